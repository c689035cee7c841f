"""Command-line options described once, as data.

A command's options are a class deriving from `Options`, one attribute per
argument or option, declared like dataclass fields (the attribute name is the
Python name of the value, the annotation its type):

    class ExportOptions(CaptureInputs):
        \"\"\"Write one row per request/response exchange.\"\"\"
        output: str | None = option("-o", "--output", help="Output file ...")
        quiet: bool = flag("-q", "--quiet", help="Do not print ...")

That one description serves every parser:

- `click_command()` builds the click command (help text, every error message);
- `parse_plain()` parses the plain spellings without importing click (the
  fast path of `kdissect export`: importing click costs about as much as
  exporting a small capture), and gives up on anything else;
- an instance holds the parsed values (`options.output`).

A subclass inherits its base's options, so an option added to a base class
reaches every command built on it: an option of every command that reads
captures is one attribute of `CaptureInputs`; its value reaches
`run_analysis` (kdissect.commands.export_core) as `options.<name>`, and the
two Spark faces (commands/spark.py, spark/submit_main.py) copy what the job
needs into its JobOptions.

Each command's class lives with the command: `ExportOptions` in
kdissect.commands.export_core (click-free, for the fast path),
`ShowOptions` in kdissect.commands.show and so on, `SparkJobOptions` in
kdissect.spark.options (shared by `kdissect spark` and spark-submit). This
module imports click only inside `click_command()`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

# Start-up matters here (the fast path imports this module): few classes and
# modules, nothing compiled at import.


# -- value kinds ---------------------------------------------------------------


def _text(text: str) -> str:
    return text


def _click(name: str) -> Callable[[], Any]:
    def click_type() -> Any:
        import click

        return getattr(click, name)

    return click_type


class Kind:
    """How an option's text becomes its value (`convert` raises ValueError with
    the message), and the click type that does the same (`click_type()`;
    by default one that calls `convert`)."""

    def __init__(self, metavar: str, convert: Callable[[str], Any] = _text,
                 click_type: Callable[[], Any] | None = None) -> None:
        self.metavar = metavar
        self.convert = convert
        self.click_type = click_type or self._converting_click_type

    def _converting_click_type(self) -> Any:
        import click

        kind = self

        class Converted(click.ParamType):
            name = kind.metavar.lower()

            def convert(self, value: Any, param: Any, ctx: Any) -> Any:
                if not isinstance(value, str):
                    return value  # already converted (a default given as a value)
                try:
                    return kind.convert(value)
                except ValueError as problem:
                    self.fail(str(problem), param, ctx)

        return Converted()


def integer(low: int | None = None, high: int | None = None) -> Kind:
    """A whole number within [low, high] (either bound may be open)."""

    def convert(text: str) -> int:
        if not (text.isascii() and text.isdigit()):
            raise ValueError(f"{text!r} is not a whole number")
        value = int(text)
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"{value} is not in the range {low}..{high}")
        return value

    def click_type() -> Any:
        import click

        return click.IntRange(low, high)

    return Kind("INTEGER", convert, click_type)


def _size(text: str) -> int:
    """A byte count: '134217728', '128m', '64MiB', '1g'; at least 4096."""
    import re

    match = re.match(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"{text!r}: expected a number of bytes, e.g. 134217728 or 128m")
    unit = (match.group(2) or "b").lower()[0]
    value = int(match.group(1)) * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]
    if value < 4096:
        raise ValueError(f"{text!r}: must be at least 4096 bytes")
    return value


TEXT = Kind("TEXT", _text, _click("STRING"))
FLAG = Kind("", _text, _click("BOOL"))  # no value: True when given
NUMBER = Kind("FLOAT", float, _click("FLOAT"))
PORT = integer(1, 65535)
SIZE = Kind("BYTES", _size)


# -- arguments and options -----------------------------------------------------


class Param:
    """One argument (no flags: the positional values) or option; `name` is the
    attribute of the Options class it is assigned to."""

    name = ""

    def __init__(self, flags: tuple[str, ...], kind: Kind = TEXT, multiple: bool = False,
                 default: Any = None, required: bool = False, help: str = "",
                 metavar: str | None = None, show_default: bool = False) -> None:
        self.flags = flags
        self.kind = kind
        self.multiple = multiple
        self.default = default
        self.required = required
        self.help = help
        self.metavar = metavar
        self.show_default = show_default

    def initial(self) -> Any:
        """The value when the command line does not give one."""
        if self.multiple:
            return ()
        if isinstance(self.default, str) and self.kind is not TEXT:
            return self.kind.convert(self.default)  # defaults are written as on the command line
        return self.default


def argument(metavar: str, *, help: str = "") -> Any:
    """One or more positional values (a tuple of str), shown as METAVAR...;
    `help` goes into the command's help text (click does not list arguments)."""
    return Param((), multiple=True, required=True, metavar=metavar, help=help)


