"""Generated tables vs the spec files: staleness, merge rule, union coverage, errors."""

from __future__ import annotations

import importlib.util
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from kdissect.cli import main as cli_main
from kdissect.protocol.errors import error_name, is_retriable
from kdissect.protocol.schema import get_schema, resolve_version, snake_case
from tests.support.protocol import ERRORS_TSV, SPEC_DIR, SPEC_SETS, spec_union
from tests.support.paths import REPO

needs_spec = pytest.mark.skipif(not (SPEC_DIR / ERRORS_TSV).exists(), reason="../shared/kafka-spec is absent")


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_protocol", REPO / "tools" / "gen_protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_spec(path: Path) -> dict:
    return json.loads("\n".join(l for l in path.read_text().splitlines() if not l.strip().startswith("//")))


@needs_spec
def test_committed_tables_are_not_stale(tmp_path: Path) -> None:
    gen = _load_generator()
    gen.write(gen.generate(SPEC_DIR), tmp_path)
    committed = REPO / "kdissect" / "protocol" / "_generated"
    fresh = sorted(p.name for p in tmp_path.glob("*.py"))
    assert fresh == sorted(p.name for p in committed.glob("*.py") if p.name not in gen.WRITTEN_ELSEWHERE)
    stale = [name for name in fresh if (tmp_path / name).read_text() != (committed / name).read_text()]
    assert not stale, f"rerun tools/gen_protocol.py: stale {stale}"


def _apis_json() -> list[dict]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli_main(["apis", "--json"]) == 0
    return json.loads(out.getvalue())


@needs_spec
def test_apis_json_covers_the_spec_union() -> None:
    union = spec_union()
    listed = {}
    for entry in _apis_json():
        assert set(entry) == {"api_key", "name", "request_versions", "response_versions"}
        for direction in ("request", "response"):
            lo, hi = entry[f"{direction}_versions"]
            listed[(entry["api_key"], direction)] = set(range(lo, hi + 1))
    assert listed == union


def test_apis_table_lists_every_key() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli_main(["apis"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["key", "name", "request", "response"]
    assert len(lines) - 1 == len(_apis_json())
    produce = lines[1].split()
    assert produce[:2] == ["0", "Produce"]


@needs_spec
def test_merge_rule_picks_the_first_defining_set() -> None:
    """For every (api, version, direction) the schema's fields are those of the
    first spec set (the release, then newest, kafka-4.x, trunk) whose
    validVersions holds the version (README rule)."""
    files: dict[tuple[int, str], list[tuple[str, dict]]] = {}
    for folder in SPEC_SETS:  # merge order
        for path in sorted((SPEC_DIR / folder).glob("*.json")):
            spec = _read_spec(path)
            if spec.get("type") in ("request", "response") and spec["validVersions"] != "none":
                files.setdefault((spec["apiKey"], spec["type"]), []).append((folder, spec))
    checked = 0
    union = spec_union()
    for (key, direction), candidates in files.items():
        for version in union[(key, direction)]:
            for folder, spec in candidates:
                lo, _, hi = spec["validVersions"].partition("-")
                if int(lo) <= version <= int(hi or lo):
                    break
            schema = get_schema(key, version, direction)
            assert schema.source == folder, (key, version, direction)

            def present(field: dict) -> bool:
                text = field.get("versions", "0+")
                if text.endswith("+"):
                    return version >= int(text[:-1])
                a, _, b = text.partition("-")
                return int(a) <= version <= int(b or a)

            expected = [snake_case(f["name"]) for f in spec["fields"] if present(f)]
            assert sorted(f.attr for f in schema.fields) == sorted(expected), (key, version, direction)
            checked += 1
    assert checked == sum(len(v) for v in union.values())


def test_newer_than_known_version_is_marked_assumed() -> None:
    # the release defines both halves of every API at the same versions, so
    # the assumed paths left are ApiVersions above the newest known (v5 in 4.4)
    assert resolve_version(18, 5, "request") == (5, None)
    used, problem = resolve_version(18, 6, "request")
    assert used == 5 and "v6" in problem
    assert resolve_version(88, 1, "response") == (1, None)  # StreamsGroupHeartbeat v1 (4.4.0)
    with pytest.raises(KeyError):
        resolve_version(88, 7, "request")


@needs_spec
def test_error_table_matches_errors_tsv() -> None:
    rows = [row for row in (SPEC_DIR / ERRORS_TSV).read_text().splitlines()[1:] if row.strip()]
    assert len(rows) == 138  # the release's Errors.values() (README of the spec folder)
    for row in rows:
        code, name, retriable = row.split("\t")[:3]
        assert error_name(int(code)) == name
        assert is_retriable(int(code)) == (retriable == "yes")
    assert error_name(0) == "NONE"
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(31337) == "UNKNOWN_31337"
    assert not is_retriable(31337)


def test_schema_reports_tagged_and_nullable_fields() -> None:
    fetch = get_schema(1, 12, "response")
    assert fetch.flexible and fetch.header_version == 1
    partition = next(f for f in fetch.fields if f.attr == "responses").fields[1].fields
    tagged = {f.attr: f.tag for f in partition if f.tagged}
    assert tagged == {"diverging_epoch": 0, "current_leader": 1, "snapshot_id": 2}
    records = next(f for f in partition if f.attr == "records")
    assert records.type == "records" and records.nullable
    assert get_schema(18, 3, "response").header_version == 0  # ApiVersions exception
    assert get_schema(7, 0, "request").header_version == 0  # ControlledShutdown v0
    assert get_schema(3, 8, "request").header_version == 1
    assert get_schema(3, 9, "request").header_version == 2


def test_import_kdissect_is_cheap() -> None:
    import subprocess
    import sys

    code = "import sys, kdissect; kdissect.decode_request; print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'pyspark', 'pandas')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
