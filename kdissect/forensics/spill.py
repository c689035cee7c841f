"""Bounded memory for tallies keyed by what a capture can multiply (client
ids, client id x broker): at most `key_limit()` keys in memory, the rest in
sorted runs on disk, merged back in key order.

`SpillMap` maps a key to its partial tally. When a new key would make more
than the limit, the tallies in memory are written, sorted by key, as one run
file (pickled records) and dropped; a key seen again later starts a new
partial tally. `items()` merges the runs and what is still in memory
(`heapq.merge`), combining the partial tallies of one key with the map's
merge function (counts add, sketches merge: kdissect.forensics.sketch), so
it yields what a single dict would hold, in key order, one key at a time.

`RowSpool` holds a table's rows: in memory up to the same limit, then in a
file; it can be read any number of times (a text table reads its rows twice:
column widths, then lines). `json_pieces` gives an object whose values may
be spools as `json.dumps(obj, indent=2)` would, piece by piece, without
building the text of the big arrays at once.

Files go to a private directory made in TMPDIR (tempfile's rules), removed
by `close()`, when the owner is collected, and at exit (failures included).

The limit, `SPILL_KEYS` (5,000), can be set with the environment variable
`KDISSECT_SPILL_KEYS` (the tests force a tiny one to prove that the spilled
path gives the same output as the in-memory one).
"""

from __future__ import annotations

import heapq
import json
import os
import pickle
import shutil
import tempfile
import weakref
from itertools import islice
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

SPILL_KEYS = 5_000  # about 20 MB of client tallies and rows: the summary verbs stay under 2x export
_BATCH = 1_000  # rows per pickle in a RowSpool (fewer calls; one batch read at a time)
MAX_RUNS = 32  # run files of a SpillMap before they are merged into one

T = TypeVar("T")


def key_limit() -> int:
    """Keys (or rows) kept in memory before spilling."""
    text = os.environ.get("KDISSECT_SPILL_KEYS")
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            pass
    return SPILL_KEYS


