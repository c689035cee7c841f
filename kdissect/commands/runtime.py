"""The command line's runtime, shared by `kdissect` (cli.py), its commands and
spark-submit's entry (spark/submit_main.py): how a run reports (`say`), how
errors end it (`guarded`: one line, exit 2 for a user's problem, 1 for
anything else), how a click command runs (`run_click`), and the capture
helpers of every command that reads captures (`run_analysis`,
`print_accounting`).

Click-free at import: the plain `export` path (cli.py) never loads click.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from kdissect.failures import InputError

if TYPE_CHECKING:  # pragma: no cover
    from kdissect.options import CaptureInputs


def say(line: str) -> None:
    """One line on stderr, as `click.echo(line, err=True)` writes it."""
    if line.isascii() and "\x1b" not in line:
        stream = sys.stderr
        stream.write(line + "\n")
        stream.flush()
        return
    # non-ASCII text or escape sequences: click's own stream and ANSI handling
    import click

    click.echo(line, err=True)


def fail(message: str, code: int) -> int:
    """Say `message` as kdissect's one-line error; return the exit status."""
    say(f"kdissect: error: {message}")
    return code


def run_click(command: Any, args: list[str], prog_name: str) -> int:
    """Run a click command or group as every kdissect entry runs one: click's
    own usage errors as click prints them, every other error as one line."""

    def run() -> int:
        import click

        try:
            result = command.main(args=args, prog_name=prog_name, standalone_mode=False)
            return result if isinstance(result, int) else 0
        except click.exceptions.Exit as stop:
            return stop.exit_code
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
                 keep_apis: Any = (), output: str | None = None) -> Any:
    """An iterable Analysis over the captures the options name (exchanges;
    `.accounting`). Files under a directory or glob that are not captures are
    skipped and, unless `quiet`, named in one line on stderr. `keep_apis`:
    api keys whose exchanges keep their decoded messages. `output`: the
    command's output file, refused if it is one of the captures, key logs or
    broker logs."""
    from kdissect.inputs import expand_inputs
    from kdissect.pipeline import Analysis

    paths, skipped = expand_inputs(options.captures)
    broker_logs: list[str] = []
    if options.broker_logs:
        from kdissect.brokerlog.parse import request_log_files

        broker_logs = request_log_files(options.broker_logs)  # (a bad one fails here, before any output)
    if output is not None:
        from kdissect.protected_inputs import ProtectedInputs, refuse_output_over_input

        refuse_output_over_input(output, ProtectedInputs([*paths, *options.tls_keylogs, *broker_logs]))
    if skipped and not quiet:
        names = ", ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        say(f"kdissect: not captures, skipped: {names}".encode("utf-8", "replace").decode("utf-8"))
    return Analysis(paths, options.ports or (9092,), not options.no_detect, keep_messages,
                    progress=sys.stderr.isatty(), tls_keylogs=options.tls_keylogs, keep_apis=keep_apis,
                    broker_logs=broker_logs)


def print_accounting(analysis: Any) -> None:
    """The accounting summary (and the reader's problems) on stderr."""
    for line in analysis.summary_lines():
        say(f"kdissect: {line}")
    for problem in analysis.read_stats.problems:
        say(f"kdissect: {problem}".encode("utf-8", "replace").decode("utf-8"))
