"""Aligned text tables for the terminal, fitted to a width.

Columns come in priority order: the ones that answer the table's question
(lag, errors, service times) right after the row's identity, ids and detail
last. With a width, a table keeps the longest run of leading columns that
fits and names the rest on one line (`--wide` shows them); without one
(`width=None`: a pipe, a file, `--wide`), every column. The commands decide
the width (kdissect.commands.runtime.table_width).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

CELL_LIMIT = 60  # a longer cell is cut with '...' (a row stays one line)
GAP = "  "


def render_cells(title: str, header: Sequence[str], cells: list[list[str]], numeric: Sequence[bool],
                 width: int | None = None) -> str:
    """`title`, then the header and one line per row of `cells` (text,
    already formatted; long cells are cut), numbers right-aligned; fitted
    to `width` columns."""
    widths = [max([len(name), *(min(len(row[i]), CELL_LIMIT) for row in cells)]) for i, name in enumerate(header)]
    return "\n".join(_lines(title, header, lambda: cells, bool(cells), widths, numeric, width))


def table_lines(title: str, header: Sequence[str], rows: Callable[[], Iterable[Sequence[Any]]],
                text: Callable[[int, Any], str], is_number: Callable[[int, Any], bool],
                width: int | None = None) -> Iterator[str]:
    """`render_cells`' lines, one at a time, for a table too big to hold as
    text (a row per client id): `rows()` gives each row's values and is read
    twice -- the widths and which columns are numbers, then the lines --
    rather than held. `text(i, value)` is column i's cell text,
    `is_number(i, value)` whether it right-aligns."""
    widths = [len(name) for name in header]
    numeric = [True] * len(header)
    empty = True
    for row in rows():
        empty = False
        for i, value in enumerate(row):
            widths[i] = max(widths[i], min(len(text(i, value)), CELL_LIMIT))
            numeric[i] = numeric[i] and is_number(i, value)
    texts = lambda: ([text(i, value) for i, value in enumerate(row)] for row in rows())  # noqa: E731
    return _lines(title, header, texts, not empty, widths, numeric, width)


def _lines(title: str, header: Sequence[str], cells: Callable[[], Iterable[Sequence[str]]], any_rows: bool,
           widths: list[int], numeric: Sequence[bool], width: int | None) -> Iterator[str]:
    if not any_rows:
        yield f"{_fit_line(title, width)}\n  (none)"
        return
    shown = len(header)
    first_cut = False
    if width is not None:
        shown = _columns_that_fit(widths, width)
        if shown == 0:  # not even the first column: cut it to the width
            widths = [max(1, width - len(GAP))] + widths[1:]
            first_cut = True
            shown = 1

    def line(values: Sequence[str]) -> str:
        return GAP + GAP.join(v.rjust(w) if num else v.ljust(w)
                              for v, w, num in zip(values[:shown], widths[:shown], numeric[:shown])).rstrip()

    yield _fit_line(title, width)
    yield line([_cut(h, w) for h, w in zip(header, widths)])
    for row in cells():
        values = [_cut(text, CELL_LIMIT) for text in row[:shown]]
        if first_cut:
            values[0] = _cut(values[0], widths[0])
        yield line(values)
    if shown < len(header):
        hidden = list(header[shown:])
        yield _fit_line(f"  ({len(hidden)} more columns with --wide: {', '.join(hidden)})", width)


def joined_pieces(parts: Iterable[Iterable[str]]) -> Iterator[str]:
    """The parts' lines as `"\\n\\n".join(part texts) + "\\n"` gives them, piece by piece
    (a part is an iterable of lines, consumed only when its turn comes)."""
    for at, part in enumerate(parts):
        if at:
            yield "\n\n"
        for number, line in enumerate(part):
            yield ("\n" if number else "") + line
    yield "\n"


def wrap_line(text: str, width: int | None, indent: str = "    ") -> str:
    """A line of prose wrapped at word boundaries to `width` (None: as is),
    continuation lines indented."""
    if width is None or len(text) <= width:
        return text
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False))


def _columns_that_fit(widths: Sequence[int], width: int) -> int:
    used = 0  # each column adds its gap (the line's leading one for the first)
    for count, column in enumerate(widths):
        used += len(GAP) + column
        if used > width:
            return count
    return len(widths)


def _fit_line(text: str, width: int | None) -> str:
    return text if width is None else _cut(text, width)


def _cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    return text[: width - 3] + "..." if width > 3 else text[:width]
