"""Move kdissect's flat modules into packages by layer, and the tests into
folders that mirror them (issue 24, steps 1 and 7). A mechanical rewrite,
re-applied after merging branches written against the flat layout:

    python tools/relayout.py            # move, rewrite, report what it does not know
    python tools/relayout.py --check    # only report: exit 1 when anything is left to do

What it does, in this order (every step is a no-op once done, so running it
twice changes nothing):
1. `git mv` every module in MODULES and every test in TESTS that is still at
   its old place, and writes the `__init__.py` of the new packages (PACKAGES).
2. Rewrites every tracked text file (sources, tests, tools, benchmarks,
   notebooks, docs, pyproject.toml, ...):
   - dotted names: `kdissect.capture` -> `kdissect.wire.capture`, in imports,
     attribute chains, strings (`monkeypatch.setattr("kdissect.pipeline.X")`),
     mypy overrides; `tests.test_protocol_imports` likewise;
   - paths: `kdissect/capture.py` -> `kdissect/wire/capture.py`,
     `kdissect/tls/` -> `kdissect/conn/tls/`, `tests/test_x.py` -> its new place;
   - in Python files, `from kdissect import capture` (a module, not a
     re-exported name) -> `from kdissect.wire import capture`, and relative
     imports inside the package -> absolute ones (the package's style);
   - in a test moved one level deeper, `Path(__file__).resolve().parent.parent`
     (or `.parents[1]`) -> `REPO` from tests/support/paths.py;
   - names relative to the package in the two tables that hold them:
     `native.NATIVE_MODULES` and tests/package/test_layers.py's `LAYERS`
     (rebuilt from NEW_LAYERS, keeping any member a merged branch added), and
     the modules column of docs/architecture.md's layer table (from LAYERS).
3. Reports the flat modules and flat tests it has no place for (a branch
   added them): add a line to MODULES or TESTS and run it again.

To extend the map: a new flat module `kdissect/x.py` of layer L goes into
MODULES as `"x": "L_PACKAGE.x"` (or into STAY when it belongs at the top);
a new test `tests/test_x.py` into TESTS as `"test_x": "dir/test_name"`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "kdissect"

# old name below kdissect -> new name below kdissect (modules and packages)
MODULES: dict[str, str] = {
    # model: plain data, no I/O (the slot-record base, times, the row, its problems, the counters)
    "packet": "model.packet",
    "times": "model.times",
    "exchange": "model.exchange",
    "problems": "model.problems",
    "accounting": "model.accounting",
    # wire: capture files -> ordered TCP byte streams per direction
    "spark.tree": "shared.outdir_tree",  # OUTDIR as a tree in any store: Spark writes it, the report reads it
    "stores": "wire.stores",  # captures in S3 and HDFS (listing, ranged reads); capture.py imports it
    "webhdfs": "wire.webhdfs",  # the webhdfs:// client (the webhdfs extra)
    "capture": "wire.capture",
    "linklayers": "wire.linklayers",
    "captureset": "wire.captureset",
    "reassembly": "wire.reassembly",
    # conn: one connection's byte streams -> exchanges
    "detect": "conn.detect",
    "tls": "conn.tls",
    "framing": "conn.framing",
    "decoding": "conn.decoding",
    "pairing": "conn.pairing",
    "holds": "conn.holds",
    "sasl": "conn.sasl",
    "trial": "conn.trial",
    "waits": "conn.waits",
    "pipeline": "conn.pipeline",
    "arrivals": "conn.arrivals",
    # error codes of the protocol's normal flow: it reads the generated error table
    # (so not model/, below protocol/) at call time (which protocol/ does not allow);
    # pairing is its first user
    "normal_flow": "conn.normal_flow",
    # the broker's request log: reading and joining it is per connection, its
    # tables are analysis (a submodule listed before its package moves first)
    "brokerlog.tables": "stats.brokerlog",
    "brokerlog": "conn.brokerlog",
    # stats: tallies over exchanges (forensics/ is its sibling)
    "summary": "stats.summary",
    "stats_tables": "stats.tables",
    "text_table": "stats.text_table",  # the text tables fitted to a terminal
    # filters: which exchanges a run keeps (analysis, beside stats/ and forensics/)
    "display_filter": "filters.display_filter",
    "mentions": "filters.mentions",
    "selection": "filters.selection",
    # shared: what the faces share (writers, options, inputs, extras, allocator)
    "output": "shared.output",
    "atomic": "shared.atomic",
    "protected_inputs": "shared.protected_inputs",
    "options": "shared.options",
    "inputs": "shared.inputs",
    "extras": "shared.extras",
    "allocator": "shared.allocator",
    "hints": "shared.hints",
}
# flat names that stay where they are
STAY = ("__init__", "__main__", "cli", "failures", "blake2", "ranks", "text_escape", "native", "py.typed",
        "protocol", "records", "forensics", "commands", "spark", "scapy", "report",
        *sorted({new.split(".")[0] for new in MODULES.values()}))

# the new packages' __init__.py (docstring; `native` when a compiled module lives there)
PACKAGES: dict[str, tuple[str, bool]] = {
    "model": ("The plain data every layer passes on: the slot-record base and `TcpSegment`,\n"
              "times, the exchange row, its problems, the run's accounting. No I/O.", False),
    "wire": ("Capture files to ordered TCP byte streams: capture formats, link layers,\n"
             "the capture-set rule, reassembly.", True),
    "conn": ("One Kafka connection: detection, the TLS bridge, framing, pairing, trial\n"
             "decoding, waits, and the Dissector that runs them.", True),
    "stats": ("Figures over exchanges: the latency, error and throttling summaries and\n"
              "the tables `kdissect stats` prints.", False),
    "filters": ("Which exchanges a run keeps: the display filter, the topics and groups\n"
                "an exchange names, the selection that combines them with the time window.", False),
    "shared": ("What the faces share: table writers, atomic outputs, protected inputs,\n"
               "option declarations, capture arguments, extras, the allocator tuning.", False),
}

# the declared layers after the move, lowest first (tests/package/test_layers.py's LAYERS)
NEW_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("failures", "blake2", "native")),
    ("model", ("model",)),
    ("protocol", ("protocol",)),
    ("records", ("records",)),
    ("wire", ("wire",)),
    ("connection", ("conn",)),
    ("analysis", ("stats", "forensics")),
    ("face support", ("shared", "commands.runtime")),
    ("faces", ("spark", "scapy", "report")),
    ("command line", ("cli", "__main__", "commands")),
]
# a comment after each row of LAYERS
LAYER_NOTES = {
    "base": "leaves every layer may use: the user-error exception, BLAKE2b, the compiled build's switch",
    "model": "plain data: the slot-record base and TcpSegment, times, the row, its problems, the counters",
    "protocol": "message tables, codec, skims, topic labels",
    "records": "message sets and record batches inside messages",
    "wire": "capture files -> ordered TCP bytes per direction",
    "connection": "bytes -> frames -> exchanges, the TLS bridge included",
    "analysis": "tallies over exchanges",
    "face support": "writers, option declarations, inputs, extras, allocator, the command line's runtime",
    "faces": "never import each other",
    "command line": "drives the faces",
}

# tests/<old>.py -> tests/<new>.py: folders mirror kdissect/ (plus lab/ for
# recordings with real brokers and package/ for checks over the whole package),
# names say what they check
TESTS: dict[str, str] = {
    "test_capture": "wire/test_capture",
    "test_stores": "wire/test_stores",
    "test_capture_throughput": "wire/test_capture_throughput",
    "test_captureset": "wire/test_captureset",
    "test_reassembly": "wire/test_reassembly",
    "test_framing": "conn/test_framing",
    "test_connection_bound": "conn/test_connection_bound",
    "test_latency": "conn/test_timing",
    "test_midstream": "conn/test_midstream",
    "test_mutation_campaign": "conn/test_mutated_captures",
    "test_pairing_inexact": "conn/test_pairing_inexact",
    "test_pairing_paths": "conn/test_pairing_short_cuts",
    "test_pairing_reordered": "conn/test_pairing_reordered",
    "test_pairing_skim": "conn/test_pairing_skim",
    "test_pipeline": "conn/test_pipeline",
    "test_pipeline_impair": "conn/test_pipeline_impaired",
    "test_pipeline_paths": "conn/test_pipeline_fast_paths",
    "test_vs_tshark": "conn/test_vs_tshark",
    "test_arrivals": "conn/test_arrivals",
    "test_brokerlog": "conn/test_brokerlog_join",
    "test_tls_captures": "conn/tls/test_captures",
    "test_tls_keylog": "conn/tls/test_keylog",
    "test_tls_openssl": "conn/tls/test_openssl",
    "test_tls_pipeline": "conn/tls/test_pipeline",
    "test_tls_vectors": "conn/tls/test_vectors",
    "test_accounting": "model/test_accounting",
    "test_problems": "model/test_problems",
    "test_slot_records": "model/test_slot_records",
    "test_protocol_bodies": "protocol/test_bodies",
    "test_protocol_codecache": "protocol/test_codecache",
    "test_protocol_crosscheck": "protocol/test_crosscheck",
    "test_protocol_fuzz": "protocol/test_fuzz",
    "test_protocol_golden": "protocol/test_golden",
    "test_protocol_imports": "protocol/test_imports",
    "test_protocol_quirks": "protocol/test_quirks",
    "test_protocol_roundtrip": "protocol/test_roundtrip",
    "test_protocol_skim": "protocol/test_skim",
    "test_protocol_tables": "protocol/test_tables",
    "test_varints": "protocol/test_varints",
    "test_records": "records/test_payloads",
    "test_records_api": "records/test_api",
    "test_records_capture": "records/test_capture",
    "test_records_figures": "records/test_figures",
    "test_records_fuzz": "records/test_fuzz",
    "test_cli_stats": "stats/test_summary",
    "test_summary_memory": "stats/test_summary_memory",
    "test_terminal_output": "stats/test_terminal_output",
    "test_selection": "filters/test_selection",
    "test_forensics_clients": "forensics/test_clients",
    "test_forensics_groups": "forensics/test_groups",
    "test_group_lag": "forensics/test_group_lag",
    "test_forensics_topics": "forensics/test_topics",
    "test_forensics_transactions": "forensics/test_transactions",
    "test_quantile_sketch": "forensics/test_sketch",
    "test_cli_inputs": "shared/test_inputs",
    "test_options": "shared/test_options",
    "test_output_batches": "shared/test_output_batches",
    "test_output_jsonl": "shared/test_output_jsonl",
    "test_output_strings": "shared/test_output_strings",
    "test_safe_outputs": "shared/test_safe_outputs",
    "test_extras": "shared/test_extras",
    "test_hostile_strings": "shared/test_hostile_strings",
    "test_cli": "commands/test_cli",
    "test_cli_plain_args": "commands/test_plain_args",
    "test_forensics_cli": "commands/test_forensics",
    "test_show_records": "commands/test_show_records",
    "test_spark": "spark/test_job",
    "test_cli_submit": "spark/test_submit",
    "test_forensics_spark": "spark/test_forensics",
    "test_spark_captureset": "spark/test_captureset",
    "test_spark_outdir": "spark/test_outdir",
    "test_spark_stores": "spark/test_stores",
    "test_spark_hdfs": "spark/test_hdfs",
    "test_spark_cluster_stores": "spark/test_cluster_stores",
    "test_spark_part_files": "spark/test_part_files",
    "test_spark_runs": "spark/test_runs",
    "test_spark_session": "spark/test_session",
    "test_spark_split": "spark/test_split",
    "test_spark_summaries": "spark/test_summaries",
    "test_spark_selection": "spark/test_selection",
    "test_brokerlog_spark": "spark/test_brokerlog",
    "test_report": "report/test_report",
    "test_report_spark": "report/test_spark_tables",
    "test_report_hostile": "report/test_hostile_text",
    "test_scapy": "scapy/test_layers",
    "test_scapy_captures": "scapy/test_captures",
    "test_scapy_live": "scapy/test_live",
    "test_scapy_roundtrip": "scapy/test_roundtrip",
    "test_scapy_tls": "scapy/test_tls",
    "test_protocol_scapy_readers": "scapy/test_core_readers",
    "test_captures_lab": "lab/test_captures",
    "test_kafka_lab": "lab/test_apache_kafka",
    "test_lab_imports": "lab/test_imports",
    "test_records_lab": "lab/test_records",
    "test_tls_lab": "lab/test_tls",
    "test_waits_lab": "lab/test_waits",
    "test_longpoll_data_lab": "lab/test_longpoll_data",
    "test_share_groups_lab": "lab/test_share_groups",
    "test_package_layers": "package/test_layers",
    "test_types": "package/test_types",
    "test_native": "package/test_native",
    "test_wheel": "package/test_wheel",
    "test_notebooks": "package/test_notebooks",
    "test_relayout": "package/test_relayout",  # when cherry-picked before the move
}
TEST_FOLDER_DOC = "Tests of kdissect/{0}/ (tests mirror the package)."
TEST_FOLDER_DOCS = {
    "lab": "Tests over the capture lab: live brokers and clients, their recordings.",
    "package": "Checks over the whole package: layers, types, the compiled build, the wheel, the notebooks.",
}

TEXT_SUFFIXES = (".py", ".md", ".toml", ".ipynb", ".txt", ".cfg", ".ini", ".sh", ".yml", ".yaml", ".properties")
TEXT_NAMES = ("Makefile", "run")
SKIP_DIRS = ("captures/", "tools/relayout.py")  # data, and this map


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def module_path(relative: str) -> Path:
    """kdissect/<relative>.py, or the package directory, whichever exists (else the .py)."""
    base = REPO / PACKAGE / Path(*relative.split("."))
    return base if base.is_dir() else base.with_suffix(".py")


# ---- step 1: moves -------------------------------------------------------------------

def move_modules(log: list[str]) -> None:
    for old, new in MODULES.items():
        source, target_dir = _current_path(old), REPO / PACKAGE / Path(*new.split("."))
        target = target_dir if source.is_dir() else target_dir.with_suffix(".py")
        if not source.exists() or target.exists():
            continue
        _ensure_package(target.parent, log)
        git("mv", str(source.relative_to(REPO)), str(target.relative_to(REPO)))
        log.append(f"moved {source.relative_to(REPO)} -> {target.relative_to(REPO)}")


def _current_path(old: str) -> Path:
    """Where an old module is now: at its old place, or inside a package that moved."""
    path = module_path(old)
    parent = _longest_prefix(old, exclude=old)
    if not path.exists() and parent is not None:
        path = module_path(MODULES[parent] + old[len(parent):])
    return path


def _longest_prefix(name: str, exclude: str = "") -> str | None:
    found = [old for old in MODULES if old != exclude and (name == old or name.startswith(old + "."))]
    return max(found, key=len, default=None)


def _ensure_package(folder: Path, log: list[str]) -> None:
    init = folder / "__init__.py"
    if init.exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    name = folder.relative_to(REPO / PACKAGE).as_posix()
    doc, native = PACKAGES.get(name, (f"kdissect.{name.replace('/', '.')}", False))
    text = f'"""{doc}"""\n'
    if native:
        text += ("\nfrom kdissect import native as _native\n\n"
                 "_native.extend(__path__, __name__)  # this package's compiled modules, when in use\n")
    init.write_text(text)
    git("add", str(init.relative_to(REPO)))
    log.append(f"created {init.relative_to(REPO)}")


def move_tests(log: list[str]) -> list[Path]:
    """Moves the tests; returns the moved files (at their new places)."""
    moved = []
    for old, new in TESTS.items():
        source, target = REPO / "tests" / f"{old}.py", REPO / "tests" / f"{new}.py"
        if not source.exists() or target.exists():
            continue
        folder = target.parent
        for level in reversed([folder, *folder.parents]):
            if level == REPO / "tests" or REPO / "tests" not in level.parents:
                continue
            init = level / "__init__.py"
            if not init.exists():
                level.mkdir(parents=True, exist_ok=True)
                top = level.relative_to(REPO / "tests").as_posix()
                init.write_text(f'"""{TEST_FOLDER_DOCS.get(top, TEST_FOLDER_DOC.format(top))}"""\n')
                git("add", str(init.relative_to(REPO)))
        git("mv", str(source.relative_to(REPO)), str(target.relative_to(REPO)))
        log.append(f"moved {source.relative_to(REPO)} -> {target.relative_to(REPO)}")
        moved.append(target)
    return moved


# ---- step 2: rewrites ----------------------------------------------------------------

def dotted_map() -> dict[str, str]:
    names = {f"{PACKAGE}.{old}": f"{PACKAGE}.{new}" for old, new in MODULES.items()}
    names.update({f"tests.{old}": "tests." + new.replace("/", ".") for old, new in TESTS.items()})
    return names


def path_map() -> dict[str, str]:
    paths = {}
    for old, new in MODULES.items():
        old_path, new_path = f"{PACKAGE}/{old.replace('.', '/')}", f"{PACKAGE}/{new.replace('.', '/')}"
        paths[old_path + ".py"] = new_path + ".py"
        paths[old_path + "/"] = new_path + "/"
    paths.update({f"tests/{old}.py": f"tests/{new}.py" for old, new in TESTS.items()})
    return paths


def _alternation(keys: list[str]) -> str:
    return "|".join(re.escape(key) for key in sorted(keys, key=len, reverse=True))


def rewrite_names(text: str) -> str:
    """Dotted module names and paths, anywhere in the text (idempotent: a new
    name never contains an old one at a name boundary)."""
    dotted, paths = dotted_map(), path_map()
    text = re.sub(rf"(?<![\w.]){_alternation(list(dotted))}(?!\w)",
                  lambda match: dotted[match.group(0)], text)
    text = re.sub(rf"(?<![\w./]){_alternation(list(paths))}",
                  lambda match: paths[match.group(0)], text)
    return text


def _replace_lines(text: str, spans: list[tuple[int, int, str]]) -> str:
    """Replace 1-based inclusive line spans (end to start, so numbers hold)."""
    lines = text.splitlines(keepends=True)
    for start, end, new in sorted(spans, reverse=True):
        lines[start - 1:end] = [new]
    return "".join(lines)


def rewrite_from_imports(text: str, module: str | None) -> str:
    """`from kdissect import capture, cli` -> one statement per package, and
    relative imports (inside the package) -> absolute ones."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if module is None:
                continue
            parts = module.split(".")
            base = parts[:len(parts) - node.level]
            absolute = ".".join(base + ([node.module] if node.module else []))
            source = absolute
        elif node.module == PACKAGE:
            source = PACKAGE
        else:
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            full = rewrite_names(f"{source}.{alias.name}")
            where = full.rsplit(".", 1)[0] if full != f"{source}.{alias.name}" else rewrite_names(source)
            groups.setdefault(where, []).append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
        if not node.level and list(groups) == [PACKAGE]:
            continue
        first, last = lines[node.lineno - 1], lines[node.end_lineno - 1]  # type: ignore[index]
        indent = first[:node.col_offset]
        tail = last[node.end_col_offset:]  # comments and the line end
        statements = [f"from {where} import {', '.join(names)}" for where, names in groups.items()]
        spans.append((node.lineno, node.end_lineno, indent + f"\n{indent}".join(statements) + tail))
    return _replace_lines(text, spans) if spans else text


