"""How much the worker's next poll may take, so that a due commit is not held back.

The worker commits between batches: it fetches up to ``max_poll_records``, processes them, and
only then checks whether the commit interval is up. Under load a full batch takes tens of
milliseconds to process (2,000 records at ~15 µs), and an idle poll waits up to 100 ms for
data; either way a commit begins late, and every output of its transaction becomes visible
that much later. Under exactly-once the produce-to-visible latency is about one commit cycle
plus one commit, so a late commit is latency that nothing else buys back.

:class:`FetchPacer` aims each poll at the commit deadline instead: it waits no longer than the
time left, and takes no more records than the worker processed, on average, in that time
(an exponentially weighted seconds-per-record over the recent batches). Records it leaves are
still in the consumer's buffer, so the next poll returns them at no cost; with no commit
pending (nothing processed since the last one) the poll is what it was. Kafka Streams' stream
thread does much the same: it processes in rounds whose size it adapts to how long they take,
and checks for a due commit between rounds.
"""

from __future__ import annotations

import math

#: Never ask for fewer records than this: tiny polls cost a round of the loop each.
MIN_RECORDS = 64
#: Weight of the newest batch in the seconds-per-record average.
SMOOTHING = 0.2
#: While agents are draining before a due commit, poll this long (ms) rather than spin.
DRAINING_POLL_MS = 5


class FetchPacer:
    """The next poll's ``(timeout_ms, max_records)`` given the time left until the commit."""

    __slots__ = ("max_records", "poll_ms", "seconds_per_record")

    def __init__(self, max_records: int, poll_ms: int) -> None:
        self.max_records = max_records
        self.poll_ms = poll_ms
        #: Recent processing cost; None until a batch has been measured.
        self.seconds_per_record: float | None = None

    def observe(self, records: int, seconds: float) -> None:
        """A batch of ``records`` took ``seconds`` to process (dispatch to settled)."""
        if records <= 0 or seconds <= 0:
            return
        cost = seconds / records
        previous = self.seconds_per_record
        self.seconds_per_record = (
            cost if previous is None else previous + SMOOTHING * (cost - previous)
        )

    def next_poll(self, time_left: float | None, *, draining: bool = False) -> tuple[int, int]:
        """``time_left``: seconds until the commit is due (<= 0: due now), or None when no
        commit is pending (nothing processed since the last one)."""
        if time_left is None:
            return self.poll_ms, self.max_records
        if time_left <= 0:
            return (DRAINING_POLL_MS if draining else 0), MIN_RECORDS
        timeout = min(self.poll_ms, max(1, math.ceil(time_left * 1000)))
        cost = self.seconds_per_record
        if cost is None:
            return timeout, self.max_records
        records = int(time_left / cost)
        return timeout, max(MIN_RECORDS, min(self.max_records, records))
