"""Dependencies run one way: no kdissect module imports a layer above its own,
and no face imports another.

`LAYERS` is the declared order, lowest first, and the one place it is
written (docs/architecture.md shows it and points here). A module belongs to
the layer of the longest name in the table that is it or a package holding
it. It may import modules of its own layer and of the layers below. The
graph is read from the source as tests/protocol/test_imports.py reads the
protocol package's (every import statement, at any level, and
`importlib.import_module` on a constant; not those under
``if TYPE_CHECKING:``, which never run).

Within a layer two more rules hold:
- the faces (spark, scapy, report) never import each other;
- a command module never imports another command's module: what commands
  share is in kdissect.commands.runtime (or a helper the table names with
  the modules that may import it).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.protocol.test_imports import _imports, module_names
from tests.support.paths import REPO

PREFIX = "kdissect"

# lowest first; names relative to kdissect
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("failures", "blake2", "native", "ranks", "sketch", "text_escape")),  # leaves every layer may use: the user-error exception, BLAKE2b, the compiled build's switch, percentiles and their sketches
    ("model", ("model",)),  # plain data: the slot-record base and TcpSegment, times, the row, its problems, the counters
    ("protocol", ("protocol",)),  # message tables, codec, skims, topic labels
    ("records", ("records",)),  # message sets and record batches inside messages
    ("wire", ("wire",)),  # capture files -> ordered TCP bytes per direction
    ("connection", ("conn",)),  # bytes -> frames -> exchanges, the TLS bridge included
    ("analysis", ("stats", "forensics", "filters")),  # tallies over exchanges
    ("face support", ("shared", "commands.runtime")),  # writers, option declarations, inputs, extras, allocator, the command line's runtime
    ("faces", ("spark", "scapy", "report")),  # never import each other
    ("command line", ("cli", "__main__", "commands")),  # drives the faces
]
SIBLING_FACES = ("spark", "scapy", "report")
# command-line helpers that are not commands, and who may import them
COMMAND_HELPERS: dict[str, tuple[str, ...]] = {
    "commands.export_core": ("cli", "commands.export"),  # export without click (cli's plain path)
    "commands.forensics_common": ("commands.topics", "commands.groups", "commands.clients"),
}
# the package's __init__ only re-exports the protocol lazily
EXEMPT = ("kdissect",)


def layer_of(module: str) -> int:
    """The index in LAYERS of a dotted module name (KeyError when undeclared)."""
    relative = module[len(PREFIX) + 1:]
    best, found = -1, None
    for index, (_name, members) in enumerate(LAYERS):
        for member in members:
            if (relative == member or relative.startswith(member + ".")) and len(member) > best:
                best, found = len(member), index
    if found is None:
        raise KeyError(module)
    return found


def _group(module: str, names: tuple[str, ...]) -> str | None:
    relative = module[len(PREFIX) + 1:]
    return next((name for name in names if relative == name or relative.startswith(name + ".")), None)


def package_graph() -> dict[str, set[str]]:
    modules = module_names(REPO / PREFIX, PREFIX)
    graph = {}
    for name, path in modules.items():
        found: set[str] = set()
        _imports(ast.parse(path.read_text()), found, [], 0, modules, PREFIX)
        found.discard(name)
        graph[name] = {target for target in found if target != PREFIX}
    return graph


def violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        if module in EXEMPT:
            continue
        own = layer_of(module)
        for target in sorted(targets):
            theirs = layer_of(target)
            if theirs > own:
                problems.append(f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[theirs][0]})")
            # (a module the table places below the faces, as shared.outdir_tree, is not the face's)
            face = _group(module, SIBLING_FACES) if LAYERS[own][0] == "faces" else None
            other = _group(target, SIBLING_FACES) if LAYERS[theirs][0] == "faces" else None
            if face and other and face != other:
                problems.append(f"{module} imports the face {other}")
            relative, wanted = module[len(PREFIX) + 1:], target[len(PREFIX) + 1:]
            if wanted.startswith("commands.") and wanted != "commands.runtime" \
                    and not relative.startswith(wanted.split(".")[0] + "." + wanted.split(".")[1]):
                allowed = COMMAND_HELPERS.get(".".join(wanted.split(".")[:2]))
                if allowed is None or relative not in allowed:
                    problems.append(f"{module} imports the command module {target}")
    return problems


def test_every_module_has_a_declared_layer() -> None:
    for module in package_graph():
        if module not in EXEMPT:
            layer_of(module)  # raises for a module the table does not place


def test_the_checker_finds_a_module_importing_upwards_or_sideways() -> None:
    """The rules can fail: made-up imports that break each of them."""
    assert violations({"kdissect.records.table": {"kdissect.forensics.names"}}) == [
        "kdissect.records.table (records) imports kdissect.forensics.names (analysis)"]
    assert violations({"kdissect.spark.submit_main": {"kdissect.cli"}})
    assert violations({"kdissect.report.page": {"kdissect.spark.tables"}}) == [
        "kdissect.report.page imports the face spark"]
    assert violations({"kdissect.commands.show": {"kdissect.commands.export_core"}})
    assert violations({"kdissect.commands.show": {"kdissect.commands.runtime", "kdissect.spark.job",
                                                  "kdissect.conn.pipeline"}}) == []
    assert violations({"kdissect.commands.topics": {"kdissect.commands.forensics_common"}}) == []


def test_dependencies_run_one_way() -> None:
    graph = package_graph()
    # the reader sees the package's imports, function-level ones included
    assert "kdissect.commands.runtime" in graph["kdissect.spark.submit_main"]
    assert "kdissect.conn.pipeline" in graph["kdissect.commands.runtime"]
    problems = violations(graph)
    assert problems == [], "\n".join(problems)


def test_the_architecture_doc_shows_the_declared_layers() -> None:
    """docs/architecture.md's layer table lists LAYERS, in order."""
    text = (REPO / "docs" / "architecture.md").read_text()
    rows = text[text.index("| layer | modules |"):].split("\n\n", 1)[0].splitlines()[2:]
    shown = []
    for row in rows:
        name, modules = (cell.strip() for cell in row.strip("|").split("|")[:2])
        names = [m.strip().strip("`").rstrip("/").removesuffix(".py").replace("/", ".") for m in modules.split(",")]
        shown.append((name, tuple(names)))
    assert shown == LAYERS
