"""Worker: one process running a topology with one consumer, one producer and many tasks.

The worker's loop is deliberately plain: fetch a batch, hand each record to the agents that
consume its topic, wait until they have processed all of it, and commit when due. Everything
that changes ownership (rebalance callbacks) or undoes work (aborts) happens under one processing
lock, so a commit, a revocation and an abort never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams_app.app.app import WALL_CLOCK
from streams_app.app.context import Event, SendFuture, current_event, current_runtime
from streams_app.codecs import DecodeError, TombstoneError
from streams_app.errors import InvalidTimestamp, WorkerStopped
from streams_app.runtime import guarantees
from streams_app.runtime.actor import AgentRunner
from streams_app.runtime.assignor import StreamsAssignor
from streams_app.runtime.broker_limits import check_broker_limits, check_topic_limits
from streams_app.runtime.clock import Clock, SystemClock
from streams_app.runtime.commit import MIGRATED, PRODUCER_BROKEN
from streams_app.runtime.dead_letters import DeadLetter, DeadLetters
from streams_app.runtime.errors_policy import Decision, ErrorPolicy, Failure, is_bad_record
from streams_app.runtime.lag import running_lag
from streams_app.runtime.measured_commit import MeasuredCommitter
from streams_app.runtime.metrics import WorkerMetrics
from streams_app.runtime.partition_group import PartitionGroup
from streams_app.runtime.placement import PlacementConfig
from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.progress import CatchUpMonitor, RestoreProgress, interactive_stream
from streams_app.runtime.punctuator import CallbackFailed, Punctuator
from streams_app.runtime.replicas import Replicas
from streams_app.runtime.state_memory import log_state_memory
from streams_app.runtime.stream_time import decode_metadata
from streams_app.runtime.task import RUNNING, Task
from streams_app.runtime.task_manager import TaskManager
from streams_app.runtime.topology import TopologyPlan, plan_topology
from streams_app.runtime.web import WebServer
from streams_app.settings import AT_MOST_ONCE, Settings
from streams_app.state.base import Store
from streams_app.state.budget import StateMemory
from streams_app.state.directory import StateDirectory
from streams_app.state.factory import open_store, rocksdb_options
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    RecordLike,
    TopicPartition,
    Transport,
)
from streams_app.transport.errors import TransportError, is_record_rejected

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.table import Table
    from streams_app.app.topic import Topic

log = logging.getLogger(__name__)

H_SRC_TOPIC = "src_topic"
H_SRC_PARTITION = "src_partition"
H_SRC_OFFSET = "src_offset"
H_TXN_ID = "txn_id"
H_GENERATION = "generation"


def _nothing() -> None:
    pass


def _kafka_timestamp(record: RecordLike) -> int:
    return record.timestamp


class AgentFailed(Exception):
    """Agents failed on records of the batch being processed (one failure per record)."""

    def __init__(self, failures: list[Failure]) -> None:
        super().__init__("; ".join(f.describe() for f in failures))
        self.failures = failures


class Worker:
    """Runs an :class:`~streams_app.app.app.App` until stopped.

    ``overrides`` replace settings for this worker only (the CLI's ``--state-dir``, tests).
    """

    def __init__(
        self,
        app: App,
        *,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **overrides: Any,
    ) -> None:
        self.app = app
        conf = app.conf.replace(**overrides) if overrides else app.conf
        conf.validate()
        self.conf: Settings = conf
        self.transport: Transport = transport or app.transport()
        self.clock: Clock = clock or SystemClock()
        self._timer_due: dict[str, float] = {}
        #: (topic, partition) -> its src_topic and src_partition lineage headers, made once.
        self._lineage: dict[tuple[str, int], tuple[tuple[str, bytes], tuple[str, bytes]]] = {}
        self.runner = AgentRunner(app)
        self.policy = ErrorPolicy(conf)
        self.punctuator = Punctuator(app, self.send, self._dead_letter)
        self._wall_timers = [t for t in app.timers if t.on == WALL_CLOCK]
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._lock = asyncio.Lock()
        #: Partitions paused while a failed record of theirs backs off -> when they resume.
        self.backing_off: dict[TopicPartition, float] = {}
        self.records_processed = 0
        #: Records handed to the agents since the last time they were all done.
        self._fed = 0
        self.error: BaseException | None = None
        #: The state memory budget: the read cache shared by every table and partition, and the
        #: uncommitted-writes budget. Their counters are the worker's state metrics.
        self.memory = StateMemory(conf.state_cache_max_bytes, conf.state_uncommitted_max_bytes)
        # set in start()
        self.directory: StateDirectory | None = None
        self.plan: TopologyPlan | None = None
        self.stores: dict[str, Store] = {}
        self._admin: AdminClient | None = None
        self._consumer: ConsumerClient | None = None
        self._restore_consumer: ConsumerClient | None = None
        self._producer: StreamsProducer | None = None
        self._tasks: TaskManager | None = None
        self._committer: MeasuredCommitter | None = None
        self._dead_letters: DeadLetters | None = None
        #: Standbys, warm-ups, fencing of departed members, probing (runtime/replicas.py).
        self.replicas: Replicas | None = None
        #: What /metrics exports (plain counters; see runtime.metrics).
        self.metrics = WorkerMetrics()
        #: The web server (None: web_enabled is off, or not started yet).
        self.web: WebServer | None = None
        self._catch_up: asyncio.Task[None] | None = None

    # -- accessors (valid once started) ---------------------------------------------------

    @property
    def consumer(self) -> ConsumerClient:
        assert self._consumer is not None, "worker not started"
        return self._consumer

    @property
    def producer(self) -> StreamsProducer:
        assert self._producer is not None, "worker not started"
        return self._producer

    @property
    def tasks(self) -> TaskManager:
        assert self._tasks is not None, "worker not started"
        return self._tasks

    @property
    def committer(self) -> MeasuredCommitter:
        assert self._committer is not None, "worker not started"
        return self._committer

    @property
    def dead_letters(self) -> DeadLetters:
        assert self._dead_letters is not None, "worker not started"
        return self._dead_letters

    @property
    def dead_lettered(self) -> int:
        """Records committed to dead-letter topics so far."""
        return self._dead_letters.committed_count if self._dead_letters is not None else 0

    @property
    def admin(self) -> AdminClient:
        assert self._admin is not None, "worker not started"
        return self._admin

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self) -> None:
        """Start, process until :meth:`request_stop`, then stop cleanly."""
        token = current_runtime.set(self)
        try:
            await self.start()
            await self._loop()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            try:
                await self._shutdown()
            finally:
                current_runtime.reset(token)
                self.stopped.set()

    @property
    def web_url(self) -> str | None:
        """``http://host:port`` of this worker's web server (None when it has none)."""
        return self.web.url if self.web is not None else None

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    def request_stop(self) -> None:
        """Graceful stop: finish the current batch, commit, close (SIGTERM does this)."""
        self._stop_requested.set()

    def request_commit(self) -> None:
        """Commit at the next quiescent point, whether or not ``commit_interval`` is up.

        Like Kafka Streams' ``ProcessorContext.commit()``. The test harness uses it to commit
        without moving its manual clock (which would also fire timers)."""
        if self._committer is not None:
            self._committer.requested = True

    async def start(self) -> None:
        conf = self.conf
        log.info(
            "starting worker for %s (%s) on %s",
            conf.id,
            conf.processing_guarantee,
            self.transport.address,
        )
        self.directory = StateDirectory(conf.state_dir, conf.id)
        if conf.web_enabled:  # first: /health answers during start; a port in use stops us now
            self.web = WebServer(self)
            await self.web.start()
        admin = self.transport.admin()
        await admin.start()  # raises BrokerUnavailable naming the address
        self._admin = admin
        if conf.exactly_once:
            await admin.check_exactly_once_support()
        limits = await admin.broker_limits()
        if limits is None:
            log.info("not allowed to describe broker configs: broker-side limits not checked")
        else:
            check_broker_limits(conf, limits)

        # Agents run up to their first `async for`, declaring group_by topics on the way.
        self.runner.start()
        await self.runner.wait_started(timeout=30.0)
        self.plan = await plan_topology(self.app, self.runner, admin, conf)
        written = [
            name
            for name in self.plan.partition_counts
            if name not in self.plan.input_topics or name.endswith("-repartition")
        ]
        check_topic_limits(conf, await admin.topic_max_message_bytes(written))
        options = rocksdb_options(conf)  # one block cache and memtable budget for all tables
        for table in self.app.tables.values():
            self.stores[table.name] = open_store(conf.store, self.directory, table.name, options)
        self._tasks = TaskManager(
            self.plan, self.stores, self.memory.cache, group_factory=self._partition_group
        )
        self._tasks.progress = RestoreProgress(
            self.metrics, conf.progress_interval, stream=interactive_stream(log)
        )
        self._tasks.local_offsets()  # opens local state now, not inside a group join
        # The KIP-441 assignor (standbys, warm-ups, probing) runs only when standbys are asked
        # for: with it, groups of several members were seen rebalancing in alternating
        # generations for tens of seconds (an open defect), so the default stays on the range
        # assignor, which the chaos suite has long proven.
        assignor: StreamsAssignor | None = None
        if conf.table_standby_replicas > 0:
            assignor = StreamsAssignor(
                self.plan,
                process_id=self.directory.process_id,
                transactional_id=(
                    guarantees.transactional_id(conf, self.directory.process_id)
                    if conf.exactly_once
                    else None
                ),
                local_offsets=self._tasks.local_offsets,
                end_offsets=admin.end_offsets,
                placement=PlacementConfig(
                    standby_replicas=conf.table_standby_replicas,
                    acceptable_recovery_lag=conf.acceptable_recovery_lag,
                    max_warmup_replicas=conf.max_warmup_replicas,
                ),
                probing_interval=conf.probing_rebalance_interval,
            )
            self.replicas = Replicas(conf, self.transport, admin, self._tasks, assignor)
        if self.stores:
            log_state_memory(conf, self.plan, options)

        self._producer = StreamsProducer(
            self.transport,
            guarantees.producer_config(conf, self.directory.process_id),
            clock=self.clock,
        )
        await self._producer.start()  # exactly-once: fences our previous incarnation
        self._dead_letters = DeadLetters(
            self._producer,
            self.plan.dead_letter_topics,
            self.plan.partition_counts,
            on_committed=self.metrics.dead_letter,
        )
        self._restore_consumer = self.transport.consumer(guarantees.restore_consumer_config(conf))
        await self._restore_consumer.start()
        self._consumer = self.transport.consumer(
            dataclasses.replace(
                guarantees.consumer_config(conf), assignor=assignor, application_server=self.web_url
            )
        )
        await self._consumer.start()
        plan = self.plan
        self._committer = MeasuredCommitter(
            conf.processing_guarantee,
            self._producer,
            self._consumer,
            self._tasks,
            changelog_topic=lambda table: plan.changelog_topics[table],
            clear_inboxes=self.runner.clear_inboxes,
            clock=self.clock,
            uncommitted=self.memory.uncommitted,
            on_commit=self._on_commit,
            metrics=self.metrics,
        )
        now = self.clock.monotonic()
        self._timer_due = {t.name: now + t.interval for t in self._wall_timers}
        self._consumer.subscribe(self.plan.input_topics, _RebalanceListener(self))
        self._catch_up = asyncio.ensure_future(self._catch_up_monitor().run())
        self.started.set()
        log.info("worker %s started; inputs %s", conf.id, ", ".join(self.plan.input_topics))

    def _catch_up_monitor(self) -> CatchUpMonitor:
        consumer, tasks = self.consumer, self.tasks
        return CatchUpMonitor(
            lambda: running_lag(tasks, consumer),
            lambda: self.records_processed,
            lambda: self.metrics.rebalances,
            interval=self.conf.progress_interval,
            threshold=self.conf.max_poll_records,
            stream=interactive_stream(log),
        )

    async def _shutdown(self) -> None:
        if self._catch_up is not None:
            self._catch_up.cancel()
        if self._committer is not None and self._tasks is not None:
            async with self._lock:
                if self.error is None:
                    try:
                        await self.committer.commit()
                    except Exception as exc:
                        log.warning("final commit failed (%s); aborting", type(exc).__name__)
                        await self._safe_abort()
                else:
                    await self._safe_abort()
                self.tasks.close_all()
        await self.runner.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        for client in (self._consumer, self._restore_consumer):
            if client is not None:
                try:
                    await client.stop()
                except Exception as exc:
                    log.warning("closing a consumer failed: %s", type(exc).__name__)
        if self._producer is not None:
            await self._producer.stop()
        if self._admin is not None:
            with contextlib.suppress(Exception):
                await self._admin.close()
        for store in self.stores.values():
            store.close()
        if self.directory is not None:
            self.directory.close()
        if self.web is not None:
            await self.web.stop()

    async def _safe_abort(self) -> None:
        try:
            await self.committer.abort()
        except Exception as exc:
            log.warning("abort during shutdown failed: %s", type(exc).__name__)

    # -- the loop -------------------------------------------------------------------------

    async def _loop(self) -> None:
        conf = self.conf
        interval = conf.effective_commit_interval
        stop = self._stop_requested
        poll_ms = max(5, min(100, int(interval * 1000)))
        while not stop.is_set():
            if self.backing_off:
                await self._resume_backed_off()
            if self.tasks.restoring():
                await self._restore()
                continue
            waiting = self._buffered_wait()
            batch = await self.consumer.getmany(
                timeout_ms=poll_ms if waiting is None else min(poll_ms, waiting),
                max_records=conf.max_poll_records,
            )
            async with self._lock:
                if self._timer_due and await self._run_due_timers():
                    continue  # a timer failed: the abort rewound the consumer past this batch
                if not batch and self.committer.due(interval, conf.commit_every):
                    # Idle: a trailing transaction marker may have moved the position.
                    await self._sync_positions(list(self.tasks.by_tp))
                await self._step(batch, interval)

    async def _step(
        self, batch: Mapping[TopicPartition, Sequence[RecordLike]], interval: float
    ) -> None:
        committer = self.committer
        try:
            if batch or self._has_buffered():
                if self.conf.processing_guarantee == AT_MOST_ONCE:
                    await committer.commit_offsets_before_processing(self._batch_offsets(batch))
                await self._process(batch)
            if committer.due(interval, self.conf.commit_every):
                await committer.commit()
        except AgentFailed as failed:
            await self._on_agent_failures(failed.failures)
        except MIGRATED as exc:
            self.dead_letters.aborted()
            await self._on_migrated(exc)
        except TransportError as exc:  # PRODUCER_BROKEN and any other transaction failure
            log.warning(
                "transaction failed (%s: %s): aborting and retrying", type(exc).__name__, exc
            )
            await self.runner.stop()  # agents may still be sending into it (a batch mid-way)
            await committer.abort(recreate_producer=True)
            # A dead letter refused for good stops the worker naming its record; an output
            # refused for good stops it too: committing again would fail the same way.
            self.dead_letters.raise_if_refused()
            if is_record_rejected(exc):
                raise WorkerStopped(
                    f"{exc}: the transaction cannot commit, and every retry would fail the same "
                    "way. Stopping; nothing of it was committed. Fix: raise the topic's "
                    "max.message.bytes (or make the record smaller); then restart"
                ) from exc
            await self.runner.restart()

    async def _run_due_timers(self) -> bool:
        """Run timers whose time has come; what they send joins the open transaction.
        Returns whether one failed (and the transaction was aborted)."""
        now = self.clock.monotonic()
        for timer in self._wall_timers:
            due = self._timer_due.get(timer.name)
            if due is None or now < due:
                continue
            self._timer_due[timer.name] = now + timer.interval
            try:
                await timer.fun()
            except Exception as exc:
                await self._on_agent_failures([Failure.of(f"timer:{timer.name}", exc, None)])
                return True
        return False

    def _batch_offsets(
        self, batch: Mapping[TopicPartition, Sequence[RecordLike]]
    ) -> dict[TopicPartition, int]:
        return {tp: records[-1].offset + 1 for tp, records in batch.items() if records}

    async def _process(self, batch: Mapping[TopicPartition, Sequence[RecordLike]]) -> None:
        started = time.perf_counter()
        by_tp = self.tasks.by_tp
        self._fed = 0  # what an earlier, failed batch fed does not count
        retried = self._retried_partitions()
        held: list[tuple[Task, TopicPartition, Sequence[RecordLike]]] = []
        for tp, records in batch.items():
            task = by_tp.get(tp)
            if task is None or not records:
                continue  # revoked: the new owner processes them
            key = TopicPartition(tp[0], tp[1])
            if task.state != RUNNING:
                # Not restored yet (its partitions should be paused): fetch these again later.
                self.consumer.seek(key, task.offsets.get(key, records[0].offset))
                continue
            group = task.group_for(key)
            if group is not None:  # co-partitioned inputs: smallest timestamp first
                group.add(key, records, self._ordering_timestamp(task, key))
                continue
            if key in retried:
                index = self._first_retry(key, records)
                if index is not None:
                    await self._dispatch(task, key, records[:index])
                    held.append((task, key, records[index:]))
                    continue
            await self._dispatch(task, key, records)
        if self._has_buffered():
            await self._process_buffered()
        await self._agents_done()
        for task, key, records in held:
            # A record that failed before is tried again in a transaction of its own, so that
            # if it fails again its abort takes nothing else with it: commit first.
            await self.committer.commit()
            await self._dispatch(task, key, records[:1])
            await self._agents_done()
            await self._dispatch(task, key, records[1:])
            await self._agents_done()
        if not self.punctuator.idle:
            try:
                await self.punctuator.after_batch(self.tasks.running())
            except CallbackFailed as exc:
                failure = Failure.of(exc.what, exc.error, None, replayed=True)
                raise AgentFailed([failure]) from exc
        await self._sync_positions(batch)
        self.metrics.batch_seconds.observe(time.perf_counter() - started)

    async def _agents_done(self) -> None:
        """Wait until the agents have processed everything handed to them; raise their
        failures (one per record)."""
        await self.runner.wait_idle()
        failures: dict[tuple[str, int, int] | None, Failure] = {}
        for actor in self.runner.failed():
            error = actor.error
            assert error is not None
            failure = Failure.of(actor.name, error, actor.failed_event)
            failures.setdefault(failure.position, failure)
        if failures:
            raise AgentFailed(list(failures.values()))
        self.records_processed += self._fed
        self.committer.records_since_commit += self._fed
        self._fed = 0

    def _retried_partitions(self) -> set[TopicPartition]:
        attempts = self.policy.attempts
        if not attempts or self.conf.processing_guarantee == AT_MOST_ONCE:
            return set()
        poisoned = self.policy.poisoned
        return {TopicPartition(p[0], p[1]) for p in attempts if p not in poisoned}

    def _first_retry(self, tp: TopicPartition, records: Sequence[RecordLike]) -> int | None:
        """Index of the first record of ``records`` that failed before (and is to be retried)."""
        attempts, poisoned = self.policy.attempts, self.policy.poisoned
        expected = self.tasks.by_tp[tp].offsets.get(tp, 0)
        for index, record in enumerate(records):
            position = (tp.topic, tp.partition, record.offset)
            if record.offset >= expected and position in attempts and position not in poisoned:
                return index
        return None

    # -- co-partitioned inputs in timestamp order (runtime.partition_group) ----------------

    def _partition_group(self, partitions: list[TopicPartition]) -> PartitionGroup:
        return PartitionGroup(
            partitions,
            max_idle=self.conf.max_task_idle,
            lag=self.consumer.fetched_lag,
            limit=max(2 * self.conf.max_poll_records, 1000),
        )

    def _ordering_timestamp(self, task: Task, tp: TopicPartition) -> Any:
        topic = self.app.topics[tp.topic]
        if topic.timestamp_fn is None:
            return _kafka_timestamp
        load_value = topic.value_codec.loads

        def extracted(record: RecordLike) -> int:
            try:
                value = None if record.value is None else load_value(record.value)
                return topic.timestamp_of(record.timestamp, value, -1)
            except Exception:  # dead-lettered when dispatched; order it by Kafka's time
                return record.timestamp

        return extracted

    def _has_buffered(self) -> bool:
        if self._tasks is None:
            return False
        return any(group.buffered for task in self.tasks.running() for group in task.groups())

    def _buffered_wait(self) -> int | None:
        """How long the next poll may wait (ms) while buffered records wait on a task's idle
        deadline; None when nothing is buffered."""
        if not self._has_buffered():
            return None
        now = self.clock.monotonic()
        deadlines = [
            d
            for task in self.tasks.running()
            for group in task.groups()
            if (d := group.next_deadline()) is not None
        ]
        if not deadlines:
            return 5
        return max(1, min(100, int((min(deadlines) - now) * 1000) + 1))

    async def _process_buffered(self) -> None:
        """Process each ready group's records, smallest timestamp first. Between runs from
        different partitions, wait until the agents are idle: the records of two topics go to
        different agents, which must see them in that order too."""
        now = self.clock.monotonic()
        retried = self._retried_partitions()
        for task in self.tasks.running():
            for group in task.groups():
                last: TopicPartition | None = None
                while group.ready(now):
                    tp, run = group.next_run()
                    if last is not None and tp != last:
                        await self._agents_done()
                    last = tp
                    if tp in retried:
                        await self._dispatch_retries_alone(task, tp, run)
                    else:
                        await self._dispatch(task, tp, run)
                # A partition backing off after a failure stays paused until its time is up.
                pause = group.to_pause()
                resume = [tp for tp in group.to_resume() if tp not in self.backing_off]
                if pause:
                    self.consumer.pause(pause)
                if resume:
                    self.consumer.resume(resume)

    async def _dispatch_retries_alone(
        self, task: Task, tp: TopicPartition, run: Sequence[RecordLike]
    ) -> None:
        """Dispatch a run in order, each record that failed before in a transaction of its
        own (what came before it is committed first), so that if it fails again its abort
        takes nothing else with it. For runs that must keep their order: a partition group's
        (ungrouped partitions hold their retried records until the batch is done instead)."""
        while run:
            index = self._first_retry(tp, run)
            if index is None:
                await self._dispatch(task, tp, run)
                return
            await self._dispatch(task, tp, run[:index])
            await self._agents_done()
            await self.committer.commit()
            await self._dispatch(task, tp, run[index : index + 1])
            await self._agents_done()
            run = run[index + 1 :]

    async def _sync_positions(self, partitions: Iterable[TopicPartition]) -> None:
        """Step the next-offset-to-commit over transaction markers (KAFKA-6607).

        After the last record of a transaction at offset N the consumer's position is N+2, past
        the commit marker. Committing N+1 would leave the committed offset forever one short of
        the end offset; committing the position makes "committed == end" mean "all processed".
        Safe because every record the consumer returned below the position has been processed.
        """
        by_tp = self.tasks.by_tp
        for tp in partitions:
            task = by_tp.get(tp)
            if task is None or task.state != RUNNING:
                continue
            key = TopicPartition(tp[0], tp[1])
            if task.buffered(key):
                continue  # fetched, not processed: the position is past them
            position = await self.consumer.position(key)
            if position > task.offsets.get(key, position):
                task.offsets[key] = position

    async def _dispatch(self, task: Task, tp: TopicPartition, records: Sequence[RecordLike]) -> int:
        topic = self.app.topics[tp.topic]
        load_key, load_value = topic.key_codec.loads, topic.value_codec.loads
        tombstones = topic.accepts_tombstones
        streams = [
            actors[tp.partition % len(actors)].input for actors in self.runner.actor_lists(tp.topic)
        ]
        forwarders = self.runner.forwarders.get(tp.topic, ())
        policy = self.policy
        poisoned = policy.poisoned
        offsets = task.offsets
        expected = offsets.get(tp, 0)
        count = 0
        # Stream time (runtime.stream_time): the record's time, and the partition's largest.
        timestamp_fn = topic.timestamp_fn
        times = task.partition_times
        partition_time = times.get(tp, -1)
        for record in records:
            offset = record.offset
            if offset < expected:
                continue  # fetched before a rewind or rebalance: already processed
            if poisoned:
                failure = policy.poison_for(tp.topic, tp.partition, offset)
                if failure is not None:  # decided before the abort that brought it round
                    position = (tp.topic, tp.partition, offset)
                    await self._dead_letter(
                        record, failure.error, failure.agent, policy.attempts_of(position)
                    )
                    offsets[tp] = offset + 1
                    continue
            raw_key, raw_value = record.key, record.value
            try:
                key = None if raw_key is None else load_key(raw_key)
                if raw_value is not None:
                    value = load_value(raw_value)
                elif tombstones:
                    value = None
                else:
                    raise TombstoneError(
                        f"a record without a value (tombstone) on {tp.topic}, whose values are "
                        "a Record model"
                    )
            except Exception as exc:  # a poison record: dead-letter it, never crash-loop
                error = exc if isinstance(exc, DecodeError) else DecodeError(str(exc))
                await self._dead_letter(record, error, None, 0)
                offsets[tp] = offset + 1
                continue
            timestamp = record.timestamp
            if timestamp_fn is not None or timestamp < 0:
                try:
                    timestamp = topic.timestamp_of(timestamp, value, partition_time)
                except InvalidTimestamp as exc:
                    await self._dead_letter(record, exc, None)
                    offsets[tp] = offset + 1
                    continue
            if timestamp > partition_time:
                partition_time = times[tp] = timestamp
            event = Event(
                tp.topic,
                tp.partition,
                offset,
                timestamp,
                key,
                value,
                tuple(record.headers),
                raw_key,
                raw_value,
                task,
            )
            for stream in streams:
                stream.feed(event)
            if forwarders:
                token = current_event.set(event)
                try:
                    for forwarder in forwarders:
                        await forwarder.forward(event)
                except Exception as exc:
                    name = f"group_by:{forwarder.target.name}"
                    raise AgentFailed([Failure.of(name, exc, event)]) from exc
                finally:
                    current_event.reset(token)
            offsets[tp] = offset + 1
            count += 1
        self._fed += count
        self.metrics.count_in(tp.topic, count)
        return count

    async def _dead_letter(
        self, record: RecordLike, error: BaseException, agent: str | None, attempts: int = 0
    ) -> None:
        await self.dead_letters.send(
            DeadLetter(
                record.topic,
                record.partition,
                record.offset,
                record.key,
                record.value,
                tuple(record.headers),
                error,
                agent,
                attempts,
            )
        )

    # -- failure handling -----------------------------------------------------------------

    async def _on_agent_failures(self, failures: list[Failure]) -> None:
        """Decide per record, undo the transaction once, then carry the decisions out.

        Retried records pause only their own partition for the backoff: every other partition
        is processed and committed meanwhile (see :mod:`streams_app.runtime.errors_policy`).
        """
        decisions = [(failure, self.policy.decide(failure)) for failure in failures]
        for failure, decision in decisions:
            if is_bad_record(failure.error) and decision is Decision.DEAD_LETTER:
                log.warning("%s: a bad record, no retry can help", failure.describe())
                continue
            # The traceback once per record (its first failure) and with the final decision;
            # the retries in between say which attempt failed.
            attempts = self.policy.attempts_of(failure.position) if failure.position else 1
            log.error(
                "%s; policy %s -> %s%s",
                failure.describe(),
                self.conf.error_policy,
                decision.value,
                self._retry_note(failure, decision),
                exc_info=failure.error if attempts <= 1 or decision is not Decision.RETRY else None,
            )
        if self.conf.processing_guarantee == AT_MOST_ONCE:
            # The offsets were committed before processing: nothing to undo, nothing to retry.
            await self.runner.restart()
            for failure, decision in decisions:
                if decision is Decision.DEAD_LETTER and failure.event is not None:
                    await self._dead_letter_event(failure)
        else:
            # Agents may still be working on the batch (a group_by key function failed while
            # it was being handed out): stop them before the abort, or they send into it.
            await self.runner.stop()
            await self.committer.abort()
            self.dead_letters.aborted()
            await self.runner.restart()
        for failure, decision in decisions:
            if decision is Decision.STOP and failure.replayed:
                raise WorkerStopped(
                    f"{failure.describe()}, {self.policy.callback_failures} times in a row: it "
                    "runs again whenever the abort replays its records, and there is no record "
                    "to dead-letter. Stopping; nothing of it was committed. Fix the callback, "
                    "then restart"
                ) from failure.error
            if decision is Decision.STOP:
                raise WorkerStopped(failure.describe()) from failure.error
        for failure, decision in decisions:
            if decision is Decision.RETRY:
                self._back_off(failure)

    def _retry_note(self, failure: Failure, decision: Decision) -> str:
        if decision is not Decision.RETRY:
            return ""
        if failure.position is None:
            attempts = self.policy.callback_failures
        else:
            attempts = self.policy.attempts_of(failure.position)
        limit = self.conf.max_retries if self.conf.error_policy != "retry" else None
        of = f"/{limit}" if limit is not None else ""
        return f" (retry {attempts}{of} in {self.policy.backoff(failure.position):g}s)"

    async def _dead_letter_event(self, failure: Failure) -> None:
        """At-most-once: dead-letter a failed record at once (it will not come round)."""
        event = failure.event
        assert event is not None and failure.position is not None
        self.policy.poisoned.pop(failure.position, None)
        await self.dead_letters.send(
            DeadLetter(
                event.topic,
                event.partition,
                event.offset,
                event.raw_key,
                event.raw_value,
                event.headers,
                failure.error,
                failure.agent,
                self.policy.attempts_of(failure.position),
            )
        )

    def _back_off(self, failure: Failure) -> None:
        """Pause the failed record's partition until its backoff is over (a replayed
        callback: every partition, as it is not known which task's records run it)."""
        tp, position = failure.tp, failure.position
        if failure.replayed:  # restoring tasks' partitions stay paused by the restore
            paused = [tp for tp, task in self.tasks.by_tp.items() if task.state == RUNNING]
        elif tp is None or position is None or tp not in self.tasks.by_tp:
            return
        else:
            paused = [tp]
        delay = self.policy.backoff(position)
        until = self.clock.monotonic() + delay
        self.consumer.pause(paused)
        for each in paused:
            self.backing_off[each] = max(until, self.backing_off.get(each, 0.0))
        # Nothing needs to run then (the loop looks at every turn), but a manual clock (the
        # test driver) learns that time has to pass.
        self.clock.call_later(delay, _nothing)

    async def _resume_backed_off(self) -> None:
        now = self.clock.monotonic()
        due = [tp for tp, until in self.backing_off.items() if until <= now]
        if not due:
            return
        async with self._lock:
            for tp in due:
                self.backing_off.pop(tp, None)
            owned = [tp for tp in due if tp in self.tasks.by_tp]
            if owned:
                self.consumer.resume(owned)

    def _on_commit(self, committed: Mapping[TopicPartition, int]) -> None:
        self.policy.committed(committed)
        self.dead_letters.committed()

    async def _on_migrated(self, exc: BaseException) -> None:
        await self.runner.stop()
        self.backing_off.clear()  # the rejoin pauses and resumes every partition itself
        await self.committer.task_migrated(exc)
        if self.replicas is not None:
            self.replicas.forget_active()
        await self.runner.restart()
        assert self.plan is not None
        self.consumer.unsubscribe()
        self.consumer.subscribe(self.plan.input_topics, _RebalanceListener(self))

    async def _restore(self) -> None:
        assert self._restore_consumer is not None
        async with self._lock:
            restoring = self.tasks.restoring()
            if not restoring:
                return
            await self.tasks.restore(
                restoring, self._restore_consumer, self.admin, self.conf.restore_timeout
            )
            self.consumer.resume([tp for task in restoring for tp in task.partitions])

    # -- what agents, topics and tables call ----------------------------------------------

    async def send(
        self,
        topic: Topic,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> SendFuture:
        raw_key, raw_value = topic.encode(key, value)
        if headers is None:
            out: list[tuple[str, bytes]] = []
        elif isinstance(headers, Mapping):
            out = list(headers.items())
        else:
            out = list(headers)
        if self.conf.lineage_headers:
            event = current_event.get()
            if event is not None:
                source = self._lineage.get((event.topic, event.partition))
                if source is None:
                    source = self._lineage[(event.topic, event.partition)] = (
                        (H_SRC_TOPIC, event.topic.encode()),
                        (H_SRC_PARTITION, b"%d" % event.partition),
                    )
                out += source
                out.append((H_SRC_OFFSET, b"%d" % event.offset))
        if self.conf.transaction_headers:
            group = self._committer.group if self._committer is not None else None
            out.append((H_TXN_ID, (self.producer.transactional_id or "").encode()))
            out.append((H_GENERATION, b"%d" % (group.generation_id if group else -1)))
        return await self.producer.send(
            topic.name,
            key=raw_key,
            value=raw_value,
            partition=partition,
            headers=out or None,
            timestamp_ms=None if timestamp is None else round(timestamp * 1000),
        )

    def wall_time(self) -> float:
        return self.clock.time()

    @property
    def late_records(self) -> int:
        """Records a windowed table refused because their windows had closed."""
        return self.punctuator.late_records

    def table_items(self, table: Table) -> Iterator[tuple[Any, Any]]:
        store = self.stores.get(table.name)
        if store is None or self._tasks is None:
            return
        for task in list(self.tasks.tasks.values()):
            if table.name not in self.tasks.plan.tables_by_group.get(task.id.group, ()):
                continue
            for raw_key, raw_value in store.partition(task.id.partition).items():
                yield table.key_codec.loads(raw_key), table.value_codec.loads(raw_value)

    @property
    def state_path(self) -> Path | None:
        return self.directory.path if self.directory else None


class _RebalanceListener:
    """Commit before giving partitions up; snapshot membership and rewind on assignment."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        worker = self.worker
        if worker._committer is None:
            return
        async with worker._lock:
            try:
                await worker.committer.commit()
            except Exception as exc:  # never raise into the client: abort instead
                log.warning("commit on revocation failed (%s); aborting", type(exc).__name__)
                try:
                    await worker.committer.abort(recreate_producer=isinstance(exc, PRODUCER_BROKEN))
                except Exception:
                    await worker.producer.recreate()
            worker.tasks.close_all()
            worker.committer.group = None
            worker.dead_letters.aborted()
            worker.backing_off.clear()  # a new assignment starts unpaused

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        worker = self.worker
        if worker._committer is None:
            return
        async with worker._lock:
            consumer = worker.consumer
            worker.committer.group = consumer.group_metadata()
            worker.metrics.rebalances += 1
            tps = sorted(TopicPartition(tp[0], tp[1]) for tp in assigned)
            worker.policy.keep_only(tps)  # decisions about partitions now elsewhere are moot
            tasks = worker.tasks.assign(tps)
            if worker.replicas is not None:
                # Standbys (before any restore), fencing departed members (before reading
                # committed offsets), probing: runtime/replicas.py.
                await worker.replicas.on_assignment(consumer)
            if not tps:
                return
            consumer.pause(tps)  # until the tables are restored
            found = await consumer.committed_offsets_with_metadata(tps)
            missing = [tp for tp, committed in found.items() if committed is None]
            beginnings = await worker.admin.beginning_offsets(missing) if missing else {}
            for tp in tps:
                task = worker.tasks.by_tp[tp]
                committed = found.get(tp)
                if committed is None:
                    offset = beginnings.get(tp, 0)
                    metadata = decode_metadata(None)
                else:
                    offset = committed.offset
                    metadata = decode_metadata(committed.metadata)
                task.committed[tp] = offset
                task.offsets[tp] = offset
                task.restore_times({tp: metadata})  # stream time resumes where it committed
                consumer.seek(tp, offset)
            log.info(
                "assigned %d partitions (%d new tasks), generation %s",
                len(tps),
                len(tasks),
                worker.committer.group.generation_id if worker.committer.group else "?",
            )
