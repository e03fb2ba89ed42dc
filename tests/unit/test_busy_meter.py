"""Whether a worker processes while its commit is in flight, and in what slices
(``runtime.worker.busy``, ``Loop.meanwhile``): judged by the worker's busy time (on a CPU or
waiting for one) since its last commit ended, with slices sized by the busy time per record.

Unit tests of our own logic with a stand-in clock, and of the system clock's busy time on a
shared CPU; the real-broker side is
tests/runtime/test_process_during_commit.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from types import SimpleNamespace
from typing import Any, cast

import pytest

from streams_app.runtime.clock import SystemClock
from streams_app.runtime.worker.busy import BusyMeter
from streams_app.runtime.worker.loop import (
    MEANWHILE_SLICE,
    MEANWHILE_SLICE_MAX,
    MEANWHILE_SLICE_SECONDS,
    SATURATED,
    Loop,
)
from streams_app.settings import AT_LEAST_ONCE, EXACTLY_ONCE_V2


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 7.0

    def monotonic(self) -> float:
        return self.now

    def busy_time(self) -> float:
        return self.cpu

    def spend(self, wall: float, cpu: float) -> None:
        self.now += wall
        self.cpu += cpu


def test_share_and_cost_are_since_the_mark() -> None:
    clock = _Clock()
    meter = BusyMeter(cast(Any, clock), records=10)
    clock.spend(wall=0.1, cpu=0.05)
    share, cost = meter.read(records=1_010)
    assert share == pytest.approx(0.5)
    assert cost == pytest.approx(0.05 / 1_000)

    meter.mark(records=1_010)  # a commit ended: what came before no longer counts
    clock.spend(wall=0.2, cpu=0.19)
    share, cost = meter.read(records=1_110)
    assert share == pytest.approx(0.95)
    assert cost == pytest.approx(0.19 / 100)


def test_nothing_measured_yet() -> None:
    clock = _Clock()
    meter = BusyMeter(cast(Any, clock))
    assert meter.read(records=0) == (0.0, None)  # no time passed: not busy
    clock.spend(wall=0.1, cpu=0.09)
    share, cost = meter.read(records=0)
    assert share == pytest.approx(0.9)
    assert cost is None  # no record processed: no cost per record


def _loop(clock: _Clock, guarantee: str = EXACTLY_ONCE_V2, during_commit: bool = True) -> Loop:
    loop = Loop.__new__(Loop)
    loop.conf = cast(
        Any, SimpleNamespace(process_during_commit=during_commit, processing_guarantee=guarantee)
    )
    loop.batch = cast(Any, SimpleNamespace(records_processed=0))
    loop.busy = BusyMeter(cast(Any, clock))
    return loop


def _after(loop: Loop, clock: _Clock, records: int, wall: float, cpu: float) -> Any:
    clock.spend(wall=wall, cpu=cpu)
    loop.batch.records_processed += records
    return loop.meanwhile()


def _size(meanwhile: Any) -> int:
    assert isinstance(meanwhile, partial), meanwhile
    return int(meanwhile.keywords["size"])


def test_a_worker_with_time_to_spare_commits_with_nothing_else_going_on() -> None:
    clock = _Clock()
    loop = _loop(clock)
    below = SATURATED - 0.1
    assert _after(loop, clock, records=10_000, wall=0.1, cpu=0.1 * below) is None


@pytest.mark.parametrize(
    ("cost", "size"),
    [
        (5e-6, int(MEANWHILE_SLICE_SECONDS / 5e-6)),  # a cheap join: sized by time
        (1e-7, MEANWHILE_SLICE_MAX),  # very cheap: capped
        (2e-4, MEANWHILE_SLICE),  # a slow agent: never under the floor
    ],
)
def test_a_saturated_worker_processes_in_slices_sized_by_time(cost: float, size: int) -> None:
    assert MEANWHILE_SLICE < int(MEANWHILE_SLICE_SECONDS / 5e-6) < MEANWHILE_SLICE_MAX
    clock = _Clock()
    loop = _loop(clock)
    records = 10_000
    meanwhile = _after(loop, clock, records, wall=records * cost / 0.95, cpu=records * cost)
    assert _size(meanwhile) == size


def test_busy_is_measured_from_the_end_of_the_last_commit() -> None:
    """The commit's own waits are idle at any load: a worker busy all the time between commits
    is saturated however long its last commit took."""
    clock = _Clock()
    loop = _loop(clock)
    assert _after(loop, clock, records=1_000, wall=0.1, cpu=0.1) is not None
    clock.spend(wall=0.5, cpu=0.0)  # the commit in flight, slow, and nothing to do meanwhile
    loop.busy.mark(loop.batch.records_processed)  # as Loop.step does once it returns
    assert _after(loop, clock, records=1_000, wall=0.1, cpu=0.09) is not None


@pytest.mark.parametrize(
    ("guarantee", "during_commit"), [(AT_LEAST_ONCE, True), (EXACTLY_ONCE_V2, False)]
)
def test_only_exactly_once_with_the_setting_on(guarantee: str, during_commit: bool) -> None:
    clock = _Clock()
    loop = _loop(clock, guarantee, during_commit)
    assert _after(loop, clock, records=1_000, wall=0.1, cpu=0.1) is None


def test_a_thread_that_shares_its_cpu_is_busy_all_the_time_though_on_it_half() -> None:
    """The system clock's busy time counts the time a thread waits for a CPU: this thread and a
    spinning process pinned to one CPU each get about half of it, and this thread, which never
    sleeps, is busy all the time (its CPU time alone says half)."""
    clock = SystemClock()
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen(
        [sys.executable, "-c", "import sys\nprint(flush=True)\nwhile True: pass"],
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    try:
        assert hog.stdout is not None and hog.stdout.readline() == b"\n"  # it spins now
        os.sched_setaffinity(0, {cpu})
        wall, busy, on_cpu = time.monotonic(), clock.busy_time(), time.thread_time()
        while time.monotonic() - wall < 0.5:
            pass
        wall = time.monotonic() - wall
        busy, on_cpu = clock.busy_time() - busy, time.thread_time() - on_cpu
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    assert on_cpu < 0.8 * wall, "the spinning process did not share the CPU"
    assert busy > 0.9 * wall
