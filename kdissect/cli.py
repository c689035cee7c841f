"""Command-line entry point: `kdissect COMMAND ...`.

This module is deliberately thin. Each subcommand lives in its own module under
`kdissect.commands` and exposes a click command named `command`; they are
imported only when used so that `kdissect apis` does not pay for pyarrow or
pyspark imports.

`kdissect export` with plain arguments (capture paths, -o FILE, -p PORT, -q,
--no-detect, each in its simplest spelling) runs without click: importing
click costs about as much as exporting a small capture. Anything else (help,
--opt=value forms, bad values, other commands) goes through click, which
then also produces every error message.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import sys
from typing import Any

from kdissect.failures import InputError

# name -> module holding a click command called `command`
COMMANDS: dict[str, str] = {
    "apis": "kdissect.commands.apis",
    "export": "kdissect.commands.export",
    "show": "kdissect.commands.show",
    "stats": "kdissect.commands.stats",
    "records": "kdissect.commands.records",
    "spark": "kdissect.commands.spark",
}

_group: Any = None


def _make_group() -> Any:
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


def plain_export_args(args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of `export()` for plain `export` arguments, or
    None when click must parse them (anything unusual, help, any doubt)."""
    if len(args) < 2 or args[0] != "export":
        return None
    captures: list[str] = []
    ports: list[int] = []
    output: str | None = None
    quiet = no_detect = False
    i = 1
    while i < len(args):
        arg = args[i]
        if arg in ("-o", "--output", "-p", "--port"):
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            if value.startswith("-") and value != "-":
                return None
            if arg in ("-o", "--output"):
                if output is not None:
                    return None  # repeated: let click decide which wins
                output = value
            else:
                if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
                    return None  # click words the error
                ports.append(int(value))
            i += 2
            continue
        if arg in ("-q", "--quiet"):
            quiet = True
        elif arg == "--no-detect":
            no_detect = True
        elif arg.startswith("-"):
            return None
        else:
            captures.append(arg)
        i += 1
    if not captures:
        return None
    return {"captures": tuple(captures), "ports": tuple(ports), "no_detect": no_detect,
            "output": output, "quiet": quiet}


def _plain_export(arguments: dict[str, Any]) -> int:
    """Run export as click would run the command, errors included."""
    from kdissect.commands.export_core import export

    try:
        export(**arguments)
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
    try:
        if plain is not None:
            return _plain_export(plain)
        import click

        try:
            result = __getattr__("cli").main(args=args, prog_name="kdissect", standalone_mode=False)
            return result if isinstance(result, int) else 0
        except click.exceptions.Exit as stop:
            return stop.exit_code
        except click.ClickException as problem:
            problem.show()
            return problem.exit_code
        except click.exceptions.Abort:
            return _fail("aborted", 130)
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
    sys.exit(main())


if __name__ == "__main__":
    entry()
