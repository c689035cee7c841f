#!/usr/bin/env python3
"""Compare two `kdissect spark` output directories table by table.

    python3 benchmarks/same_spark_tables.py OUT_A OUT_B

Every Parquet table under each directory (`_work` and the manifest aside) is
read with pyarrow, its rows sorted (the job's files are written per task, so
row order may differ between runs), and compared: same tables, same schemas,
same rows. Prints one line per table and exits 1 on any difference.
"""

from __future__ import annotations

import sys
from pathlib import Path


def tables(directory: Path) -> dict[str, Path]:
    """Table name (its directory, or file stem, relative to `directory`) -> its path."""
    found: dict[str, Path] = {}
    for path in sorted(directory.rglob("*.parquet")):
        relative = path.relative_to(directory)
        if relative.parts[0].startswith("_"):
            continue
        owner = path.parent if path.parent != directory else path
        found.setdefault(owner.relative_to(directory).as_posix(), owner)
    return found


def sorted_rows(path: Path) -> tuple[object, list[tuple]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = [tuple(repr(value) for value in row.values()) for row in table.to_pylist()]
    return table.schema, sorted(rows)


def main() -> int:
    a, b = (Path(arg) for arg in sys.argv[1:3])
    left, right = tables(a), tables(b)
    differ = False
    for name in sorted(set(left) | set(right)):
        if name not in left or name not in right:
            print(f"{name}: only in {a if name in left else b}")
            differ = True
            continue
        (schema_a, rows_a), (schema_b, rows_b) = sorted_rows(left[name]), sorted_rows(right[name])
        same = schema_a.equals(schema_b) and rows_a == rows_b
        differ |= not same
        print(f"{name}: {len(rows_a)} rows" + ("" if same else f" DIFFER ({len(rows_b)} rows in {b})"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
