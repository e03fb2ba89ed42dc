"""The rebalance listener: commit before giving partitions up; rewind to the committed offsets on
assignment, and restore before processing.

The concern it owns (Kafka Streams' ``StreamsRebalanceListener``, which calls only public
``TaskManager`` methods): the consumer's two callbacks, under the worker's processing lock so
that a commit, a revocation and an abort never interleave. It uses the worker's collaborators
through their public methods only.

- **Revoked**: commit what is done (or, when agents are mid-record or the commit fails, abort
  it), then forget flow control's holds and close every task (``FailureHandler.stop_processing``
  with the assignment ending), so the next owner starts from what was committed.
- **Assigned**: snapshot the group metadata for KIP-447, create the tasks (restoring, their
  partitions paused), apply standbys and fence departed members (``runtime/replicas.py``), and
  seek each partition to its committed offset with the stream time it committed. The loop then
  restores them (``loop.py``) and resumes their partitions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from streams_app.runtime.commit import PRODUCER_BROKEN
from streams_app.runtime.stream_time import decode_metadata
from streams_app.transport.base import TopicPartition
from streams_app.transport.errors import TransactionLeftOpenError

if TYPE_CHECKING:
    from streams_app.runtime.worker.root import Worker
    from streams_app.runtime.worker.started import Started

log = logging.getLogger(__name__)


class RebalanceListener:
    def __init__(self, worker: Worker, parts: Started) -> None:
        self.worker = worker
        self.parts = parts

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        worker, parts = self.worker, self.parts
        committer, runner = parts.committer, worker.runner
        worker.rebalancing = True
        await worker.app.on_rebalance_start.send()
        async with worker.lock:
            quiet = runner.all_idle() and not worker.timers.busy
            try:
                if not quiet:
                    # An agent waits for an RPC reply (or a timer runs) mid-record: it cannot
                    # commit half a record, so everything since the last commit is undone.
                    raise RuntimeError("agents are not idle")
                await worker.collector.flush_soon()
                await committer.commit()
            except Exception as exc:  # abort instead: only a check left unanswered raises
                log.warning("commit on revocation failed (%s); aborting", type(exc).__name__)
                try:
                    # Busy agents are stopped, or they would send into the aborted transaction.
                    await parts.failures.stop_processing(
                        stop_agents=not quiet, assignment_ends=True
                    )
                    await committer.abort(recreate_producer=isinstance(exc, PRODUCER_BROKEN))
                except TransactionLeftOpenError:
                    raise  # records given up may be open: the worker stops (StreamsProducer)
                except Exception:
                    await parts.producer.recreate()
                if not quiet:
                    await runner.restart()
            # A new assignment starts unpaused (FlowControl.reset).
            await parts.failures.stop_processing(stop_agents=False, assignment_ends=True)
            parts.tasks.close_all()
            committer.group = None
            parts.dead_letters.aborted()
        await worker.app.on_partitions_revoked.send(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        worker, parts = self.worker, self.parts
        committer, consumer = parts.committer, parts.consumer
        worker.rebalancing = True
        async with worker.lock:
            committer.group = consumer.group_metadata()
            worker.metrics.rebalances += 1
            tps = sorted(TopicPartition(tp[0], tp[1]) for tp in assigned)
            worker.policy.keep_only(tps)  # decisions about partitions now elsewhere are moot
            tasks = parts.tasks.assign(tps)
            worker.runner.assign({(tp.topic, tp.partition) for tp in tps})
            if parts.global_tables is not None:
                parts.global_tables.reposition()
            # Standbys (before any restore), fencing departed members (before reading
            # committed offsets), probing: runtime/replicas.py.
            await parts.replicas.on_assignment(consumer)
            if tps:
                await self._start_from_committed(tps)
            log.info(
                "assigned %d partitions (%d new tasks), generation %s",
                len(tps),
                len(tasks),
                committer.group.generation_id if committer.group else "?",
            )
        leader = parts.leader_tp
        if leader is not None and leader in tps:
            log.info(
                "this worker is the leader (holds %s[0]): on_leader timers run here", leader[0]
            )
        await worker.app.on_partitions_assigned.send(assigned)
        if not tps:
            worker.rebalancing = False
            await worker.app.on_rebalance_complete.send()

    async def _start_from_committed(self, tps: list[TopicPartition]) -> None:
        parts = self.parts
        consumer = parts.consumer
        consumer.pause(tps)  # until the tables are restored
        # A predecessor no member knew of would hold these offsets and the changelogs' tails
        # until its transaction timed out (runtime/fencing.py).
        await parts.replicas.fence_predecessors(consumer, tps)
        found = await consumer.committed_offsets_with_metadata(tps)
        missing = [tp for tp, committed in found.items() if committed is None]
        starts: dict[TopicPartition, int] = {}
        if missing:
            if self.worker.conf.consumer_auto_offset_reset == "latest":
                starts = await parts.admin.end_offsets(missing)
            else:
                starts = await parts.admin.beginning_offsets(missing)
        for tp in tps:
            task = parts.tasks.by_tp[tp]
            committed = found.get(tp)
            if committed is None:
                offset = starts.get(tp, 0)
                metadata = decode_metadata(None)
            else:
                offset = committed.offset
                metadata = decode_metadata(committed.metadata)
            task.committed[tp] = offset
            task.offsets[tp] = offset
            task.restore_times({tp: metadata})  # stream time resumes where it committed
            consumer.seek(tp, offset)
