"""`kdissect report INPUT... -o report.html`: one self-contained HTML page of
charts and tables, from captures or from a `kdissect spark` OUTDIR."""

from __future__ import annotations

from pathlib import Path

from kdissect.commands.runtime import print_accounting, run_analysis, say
from kdissect.failures import InputError
from kdissect.shared.options import CaptureInputs, RowOrder, argument, click_command, flag, option

class ReportOptions(RowOrder, CaptureInputs):
    """Write one self-contained HTML page of charts and tables (open it in any browser, offline)."""

    captures: tuple[str, ...] = argument(
        "INPUT", help="Captures, as for every other command: pcap or pcapng files (either may be gzipped), "
                      "directories (searched recursively) or globs, read together as one capture set. Or one "
                      "directory written by `kdissect spark -o OUTDIR`: the page is then drawn from its tables, "
                      "without reading a packet.")
    output: str = option("-o", "--output", required=True, metavar="FILE", help="The HTML file to write.")
    quiet: bool = flag("-q", "--quiet", help="Do not print the accounting summary on stderr.")

def _spark_outdir(options: ReportOptions) -> str | None:
    """The Spark OUTDIR the inputs name, or None for captures."""
    from kdissect.report.data import is_spark_outdir

    outdirs = [item for item in options.captures if is_spark_outdir(item)]
    if not outdirs:
        return None
    if len(options.captures) > 1:
        raise InputError(f"{outdirs[0]} is a kdissect spark output: give it alone, not with other inputs")
    given = [name for name, used in (("--port", options.ports), ("--no-detect", options.no_detect),
                                     ("--tls-keylog", options.tls_keylogs)) if used]
    if given:
        raise InputError(f"{', '.join(given)} applies to captures; {outdirs[0]} holds the Spark job's tables "
                         "(give the option to `kdissect spark` instead)")
    return outdirs[0]

def report(options: ReportOptions) -> None:
    """Write one self-contained HTML page of charts and tables."""
    # (no extra needed: the page is built from the base dependencies; altair and
    # vl-convert, the `report` extra, draw the charts in notebooks)
    from kdissect.report import from_analysis, from_spark_outdir, write_page

    outdir = _spark_outdir(options)
    if outdir is not None and (options.display_filter or options.time_from or options.time_to or options.clients
                               or options.brokers or options.topics or options.groups or options.sort
                               or options.top):
        # the OUTDIR's tables were computed by the job: select when running it (the page says what it selected)
        raise InputError("a Spark OUTDIR's tables are already computed: give -Y, --from/--to, --client, --broker "
                         "or --group to `kdissect spark` instead (--topic, --top and --sort apply to captures)")
    if outdir is not None:
        from kdissect.shared.protected_inputs import ProtectedInputs, refuse_output_over_input

        # the page may sit beside the tables, not over a file they are read from
        # (an OUTDIR in a store holds no local file the page could be written over)
        from kdissect.wire import stores

        if not stores.is_uri(outdir) or stores.parse(outdir).scheme in stores.LOCAL_SCHEMES:
            local = Path(stores.parse(outdir).path if stores.is_uri(outdir) else outdir)
            refuse_output_over_input(options.output, ProtectedInputs(str(p) for p in local.rglob("*") if p.is_file()))
        data = from_spark_outdir(outdir)
        analysis = None
    else:
        from kdissect.stats.tables import COLLECT_KEEPS

        # what the tables read, as for `kdissect stats`
        analysis = run_analysis(options, quiet=options.quiet, output=options.output, **COLLECT_KEEPS)
        if options.sort is not None or options.top is not None:
            from kdissect.filters.selection import Ranked

            # the page of the first N exchanges by a column (every one still read: the accounting is whole)
            analysis = Ranked(analysis, options.sort, options.top)
        data = from_analysis(analysis)
    try:
        size = write_page(data, options.output)
    except OSError as problem:
        raise InputError(f"cannot write {options.output}: {problem.strerror or problem}") from None
    if analysis is not None and not options.quiet:
        print_accounting(analysis)
    if not options.quiet:
        say(f"kdissect: report written to {options.output} ({size} bytes)")

command = click_command("report", ReportOptions, report)
