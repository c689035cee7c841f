"""Command-line entry point: `kdissect COMMAND ...`.

This module is deliberately thin. Each subcommand lives in its own module under
`kdissect.commands` and exposes a click command named `command`; they are
imported only when used so that `kdissect apis` does not pay for pyarrow or
pyspark imports.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

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


def _fail(message: str, code: int) -> int:
    click.echo(f"kdissect: error: {message}", err=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used by tests)."""
    try:
        result = cli.main(args=argv, prog_name="kdissect", standalone_mode=False)
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
