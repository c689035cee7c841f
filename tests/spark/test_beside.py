"""The driver step run beside the finishing job (kdissect.spark.job._Beside)."""

from __future__ import annotations

import threading
import time

import pytest

from kdissect.spark.job import _Beside, _until_a_job_runs


def test_the_step_runs_beside_the_block_and_its_result_is_handed_back():
    block_running = threading.Event()
    seen = []

    def step(value: int) -> int:
        seen.append(block_running.wait(5))  # runs while the block still runs
        return value * 2

    with _Beside() as beside:
        beside.start(step, 21)
        block_running.set()
        assert beside.result() == 42
    assert seen == [True]


def test_leaving_the_block_waits_for_the_step():
    finished = []

    def step() -> None:
        time.sleep(0.2)
        finished.append(True)

    with _Beside() as beside:
        beside.start(step)
    assert finished == [True]  # (what follows the block removes the files the step reads)


def test_an_error_of_the_step_is_raised_even_if_its_result_was_not_asked_for():
    def step() -> None:
        raise ValueError("cannot write the table")

    with pytest.raises(ValueError, match="cannot write the table"):
        with _Beside() as beside:
            beside.start(step)


def test_an_error_of_the_block_is_raised_after_the_step_ended():
    finished = []

    def step() -> None:
        time.sleep(0.2)
        finished.append(True)

    with pytest.raises(RuntimeError, match="the finishing job failed"):
        with _Beside() as beside:
            beside.start(step)
            raise RuntimeError("the finishing job failed")
    assert finished == [True]


def test_a_block_that_starts_nothing_leaves_at_once():
    with _Beside():
        pass


class _Tracker:
    def __init__(self, active_after: float) -> None:
        self.since = time.monotonic()
        self.active_after = active_after
        self.asked = 0

    def getActiveJobsIds(self) -> list[int]:
        self.asked += 1
        return [0] if time.monotonic() - self.since >= self.active_after else []


class _Context:
    def __init__(self, tracker: _Tracker) -> None:
        self.tracker = tracker

    def statusTracker(self) -> _Tracker:
        return self.tracker


def test_the_step_is_held_back_until_a_job_runs():
    tracker = _Tracker(active_after=0.15)
    started = time.monotonic()
    _until_a_job_runs(_Context(tracker), threading.Event(), most=5.0)
    assert 0.15 <= time.monotonic() - started < 2.0
    assert tracker.asked >= 2


def test_the_step_is_not_held_back_once_the_main_thread_is_done_or_past_the_limit():
    done = threading.Event()
    done.set()
    started = time.monotonic()
    _until_a_job_runs(_Context(_Tracker(active_after=60)), done, most=30.0)
    assert time.monotonic() - started < 1.0
    started = time.monotonic()
    _until_a_job_runs(_Context(_Tracker(active_after=60)), threading.Event(), most=0.1)
    assert 0.1 <= time.monotonic() - started < 1.0


def test_result_releases_a_step_held_back_for_a_job_that_never_comes():
    with _Beside() as beside:
        beside.start(lambda: "written", wait=lambda done: _until_a_job_runs(_Context(_Tracker(60)), done, most=30.0))
        started = time.monotonic()
        assert beside.result() == "written"
        assert time.monotonic() - started < 1.0


def test_a_step_in_turn_runs_when_its_result_is_asked_for_in_this_thread():
    ran = []

    def step(value: int) -> int:
        ran.append(threading.current_thread() is threading.main_thread())
        return value * 2

    with _Beside() as beside:
        beside.start(step, 21, wait=lambda done: pytest.fail("an in-turn step waits for nothing"), in_turn=True)
        assert ran == []  # not before the block's own work
        assert beside.result() == 42
    assert ran == [True]


def test_a_step_in_turn_runs_on_leaving_if_not_asked_and_its_error_is_raised():
    ran = []
    with _Beside() as beside:
        beside.start(ran.append, "written", in_turn=True)
    assert ran == ["written"]

    def step() -> None:
        raise ValueError("cannot write the table")

    with pytest.raises(ValueError, match="cannot write the table"):
        with _Beside() as beside:
            beside.start(step, in_turn=True)


def test_a_step_in_turn_does_not_run_after_the_block_failed():
    ran = []
    with pytest.raises(RuntimeError, match="the finishing failed"):
        with _Beside() as beside:
            beside.start(ran.append, "written", in_turn=True)
            raise RuntimeError("the finishing failed")
    assert ran == []
