"""The commit protocol — the heart of exactly-once, in one place.

A worker commits every ``commit_interval`` (100 ms under exactly-once), every ``commit_every``
records, when its pending table writes outgrow ``state_uncommitted_max_bytes`` (KIP-892; see
docs/memory.md), before giving partitions up, and when it stops. It commits only at a
quiescent point: every record handed to an agent has been fully processed, so the transaction
holds all of each record's effects or none of them.

Exactly-once v2 commit, for all tasks of the worker in **one** Kafka transaction:

1. **Changelog.** Each task's pending table writes are encoded once and sent to the table's
   changelog partition (the task's partition) — one record per changed key, the latest value.
   They join the transaction that already holds every output record sent while processing.
   (A table built from a compacted topic has that topic as its changelog: nothing to send,
   its records are there already; its store's changelog offset is the task's offset on it.)
2. **Send gate.** Flush, then check every send of the transaction. aiokafka would commit a
   transaction whose sends failed; one failure here turns the commit into an abort.
3. **Offsets.** TxnOffsetCommit (v3) with the offsets of every task — the next record to
   process — and the consumer-group generation and member id snapshotted at assignment. A
   zombie (a worker the group has moved on from) is rejected here (KIP-447): CommitFailed.
   Like the records, they count only at EndTxn(commit). They go out after the send gate, as
   in Kafka Streams: a broker of Kafka 4.x checks a transaction's first write to each
   partition and its offsets with the transaction coordinator through one slot per
   transactional id, so offsets sent while such a write is in flight make one of the two fail
   and wait out a retry backoff (``StreamsProducer.commit``).
4. **EndTxn(commit).** From now on outputs, changelog records and offsets are visible to
   ``read_committed`` readers, all together.
5. **State.** Only now apply each task's table writes to its store partition, in one atomic
   batch with the changelog offset they correspond to. A crash before this step leaves the
   store behind the changelog, never ahead: restore reads the committed tail. (The RocksDB
   partition may hold the batch in memory and write it with later commits' batches, up to
   ``rocksdb_write_behind_interval`` later: the same promise, a longer tail after a crash.)
6. **Decisions.** Tell the error policy which offsets are now committed (``on_commit``): the
   dead-letter decisions and retry counts of records below them are history. Never earlier:
   a decision must survive every abort until the transaction that carries it out commits.

**Processing while the commit is in flight** (exactly-once, the periodic commits of a saturated
worker: ``process_during_commit``, ``Loop.meanwhile``). Steps 2-4 are three round trips in
which the worker would sit idle (about 10 of a commit's ~17 ms on an idle machine); a worker
with time to spare gains nothing from using them and commits as above. After step 1 the
commit *seals* what it carries: the offsets, stream times and table writes as they are now
(each table's :class:`~streams_app.state.base.PartitionTransaction` keeps its sealed writes
apart from later ones), and the producer holds every later send back
(:meth:`StreamsProducer.hold`). Steps 2-4 then run as a task while the worker processes the
records it has already fetched, in small slices (about half a millisecond each, three turns of
the event loop after each) so that each of the commit's answers waits at most one slice for the
event loop. Then:

- **the commit succeeded:** step 5 applies the sealed writes only, the tasks' committed
  offsets become the sealed ones, and the held sends go into the next transaction
  (:meth:`StreamsProducer.release`: under transaction version 2 the next transaction needs the
  epoch EndTxn returned, so nothing of it may be sent earlier);
- **the commit failed:** the error is raised as before, and the abort undoes the records
  processed meanwhile with everything else (the held sends are dropped);
- **processing failed meanwhile** (an agent raised): the commit is still awaited and
  finished, then the agent failure is raised; its abort undoes only what came after the
  commit.

If anything fails before step 4, :meth:`Committer.abort` aborts the transaction, drops every
task's pending writes and seeks every input partition back to its committed offset; processing
resumes from there as if the failed attempt never happened. An agent error does the same, then
the error policy decides about the one record that failed (retry it after a backoff of its
partition alone, in a transaction of its own; dead-letter it; or stop: see
:mod:`streams_app.runtime.errors_policy`). When the failure means this worker
lost its partitions (fenced producer, stale generation), :meth:`Committer.task_migrated`
additionally closes every task and recreates the producer, and the worker rejoins the group.
So does a failure *of* step 4 (EndTxn sent, then no definite answer; or a transaction the
coordinator timed out): the transaction may have committed all the same, and only the broker
knows, so the worker reads its committed offsets again instead of rewinding to its own.

At-least-once uses steps 1, 2 and 5 and then a plain offset commit (after the outputs are
acknowledged: duplicates possible, loss not). At-most-once commits offsets right after fetching,
before processing (loss possible, duplicates not).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from streams_app.runtime.clock import Clock
from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.task import Task
from streams_app.runtime.task_manager import TaskManager
from streams_app.settings import AT_LEAST_ONCE, AT_MOST_ONCE, EXACTLY_ONCE_V2
from streams_app.state.base import PartitionTransaction
from streams_app.state.budget import UncommittedWrites
from streams_app.topology.contract import SendFuture
from streams_app.transport.base import ConsumerClient, GroupMetadata, TopicPartition
from streams_app.transport.errors import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    FatalProducerError,
    ProducerFencedError,
    SendFailedError,
    TransactionLeftOpenError,
)

log = logging.getLogger(__name__)

#: Errors after which this worker must assume it no longer owns its tasks.
#: A commit whose outcome is unknown counts too: EndTxn sent, then no definite answer, or a
#: fencing that may mean the coordinator completed an EndTxn it had accepted before the broker
#: went away (``CommitTimedOutError``): whether it committed is known only to the broker. The
#: worker re-reads its committed offsets and restores its changelog tails, as after a fencing;
#: rewinding to the offsets it holds would process committed records again. A transaction the
#: coordinator timed out *before* our EndTxn was sent (``TransactionTimedOutError`` alone) is a
#: known abort: rewind and retry, the tasks kept.
MIGRATED = (ProducerFencedError, CommitFailedError, CommitOutcomeUnknownError)
#: Errors after which the producer must not be reused (sequence gaps, fatal state).
PRODUCER_BROKEN = (ProducerFencedError, FatalProducerError, SendFailedError)

#: What the worker does while a commit is in flight: process until the commit is done.
Meanwhile = Callable[["asyncio.Future[None]"], Awaitable[None]]


class Committer:
    def __init__(
        self,
        guarantee: str,
        producer: StreamsProducer,
        consumer: ConsumerClient,
        tasks: TaskManager,
        changelog_topic: Callable[[str], str],
        clear_inboxes: Callable[[], None],
        clock: Clock,
        uncommitted: UncommittedWrites | None = None,
        on_commit: Callable[[Mapping[TopicPartition, int]], None] | None = None,
    ) -> None:
        self.guarantee = guarantee
        self.clock = clock
        self.producer = producer
        self.consumer = consumer
        self.tasks = tasks
        self._changelog_topic = changelog_topic
        self._clear_inboxes = clear_inboxes
        self._on_commit = on_commit
        #: Group membership snapshotted at assignment (KIP-447); never read live.
        self.group: GroupMetadata | None = None
        self.commits = 0
        self.last_commit = clock.monotonic()
        self.records_since_commit = 0
        #: A commit was asked for (``Worker.request_commit``): due whatever the interval.
        self.requested = False
        #: The budget for pending table writes: over it, a commit is due at once.
        self.uncommitted = uncommitted if uncommitted is not None else UncommittedWrites(None)
        #: Commits that were due only because the pending writes outgrew their budget.
        self.early_commits = 0
        self._over_budget = False

    def due(self, interval: float, every: int) -> bool:
        if (
            self.requested
            or self.records_since_commit >= every
            # The same sum as time_left's, so the two agree on every float: a clock at
            # 0.5 after a commit at 0.4 has 0.0 s left, while 0.5 - 0.4 < 0.1 is not yet due,
            # and the worker would spin on zero-timeout polls that never reach the commit.
            or self.clock.monotonic() >= self.last_commit + interval
        ):
            return True
        # KIP-892: pending writes over their budget end the transaction early rather than grow.
        self._over_budget = self.uncommitted.exceeded(self.tasks.transactions())
        return self._over_budget

    def time_left(self, interval: float) -> float | None:
        """Seconds until the interval is up (<= 0: due now), or None when there is nothing to
        commit yet (no record processed since the last commit): the worker paces its polls by
        it (:mod:`streams_app.runtime.pacing`)."""
        if self.requested:
            return 0.0
        if not self.records_since_commit:
            return None
        return self.last_commit + interval - self.clock.monotonic()

    async def commit(self, meanwhile: Meanwhile | None = None) -> bool:
        """Commit all progress of all tasks; return whether anything was committed.

        ``meanwhile``: under exactly-once, process more records while steps 2-4 are in flight
        (see the module docstring); None commits with nothing else going on (revocation,
        shutdown, a requested commit, a commit before a retried record)."""
        tasks = [t for t in self.tasks.running() if t.has_uncommitted]
        self.last_commit = self.clock.monotonic()
        self.records_since_commit = 0
        self.requested = False
        early, self._over_budget = self._over_budget, False
        if not tasks and not self.producer.in_transaction:
            return False

        # 1. Changelog records for every pending table write, into the same transaction.
        for task in tasks:
            await self._send_changelog(task)

        offsets = self._offsets(tasks)
        # Stream time travels with the offsets, as their metadata (runtime.stream_time).
        metadata = self._metadata(tasks, offsets)
        if self.guarantee == EXACTLY_ONCE_V2 and meanwhile is not None:
            # 2-4 with the next records processed meanwhile; 5 for the sealed writes.
            failed = await self._commit_while(meanwhile, tasks, offsets, metadata)
            self._committed(early)
            if failed is not None:
                raise failed
            return True
        if self.guarantee == EXACTLY_ONCE_V2:
            # 2-4. The send gate, the offsets into the transaction, then EndTxn(commit)
            # (StreamsProducer.commit).
            await self.producer.commit(offsets, self.group, metadata)
        else:
            # 2. The send gate: every output and changelog record acknowledged, or abort.
            await self.producer.flush_and_check()
            # 3. At-least-once: the offsets, only now that the outputs are acknowledged.
            if self.guarantee == AT_LEAST_ONCE and offsets:
                await self.consumer.commit(offsets, metadata)

        # 5. Only what Kafka committed reaches the stores, with its changelog offset.
        for task in tasks:
            self._apply_state(task)
            task.mark_committed()
        self._committed(early)
        return True

    def _committed(self, early: bool) -> None:
        self.commits += 1
        if early:
            self.early_commits += 1
        self.uncommitted.reset()
        # 6. Decisions about records the commit moved past are history.
        if self._on_commit is not None:
            self._on_commit(
                {tp: o for task in self.tasks.running() for tp, o in task.committed.items()}
            )

    async def _commit_while(
        self,
        meanwhile: Meanwhile,
        tasks: list[Task],
        offsets: dict[TopicPartition, int],
        metadata: dict[TopicPartition, str],
    ) -> BaseException | None:
        """Steps 2-5 with ``meanwhile`` processing the next records while 2-4 are in flight.
        Returns the error processing raised meanwhile (raised once the commit is done), and
        raises the commit's own."""
        # Seal: what this commit carries is what the tasks and tables hold now.
        sealed = [task.seal() for task in tasks]
        for task in tasks:
            for tx in task.tables.values():
                if tx.dirty:
                    tx.seal()
        self.producer.hold()
        committing = asyncio.ensure_future(self.producer.commit(offsets, self.group, metadata))
        failed: BaseException | None = None
        try:
            await meanwhile(committing)
        except asyncio.CancelledError:
            committing.cancel()
            self.producer.drop_held()
            raise
        except Exception as exc:
            failed = exc
        try:
            await committing
        except BaseException:
            self.producer.drop_held()
            raise
        # 5. The sealed writes reach the stores; later writes stay pending.
        for task, seal in zip(tasks, sealed, strict=True):
            for table_name, tx in task.tables.items():
                if tx.sealed:
                    source = self._source_partition(task, table_name)
                    if source is not None:
                        tx.commit_sealed(seal.offsets[source])
                        continue
                    future = task.changelog_last.pop(table_name)
                    tx.commit_sealed(self._next_changelog_offset(tx, future))
            task.changelog_last.clear()
            task.mark_sealed_committed(seal)
        if failed is None:
            await self.producer.release()
        else:
            self.producer.drop_held()  # the abort that follows undoes what sent them
        return failed

    def _source_partition(self, task: Task, table_name: str) -> TopicPartition | None:
        """The task's input partition that is ``table_name``'s changelog (a table built from a
        compacted topic), or None (a changelog of its own)."""
        tp = TopicPartition(self._changelog_topic(table_name), task.id.partition)
        return tp if tp in task.offsets else None

    async def _send_changelog(self, task: Task) -> None:
        for table_name, tx in task.tables.items():
            if not tx.dirty or self._source_partition(task, table_name) is not None:
                continue
            topic = self._changelog_topic(table_name)
            future = await self.producer.send_records(
                topic, task.id.partition, list(tx.prepare().items())
            )
            if future is not None:
                task.changelog_last[table_name] = future

    def _offsets(self, tasks: list[Task]) -> dict[TopicPartition, int]:
        offsets: dict[TopicPartition, int] = {}
        for task in tasks:
            for tp, offset in task.offsets.items():
                if task.touched or task.committed.get(tp) != offset:
                    offsets[tp] = offset
        return offsets

    def _metadata(
        self, tasks: list[Task], offsets: dict[TopicPartition, int]
    ) -> dict[TopicPartition, str]:
        out: dict[TopicPartition, str] = {}
        # Our transactional id (None unless exactly-once) goes with every offset it commits.
        committer = self.producer.transactional_id
        for task in tasks:
            tps = [tp for tp in task.offsets if tp in offsets]
            if tps:
                out.update(task.offset_metadata(tps, committer))
        return out

    def _apply_state(self, task: Task) -> None:
        for table_name, tx in task.tables.items():
            if not tx.dirty:
                continue
            source = self._source_partition(task, table_name)
            if source is not None:
                tx.commit(task.offsets[source])
                continue
            future = task.changelog_last.pop(table_name)
            tx.commit(self._next_changelog_offset(tx, future))
        task.changelog_last.clear()

    @staticmethod
    def _next_changelog_offset(tx: PartitionTransaction, future: SendFuture) -> int:
        """The next changelog offset the store does not contain, once this commit's changelog
        records are in it."""
        metadata = future.result()
        if metadata is not None and metadata.offset >= 0:
            return metadata.offset + 1
        # acks=0 (at-most-once) reports no offsets: keep the old one. Restore then replays a
        # little more than needed, which is harmless: changelog records are values, not
        # deltas, so replaying them again yields the same state.
        return tx.partition.changelog_offset or 0

    async def commit_offsets_before_processing(self, offsets: dict[TopicPartition, int]) -> None:
        """At-most-once: the offsets of a fetched batch are committed before it is processed."""
        if self.guarantee == AT_MOST_ONCE and offsets:
            await self.consumer.commit(offsets)

    async def abort(self, *, recreate_producer: bool = False) -> None:
        """Undo everything since the last commit and rewind every task to it."""
        if recreate_producer:
            await self.producer.recreate()
        else:
            await self.producer.abort()
        self._clear_inboxes()
        for task in list(self.tasks.tasks.values()):
            paused = task.rewind()
            if paused:
                self.consumer.resume(paused)
            for tp in task.partitions:
                committed = task.committed.get(tp)
                if committed is not None:
                    self.consumer.seek(tp, committed)
        self.records_since_commit = 0
        self.uncommitted.reset()

    async def task_migrated(self, cause: BaseException) -> None:
        """This worker lost (some of) its tasks: drop them all, rejoin with a fresh producer."""
        if isinstance(cause, CommitOutcomeUnknownError):
            log.warning(
                "%s: whether it committed is known only to the broker; closing all tasks, "
                "recreating the producer, rejoining (the committed offsets are read again)",
                cause,
            )
        else:
            log.warning(
                "tasks migrated (%s): closing all tasks, recreating the producer, rejoining",
                type(cause).__name__,
            )
        self._clear_inboxes()
        self.tasks.close_all()
        self.group = None
        if isinstance(cause, CommitFailedError):
            # The transaction is still abortable; abort it rather than wait for its timeout.
            try:
                await self.producer.abort()
            except TransactionLeftOpenError:
                raise  # records given up may be open: the worker stops (see StreamsProducer)
            except Exception:  # the recreate below aborts it
                pass
        await self.producer.recreate()
        self.records_since_commit = 0
