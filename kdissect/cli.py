"""Command-line entry point: `kdissect COMMAND ...`.

This module is deliberately thin. Each subcommand lives in its own module under
`kdissect.commands` and exposes a click command named `command`, built from
its options class (see `kdissect.options`); they are imported only when
used so that `kdissect apis` does not pay for pyarrow or pyspark imports.

`kdissect export` with plain arguments (capture paths, -o FILE, -p PORT, -q,
--no-detect, each in its simplest spelling) runs without click: importing
click costs about as much as exporting a small capture. The same options
class is parsed then by `kdissect.options.parse_plain`. Anything else (help,
--opt=value forms, bad values, other commands) goes through click, which
then also produces every error message.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, Callable

from kdissect.failures import InputError

# name -> module holding a click command called `command`
COMMANDS: dict[str, str] = {
    "apis": "kdissect.commands.apis",
    "export": "kdissect.commands.export",
    "show": "kdissect.commands.show",
    "stats": "kdissect.commands.stats",
    "records": "kdissect.commands.records",
    "topics": "kdissect.commands.topics",
    "groups": "kdissect.commands.groups",
    "clients": "kdissect.commands.clients",
    "spark": "kdissect.commands.spark",
    "report": "kdissect.commands.report",
}

_group: Any = None


def _make_group() -> Any:
    import importlib
    import importlib.util

    import click

    class _LazyGroup(click.Group):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(name for name, mod in COMMANDS.items() if importlib.util.find_spec(mod))

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            module_name = COMMANDS.get(cmd_name)
            if module_name is None or importlib.util.find_spec(module_name) is None:
                return None
            return importlib.import_module(module_name).command

    @click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(package_name="kdissect")
    def cli() -> None:
        """Dissect and analyze Apache Kafka traffic in packet captures."""

    return cli


def __getattr__(name: str) -> Any:
    # `cli`, the click group, is built on first use (importing click is not free)
    if name == "cli":
        global _group
        if _group is None:
            _group = _make_group()
        return _group
    raise AttributeError(f"module 'kdissect.cli' has no attribute {name!r}")


def _fail(message: str, code: int) -> int:
    from kdissect.commands.export_core import say

    say(f"kdissect: error: {message}")
    return code


def plain_export_args(args: list[str]) -> Any:
    """The ExportOptions for plain `export` arguments, or None when click must
    parse them (anything unusual, help, any doubt)."""
    if not args or args[0] != "export":
        return None
    from kdissect.commands.export_core import ExportOptions
    from kdissect.options import parse_plain

    return parse_plain(ExportOptions, args[1:])


def _plain_export(options: Any) -> int:
    """Run export as click would run the command, errors included."""
    from kdissect.commands.export_core import export

    try:
        export(options)
        return 0
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\n")  # as click does before its Abort
        return _fail("aborted", 130)
    except OSError as problem:
        if problem.errno != errno.EPIPE:
            raise
        # output closed early (e.g. `| head`): exit 1 quietly, like click
        from click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment]
        sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used by tests)."""
    args = sys.argv[1:] if argv is None else list(argv)
    plain = plain_export_args(args)
    if plain is not None:
        return _guarded(lambda: _plain_export(plain))
    return run_click(__getattr__("cli"), args, "kdissect")


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
        except click.UsageError as problem:
            return _usage_error(problem, args)
        except click.ClickException as problem:
            problem.show()
            return problem.exit_code
        except click.exceptions.Abort:
            return _fail("aborted", 130)

    return _guarded(run)


def _usage_error(problem: Any, args: list[str]) -> int:
    """A usage error as the README promises it: one line, one hint, exit 2
    (click's own four-line usage block is not printed)."""
    from kdissect.commands.export_core import say

    context = getattr(problem, "ctx", None)
    path = context.command_path if context is not None else "kdissect"
    message = problem.format_message()
    if message.startswith("No such command"):
        import difflib

        wanted = next((a for a in args if not a.startswith("-")), "")
        close = difflib.get_close_matches(wanted, list(COMMANDS), n=1)
        message += f" Did you mean '{close[0]}'?" if close else ""
    say(f"kdissect: error: {message}")
    what = "commands" if context is not None and context.parent is None and path == "kdissect" else "options"
    say(f"kdissect: hint: '{path} --help' lists the {what}")
    return 2


def _guarded(run: Callable[[], int]) -> int:
    """`run()`'s status; a user's problem (a missing extra too) as a one-line
    error (exit 2), anything else as a one-line internal error (exit 1)."""
    try:
        return run()
    except InputError as problem:
        return _fail(str(problem), 2)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        # Output closed early (e.g. `| head`): not an error worth a message.
        sys.stderr.close()
        return 0
    except Exception as problem:  # last line of defence: never a traceback
        if os.environ.get("KDISSECT_DEBUG"):
            raise
        return _fail(f"internal error ({type(problem).__name__}): {problem}", 1)


def entry() -> None:
    _stop_on_terminate()
    sys.exit(main())


def _stop_on_terminate() -> None:
    """SIGTERM (`kill`, a job's time limit) ends the run as an exception
    does, so an output being written is abandoned: its temporary file is
    removed and the earlier file stays (kdissect.atomic). Exit 128 + 15."""
    import _signal  # not `signal`: its enums cost start-up time

    if _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
        _signal.signal(_signal.SIGTERM, _terminated)


def _terminated(number: int, frame: Any) -> None:
    raise SystemExit(128 + number)


if __name__ == "__main__":
    entry()
