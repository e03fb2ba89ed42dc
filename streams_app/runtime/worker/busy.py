"""How busy the worker has been between commits, from its event loop thread's busy time.

The loop asks it at every periodic commit under exactly-once (``Loop.meanwhile``): a worker that
was busy most of the time since its last commit ended is saturated (records are
waiting), and processes already-fetched records while the commit is in flight; the busy time per
record sizes the slices it processes them in.

Why the thread's time, not the batches' measured processing time (``FetchPacer.seconds_per_record``,
dispatch to settled): that leaves out the poll, the fetch's decoding, the collector's pauses and
the loop's own turns, which for a cheap topology (a stream-table join at 5 µs a record) are a
large part of its cost. Judged by it, a join whose core was 0.83-0.92 busy seemed to have time
to spare, and processed 2-4% of its records during commits (BENCHMARKS.md, "Join buffers as
bytes").

Busy time is the thread's time on a CPU plus its time waiting for one (``Clock.busy_time``,
Linux's schedstat): on a host with more runnable threads than CPUs, a saturated worker is on a
CPU only for its share of the time, and its CPU time alone read it as partly idle (a worker of
``tests/runtime/test_process_during_commit.py`` on a loaded 2-CPU host never counted as
saturated). Its busy time per record includes the waits then too, which is what a slice's
length in wall time (``MEANWHILE_SLICE_SECONDS``) should be sized by.

Why from the end of the last commit and not its start: the commit's own waits are idle time
whatever the load, and counting them would put a saturated worker whose commits are slow below
the threshold. Between commits a saturated worker is busy all but its polls' waits; one keeping
up at half its capacity, about half the time.
"""

from __future__ import annotations

from streams_app.runtime.clock import Clock


class BusyMeter:
    """The busy share and busy time per record since :meth:`mark` (the end of the last commit)."""

    __slots__ = ("_busy", "_clock", "_records", "_since")

    def __init__(self, clock: Clock, records: int = 0) -> None:
        self._clock = clock
        self._since = clock.monotonic()
        self._busy = clock.busy_time()
        self._records = records

    def mark(self, records: int) -> None:
        """Start measuring again; ``records``: the worker's count of records processed so far."""
        clock = self._clock
        self._since = clock.monotonic()
        self._busy = clock.busy_time()
        self._records = records

    def read(self, records: int) -> tuple[float, float | None]:
        """``(share of the time busy, busy seconds per record or None)`` since the mark.

        ``records``: the worker's count of records processed so far. The share is 0.0 when no
        time has passed (a clock that does not move, as the test harness's)."""
        clock = self._clock
        elapsed = clock.monotonic() - self._since
        busy = clock.busy_time() - self._busy
        processed = records - self._records
        share = busy / elapsed if elapsed > 0 else 0.0
        return share, (busy / processed if processed > 0 and busy > 0 else None)
