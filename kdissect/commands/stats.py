"""`kdissect stats CAPTURE...`: latency, error, throttle and no-response tables."""

from __future__ import annotations

from kdissect.commands.runtime import echo, echo_pieces, run_analysis, say, table_width
from kdissect.shared.options import WIDE_HELP, CaptureInputs, click_command, flag


class StatsOptions(CaptureInputs):
    """Latency percentiles per API/client/broker, errors, throttling and the accounting."""

    as_json: bool = flag("--json", help="Print the tables as one JSON object.")
    wide: bool = flag("--wide", help=WIDE_HELP)


def stats(options: StatsOptions) -> None:
    """Latency percentiles per API/client/broker, errors, throttling and the accounting."""
    from kdissect.forensics.render import render_stats
    from kdissect.forensics.spill import json_pieces
    from kdissect.stats.tables import COLLECT_KEEPS, as_dict, collect
    from kdissect.text_escape import lossless_value

    analysis = run_analysis(options, **COLLECT_KEEPS)
    from kdissect.stats.brokerlog import observe, payload as broker_log_payload

    broker_tables = observe(analysis)
    summary, tables = collect(analysis)
    if options.as_json:
        payload = as_dict(summary, tables, analysis.accounting)
        if analysis.accounting.tls_connections:
            payload["tls"] = analysis.dissector.tls_stats.to_dict()
        if broker_tables is not None:
            payload["broker_log"] = broker_log_payload(analysis, broker_tables)
        # the arrays of one row per client id are written row by row
        echo_pieces(json_pieces(payload, value=lossless_value, default=str, allow_nan=True))
    else:
        # the analysis gives the accounting lines with the TLS line
        width = table_width(options.wide)
        echo_pieces(summary.render_lines(analysis, width))
        echo(render_stats(tables, width))
        if broker_tables is not None:
            echo(broker_tables.render(analysis.dissector.encrypted_clients, width))
    for problem in analysis.read_stats.problems:
        say(f"kdissect: {problem}")
    from kdissect.shared.hints import run_hints

    for hint in run_hints(analysis):
        say(f"kdissect: {hint}")


command = click_command("stats", StatsOptions, stats)
