"""What a worker counts while it runs, in plain ints, exported at scrape time (not on the hot path).

A worker handles tens of thousands of records per second; a Prometheus client metric costs a
lock and, with labels, a dict lookup of its child on every increment. So the runtime counts
here in plain attributes, dicts keyed by topic updated once per fetched batch and partition
(never per record), and histograms that bump one list slot. The web server's collector
(:mod:`streams_app.runtime.web.exposition`) turns them into Prometheus metric families only
when ``/metrics`` is scraped. Counters that already exist elsewhere (transactions committed and
aborted in :class:`~streams_app.runtime.producer.StreamsProducer`, records processed in the
worker) are read from where they are, not counted twice.

Everything here is single-threaded (the worker's event loop), so no locks.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from streams_app.transport.base import TopicPartition

#: Seconds: from a fraction of a millisecond (a small batch) to tens of seconds (a stall).
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
#: Records per producer batch.
BATCH_RECORD_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class Histogram:
    """Observations counted into fixed buckets (``le`` bounds, as Prometheus means them)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        #: One slot per bound, plus one for everything above the last (+Inf).
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` per bucket, the last one ``+Inf``."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class ProducerStats:
    """What the worker's producer sent: records per topic and records per batch.

    Counted per batch handed to the client on the batch path, per record on the record-by-record
    path (large records, transports without batches). Records of aborted transactions count:
    these are sends, as Kafka's ``record-send-total``; what was committed is read from the
    topics."""

    __slots__ = ("batch_records", "records_out")

    def __init__(self) -> None:
        self.records_out: dict[str, int] = {}
        self.batch_records = Histogram(BATCH_RECORD_BUCKETS)

    def batch(self, topic: str, records: int) -> None:
        self.records_out[topic] = self.records_out.get(topic, 0) + records
        self.batch_records.observe(records)

    def record(self, topic: str) -> None:
        self.records_out[topic] = self.records_out.get(topic, 0) + 1


@dataclass
class RestoreState:
    """One changelog partition being restored: offsets ``[start, end)``, read up to
    ``position``."""

    start: int
    position: int
    end: int

    @property
    def remaining(self) -> int:
        return max(0, self.end - self.position)


@dataclass
class WorkerMetrics:
    """The worker's counters (see the module docstring). Attribute names are the metrics'."""

    #: Input records processed per topic (handed to the agents or dead-lettered).
    records_in: dict[str, int] = field(default_factory=dict)
    #: Records sent to the dead-letter topic, per source topic.
    dead_letters: dict[str, int] = field(default_factory=dict)
    #: Failed commits by cause (the exception's class name: ProducerFencedError, ...).
    commit_failures: dict[str, int] = field(default_factory=dict)
    #: Assignments received (every rebalance this worker took part in ends with one).
    rebalances: int = 0
    #: Seconds to process one fetched batch (decode, agents, until they are idle).
    batch_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    #: Seconds per commit that committed something (the whole protocol, EndTxn included).
    commit_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    #: Changelog offsets applied by restores, per changelog topic (markers included).
    restored_records: dict[str, int] = field(default_factory=dict)
    #: Changelog partitions being restored now.
    restoring: dict[TopicPartition, RestoreState] = field(default_factory=dict)
    #: ``time.monotonic()`` of the last sign of progress: a commit point reached (committing
    #: something or finding nothing to commit) or a restore finished. Stalls count from here.
    progress_at: float = field(default_factory=time.monotonic)
    #: Task id -> ``time.monotonic()`` of the last commit that carried its progress.
    committed_at: dict[str, float] = field(default_factory=dict)

    def commit_point(self) -> None:
        self.progress_at = time.monotonic()

    def task_committed(self, task: str) -> None:
        self.committed_at[task] = time.monotonic()

    def count_in(self, topic: str, records: int) -> None:
        self.records_in[topic] = self.records_in.get(topic, 0) + records

    def dead_letter(self, topic: str) -> None:
        self.dead_letters[topic] = self.dead_letters.get(topic, 0) + 1

    def commit_failed(self, cause: BaseException) -> None:
        name = type(cause).__name__
        self.commit_failures[name] = self.commit_failures.get(name, 0) + 1

    def restore_progress(self, tp: TopicPartition, position: int, end: int) -> None:
        """A restore reached ``position`` of ``[start, end)`` (the first call gives the start)."""
        state = self.restoring.get(tp)
        if state is None:
            self.restoring[tp] = RestoreState(position, position, end)
            return
        moved = position - state.position
        if moved > 0:
            self.restored_records[tp.topic] = self.restored_records.get(tp.topic, 0) + moved
        state.position = position
        state.end = end

    def restore_finished(self) -> None:
        self.restoring.clear()
        self.progress_at = time.monotonic()