_DEPTH = re.compile(r"Path\(__file__\)\.resolve\(\)\.(?:parent\.parent|parents\[1\])(?!\.parent|\[)")


def rewrite_depth(text: str) -> str:
    """A test moved one level deeper: its checkout root comes from tests/support/paths.py."""
    if not _DEPTH.search(text):
        return text
    text = _DEPTH.sub("REPO", text)
    text = re.sub(r"(?m)^REPO = REPO\n", "", text)
    if "from tests.support.paths import REPO" in text:
        return text
    tree = ast.parse(text)
    after = 0  # the end of the imports at the top (those after code stay where they are)
    for index, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            after = node.end_lineno or 0
        elif not (index == 0 and isinstance(node, ast.Expr)):  # the docstring
            break
    lines = text.splitlines(keepends=True)
    lines.insert(after or 0, "from tests.support.paths import REPO\n")
    return "".join(lines)


def _relative(name: str) -> str:
    old = _longest_prefix(name)
    return name if old is None else MODULES[old] + name[len(old):]


def _quoted(name: str) -> str:
    return '"' + name + '"'


def rewrite_native_modules(text: str) -> str:
    def new_tuple(match: re.Match[str]) -> str:
        names = ast.literal_eval(match.group(2))
        return match.group(1) + "(" + ", ".join(_quoted(_relative(name)) for name in names) + ")"
    return re.sub(r"(?m)^(NATIVE_MODULES = )(\(.*\))", new_tuple, text)


