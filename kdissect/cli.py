"""Command-line entry point: `kdissect COMMAND ...`.

This module is deliberately thin. Each subcommand lives in its own module under
`kdissect.commands` and exposes a click command named `command`, built from
its options class (see `kdissect.shared.options`); they are imported only when
used so that `kdissect apis` does not pay for pyarrow or pyspark imports.

`kdissect export` with plain arguments (capture paths, -o FILE, -p PORT, -q,
--no-detect, each in its simplest spelling) runs without click: importing
click costs about as much as exporting a small capture. The same options
class is parsed then by `kdissect.shared.options.parse_plain`. Anything else (help,
--opt=value forms, bad values, other commands) goes through click, which
then also produces every error message.
"""

from __future__ import annotations

import errno
import sys
from typing import Any

from kdissect.commands.runtime import fail, guarded, run_click

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


def plain_export_args(args: list[str]) -> Any:
    """The ExportOptions for plain `export` arguments, or None when click must
    parse them (anything unusual, help, any doubt)."""
    if not args or args[0] != "export":
        return None
    from kdissect.commands.export_core import ExportOptions
    from kdissect.shared.options import parse_plain

    return parse_plain(ExportOptions, args[1:])


def _plain_export(options: Any) -> int:
    """Run export as click would run the command, errors included."""
    from kdissect.commands.export_core import export

    try:
        export(options)
        return 0
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\n")  # as click does before its Abort
        return fail("aborted", 130)
    except OSError as problem:
        if problem.errno != errno.EPIPE:
            raise
        # output closed early (e.g. `| head`): exit 1 quietly, like click
        from click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment, operator]
        sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment, operator]
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used by tests)."""
    args = sys.argv[1:] if argv is None else list(argv)
    plain = plain_export_args(args)
    if plain is not None:
        return guarded(lambda: _plain_export(plain))
    return run_click(__getattr__("cli"), args, "kdissect")


def entry() -> None:
    _stop_on_terminate()
    _fewer_collections()
    try:
        sys.exit(main())
    finally:
        # a signal between making an output's temporary file and the code
        # that abandons it leaves the file to this (kdissect.shared.atomic)
        from kdissect.shared.atomic import remove_unfinished

        remove_unfinished()


# the command line's young-generation threshold (net new containers between
# collections): see _fewer_collections
CLI_COLLECTION_THRESHOLD = 200_000


def _fewer_collections() -> None:
    """The command's process is kdissect's own (the Python API leaves the
    collector to its caller): its cyclic collector runs once per
    `CLI_COLLECTION_THRESHOLD` net new containers instead of 700 (70,000
    while a capture is dissected, kdissect.conn.pipeline.fewer_collections).
    Kdissect makes few reference cycles, and a young collection walks every
    container still alive when it runs: the later it comes, the more of them
    are gone (an export of 20,000 exchanges with the broker's request log
    holds 76,000 young containers at the pipeline's 70,000, 33,500 of them
    the log's identity tuples: 10-16 ms of CPU; the plain export 3-7 ms).
    What a cycle can hold uncollected in between is bounded by the threshold
    (a few tens of MB at most); the older generations' thresholds stay."""
    import gc

    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], CLI_COLLECTION_THRESHOLD), *threshold[1:])


def _stop_on_terminate() -> None:
    """SIGTERM (`kill`, a job's time limit) ends the run as an exception
    does, so an output being written is abandoned: its temporary file is
    removed and the earlier file stays (kdissect.shared.atomic). Exit 128 + 15."""
    import _signal  # not `signal`: its enums cost start-up time

    if _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
        _signal.signal(_signal.SIGTERM, _terminated)


def _terminated(number: int, frame: Any) -> None:
    raise SystemExit(128 + number)


if __name__ == "__main__":
    entry()