def option(*flags: str, kind: Kind = TEXT, multiple: bool = False, default: Any = None,
           required: bool = False, help: str = "", metavar: str | None = None,
           show_default: bool = False) -> Any:
    """An option taking a value: `-o FILE`; `multiple` collects repeats into a tuple."""
    return Param(flags, kind, multiple, default, required, help, metavar, show_default)


def flag(*flags: str, help: str = "") -> Any:
    """An option without a value: False unless given."""
    return Param(flags, FLAG, default=False, help=help)


class Options:
    """Base of a command's options: subclasses declare them as attributes;
    instances hold their values (missing keywords take the defaults)."""

    @classmethod
    def params(cls) -> tuple[Param, ...]:
        """The arguments and options, a base class's first (a subclass may
        redefine one). Collected on first use rather than when the class is
        made: that is start-up time."""
        found = cls.__dict__.get("_params")
        if found is None:
            collected: dict[str, Param] = {}
            for klass in reversed(cls.__mro__):
                for name, value in vars(klass).items():
                    if isinstance(value, Param):
                        value.name = name
                        collected[name] = value
            found = tuple(collected.values())
            setattr(cls, "_params", found)
        return found

    def __init__(self, **values: Any) -> None:
        for param in self.params():
            if param.name in values:
                setattr(self, param.name, values.pop(param.name))
            elif param.required:
                raise TypeError(f"{type(self).__name__}: {param.name} is required")
            else:
                setattr(self, param.name, param.initial())
        if values:
            raise TypeError(f"{type(self).__name__}: no option named {', '.join(values)}")

    def values(self) -> dict[str, Any]:
        return {param.name: getattr(self, param.name) for param in self.params()}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.values() == self.values()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.values().items())})"


# -- the parsers ----------------------------------------------------------------


def parse_plain(options: type[Options], args: Iterable[str]) -> Options | None:
    """The options for `args` in their plain spellings (`-o FILE`, `--port P`,
    flags, positional values), or None whenever click must decide: help,
    `--opt=value` or `-oFILE`, `--`, unknown options, a bad or missing value,
    a value starting with '-', a single-valued option given twice."""
    by_flag = {name: param for param in options.params() for name in param.flags}
    positional = next((p for p in options.params() if not p.flags), None)
    given: dict[str, Any] = {}
    items: list[str] = []
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-"):
            items.append(arg)
            continue
        param = by_flag.get(arg)
        if param is None:
            return None
        if param.kind is FLAG:
            given[param.name] = True
            continue
        if i >= len(args) or (args[i].startswith("-") and args[i] != "-"):
            return None
        try:
            value = param.kind.convert(args[i])
        except ValueError:
            return None  # click words the error
        i += 1
        if param.multiple:
            given[param.name] = given.get(param.name, ()) + (value,)
        elif param.name in given:
            return None  # repeated: click decides which one wins
        else:
            given[param.name] = value
    if items:
        if positional is None:
            return None
        given[positional.name] = tuple(items)
    if any(p.required and p.name not in given for p in options.params()):
        return None
    return options(**given)


def click_command(name: str, options: type[Options], run: Callable[[Any], Any]) -> Any:
    """The click command `name` for `options`, calling `run(options(...))`."""
    import inspect

    import click

    params: list[click.Parameter] = []
    for param in options.params():
        if not param.flags:
            params.append(click.Argument([param.name], nargs=-1, required=param.required,
                                         metavar=f"{param.metavar}..."))
            continue
        settings: dict[str, Any] = {"help": param.help, "required": param.required}
        if param.kind is FLAG:
            settings["is_flag"] = True
        else:
            settings.update(type=param.kind.click_type(), multiple=param.multiple,
                            show_default=param.show_default)
            if param.default is not None:  # (in click 8.5 an explicit None satisfies required=True)
                settings["default"] = param.default
            if param.metavar:
                settings["metavar"] = param.metavar
        params.append(click.Option([*param.flags, param.name], **settings))

    def callback(**values: Any) -> Any:
        return run(options(**values))

    help_text = inspect.cleandoc(options.__doc__ or "")
    arguments = [f"{p.metavar}...: {p.help}" for p in options.params() if not p.flags and p.help]
    if arguments:
        help_text += "\n\n" + "\n\n".join(arguments)
    return click.Command(name, params=params, callback=callback, help=help_text,
                         context_settings={"help_option_names": ["-h", "--help"]})


# -- what every command that reads captures takes ----------------------------------