def rewrite_layers(text: str) -> str:
    """LAYERS from NEW_LAYERS, keeping members the old table had beyond them."""
    tree = ast.parse(text)
    node = next(node for node in tree.body if isinstance(node, ast.AnnAssign)
                and getattr(node.target, "id", "") == "LAYERS")
    old = ast.literal_eval(node.value)  # type: ignore[arg-type]
    rows = {name: list(members) for name, members in NEW_LAYERS}
    covered = [member for _name, members in NEW_LAYERS for member in members]
    for name, members in old:
        for member in members:
            new = _relative(member)
            if "." in new and "." not in member:  # moved into a folder NEW_LAYERS does not name: the folder
                new = new.split(".")[0]
            if not any(new == known or new.startswith(known + ".") for known in covered):
                rows.setdefault(name, []).append(new)
                covered.append(new)
    body = "".join(f"    ({_quoted(name)}, ({', '.join(_quoted(m) for m in members)}{',' * (len(members) == 1)})),"
                   + (f"  # {LAYER_NOTES[name]}" if name in LAYER_NOTES else "") + "\n"
                   for name, members in rows.items())
    new_text = f"LAYERS: list[tuple[str, tuple[str, ...]]] = [\n{body}]\n"
    lines = text.splitlines(keepends=True)
    start = node.lineno
    # the comments that belonged to the old rows go with them
    return "".join(lines[:start - 1]) + new_text + "".join(lines[node.end_lineno:])  # type: ignore[operator]


