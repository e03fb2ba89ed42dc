"""FetchPacer: each poll aimed at the commit deadline (runtime.pacing)."""

from __future__ import annotations

from streams_app.runtime.pacing import DRAINING_POLL_MS, MIN_RECORDS, FetchPacer


def test_no_commit_pending_polls_as_configured() -> None:
    pacer = FetchPacer(max_records=2000, poll_ms=100)
    pacer.observe(1000, 0.015)
    assert pacer.next_poll(None) == (100, 2000)


def test_waits_no_longer_than_the_time_left() -> None:
    pacer = FetchPacer(max_records=2000, poll_ms=100)
    assert pacer.next_poll(0.0304) == (31, 2000)  # no cost measured yet: the full batch
    assert pacer.next_poll(5.0) == (100, 2000)


def test_takes_what_it_can_process_before_the_deadline() -> None:
    pacer = FetchPacer(max_records=2000, poll_ms=100)
    pacer.observe(2000, 0.030)  # 15 µs a record
    timeout, records = pacer.next_poll(0.006)
    assert timeout == 6
    assert records == 400
    # plenty of time: the configured maximum
    assert pacer.next_poll(0.090)[1] == 2000
    # almost none: a floor, not a trickle of one-record polls
    assert pacer.next_poll(0.0001)[1] == MIN_RECORDS


def test_due_now_does_not_wait_unless_agents_are_draining() -> None:
    pacer = FetchPacer(max_records=2000, poll_ms=100)
    assert pacer.next_poll(0.0) == (0, MIN_RECORDS)
    assert pacer.next_poll(-0.5) == (0, MIN_RECORDS)
    assert pacer.next_poll(-0.5, draining=True) == (DRAINING_POLL_MS, MIN_RECORDS)


def test_cost_is_a_moving_average_that_ignores_empty_batches() -> None:
    pacer = FetchPacer(max_records=100_000, poll_ms=100)
    pacer.observe(0, 0.01)
    pacer.observe(100, 0.0)
    assert pacer.seconds_per_record is None
    pacer.observe(1000, 0.010)  # 10 µs
    pacer.observe(1000, 0.060)  # one slow batch (60 µs) moves it a fifth of the way
    assert pacer.seconds_per_record is not None
    assert abs(pacer.seconds_per_record - 20e-6) < 1e-9
    assert pacer.next_poll(0.1)[1] == 5000


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def monotonic(self) -> float:
        return self.now


def test_committer_time_left() -> None:
    from typing import Any, cast

    from streams_app.runtime.commit import Committer
    from streams_app.settings import EXACTLY_ONCE_V2

    clock = _Clock()
    unused = cast(Any, None)  # time_left reads only the committer's own counters and clock
    committer = Committer(EXACTLY_ONCE_V2, unused, unused, unused, str, lambda: None, clock)  # type: ignore[arg-type]
    assert committer.time_left(0.1) is None  # nothing processed: no commit pending
    committer.records_since_commit = 3
    clock.now += 0.04
    left = committer.time_left(0.1)
    assert left is not None and abs(left - 0.06) < 1e-9
    clock.now += 0.2
    left = committer.time_left(0.1)
    assert left is not None and left < 0  # overdue
    committer.records_since_commit = 0
    committer.requested = True  # Worker.request_commit: due whatever the interval
    assert committer.time_left(0.1) == 0.0


def test_due_and_time_left_agree_on_the_deadline() -> None:
    """A commit at 0.4 with a 0.1 s interval: at 0.5 no time is left (0.4 + 0.1 - 0.5 == 0.0),
    so the commit must be due too (0.5 - 0.4 < 0.1 in floats). When they disagreed, the worker
    polled with a zero timeout forever under a virtual clock (the faust_compat rpc test)."""
    from types import SimpleNamespace
    from typing import Any, cast

    from streams_app.runtime.commit import Committer
    from streams_app.settings import EXACTLY_ONCE_V2

    clock = _Clock()
    clock.now = 0.4
    unused = cast(Any, None)
    tasks = cast(Any, SimpleNamespace(transactions=lambda: []))
    committer = Committer(EXACTLY_ONCE_V2, unused, unused, tasks, str, lambda: None, clock)  # type: ignore[arg-type]
    committer.records_since_commit = 1
    for start, interval, ticks in ((0.4, 0.1, 1), (0.3, 0.1, 7), (1.6, 0.1, 1), (0.0, 0.05, 3)):
        committer.last_commit = start
        for tick in range(1, ticks + 1):
            clock.now = start + tick * interval / ticks
            left = committer.time_left(interval)
            assert left is not None
            assert (left <= 0) == committer.due(interval, 1_000_000), (start, clock.now)
