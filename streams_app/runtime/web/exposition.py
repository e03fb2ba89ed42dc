"""``/metrics``: a worker's counters as Prometheus metric families, made when scraped.

One :class:`~prometheus_client.CollectorRegistry` per worker (tests and some deployments run
several workers in one process; the global registry would mix them), holding this collector
and the process collector (CPU, memory, open files). The collector reads the worker's plain
counters (:mod:`streams_app.runtime.metrics`) and its live state (tasks, offsets, the last
fetched high watermarks) at scrape time: the hot path never touches prometheus_client.

Every family carries an ``app`` label (the app id), so one Prometheus can scrape several apps.
Names follow Prometheus' conventions (``_total`` counters, ``_seconds`` histograms); see
docs/operations.md for what each means and what healthy looks like.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

from streams_app.runtime.health import busy_agents, seconds_since_commit
from streams_app.runtime.lag import partition_lags
from streams_app.runtime.metrics import Histogram
from streams_app.runtime.task import RESTORING, RUNNING
from streams_app.runtime.web.views import readiness

if TYPE_CHECKING:
    from streams_app.runtime.view import WorkerView

CONTENT_TYPE = CONTENT_TYPE_LATEST
PREFIX = "streams_app_"


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


def _histogram(
    name: str, documentation: str, histogram: Histogram, app: str
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(PREFIX + name, documentation, labels=["app"])
    family.add_metric(
        [app],
        [(_bound(bound), count) for bound, count in histogram.cumulative()],
        histogram.sum,
    )
    return family


def _per(
    family: CounterMetricFamily | GaugeMetricFamily,
    app: str,
    values: Mapping[str, float],
) -> CounterMetricFamily | GaugeMetricFamily:
    for label, value in sorted(values.items()):
        family.add_metric([app, label], value)
    return family


class WorkerCollector:
    """Reads one worker at scrape time (a ``prometheus_client`` collector)."""

    def __init__(self, worker: WorkerView) -> None:
        self.worker = worker

    def describe(self) -> Iterable[Metric]:
        # Nothing to check at registration: the worker may not have started yet.
        return ()

    def collect(self) -> Iterator[Metric]:
        worker = self.worker
        metrics = worker.metrics
        app = worker.conf.id

        info = GaugeMetricFamily(
            PREFIX + "info",
            "The worker: app id, processing guarantee, transactional id (value 1).",
            labels=["app", "guarantee", "transactional_id"],
        )
        parts = worker.parts
        producer = parts.producer if parts is not None else None
        info.add_metric(
            [app, worker.conf.processing_guarantee, (producer and producer.transactional_id) or ""],
            1,
        )
        yield info
        ready, _ = readiness(worker)
        yield _gauge(
            "ready",
            "1 when the worker can make progress (what /ready answers 200 for).",
            app,
            1 if ready else 0,
        )

        yield _per(
            CounterMetricFamily(
                PREFIX + "records_in",
                "Input records handed to the agents, per topic (reprocessing after an abort "
                "counts again).",
                labels=["app", "topic"],
            ),
            app,
            metrics.records_in,
        )
        yield _per(
            CounterMetricFamily(
                PREFIX + "records_out",
                "Records sent by the worker's producer, per topic: outputs, changelogs, dead "
                "letters (records of aborted transactions included).",
                labels=["app", "topic"],
            ),
            app,
            producer.stats.records_out if producer is not None else {},
        )
        yield _counter(
            "records_processed",
            "Input records processed (all topics).",
            app,
            worker.records_processed,
        )
        yield _histogram(
            "batch_seconds",
            "Seconds to process one fetched batch: decode, agents, until they are idle.",
            metrics.batch_seconds,
            app,
        )
        yield _histogram(
            "commit_seconds",
            "Seconds per commit (changelog, offsets, send gate, EndTxn, store writes).",
            metrics.commit_seconds,
            app,
        )
        batches = "Records per batch the producer handed to the Kafka client."
        if producer is not None:
            yield _histogram("producer_batch_records", batches, producer.stats.batch_records, app)
        else:  # not started: the family without samples, so its name is always declared
            yield HistogramMetricFamily(PREFIX + "producer_batch_records", batches, labels=["app"])
        committer = parts.committer if parts is not None else None
        yield _counter(
            "commits",
            "Commits that committed something.",
            app,
            committer.commits if committer else 0,
        )
        yield _counter(
            "transactions_committed",
            "Kafka transactions committed (exactly-once).",
            app,
            producer.transactions_committed if producer else 0,
        )
        yield _counter(
            "transactions_aborted",
            "Kafka transactions aborted (agent errors, failed sends, fencing, shutdown).",
            app,
            producer.transactions_aborted if producer else 0,
        )
        yield _counter(
            "producer_recreated",
            "Times the producer was replaced after a fatal error or fencing.",
            app,
            producer.recreated if producer else 0,
        )
        yield _per(
            CounterMetricFamily(
                PREFIX + "commit_failures",
                "Commits that failed, by cause (the error's class: ProducerFencedError, "
                "CommitFailedError, SendFailedError, ...).",
                labels=["app", "cause"],
            ),
            app,
            metrics.commit_failures,
        )
        yield _counter(
            "rebalances",
            "Assignments received (one per rebalance the worker took part in).",
            app,
            metrics.rebalances,
        )
        yield _per(
            CounterMetricFamily(
                PREFIX + "dead_letters",
                "Records sent to the dead-letter topic, per source topic.",
                labels=["app", "topic"],
            ),
            app,
            metrics.dead_letters,
        )
        # Windowed tables (runtime.punctuator counts them as stream time moves).
        punctuator = worker.punctuator
        windowed = {name: 0 for name, t in worker.app.tables.items() if t.window is not None}
        yield _per(
            CounterMetricFamily(
                PREFIX + "late_records",
                "Records a windowed table refused as late (stream time past every window's "
                "end + grace), per table; dropped or dead-lettered per late_records.",
                labels=["app", "table"],
            ),
            app,
            {**windowed, **punctuator.late_by_table},
        )
        yield _per(
            CounterMetricFamily(
                PREFIX + "dropped_window_updates",
                "Window updates a windowed table dropped because that window had closed, per "
                "table (Kafka Streams' dropped-records-total): one per window a record skipped, "
                "late for some of its windows or all of them; once for a late sliding or "
                "session record.",
                labels=["app", "table"],
            ),
            app,
            {**windowed, **punctuator.dropped_by_table},
        )
        yield _counter(
            "windows_emitted",
            "Final results of closed windows emitted (emit on close).",
            app,
            punctuator.windows_emitted,
        )
        yield _counter(
            "windows_expired",
            "Windows deleted from the store and changelog after their retention.",
            app,
            punctuator.windows_expired,
        )
        yield from self._state_memory(app)
        yield from self._tasks(app)
        yield from self._restore(app)
        yield from self._stalls(app)

    def _stalls(self, app: str) -> Iterator[Metric]:
        """Liveness (runtime/health.py): how long since each task's progress was committed, and
        the agents holding the worker up."""
        worker = self.worker
        since = GaugeMetricFamily(
            PREFIX + "seconds_since_commit",
            "Per running task: seconds since a commit last carried its progress, while it has "
            "records waiting (0: caught up and committed).",
            labels=["app", "task"],
        )
        for task, seconds in sorted(seconds_since_commit(worker).items()):
            since.add_metric([app, task], seconds)
        yield since
        yield _gauge(
            "stuck_agents",
            "Agents busy on what they were handed for longer than the stall bound "
            "(stall_intervals commit intervals); processing_timeout fails their record.",
            app,
            len(busy_agents(worker, worker.conf.stall_seconds)),
        )
        yield _counter(
            "processing_timeouts",
            "Records that failed because their agent took longer than processing_timeout.",
            app,
            worker.watchdog.timeouts,
        )

    def _state_memory(self, app: str) -> Iterator[Metric]:
        """The state budgets of docs/memory.md: the read cache and the uncommitted writes."""
        memory = self.worker.memory
        cache, uncommitted = memory.cache, memory.uncommitted
        yield _counter(
            "state_cache_hits",
            "Table reads served by the read cache (reads of a key the open transaction wrote "
            "count as neither hit nor miss).",
            app,
            cache.hits,
        )
        yield _counter(
            "state_cache_misses",
            "Table reads that went to the store (RocksDB) and decoded.",
            app,
            cache.misses,
        )
        yield _counter(
            "state_cache_evictions",
            "Entries the read cache dropped to stay within state_cache_max_bytes.",
            app,
            cache.evictions,
        )
        yield _gauge(
            "state_cache_bytes",
            "What the read cache holds by its own (pessimistic) accounting.",
            app,
            cache.bytes,
        )
        yield _gauge(
            "state_cache_max_bytes",
            "The read cache's budget (state_cache_max_bytes).",
            app,
            cache.max_bytes,
        )
        yield _gauge(
            "state_uncommitted_bytes",
            "Pending table writes of the open transaction at the last check (estimated).",
            app,
            uncommitted.bytes,
        )
        parts = self.worker.parts
        committer = parts.committer if parts is not None else None
        yield _counter(
            "early_commits",
            "Commits made because the pending table writes outgrew state_uncommitted_max_bytes.",
            app,
            committer.early_commits if committer else 0,
        )

    def _tasks(self, app: str) -> Iterator[Metric]:
        worker = self.worker
        parts = worker.parts
        states = GaugeMetricFamily(
            PREFIX + "tasks", "Tasks this worker owns, by state.", labels=["app", "state"]
        )
        lag = GaugeMetricFamily(
            PREFIX + "consumer_lag",
            "Records between the next offset to process and the partition's end (high "
            "watermark of the last fetch), per input partition.",
            labels=["app", "topic", "partition"],
        )
        committed = GaugeMetricFamily(
            PREFIX + "committed_offset",
            "The group's committed offset per input partition owned by this worker.",
            labels=["app", "topic", "partition"],
        )
        end = GaugeMetricFamily(
            PREFIX + "end_offset",
            "High watermark of the last fetch, per input partition.",
            labels=["app", "topic", "partition"],
        )
        stable = GaugeMetricFamily(
            PREFIX + "last_stable_offset",
            "Last stable offset of the last fetch, per input partition: below the end offset "
            "while a transaction is open; stuck there, a hanging transaction.",
            labels=["app", "topic", "partition"],
        )
        if parts is not None:
            tasks = parts.tasks
            counts = {RUNNING: 0, RESTORING: 0}
            for task in tasks.tasks.values():
                counts[task.state] = counts.get(task.state, 0) + 1
            for state, count in sorted(counts.items()):
                states.add_metric([app, state], count)
            for entry in partition_lags(tasks, parts.consumer):
                labels = [app, entry.tp.topic, str(entry.tp.partition)]
                if entry.lag is not None:
                    lag.add_metric(labels, entry.lag)
                if entry.committed is not None:
                    committed.add_metric(labels, entry.committed)
                if entry.end is not None:
                    end.add_metric(labels, entry.end)
                if entry.stable is not None:
                    stable.add_metric(labels, entry.stable)
        group = parts.committer.group if parts is not None else None
        yield states
        yield lag
        yield committed
        yield end
        yield stable
        yield _gauge(
            "generation",
            "The consumer-group generation of the current assignment (-1: none).",
            app,
            group.generation_id if group else -1,
        )

    def _restore(self, app: str) -> Iterator[Metric]:
        metrics = self.worker.metrics
        yield _per(
            CounterMetricFamily(
                PREFIX + "restored_records",
                "Changelog records read by restores, per changelog topic.",
                labels=["app", "topic"],
            ),
            app,
            metrics.restored_records,
        )
        remaining = GaugeMetricFamily(
            PREFIX + "restore_remaining_records",
            "Changelog records left to restore, per changelog partition being restored.",
            labels=["app", "topic", "partition"],
        )
        for tp, state in sorted(metrics.restoring.items()):
            remaining.add_metric([app, tp.topic, str(tp.partition)], state.remaining)
        yield remaining


def _gauge(name: str, documentation: str, app: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(PREFIX + name, documentation, labels=["app"])
    family.add_metric([app], value)
    return family


def _counter(name: str, documentation: str, app: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(PREFIX + name, documentation, labels=["app"])
    family.add_metric([app], value)
    return family


def worker_registry(worker: WorkerView) -> CollectorRegistry:
    """A registry of this worker's metrics, plus the process's (CPU, memory, files)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(worker))
    ProcessCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