def rewrite_layer_table(text: str, layers: list[tuple[str, tuple[str, ...]]]) -> str:
    """The modules column of docs/architecture.md's layer table, from LAYERS."""
    head = text.find("| layer | modules |")
    if head < 0:
        return text
    block_end = text.find("\n\n", head)
    rows = text[head:block_end].splitlines()
    why = {}
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        why[cells[0]] = " | ".join(cells[2:])
    out = rows[:2]
    for name, members in layers:
        shown = []
        for member in members:
            path = REPO / PACKAGE / Path(*member.split("."))
            if member.startswith("__"):
                shown.append(f"`{member}`")
            elif path.is_dir():
                shown.append(member.replace(".", "/") + "/")
            elif "." in member:
                shown.append(member.replace(".", "/") + ".py")
            else:
                shown.append(member)
        out.append(f"| {name} | {', '.join(shown)} | {why.get(name, '')} |")
    return text[:head] + "\n".join(out) + text[block_end:]


def rewrite_notebook(text: str) -> str:
    notebook = json.loads(text)
    for cell in notebook.get("cells", []):
        source = "".join(cell.get("source", []))
        new = rewrite_names(source)
        if cell.get("cell_type") == "code":
            new = rewrite_from_imports(new, None)
        if new != source:
            cell["source"] = new.splitlines(keepends=True)
    new_text = json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    return new_text if new_text != text and json.loads(new_text) != json.loads(text) else text


