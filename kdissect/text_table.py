"""Aligned text tables for the terminal, fitted to a width.

Columns come in priority order: the ones that answer the table's question
(lag, errors, service times) right after the row's identity, ids and detail
last. With a width, a table keeps the longest run of leading columns that
fits and names the rest on one line (`--wide` shows them); without one
(`width=None`: a pipe, a file, `--wide`), every column. The commands decide
the width (kdissect.commands.runtime.table_width).
"""

from __future__ import annotations

from typing import Sequence

CELL_LIMIT = 60  # a longer cell is cut with '...' (a row stays one line)
GAP = "  "


def render_cells(title: str, header: Sequence[str], cells: list[list[str]], numeric: Sequence[bool],
                 width: int | None = None) -> str:
    """`title`, then the header and one line per row of `cells` (text,
    already formatted; long cells are cut in place), numbers right-aligned;
    fitted to `width` columns."""
    if not cells:
        return f"{_fit_line(title, width)}\n  (none)"
    for row in cells:
        for at, text in enumerate(row):
            if len(text) > CELL_LIMIT:
                row[at] = _cut(text, CELL_LIMIT)
    cut = cells
    widths = [max(len(name), *(len(row[i]) for row in cut)) for i, name in enumerate(header)]
    shown = len(header)
    if width is not None:
        shown = _columns_that_fit(widths, width)
        if shown == 0:  # not even the first column: cut it to the width
            widths = [max(1, width - len(GAP))] + widths[1:]
            cut = [[_cut(row[0], widths[0])] + list(row[1:]) for row in cut]
            shown = 1

    def line(values: Sequence[str]) -> str:
        return GAP + GAP.join(v.rjust(w) if num else v.ljust(w)
                              for v, w, num in zip(values[:shown], widths[:shown], numeric[:shown])).rstrip()

    lines = [_fit_line(title, width), line([_cut(h, w) for h, w in zip(header, widths)]),
             *(line(row) for row in cut)]
    if shown < len(header):
        hidden = list(header[shown:])
        lines.append(_fit_line(f"  ({len(hidden)} more columns with --wide: {', '.join(hidden)})", width))
    return "\n".join(lines)


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
