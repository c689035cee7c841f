"""One description of each command's options (kdissect.shared.options) serves click,
the click-free fast path and spark-submit: whatever the plain parser accepts,
click parses to the same values, and it accepts the plain spellings."""

from __future__ import annotations

import contextlib
import importlib
import io

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdissect import cli
from kdissect.shared import options
from kdissect.commands.apis import ApisOptions
from kdissect.commands.clients import ClientsOptions
from kdissect.commands.export_core import ExportOptions
from kdissect.commands.groups import GroupsOptions
from kdissect.commands.records import RecordsOptions
from kdissect.commands.report import ReportOptions
from kdissect.commands.show import ShowOptions
from kdissect.commands.spark import SparkOptions
from kdissect.commands.stats import StatsOptions
from kdissect.commands.topics import TopicsOptions
from kdissect.shared.options import CaptureInputs, Options, click_command, parse_plain
from kdissect.spark.options import SparkJobOptions

ALL = [ApisOptions, ExportOptions, ShowOptions, StatsOptions, RecordsOptions, SparkJobOptions, SparkOptions]

# values that each kind of option may meet on a command line, good and bad
VALUES = {
    "TEXT": ["out.jsonl", "-", "x", "", "-q", "--port"],
    "INTEGER": ["9092", "1", "65535", "64", "4096", "0", "70000", "-1", "+5", "x", "4097", " 7"],
    "FLOAT": ["2.5", "10", "nan", "-3", "x", "1e3"],
    "BYTES": ["128m", "64MiB", "4096", "1g", "12q", "100", " 8k "],
}
JUNK = ["--", "-", "--output=x.jsonl", "-ox.jsonl", "--bogus", "-h", "--help", "-qv", "--port=9092"]


def _click_parse(options_class: type[Options], argv: list[str]) -> Options | None:
    """What click makes of argv: the options object, or None for a usage error or help."""
    seen: list[Options] = []
    command = click_command("cmd", options_class, seen.append)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            command.main(args=argv, prog_name="cmd", standalone_mode=False)
        except (click.ClickException, click.exceptions.Exit):
            return None
    assert len(seen) == 1
    return seen[0]


def _tokens(options_class: type[Options]) -> list[str]:
    tokens = ["a.pcap", "dir/", "b*.pcap"] + JUNK
    for param in options_class.params():
        tokens += param.flags
        if param.flags and param.kind is not options.FLAG:
            tokens += VALUES[param.kind.metavar]
    return tokens


@pytest.mark.parametrize("options_class", ALL, ids=lambda c: c.__name__)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_plain_parse_agrees_with_click(options_class: type[Options], data) -> None:
    argv = data.draw(st.lists(st.sampled_from(_tokens(options_class)), max_size=8))
    plain = parse_plain(options_class, argv)
    if plain is not None:
        assert _click_parse(options_class, argv) == plain, argv


def _converts(kind: options.Kind, text: str) -> bool:
    try:
        kind.convert(text)
        return True
    except ValueError:
        return False


def _plain_spelling(options_class: type[Options], draw) -> list[str]:
    """A command line in the spellings the fast path must take, in any order:
    positional values, flags, and options with a valid value each."""
    good = {"TEXT": ["out.jsonl", "-", "x"], "INTEGER": ["9092", "19092", "1", "64"],
            "FLOAT": ["2.5", "10"], "BYTES": ["128m", "4096"]}
    units = [[value] for value in draw(st.lists(st.sampled_from(["a.pcap", "dir", "rot/*.pcap"]), min_size=1, max_size=3))]
    for param in options_class.params():
        if not param.flags or not (param.required or draw(st.booleans())):
            continue
        for _ in range(draw(st.integers(1, 2)) if param.multiple else 1):
            unit = [draw(st.sampled_from(param.flags))]
            if param.kind is not options.FLAG:
                unit.append(draw(st.sampled_from([v for v in good[param.kind.metavar] if _converts(param.kind, v)])))
            units.append(unit)
    return [token for unit in draw(st.permutations(units)) for token in unit]


@pytest.mark.parametrize("options_class", [c for c in ALL if issubclass(c, CaptureInputs)], ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_plain_spellings_take_the_plain_path(options_class: type[Options], data) -> None:
    argv = _plain_spelling(options_class, data.draw)
    plain = parse_plain(options_class, argv)
    assert plain is not None, argv
    assert _click_parse(options_class, argv) == plain


def test_values_and_defaults_come_from_the_description() -> None:
    parsed = parse_plain(SparkOptions, ["a.pcap", "-o", "out", "-p", "9093", "--port", "9094"])
    assert parsed == SparkOptions(captures=("a.pcap",), outdir="out", ports=(9093, 9094), no_detect=False,
                                  split_size=128 << 20, partitions=None, master="local[*]")
    assert parse_plain(RecordsOptions, ["a.pcap"]).max_uncompressed_mib == 64
    assert parse_plain(SparkJobOptions, ["a.pcap", "-o", "o", "--split-size", "64MiB"]).split_size == 64 << 20
    assert parse_plain(SparkJobOptions, ["a.pcap"]) is None  # -o is required: click says so
    with pytest.raises(TypeError, match="required"):
        SparkJobOptions(outdir="x")


def _capture_commands() -> dict[str, click.Command]:
    commands = {name: importlib.import_module(module).command
                for name, module in cli.COMMANDS.items() if name != "apis"}
    from kdissect.spark import submit_main

    commands["submit_main.py"] = click_command("submit_main.py", SparkJobOptions, submit_main.submit)
    return commands


def test_every_command_reading_captures_takes_the_capture_inputs() -> None:
    """An option added to CaptureInputs reaches all of them (the next one:
    --tls-keylog)."""
    shared = [(p.name, p.flags) for p in CaptureInputs.params()]
    for name, command in _capture_commands().items():
        described = [(p.name, tuple(o for o in getattr(p, "opts", ()) if o.startswith("-")) or ()) for p in command.params]
        for param_name, flags in shared:
            assert (param_name, flags) in described, f"{name} lacks {param_name}"


def test_help_lists_every_option_with_its_help(capsys) -> None:
    for name in cli.COMMANDS:
        assert cli.main([name, "--help"]) == 0
        out = capsys.readouterr().out
        options_class = {"apis": ApisOptions, "export": ExportOptions, "show": ShowOptions, "stats": StatsOptions,
                         "records": RecordsOptions, "spark": SparkOptions, "report": ReportOptions,
                         "topics": TopicsOptions, "groups": GroupsOptions, "clients": ClientsOptions}[name]
        for param in options_class.params():
            for flag in param.flags:
                assert flag in out, (name, flag)
            assert " ".join(param.help.split()[:3]) in " ".join(out.split()), (name, param.name)
