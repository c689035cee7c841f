"""The command line's runtime, shared by `kdissect` (cli.py), its commands and
spark-submit's entry (spark/submit_main.py): how a run writes and reports
(`echo` for text, `say` for one line on stderr: both escape what a capture
could use to drive the terminal, kdissect.text_escape), how
errors end it (`guarded`: one line, exit 2 for a user's problem, 1 for
anything else), how a click command runs (`run_click`), and the capture
helpers of every command that reads captures (`run_analysis`,
`print_accounting`).

Click-free at import: the plain `export` path (cli.py) never loads click.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable

from kdissect.failures import InputError

if TYPE_CHECKING:  # pragma: no cover
    from kdissect.shared.options import CaptureInputs


def echo(text: str, err: bool = False, newline: bool = True) -> None:
    """Text on stdout (or stderr): the one way every text face writes. Any
    non-printable character left in `text` (none when its captured strings
    went through `kdissect.text_escape.escape_text`) is escaped, on a
    terminal or not; newlines between lines are kept."""
    from kdissect.text_escape import terminal_text

    _write(terminal_text(text) + ("\n" if newline else ""), sys.stderr if err else sys.stdout)


def say(line: str) -> None:
    """One line on stderr; any non-printable character in it (a newline
    too) escaped."""
    from kdissect.text_escape import one_line

    _write(one_line(line) + "\n", sys.stderr)


def _write(text: str, stream: Any) -> None:
    try:
        stream.write(text)
    except UnicodeEncodeError:  # a stream that cannot write some characters (an ASCII locale)
        encoding = getattr(stream, "encoding", None) or "ascii"
        stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()


def fail(message: str, code: int) -> int:
    """Say `message` as kdissect's one-line error; return the exit status."""
    say(f"kdissect: error: {message}")
    return code


def _usage_error(problem: Any, args: list[str]) -> int:
    """A usage error as the README promises it: one line, one hint, exit 2
    (click's own four-line usage block is not printed)."""
    context = getattr(problem, "ctx", None)
    path = context.command_path if context is not None else "kdissect"
    message = problem.format_message()
    group = context is not None and hasattr(context.command, "list_commands")
    if context is not None and group and message.startswith("No such command"):
        import difflib

        wanted = next((a for a in args if not a.startswith("-")), "")
        close = difflib.get_close_matches(wanted, context.command.list_commands(context), n=1)
        message += f" Did you mean '{close[0]}'?" if close else ""
    say(f"kdissect: error: {message}")
    say(f"kdissect: hint: '{path} --help' lists the {'commands' if group else 'options'}")
    return 2


def run_click(command: Any, args: list[str], prog_name: str) -> int:
    """Run a click command or group as every kdissect entry runs one: a
    usage error as one line and a hint, every other error as one line."""

    def run() -> int:
        import click

        try:
            result = command.main(args=args, prog_name=prog_name, standalone_mode=False)
            return result if isinstance(result, int) else 0
        except click.exceptions.Exit as stop:
            return stop.exit_code
        except click.UsageError as problem:
            return _usage_error(problem, args)
        except click.ClickException as problem:
            problem.show()
            return problem.exit_code
        except click.exceptions.Abort:
            return fail("aborted", 130)

    return guarded(run)


def guarded(run: Callable[[], int]) -> int:
    """`run()`'s status; a user's problem (a missing extra too) as a one-line
    error (exit 2), anything else as a one-line internal error (exit 1)."""
    try:
        return run()
    except InputError as problem:
        return fail(str(problem), 2)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except BrokenPipeError:
        # Output closed early (e.g. `| head`): not an error worth a message.
        sys.stderr.close()
        return 0
    except Exception as problem:  # last line of defence: never a traceback
        if os.environ.get("KDISSECT_DEBUG"):
            raise
        return fail(f"internal error ({type(problem).__name__}): {problem}", 1)