def module_of(path: Path) -> str | None:
    """The dotted name a file had before the move (relative imports are read from it)."""
    relative = path.relative_to(REPO)
    if relative.parts[0] not in (PACKAGE, "tests") or path.suffix != ".py":
        return None
    name = ".".join(relative.with_suffix("").parts)  # a package's __init__ keeps it: `from . import` is its own
    for old, new in sorted(dotted_map().items(), key=lambda item: -len(item[1])):
        if name == new or name.startswith(new + "."):
            return old + name[len(new):]
    return name


def tracked_text_files() -> list[Path]:
    files = []
    for name in git("ls-files").splitlines():
        if name.startswith(SKIP_DIRS) or "/_generated/" in name:
            continue
        path = REPO / name
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES):
            files.append(path)
    return files


def rewrite_all(moved_tests: list[Path], log: list[str]) -> None:
    layers_file = REPO / "tests" / (TESTS["test_package_layers"] + ".py")
    for path in tracked_text_files():
        text = path.read_text()
        if path.suffix == ".ipynb":
            new = rewrite_notebook(text)
        else:
            new = rewrite_names(text)
            if path.suffix == ".py":
                new = rewrite_from_imports(new, module_of(path))
                if path in moved_tests:
                    new = rewrite_depth(new)
                if path.name == "native.py" and path.parent.name == PACKAGE:
                    new = rewrite_native_modules(new)
                if path == layers_file:
                    new = rewrite_layers(new)
        if new != text:
            path.write_text(new)
            log.append(f"rewrote {path.relative_to(REPO)}")
    doc = REPO / "docs" / "architecture.md"
    if doc.exists() and layers_file.exists():
        tree = ast.parse(layers_file.read_text())
        node = next(node for node in tree.body if isinstance(node, ast.AnnAssign)
                    and getattr(node.target, "id", "") == "LAYERS")
        text = doc.read_text()
        new = rewrite_layer_table(text, ast.literal_eval(node.value))  # type: ignore[arg-type]
        if new != text:
            doc.write_text(new)
            log.append(f"rewrote {doc.relative_to(REPO)} (layer table)")


