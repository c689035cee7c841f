"""`kdissect show CAPTURE...`: one line per exchange, or decoded trees with -v."""

from __future__ import annotations


import click

from kdissect.commands.runtime import print_accounting, run_analysis
from kdissect.exchange import Exchange
from kdissect.options import NUMBER, CaptureInputs, click_command, flag, option
from kdissect.output import safe_text
from kdissect.times import clock_text, to_datetime


class ShowOptions(CaptureInputs):
    """One line per exchange (like tshark's summary); -v for decoded trees."""

    verbose: bool = flag("-v", "--verbose", help="Print the decoded request and response trees.")
    show_secrets: bool = flag(
        "--show-secrets", help="With -v: do not redact passwords, tokens and SASL bytes.")
    apis: tuple[str, ...] = option("--api", multiple=True, help="Only this API (name or key; repeatable).")
    client_ids: tuple[str, ...] = option("--client-id", multiple=True, help="Only this client id (repeatable).")
    errors_only: bool = flag("--errors", help="Only exchanges with a non-zero error code.")
    slower_than: float | None = option("--slower-than", kind=NUMBER, metavar="MS",
                                       help="Only exchanges slower than MS.")


def _error_name(code: int) -> str:
    from kdissect.protocol.errors import error_name

    return error_name(code)


def broker_log_text(ex: Exchange) -> str:
    """`broker=TOTAL ms (queue, local, remote, throttle, response queue, send) network=N ms principal`,
    or why no line of the broker's request log joined."""
    if ex.broker_log != "joined":
        return f"broker-log={ex.broker_log}"
    parts = [ex.broker_request_queue_ms, ex.broker_local_ms, ex.broker_remote_ms, ex.broker_throttle_ms,
             ex.broker_response_queue_ms, ex.broker_send_ms]
    split = "/".join("-" if v is None else f"{v:g}" for v in parts)
    total = "-" if ex.broker_total_ms is None else f"{ex.broker_total_ms:g}"
    network = "" if ex.network_ms is None else f" network={ex.network_ms:.3f} ms"
    return f"broker={total} ms (queue/local/remote/throttle/respq/send {split}){network} {ex.principal or ''}".rstrip()


def summary_line(ex: Exchange, with_date: bool = False) -> str:
    """Time (UTC; with the date when asked), client -> broker, API vN,
    correlation id, latency, errors, throttle."""
    ts = ex.request_ts if ex.request_ts is not None else ex.response_ts
    when = clock_text(ts, with_date) if ts is not None else "?"
    api = f"{ex.api_name} v{ex.api_version}" if ex.api_name is not None else "? (request not captured)"
    parts = [when, f"{ex.client} -> {ex.broker}", api, f"corr={ex.correlation_id}"]
    latency = ex.latency_ms
    parts.append(f"{latency:.3f} ms" if latency is not None else "no response" if ex.response_ts is None else "-")
    if ex.client_id:
        parts.append(f"client_id={ex.client_id}")
    if ex.error_codes or ex.error_code:
        codes = sorted(set(ex.error_codes) | ({ex.error_code} if ex.error_code else set()))
        parts.append("errors=" + ",".join(_error_name(c) for c in codes))
    if ex.throttle_time_ms:
        parts.append(f"throttle={ex.throttle_time_ms} ms")
    if ex.status != "ok":
        parts.append(f"[{ex.status}]")
    if ex.broker_log is not None:  # --broker-log: the broker's own account of it
        parts.append(broker_log_text(ex))
    if ex.problems:
        parts.append("; ".join(ex.problems))
    if ts is not None and to_datetime(ts) is None:
        parts.append("(time outside the calendar: epoch seconds shown)")
    return "  ".join(parts)


def day_of(ex: Exchange) -> object:
    """The UTC date of an exchange's first time (None if it has none or it is outside the calendar)."""
    ts = ex.request_ts if ex.request_ts is not None else ex.response_ts
    when = to_datetime(ts) if ts is not None else None
    return None if when is None else when.date()


def _selected(ex: Exchange, apis: set[str], client_ids: set[str], errors_only: bool,
              slower_than: float | None) -> bool:
    if apis and not ({(ex.api_name or "").lower(), str(ex.api_key)} & apis):
        return False
    if client_ids and ex.client_id not in client_ids:
        return False
    if errors_only and not (ex.error_code or ex.error_codes):
        return False
    if slower_than is not None:
        latency = ex.latency_ms
        if latency is None or latency <= slower_than:
            return False
    return True


def _tree(ex: Exchange, show_secrets: bool) -> str:
    from kdissect.protocol.render import render_tree
    from kdissect.records.render import render_records

    lines = []
    for label, message in (("request", ex.request), ("response", ex.response)):
        if message is None:
            continue
        try:
            text = render_tree(message, show_secrets=show_secrets)
        except Exception as problem:  # a rendering bug must not hide the rest
            text = f"(cannot render: {type(problem).__name__}: {problem})"
        lines.append(f"  {label}:")
        lines.extend("    " + line for line in text.splitlines())
        # Record data (Produce / Fetch / ShareFetch) is parsed only here, on demand.
        lines.extend("    " + line for line in render_records(message, ex.api_key, ex.api_version))
    return "\n".join(lines)


def show(options: ShowOptions) -> None:
    """One line per exchange (like tshark's summary); -v for decoded trees."""
    analysis = run_analysis(options, keep_messages=options.verbose)
    api_set = {a.lower() for a in options.apis}
    id_set = set(options.client_ids)
    last_day: object = None
    for ex in analysis:
        if not _selected(ex, api_set, id_set, options.errors_only, options.slower_than):
            continue
        # the date on the first line and whenever it changes (a capture spanning days)
        day = day_of(ex)
        click.echo(safe_text(summary_line(ex, with_date=day is not None and day != last_day)))
        if day is not None:
            last_day = day
        if options.verbose:
            tree = _tree(ex, options.show_secrets)
            if tree:
                click.echo(safe_text(tree))
    print_accounting(analysis)


command = click_command("show", ShowOptions, show)
