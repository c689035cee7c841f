"""`kdissect stats CAPTURE...`: latency, error, throttle and no-response tables."""

from __future__ import annotations

import json

import click

from kdissect.commands.runtime import run_analysis
from kdissect.options import CaptureInputs, click_command, flag
from kdissect.output import safe_text


class StatsOptions(CaptureInputs):
    """Latency percentiles per API/client/broker, errors, throttling and the accounting."""

    as_json: bool = flag("--json", help="Print the tables as one JSON object.")


def stats(options: StatsOptions) -> None:
    """Latency percentiles per API/client/broker, errors, throttling and the accounting."""
    from kdissect.forensics.render import render_stats
    from kdissect.stats_tables import as_dict, collect

    # per-partition errors need the decoded response bodies
    analysis = run_analysis(options, keep_messages=True)
    from kdissect.brokerlog.tables import observe, payload as broker_log_payload

    broker_tables = observe(analysis)
    summary, tables = collect(analysis)
    if options.as_json:
        payload = as_dict(summary, tables, analysis.accounting)
        if analysis.accounting.tls_connections:
            payload["tls"] = analysis.dissector.tls_stats.to_dict()
        if broker_tables is not None:
            payload["broker_log"] = broker_log_payload(analysis, broker_tables)
        click.echo(safe_text(json.dumps(payload, indent=2, default=str, allow_nan=True)))
    else:
        # the analysis gives the accounting lines with the TLS line
        click.echo(safe_text(summary.render(analysis)), nl=False)
        click.echo(safe_text(render_stats(tables)))
        if broker_tables is not None:
            click.echo(safe_text(broker_tables.render(analysis.dissector.encrypted_clients)))
    for problem in analysis.read_stats.problems:
        click.echo(f"kdissect: {safe_text(problem)}", err=True)


command = click_command("stats", StatsOptions, stats)
