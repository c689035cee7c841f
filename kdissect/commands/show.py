"""`kdissect show CAPTURE...`: one line per exchange, or decoded trees with -v."""

from __future__ import annotations


from kdissect.commands.runtime import echo, print_accounting, run_analysis
from kdissect.model.exchange import Exchange
from kdissect.shared.options import NUMBER, CaptureInputs, RowOrder, click_command, flag, option
from kdissect.text_escape import escape_text
from kdissect.model.times import clock_text, to_datetime


class ShowOptions(RowOrder, CaptureInputs):
    """One line per exchange (like tshark's summary), in request order unless --sort; times are UTC.
    Each line: time, client -> broker, API, correlation id, the frames to open in Wireshark
    (request/response), wire latency, service time and the wait the protocol asked for; -v for
    decoded trees."""

    verbose: bool = flag("-v", "--verbose", help="Print the decoded request and response trees.")
    show_secrets: bool = flag(
        "--show-secrets", help="With -v: do not redact passwords, tokens and SASL bytes.")
    apis: tuple[str, ...] = option("--api", multiple=True, help="Only this API (name or key; repeatable).")
    client_ids: tuple[str, ...] = option("--client-id", multiple=True,
                                           help="Only this client id, as show prints it (repeatable).")
    errors_only: bool = flag("--errors", help="Only exchanges with a non-zero error code.")
    failures_only: bool = flag("--failures", help="Only exchanges with an error code that is not part of the "
                                                  "protocol's normal flow (see README: normal_flow).")
    slower_than: float | None = option("--slower-than", kind=NUMBER, metavar="MS",
                                       help="Only exchanges whose service time (latency without the wait the "
                                            "protocol asked for) is over MS.")


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


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"


def _errors_text(ex: Exchange) -> str | None:
    """The error names; per-partition ones with their topic and partitions
    (from the decoded response, when kept); normal-flow codes marked."""
    from kdissect.conn.normal_flow import is_normal_flow

    codes = sorted(set(ex.error_codes) | ({ex.error_code} if ex.error_code else set()))
    if not codes:
        return None
    where: dict[int, list[str]] = {}
    if ex.response is not None and ex.api_key is not None and ex.api_version is not None:
        try:
            from kdissect.protocol.summary import partition_errors

            for topic, partition, code in partition_errors(ex.api_key, ex.api_version, ex.response.body):
                where.setdefault(code, []).append(f"{escape_text(str(topic))}-{partition}")
        except Exception:  # a summary problem must not hide the line
            where = {}
    texts = []
    for code in codes:
        text = _error_name(code)
        if where.get(code):
            places = where[code]
            text += "(" + ",".join(places[:4]) + (f",+{len(places) - 4} more" if len(places) > 4 else "") + ")"
        if is_normal_flow(code):
            text += "[normal flow]"
        texts.append(text)
    return "errors=" + ",".join(texts)


def summary_line(ex: Exchange, with_date: bool = False, with_capture: bool = False) -> str:
    """Time (UTC, marked Z; with the date when asked), the capture file (when
    several are read), client -> broker, API vN, correlation id, the frame
    numbers (request/response, as Wireshark numbers them in that file), wire
    latency, service time, the wait (reason and length), errors, throttle."""
    ts = ex.request_ts if ex.request_ts is not None else ex.response_ts
    when = clock_text(ts, with_date) + "Z" if ts is not None else "?"
    api = f"{ex.api_name} v{ex.api_version}" if ex.api_name is not None else "? (request not captured)"
    parts = [when]
    if with_capture:
        parts.append(f"[{escape_text(str(ex.capture))}]")
    parts += [f"{escape_text(str(ex.client))} -> {escape_text(str(ex.broker))}", api, f"corr={ex.correlation_id}"]
    parts.append(f"frames={ex.request_frame if ex.request_frame is not None else '-'}/"
                 f"{ex.response_frame if ex.response_frame is not None else '-'}")
    latency = ex.latency_ms
    if latency is None:
        parts.append("no response" if ex.response_ts is None else "-")
    else:
        parts.append(f"wire={_ms(latency)}")
        parts.append(f"service={_ms(ex.service_ms)}")
        if ex.wait_reason is not None:
            parts.append(f"wait={ex.wait_reason} {_ms(ex.wait_ms)}")
    if ex.client_id:
        parts.append(f"client_id={escape_text(ex.client_id)}")
    errors = _errors_text(ex)
    if errors:
        parts.append(errors)
    if ex.throttle_time_ms:
        parts.append(f"throttle={ex.throttle_time_ms} ms")
    if ex.status != "ok":
        parts.append(f"[{ex.status}]")
    if ex.broker_log is not None:  # --broker-log: the broker's own account of it
        parts.append(broker_log_text(ex))
    if ex.problems:
        parts.append("; ".join(map(escape_text, ex.problems)))
    if ts is not None and to_datetime(ts) is None:
        parts.append("(time outside the calendar: epoch seconds shown)")
    return "  ".join(parts)


def day_of(ex: Exchange) -> object:
    """The UTC date of an exchange's first time (None if it has none or it is outside the calendar)."""
    ts = ex.request_ts if ex.request_ts is not None else ex.response_ts
    when = to_datetime(ts) if ts is not None else None
    return None if when is None else when.date()


def _api_names(given: tuple[str, ...]) -> set[str]:
    """--api values as lowercase names and key numbers; an unknown name is an error with a suggestion."""
    from kdissect.filters.display_filter import api_key_for

    wanted = set()
    for value in given:
        if value.isdigit():
            wanted.add(value)
        else:
            api_key_for(value)  # raises FilterError (exit 2) with a suggestion
            wanted.add(value.lower())
    return wanted


def _selected(ex: Exchange, apis: set[str], client_ids: set[str], errors_only: bool,
              slower_than: float | None, failures_only: bool = False) -> bool:
    if apis and not ({(ex.api_name or "").lower(), str(ex.api_key)} & apis):
        return False
    # as show prints it (the same text for a printable id without a backslash)
    if client_ids and (ex.client_id is None or escape_text(ex.client_id) not in client_ids):
        return False
    if errors_only and not (ex.error_code or ex.error_codes):
        return False
    if failures_only:
        from kdissect.conn.normal_flow import failure_codes

        if not failure_codes([*ex.error_codes, ex.error_code or 0]):
            return False
    if slower_than is not None:
        service = ex.service_ms
        if service is None or service <= slower_than:
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
    from kdissect.commands.runtime import say
    from kdissect.filters.selection import check_sort_column, ordered

    api_set = _api_names(options.apis)
    if options.sort is not None:
        check_sort_column(options.sort)
    # decoded responses kept: per-partition errors name their topic and partition
    analysis = run_analysis(options, keep_messages=True)
    id_set = set(options.client_ids)
    several = len(analysis.capture_set.paths) > 1
    say("kdissect: times are UTC; " + (f"largest {options.sort} first" if options.sort else
                                       "lines in request order (--sort COLUMN to reorder)"))
    last_day: object = None
    kept = (ex for ex in analysis
            if _selected(ex, api_set, id_set, options.errors_only, options.slower_than, options.failures_only))
    for ex in ordered(kept, options.sort, options.top):
        # the date on the first line and whenever it changes (a capture spanning days)
        day = day_of(ex)
        echo(summary_line(ex, with_date=day is not None and day != last_day, with_capture=several))
        if day is not None:
            last_day = day
        if options.verbose:
            tree = _tree(ex, options.show_secrets)
            if tree:
                echo(tree)
    print_accounting(analysis)


command = click_command("show", ShowOptions, show)
