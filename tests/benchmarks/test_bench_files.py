"""The benchmarks' reading of the host's steal time from /proc/stat."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_files import STEAL_WARN_SHARE, StealClock, cpu_ticks, steal_said  # noqa: E402


def test_steal_is_the_eighth_column_and_guest_time_is_not_counted_twice() -> None:
    # proc(5): cpu user nice system idle iowait irq softirq steal guest guest_nice;
    # guest and guest_nice are already part of user and nice
    text = "cpu  100 20 30 400 5 6 7 32 50 9\ncpu0 50 10 15 200 2 3 3 16 25 4\nintr 1 2 3\n"
    assert cpu_ticks(text) == (32, 100 + 20 + 30 + 400 + 5 + 6 + 7 + 32)


def test_an_old_kernel_without_a_steal_column_reads_as_no_steal() -> None:
    assert cpu_ticks("cpu  100 20 30 400 5 6 7\n") == (0, 568)


def test_a_text_without_the_cpu_line_first_is_refused() -> None:
    with pytest.raises(ValueError):
        cpu_ticks("intr 1 2 3\ncpu  1 2 3 4 5 6 7 8\n")


def test_the_clock_reads_this_machine() -> None:
    clock = StealClock()
    sum(range(2_000_000))  # some CPU time passes
    share = clock.share()
    if Path("/proc/stat").exists():
        assert share is None or 0.0 <= share <= 1.0  # None: no tick passed between the two readings
    else:
        assert share is None


def test_a_busy_host_is_said_so() -> None:
    assert steal_said(None) == "steal unknown"
    assert steal_said(0.012) == "steal 1.2%"
    assert "HOST BUSY" in steal_said(STEAL_WARN_SHARE + 0.001)