def run_analysis(options: CaptureInputs, keep_messages: bool = False, quiet: bool = False,
                 keep_apis: Any = (), output: str | None = None, keep_error_responses: bool = False) -> Any:
    """An iterable Analysis over the captures the options name (exchanges;
    `.accounting`). Files under a directory or glob that are not captures are
    skipped and, unless `quiet`, named in one line on stderr. `keep_apis`:
    api keys whose exchanges keep their decoded messages (kdissect.conn.pipeline.analyze);
    `keep_error_responses`: the decoded responses that carry error codes (kdissect.conn.pipeline.Analysis). `output`: the
    command's output file, refused if it is one of the captures, key logs or
    broker logs."""
    from kdissect.shared.inputs import expand_inputs
    from kdissect.conn.pipeline import Analysis

    paths, skipped = expand_inputs(options.captures)
    broker_logs: list[str] = []
    if options.broker_logs:
        from kdissect.conn.brokerlog.parse import request_log_files

        broker_logs = request_log_files(options.broker_logs)  # (a bad one fails here, before any output)
    if output is not None:
        from kdissect.shared.protected_inputs import ProtectedInputs, refuse_output_over_input

        refuse_output_over_input(output, ProtectedInputs([*paths, *options.tls_keylogs, *broker_logs]))
    if skipped and not quiet:
        from kdissect.text_escape import escape_text

        names = ", ".join(map(escape_text, skipped[:3])) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        say(f"kdissect: not captures, skipped: {names}")
    # --topic and --group read the decoded messages
    keep_messages = keep_messages or bool(options.topics or options.groups)
    analysis = Analysis(paths, options.ports or (9092,), not options.no_detect, keep_messages,
                        progress=sys.stderr.isatty(), tls_keylogs=options.tls_keylogs, keep_apis=keep_apis,
                        broker_logs=broker_logs, keep_error_responses=keep_error_responses)
    return select(analysis, options)


def select(analysis: Any, options: CaptureInputs) -> Any:
    """`analysis` as the options' selection sees it (kdissect.filters.selection),
    or itself when nothing is selected."""
    if not (options.display_filter or options.time_from or options.time_to or options.clients
            or options.brokers or options.topics or options.groups):
        return analysis
    from kdissect.filters.selection import Selected, Selection

    starts = [f.first_ts for f in analysis.capture_set.files if f.first_ts is not None]
    return Selected(analysis, Selection.from_options(options, min(starts, default=None)))


DEFAULT_PIPE_WIDTH = None  # a pipe or a file has no width: every column, for grep and awk


def table_width(wide: bool) -> int | None:
    """How many columns the text tables may take: none with `--wide`; the
    terminal's when stdout is one (COLUMNS overrides the size the terminal
    reports); every column when stdout is a pipe or a file, whatever the
    environment says, so a script sees the same columns wherever it runs."""
    if wide:
        return None
    if not sys.stdout.isatty():
        return DEFAULT_PIPE_WIDTH
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    import shutil

    return shutil.get_terminal_size().columns


def print_accounting(analysis: Any) -> None:
    """The accounting summary (and the reader's problems) on stderr."""
    for line in analysis.summary_lines():
        say(f"kdissect: {line}")
    for problem in analysis.read_stats.problems:
        say(f"kdissect: {problem}")
    from kdissect.shared.hints import run_hints

    for hint in run_hints(analysis):
        say(f"kdissect: {hint}")


def echo_pieces(pieces: Iterable[str], chunk: int = 1 << 16) -> None:
    """`echo` for text given in pieces (a table of hundreds of thousands of
    rows, made line by line): about `chunk` characters per write, never the
    whole text at once."""
    buffer: list[str] = []
    size = 0
    for piece in pieces:
        buffer.append(piece)
        size += len(piece)
        if size >= chunk:
            echo("".join(buffer), newline=False)
            buffer, size = [], 0
    if buffer:
        echo("".join(buffer), newline=False)