# ---- step 3: what the map does not know ----------------------------------------------

def unknown() -> list[str]:
    found = []
    for path in sorted((REPO / PACKAGE).iterdir()):
        name = path.stem if path.suffix == ".py" else path.name
        if path.name == "__pycache__" or name.startswith("."):
            continue
        if (path.suffix == ".py" or (path / "__init__.py").exists()) and name not in STAY and name not in MODULES:
            found.append(f"kdissect/{path.name}: no place in MODULES (add it, or to STAY)")
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path.stem not in TESTS:
            found.append(f"tests/{path.name}: no place in TESTS")
    for path in sorted(REPO.glob("tests/**/test_*.py")):
        if path.parent == REPO / "tests":
            continue
        for folder in path.relative_to(REPO / "tests").parents:
            if folder != Path(".") and not (REPO / "tests" / folder / "__init__.py").exists():
                found.append(f"tests/{folder}: no __init__.py")
    return sorted(set(found))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when something is left to do")
    args = parser.parse_args()
    if args.check:
        left = [old for old in MODULES if module_path(old).exists() and "." not in old]
        left += [old for old in MODULES if "." in old and module_path(old).exists()
                 and not (REPO / PACKAGE / Path(*MODULES[old].split("."))).exists()]
        left += [old for old in TESTS if (REPO / "tests" / f"{old}.py").exists()]
        problems = unknown()
        for line in [f"not moved yet: {name}" for name in left] + problems:
            print(line)
        return 1 if left or problems else 0
    log: list[str] = []
    move_modules(log)
    moved = move_tests(log)
    rewrite_all(moved, log)
    for line in log:
        print(line)
    problems = unknown()
    for line in problems:
        print(f"relayout: {line}", file=sys.stderr)
    if not log:
        print("relayout: nothing to do")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
