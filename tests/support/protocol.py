"""Test helpers for the protocol core: spec-file readers independent of the
generator, random message builders for round-trip tests, and frame fixtures."""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path
from typing import Any

from kdissect.protocol.schema import FieldSchema

REPO = Path(__file__).resolve().parents[2]
# beside the checkout; KDISSECT_KAFKA_SPEC points elsewhere (e.g. from a worktree)
SPEC_DIR = Path(os.environ.get("KDISSECT_KAFKA_SPEC") or REPO.parent / "shared" / "kafka-spec")
# the spec sets in merge order (the spec folder's README): the release first
SPEC_SETS = ("releases/4.4.0", "newest", "kafka-4.x", "trunk-2024-10")
ERRORS_TSV = "releases/4.4.0/errors.tsv"
FRAMES_DIR = REPO / "tests" / "fixtures" / "frames"

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1),
}


def spec_union(spec_dir: Path = SPEC_DIR) -> dict[tuple[int, str], set[int]]:
    """{(api_key, "request"|"response"): versions} read straight from the spec files."""
    union: dict[tuple[int, str], set[int]] = {}
    for path in sorted(p for folder in SPEC_SETS for p in (spec_dir / folder).glob("*.json")):
        text = "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))
        spec = json.loads(text)
        if spec.get("type") not in ("request", "response") or spec["validVersions"] == "none":
            continue
        lo, _, hi = spec["validVersions"].partition("-")
        versions = set(range(int(lo), int(hi or lo) + 1))
        union.setdefault((int(spec["apiKey"]), spec["type"]), set()).update(versions)
    return union


def _int(rng: random.Random, kind: str) -> int:
    lo, hi = _INT_RANGES[kind]
    roll = rng.random()
    if roll < 0.6:
        return rng.randint(max(lo, -3), min(hi, 300))
    if roll < 0.8:
        return rng.choice((lo, hi))
    return rng.randint(lo, hi)


def _text(rng: random.Random) -> str:
    alphabet = "abcXYZ-_.09 é中🙂"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def random_scalar(rng: random.Random, kind: str, nullable: bool) -> Any:
    if nullable and kind in ("string", "bytes", "records") and rng.random() < 0.2:
        return None
    if kind in _INT_RANGES:
        return _int(rng, kind)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float64":
        return rng.choice((0.0, -1.5, 3.25e10, rng.uniform(-1e6, 1e6)))
    if kind == "uuid":
        return uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.8 else uuid.UUID(int=0)
    if kind == "string":
        return _text(rng)
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 24)))  # bytes, records


def random_struct(rng: random.Random, cls: type, depth: int = 0) -> Any:
    """A struct instance of a codec class with random values for every field."""
    values: dict[str, Any] = {}
    for f in cls._schema:
        if f.tagged and rng.random() < 0.5:
            continue  # absent tagged field: default
        values[f.attr] = random_field(rng, cls, f, depth)
    obj = cls(**values)
    if "unknown_tagged_fields" in cls.__slots__ and rng.random() < 0.2:
        known = {f.tag for f in cls._schema if f.tagged}
        tags = sorted({rng.randint(0, 40) for _ in range(rng.randint(1, 2))} - known)
        obj.unknown_tagged_fields = [(t, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 5)))) for t in tags]
    return obj


def random_field(rng: random.Random, cls: type, f: FieldSchema, depth: int) -> Any:
    if f.is_array:
        if f.nullable and rng.random() < 0.15:
            return None
        count = rng.randint(0, 3 if depth < 2 else 1)
        if f.is_struct:
            return [random_struct(rng, cls._nested[f.attr], depth + 1) for _ in range(count)]
        return [random_scalar(rng, f.element, False) for _ in range(count)]
    if f.is_struct:
        if (f.nullable or f.tagged) and rng.random() < 0.3:
            return None
        return random_struct(rng, cls._nested[f.attr], depth + 1)
    return random_scalar(rng, f.element, f.nullable)


def frame_fixtures() -> list[dict]:
    """Recorded frames: dicts from tests/fixtures/frames/*.jsonl."""
    frames = []
    for path in sorted(FRAMES_DIR.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                entry["source"] = path.name
                frames.append(entry)
    return frames