class _Scratch:
    """A private temporary directory, made on first use, removed with its owner."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._finalizer: Any = None
        self._count = 0

    def new_file(self, prefix: str) -> str:
        if self.path is None:
            self.path = tempfile.mkdtemp(prefix="kdissect-spill-")
            self._finalizer = weakref.finalize(self, shutil.rmtree, self.path, True)
        self._count += 1
        return os.path.join(self.path, f"{prefix}-{self._count}")

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self.path = self._finalizer = None


def _write_batches(path: str, records: Iterable[Any]) -> None:
    """Records pickled `_BATCH` at a time (a spool: one reader at a time)."""
    with open(path, "wb") as out:
        batch: list[Any] = []
        for record in records:
            batch.append(record)
            if len(batch) >= _BATCH:
                pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
                batch = []
        if batch:
            pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)


def _read_batches(path: str) -> Iterator[Any]:
    # our own files, written above in this process's private directory
    with open(path, "rb") as source:
        while True:
            try:
                batch = pickle.load(source)
            except EOFError:
                return
            yield from batch


def _write_run(path: str, records: Iterable[Any]) -> None:
    """Records pickled one by one (each its own pickle: no memo shared
    between records): a merge reads many runs at once, holding one record of each."""
    with open(path, "wb") as out:
        for record in records:
            pickle.dump(record, out, protocol=pickle.HIGHEST_PROTOCOL)


def _read_run(path: str) -> Iterator[Any]:
    with open(path, "rb", buffering=1 << 14) as source:
        while True:
            try:
                yield pickle.load(source)
            except EOFError:
                return


def _identity(key: Any) -> Any:
    return key


class SpillMap(Generic[T]):
    """key -> partial tally, at most `limit` keys in memory (module docstring).

    `factory()` makes an empty tally; `merge(into, other)` adds `other` into
    `into`; `order(key)` gives a sort key, the same for equal keys only (the
    identity for strings and tuples of strings)."""

    def __init__(self, factory: Callable[[], T], merge: Callable[[T, T], None],
                 order: Callable[[Any], Any] = _identity, limit: int | None = None) -> None:
        self.factory = factory
        self.merge = merge
        self.order = order
        self.limit = limit if limit is not None else key_limit()
        self.memory: dict[Any, T] = {}
        self.runs: list[str] = []
        self.scratch = _Scratch()

    def __getitem__(self, key: Any) -> T:
        found = self.memory.get(key)
        if found is None:
            if len(self.memory) >= self.limit:
                self.spill()
            found = self.memory[key] = self.factory()
        return found

    def spill(self) -> None:
        """Write the tallies in memory as one sorted run and drop them."""
        if not self.memory:
            return
        order = self.order
        path = self.scratch.new_file("run")
        _write_run(path, sorted(((order(key), key, tally) for key, tally in self.memory.items()),
                                key=lambda record: record[0]))
        self.runs.append(path)
        self.memory = {}
        if len(self.runs) >= MAX_RUNS:  # one run of them all: few open files, whatever the number of keys
            merged = self.scratch.new_file("run")
            _write_run(merged, ((order(key), key, tally) for key, tally in self._merged(self.runs)))
            for old in self.runs:
                os.remove(old)
            self.runs = [merged]

    def _sorted_memory(self) -> Iterator[tuple[Any, Any, T]]:
        order = self.order
        return iter(sorted(((order(key), key, tally) for key, tally in self.memory.items()),
                           key=lambda record: record[0]))

    def items(self) -> Iterator[tuple[Any, T]]:
        """(key, whole tally) in key order; may be called again (runs stay until close)."""
        if not self.runs:
            for _, key, tally in self._sorted_memory():
                yield key, tally
            return
        yield from self._merged(self.runs, self._sorted_memory())

    def _merged(self, runs: list[str], *more: Iterator[tuple[Any, Any, T]]) -> Iterator[tuple[Any, T]]:
        streams = [_read_run(path) for path in runs] + list(more)
        key: Any = None
        group: list[T] = []  # the partial tallies of `key`
        for _, found, tally in heapq.merge(*streams, key=lambda record: record[0]):
            if group and found == key:
                group.append(tally)
                continue
            if group:
                yield key, self._combined(group)
            key, group = found, [tally]
        if group:
            yield key, self._combined(group)

    def _combined(self, group: list[T]) -> T:
        if len(group) == 1:
            return group[0]
        total = self.factory()  # a fresh sum: the tallies in memory stay as they are
        for tally in group:
            self.merge(total, tally)
        return total

    def __len__(self) -> int:
        """Distinct keys (reads the runs when there are any)."""
        if not self.runs:
            return len(self.memory)
        return sum(1 for _ in self.items())

    def __bool__(self) -> bool:
        return bool(self.memory) or bool(self.runs)

    def close(self) -> None:
        self.memory = {}
        self.runs = []
        self.scratch.close()

    # Spark sends tallies between processes: the whole map travels in memory
    def __getstate__(self) -> dict[str, Any]:
        return {"factory": self.factory, "merge": self.merge, "order": self.order, "limit": self.limit,
                "memory": dict(self.items())}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["factory"], state["merge"], state["order"], state["limit"])  # type: ignore[misc]
        self.memory = state["memory"]


class RowSpool:
    """A table's rows, appended once, read any number of times; past `limit`
    rows they are kept in a file instead of memory."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), limit: int | None = None) -> None:
        self.limit = limit if limit is not None else key_limit()
        self.memory: list[dict[str, Any]] = []
        self.path: str | None = None
        self._out: Any = None
        self._pending: list[dict[str, Any]] = []
        self.count = 0
        self.scratch = _Scratch()
        for row in rows:
            self.append(row)

    def append(self, row: dict[str, Any]) -> None:
        self.count += 1
        if self._out is None and len(self.memory) < self.limit:
            self.memory.append(row)
            return
        if self._out is None:
            self.path = self.scratch.new_file("rows")
            self._out = open(self.path, "wb")
            self._pending, self.memory = self.memory, []
        self._pending.append(row)
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            pickle.dump(self._pending, self._out, protocol=pickle.HIGHEST_PROTOCOL)
            self._pending = []
        self._out.flush()

    def settled(self) -> list[dict[str, Any]] | RowSpool:
        """A plain list when every row is in memory (the common case, and
        what the Python API has always given), else the spool itself."""
        return self.memory if self._out is None else self

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._out is None:
            return iter(self.memory)
        self._flush()
        return _read_batches(self.path)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __getitem__(self, index: Any) -> Any:
        if self._out is None:
            return self.memory[index]
        if isinstance(index, slice):  # the first rows of a capped table: rows[:limit]
            return list(islice(iter(self), *index.indices(self.count)))
        if index < 0:
            index += self.count
        for row in islice(iter(self), index, None):
            return row
        raise IndexError(index)

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        self.memory = []
        self.scratch.close()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RowSpool, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _spoolable(value: Any) -> bool:
    return isinstance(value, RowSpool)


def json_pieces(obj: dict[str, Any], value: Callable[[Any], Any] = lambda v: v, **options: Any) -> Iterator[str]:
    """`json.dumps(value(obj), indent=2, **options) + "\\n"` in pieces: the
    top-level values that are spools are written element by element
    (`value` applied to each row, not to the whole spool)."""
    if not any(_spoolable(item) for item in obj.values()):
        yield json.dumps(value(obj), indent=2, **options) + "\n"
        return
    yield "{"
    for at, (name, item) in enumerate(obj.items()):
        yield ("\n" if at == 0 else ",\n") + "  " + json.dumps(value(name)) + ": "
        if not _spoolable(item):
            yield _indented(json.dumps(value(item), indent=2, **options))
        elif not item:
            yield "[]"
        else:
            for number, row in enumerate(item):
                yield ("[\n" if number == 0 else ",\n") + "    " + _indented(json.dumps(value(row), indent=2,
                                                                                          **options), 4)
            yield "\n  ]"
    yield "\n}\n"


def _indented(text: str, by: int = 2) -> str:
    """`text`'s lines after the first shifted right by `by` spaces (a value nested one level deeper)."""
    return text.replace("\n", "\n" + " " * by)
