"""Processing a fetched batch: hand it out in order, wait for the agents, retry alone.

The concern it owns (Kafka Streams' ``TaskManager.process`` with its ``PartitionGroup``s): for
each partition's run of records, the task that owns it; co-partitioned inputs in timestamp order
(``runtime/partition_group.py``, paused and resumed as their buffers fill and drain); a record
that failed before, tried again in a transaction of its own (what came before it is committed
first); waiting until every agent and timer has finished what it was handed (*settled*, and
their failures raised, one per record; agents still busy past ``processing_timeout`` fail on
the record they hold, ``runtime/watchdog.py``); what runs as stream time moves
(``runtime/punctuator.py``); and the offsets stepped over transaction markers.

It also counts: ``records_processed`` (and the share processed while a commit was in flight),
and teaches the poll pacer each batch's cost per record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from streams_app.runtime.actor import AgentRunner
from streams_app.runtime.clock import Clock
from streams_app.runtime.errors_policy import ErrorPolicy, Failure
from streams_app.runtime.joins.runtime import JoinRuntime
from streams_app.runtime.measured_commit import MeasuredCommitter
from streams_app.runtime.metrics import WorkerMetrics
from streams_app.runtime.pacing import FetchPacer
from streams_app.runtime.punctuator import CallbackFailed, Punctuator
from streams_app.runtime.task import RUNNING, Task
from streams_app.runtime.task_manager import TaskManager
from streams_app.runtime.timers import TimerScheduler
from streams_app.runtime.watchdog import Watchdog
from streams_app.runtime.worker.collector import RecordCollector
from streams_app.runtime.worker.failures import AgentFailed
from streams_app.runtime.worker.flow import FlowControl
from streams_app.runtime.worker.records import RecordDispatcher
from streams_app.settings import AT_MOST_ONCE, Settings
from streams_app.transport.base import ConsumerClient, RecordLike, TopicPartition

Batch = Mapping[TopicPartition, Sequence[RecordLike]]


#: A record's Kafka timestamp, the order of co-partitioned inputs without a ``timestamp_fn``
#: (C: ``PartitionGroup.add`` maps it over every record fetched).
_kafka_timestamp: Callable[[RecordLike], int] = attrgetter("timestamp")


class BatchProcessor:
    def __init__(
        self,
        conf: Settings,
        clock: Clock,
        consumer: ConsumerClient,
        tasks: TaskManager,
        dispatcher: RecordDispatcher,
        flow: FlowControl,
        policy: ErrorPolicy,
        runner: AgentRunner,
        timers: TimerScheduler,
        punctuator: Punctuator,
        committer: MeasuredCommitter,
        collector: RecordCollector,
        metrics: WorkerMetrics,
        pacer: FetchPacer,
        watchdog: Watchdog,
        joins: JoinRuntime | None = None,
    ) -> None:
        self.conf = conf
        self.clock = clock
        self.consumer = consumer
        self.tasks = tasks
        self.dispatcher = dispatcher
        self.flow = flow
        self.policy = policy
        self.runner = runner
        self.timers = timers
        self.punctuator = punctuator
        self.committer = committer
        self.collector = collector
        self.metrics = metrics
        self.pacer = pacer
        #: Waits for the agents with the processing timeout (runtime/watchdog.py).
        self.watchdog = watchdog
        #: Tables built from topics and join processors: their end-of-batch door.
        self.joins = joins if joins is not None and joins.has_after_batch else None
        self.records_processed = 0
        #: Of those, the ones processed while a commit was in flight (process_during_commit).
        self.processed_during_commit = 0

    async def process(self, batch: Batch, *, paced: bool = True) -> None:
        """``paced``: the batch's cost per record teaches the poll pacer (not for the slices
        processed while a commit is in flight: the commit's answers interleave with them)."""
        started = time.perf_counter()
        processed_before = self.records_processed
        by_tp = self.tasks.by_tp
        dispatch = self.dispatcher.dispatch
        self.dispatcher.fed = 0  # what an earlier, failed batch fed does not count
        retried = self.retried_partitions()
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
                    await dispatch(task, key, records[:index])
                    held.append((task, key, records[index:]))
                    continue
            await dispatch(task, key, records)
        if self.has_buffered():
            await self._process_buffered()
        await self.settle()
        for task, key, records in held:
            # A record that failed before is tried again in a transaction of its own, so that
            # if it fails again its abort takes nothing else with it: commit first.
            if not await self.commit_for_retry():
                self.flow.hold(task, key, records[0].offset, retry=True)
                continue
            await dispatch(task, key, records[:1])
            await self.settle()
            await dispatch(task, key, records[1:])
            await self.settle()
        if not self.punctuator.idle:
            await self.punctuate(self.tasks.running())
        if self.joins is not None:
            await self.joins_after_batch()
        await self.sync_positions(batch)
        took = time.perf_counter() - started
        self.metrics.batch_seconds.observe(took)
        if paced:
            self.pacer.observe(self.records_processed - processed_before, took)

    async def joins_after_batch(self) -> None:
        """Joins release what stream time made due (into the transaction; agents reading
        them settle again); a joiner that raised fails like an agent."""
        assert self.joins is not None
        try:
            await self.joins.after_batch(self.tasks.running())
        except CallbackFailed as exc:
            failure = Failure.of(exc.what, exc.error, None, replayed=True)
            raise AgentFailed([failure]) from exc
        await self.settle()

    # -- until the agents are done ------------------------------------------------------------

    async def settle(self) -> None:
        """Wait until every agent and timer waits for input, is parked, or holds values; raise
        the agents' failures (one per record). Agents still busy past the processing timeout
        fail on the record they hold (runtime/watchdog.py)."""
        failures: dict[tuple[str, int, int] | None, Failure] = {}
        for failure in await self.watchdog.settle(self.runner):
            failures.setdefault(failure.position, failure)
        for actor in self.runner.failed():
            error = actor.error
            assert error is not None
            event = actor.failed_event
            if event is not None and event.offset < 0:
                event = None  # a channel value: not a record of a topic
            failure = Failure.of(actor.name, error, event)
            failures.setdefault(failure.position, failure)
        if failures:
            raise AgentFailed(list(failures.values()))
        for run in await self.timers.wait_settled():
            assert run.error is not None
            raise AgentFailed([Failure.of(f"timer:{run.timer.name}", run.error, None)])
        fed = self.dispatcher.fed
        self.records_processed += fed
        self.committer.records_since_commit += fed
        self.dispatcher.fed = 0

    async def quiescent(self) -> bool:
        """Everything handed out is fully processed (``take`` buffers flushed first)."""
        if self.runner.flush_held():
            await self.settle()
            await self.collector.flush_soon()
        return self.runner.all_idle() and not self.timers.busy and not self.collector.soon_pending

    async def commit_for_retry(self) -> bool:
        """Commit what came before a record that failed before, so that it is retried in a
        transaction of its own. False while agents are still busy (parked on an RPC reply):
        committing then would cover records they have not finished; the caller holds the
        retried record's partition back (``FlowControl.hold``), and busy agents get no new
        records until the commit (as when a commit is due)."""
        await self.collector.flush_soon()
        if not await self.quiescent():
            self.flow.draining = True
            return False
        self.flow.draining = False
        await self.committer.commit()
        return True

    # -- records that failed before -----------------------------------------------------------

    def retried_partitions(self) -> set[TopicPartition]:
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

    async def _dispatch_retries_alone(
        self, task: Task, tp: TopicPartition, run: Sequence[RecordLike]
    ) -> None:
        """Dispatch a run in order, each record that failed before in a transaction of its
        own (what came before it is committed first), so that if it fails again its abort
        takes nothing else with it. For runs that must keep their order: a partition group's
        (ungrouped partitions hold their retried records until the batch is done instead)."""
        dispatch = self.dispatcher.dispatch
        while run:
            index = self._first_retry(tp, run)
            if index is None:
                await dispatch(task, tp, run)
                return
            await dispatch(task, tp, run[:index])
            await self.settle()
            if not await self.commit_for_retry():
                self.flow.hold(task, tp, run[index].offset, retry=True)
                return
            await dispatch(task, tp, run[index : index + 1])
            await self.settle()
            run = run[index + 1 :]

    # -- co-partitioned inputs in timestamp order (runtime.partition_group) -------------------

    def _ordering_timestamp(self, task: Task, tp: TopicPartition) -> Any:
        topic = self.dispatcher.topics[tp.topic]
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

    def has_buffered(self) -> bool:
        return any(group.buffered for task in self.tasks.running() for group in task.groups())

    def buffered_wait(self) -> int | None:
        """How long the next poll may wait (ms) while buffered records wait on a task's idle
        deadline; None when nothing is buffered."""
        if not self.has_buffered():
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
        retried = self.retried_partitions()
        dispatch = self.dispatcher.dispatch
        for task in self.tasks.running():
            for group in task.groups():
                last: TopicPartition | None = None
                while group.ready(now):
                    tp, run = group.next_run()
                    if last is not None and tp != last:
                        await self.settle()
                    last = tp
                    if tp in retried:
                        await self._dispatch_retries_alone(task, tp, run)
                    else:
                        await dispatch(task, tp, run)
                # A partition backing off after a failure stays paused until its time is up;
                # one held back for busy agents waits for them (FlowControl.release).
                pause = group.to_pause()
                resume = self.flow.resumable(group.to_resume())
                if pause:
                    self.consumer.pause(pause)
                if resume:
                    self.consumer.resume(resume)

    # -- positions -----------------------------------------------------------------------------

    async def sync_positions(self, partitions: Iterable[TopicPartition]) -> None:
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

    async def punctuate(self, tasks: Iterable[Task]) -> None:
        """What moving stream time does in ``tasks`` (runtime/punctuator.py); a window-close
        callback or stream-time timer that raised fails like an agent."""
        try:
            await self.punctuator.after_batch(tasks)
        except CallbackFailed as exc:
            failure = Failure.of(exc.what, exc.error, None, replayed=True)
            raise AgentFailed([failure]) from exc

    async def after_idle_close(self, task: Task) -> None:
        """An idle close moved stream time in ``task`` (runtime/idle_close.py): emit the windows
        it closed, and let the agents reading a join take the results it released."""
        await self.punctuate((task,))
        await self.settle()

    def caught_up(self) -> bool:
        """Every record on the broker, as of the last fetch responses, has been processed (one
        not known yet counts as none). A worker working through a backlog is not."""
        lag = self.consumer.fetched_lag
        return not any(lag(tp) for tp in self.tasks.by_tp)


def batch_offsets(batch: Batch) -> dict[TopicPartition, int]:
    """The next offset of each partition of ``batch`` (at-most-once commits them first)."""
    return {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
