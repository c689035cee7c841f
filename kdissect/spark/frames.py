"""Frame numbers of byte ranges read without a pre-pass, made global after the job.

A task that reads a range in the middle of a file cannot know how many
packets the ranges before it hold, so it numbers its packets locally and
marks the numbers with its split id: frame = split_id << LOCAL_SHIFT | n,
n counting from 1 within the range. Within one file these numbers keep the
order of the global ones (split ids grow along the file, and the file's first
range is numbered globally from 1), so the shuffle's sort, the capture-set
merge and the stream numbering, which only compare frame numbers of one
file, come out as with global numbers. Once every range has reported its
packet count, the driver knows each range's offset (the packets of the
file's earlier ranges) and the numbers that reach a table or a message are
rewritten: global = n + offset.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

LOCAL_SHIFT = 40  # a range holds fewer than 2**40 packets; split ids stay below 2**23
_LOCAL_MASK = (1 << LOCAL_SHIFT) - 1
FRAME_COLUMNS = ("request_frame", "response_frame")  # the exchange columns holding frame numbers


def local_first_frame(split_id: int) -> int:
    """The (marked) number of the first packet of a locally numbered range."""
    return (split_id << LOCAL_SHIFT) + 1


def global_frame(number: int, offsets: Sequence[int]) -> int:
    """A frame number as `kdissect export` gives it (`offsets`: per split id)."""
    if number < 1 << LOCAL_SHIFT:
        return number
    return (number & _LOCAL_MASK) + offsets[number >> LOCAL_SHIFT]


def renumber_frames(table: Any, offsets: Sequence[int]) -> Any:
    """A pyarrow table with the frame columns (FRAME_COLUMNS) made global."""
    if not offsets:
        return table
    import pyarrow as pa
    import pyarrow.compute as pc

    offset_array = pa.array(offsets, pa.int64())
    for name in FRAME_COLUMNS:
        if name not in table.column_names:
            continue
        column = table.column(name)
        local = pc.greater_equal(column, 1 << LOCAL_SHIFT)
        if not pc.any(local).as_py():
            continue
        split = pc.if_else(local, pc.shift_right(column, LOCAL_SHIFT), 0)
        renumbered = pc.add(pc.bit_wise_and(column, _LOCAL_MASK), pc.take(offset_array, split))
        table = table.set_column(table.column_names.index(name), name, pc.if_else(local, renumbered, column))
    return table


_NUMBER = re.compile(r"\b\d{13,}\b")  # 2**40 has 13 digits


def renumber_text(text: str, offsets: Sequence[int]) -> str:
    """A reading problem's text ("packet N is malformed") with global frame numbers."""
    if not offsets:
        return text

    def replace(match: re.Match[str]) -> str:
        number = int(match.group())
        split = number >> LOCAL_SHIFT
        return str(global_frame(number, offsets)) if 0 < split < len(offsets) else match.group()

    return _NUMBER.sub(replace, text)