OUTPUT_HELP = "Output file; format from the extension (.jsonl, .csv, .parquet). Default: JSONL on stdout."
WIDE_HELP = ("Every column of the text tables. Without it, a table on a terminal keeps the leading columns that "
             "fit its width and names the others; on a pipe or in a file, every column.")


class CaptureInputs(Options):
    """What every command that reads captures accepts."""

    captures: tuple[str, ...] = argument(
        "CAPTURE", help="pcap or pcapng files (either may be gzipped), directories (searched "
                        "recursively; files that are not captures are skipped) or globs ('**' allowed), "
                        "read together as one capture set.")
    ports: tuple[int, ...] = option(
        "-p", "--port", kind=PORT, multiple=True,
        help="A port Kafka brokers listen on (repeatable; default 9092).")
    no_detect: bool = flag(
        "--no-detect", help="Only treat connections on the Kafka ports as Kafka (no detection by shape).")
    tls_keylogs: tuple[str, ...] = option(
        "--tls-keylog", multiple=True, metavar="FILE",
        help="A TLS key log (NSS format: SSLKEYLOGFILE, Java/Go/Python/Node key logs) to decrypt Kafka over "
             "TLS with (repeatable). Secrets in a pcapng are used without it.")
    broker_logs: tuple[str, ...] = option(
        "--broker-log", multiple=True, metavar="FILE",
        help="Apache Kafka's request log (kafka.request.logger at DEBUG or TRACE, Kafka 2.8+ JSON lines) to join "
             "to the exchanges by client endpoint, correlation id and api key (repeatable; directories and globs "
             "as for captures; rotated files are read as one log).")
    # which exchanges the run keeps (kdissect.filters.selection): every table a verb
    # shows is computed over the kept exchanges only
    display_filter: str | None = option(
        "-Y", "--filter", metavar="EXPR",
        help="Keep only the exchanges this display filter matches, over the export's columns, e.g. "
             "'api_name == \"Produce\" and service_ms > 50' (==, !=, <, <=, >, >=, contains, in {..}, "
             "is null, and/or/not, parentheses).")
    time_from: str | None = option(
        "--from", metavar="TIME",
        help="Only exchanges from TIME: ISO 8601 UTC (2026-11-26T07:30:00Z) or after the capture's "
             "first packet (+10s, +250ms).")
    time_to: str | None = option("--to", metavar="TIME", help="Only exchanges before TIME (as --from).")
    clients: tuple[str, ...] = option(
        "--client", multiple=True, metavar="CLIENT",
        help="Only exchanges of this client: a client id, an address ip:port or an ip (repeatable).")
    brokers: tuple[str, ...] = option(
        "--broker", multiple=True, metavar="BROKER",
        help="Only exchanges with this broker: ip:port or ip (repeatable).")
    # (`topics` and `records` give -t/--topic their own meaning: rows of the topic)
    topics: tuple[str, ...] = option(
        "-t", "--topic", multiple=True, metavar="TOPIC",
        help="Only exchanges whose messages name this topic (by name, or by an id the capture names; "
             "repeatable).")
    groups: tuple[str, ...] = option(
        "--group", multiple=True, metavar="GROUP",
        help="Only exchanges whose messages name this consumer group (repeatable).")


class RowOrder(Options):
    """The order and number of rows of the verbs that list exchanges."""

    sort: str | None = option(
        "--sort", metavar="COLUMN",
        help="List the exchanges largest COLUMN first (a column of the export, e.g. service_ms; "
             "nulls last). Default: request order.")
    top: int | None = option("--top", kind=integer(1), metavar="N", help="Only the first N exchanges listed.")


# -- the forensic tables' settings: `kdissect topics|groups|clients` and the Spark job --------

class ForensicSettings(CaptureInputs):
    max_uncompressed_mib: int = option(
        "--max-uncompressed-mib", kind=integer(1, 4096), default=64, show_default=True,
        help="Stop decompressing a batch beyond this many MiB (the batch is flagged).")
    horizon_s: float = option(
        "--e2e-horizon", kind=NUMBER, default=900.0, show_default=True, metavar="SECONDS",
        help="End-to-end latency: match a fetched record with its produce request only within this many "
             "seconds (bounds the memory the matching takes).")


def forensic_settings(options: ForensicSettings) -> dict[str, Any]:
    """`Forensics`' keyword arguments (horizon_ns, max_uncompressed) for the options."""
    from kdissect.failures import InputError

    if not options.horizon_s > 0:
        raise InputError("--e2e-horizon must be more than 0 seconds")
    return {"horizon_ns": int(options.horizon_s * 1e9),
            "max_uncompressed": options.max_uncompressed_mib * 1024 * 1024}
