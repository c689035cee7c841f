"""Times as integers: nanoseconds since the Unix epoch, exact to the capture.

The capture reader turns every packet time into an `int` of nanoseconds
(microsecond pcap: exact; nanosecond pcap and pcapng: exact), and every
duration is computed from those integers, so a latency is exact to the
capture's resolution. Text forms write the exact decimal digits of the
capture's resolution, never a float's approximation.
"""

from __future__ import annotations

import datetime as dt

NS_PER_SECOND = 1_000_000_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

def digits(unit: str) -> int:
    """Decimal places of seconds for an Arrow unit ("us" -> 6)."""
    return {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]


def seconds_text(ns: int, places: int = 9) -> str:
    """Exact epoch seconds with `places` decimals (truncating finer digits)."""
    sign = "-" if ns < 0 else ""
    whole, part = divmod(abs(ns), NS_PER_SECOND)
    if places <= 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{part // 10 ** (9 - places):0{places}d}"


def duration_ms(start_ns: int | None, end_ns: int | None) -> float | None:
    """Milliseconds from start to end (the nearest double to the exact value)."""
    if start_ns is None or end_ns is None:
        return None
    return (end_ns - start_ns) / 1_000_000


def to_datetime(ns: int) -> dt.datetime | None:
    """The UTC datetime of `ns`, or None when it is outside the calendar
    (years 1-9999) that datetime can show."""
    try:
        return _EPOCH + dt.timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None


def clock_text(ns: int, with_date: bool = False, places: int = 6) -> str:
    """HH:MM:SS.ffffff (with the date in front when asked), or epoch seconds
    for a time outside the calendar."""
    when = to_datetime(ns)
    if when is None:
        return f"{seconds_text(ns, places)}s"
    sub = ns % NS_PER_SECOND // 10 ** (9 - places) if places else 0
    head = when.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")
    return f"{head}.{sub:0{places}d}" if places else head
