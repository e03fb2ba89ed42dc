"""Standby tasks: warm copies of other workers' tables, kept by tailing their changelogs.

A standby task holds the same store partitions an active task of the same id would hold, in
the same place (``tables/<table>/<partition>/`` of this worker's state directory), and keeps
them up to date from the changelog, read_committed. Being a standby is a role, not a storage
property: when the assignor makes the task active here, the task manager restores only the
tail between the standby's offset and the end, from the very same store; when a task stops
being active here and becomes a standby, its store goes on from its last commit. No copy, no
second directory, no full restore on promotion. (Kafka Streams does the same: standby and
active tasks share a task directory.)

What keeps a standby exactly as committed:

- **Only committed data.** The consumer is ``read_committed``: it returns records of committed
  transactions only and never reads past the last stable offset, so an open transaction of
  the active (or of a crashed worker) is invisible here until it commits, and records of
  aborted transactions never arrive at all.
- **Data and offset together.** Each fetched batch goes to the store in one atomic
  ``StorePartition.write(batch, next offset)``, the same call restore uses; after a crash the
  standby resumes from exactly what it applied. The consumer's position past commit markers
  is stored too, so a standby that has caught up reports an offset equal to the end.
- **A table built from a topic.** Where the changelog is the table's source topic, its records
  are applied as restore applies them (``accept``: what processing stores, nothing of what it
  dead-letters), and only below the group's committed offset on that topic (the *limit*, read
  every ``lag_interval``), as Kafka Streams bounds standbys of source changelogs: beyond it the
  active task has not processed the records yet, and a store past the committed offset is wiped
  at promotion (state/restore.py). A partition that reaches its limit is paused until the
  limit moves on.
- **One writer per store partition.** This module writes only to the partitions of its
  current standby tasks. :meth:`StandbyUpdater.update` replaces that set synchronously, and
  every write re-checks membership with no ``await`` in between, so once the worker has made
  a task active (before its restore starts) no standby write can reach its store again.

The cost: one more consumer per worker, fetching every standby changelog continuously (network
and broker fetch load equal to the changelog write rate, per replica), the RocksDB writes of
every changelog record, and the disk of a full copy of each standby task's tables. See
docs/operations.md for sizing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from streams_app.aio import cancel_and_wait, within
from streams_app.runtime.task import TaskId
from streams_app.state.base import StorePartition
from streams_app.state.restore import Accept, ChangelogOffsets, changelog_batch, resume_offset
from streams_app.transport.base import ConsumerClient, TopicPartition

log = logging.getLogger(__name__)

#: Pause after a failed poll before reassigning and trying again (a back-off, not a wait for
#: an event: the broker offers none for "reachable again").
RETRY_BACKOFF = 1.0
#: How long a reading of the group's committed offsets may hold the loop (every standby waits
#: meanwhile); one that takes longer fails and is tried again at the next interval.
LIMITS_TIMEOUT = 5.0

#: The group's committed offsets of some source partitions (None: nothing committed).
CommittedReader = Callable[
    [Collection[TopicPartition]], Awaitable[Mapping[TopicPartition, int | None]]
]


class StandbyTask:
    """One standby (or warm-up) task: its changelog partitions and the stores they feed."""

    __slots__ = (
        "applied",
        "caught_up_at",
        "changelogs",
        "id",
        "lag",
        "lag_at_assignment",
        "warmup",
    )

    def __init__(
        self,
        task_id: TaskId,
        changelogs: Mapping[TopicPartition, StorePartition],
        *,
        warmup: bool = False,
        lag_at_assignment: int | None = None,
    ) -> None:
        self.id = task_id
        self.changelogs = dict(changelogs)
        #: Placed to move the task here later (Kafka Streams' warm-up replica).
        self.warmup = warmup
        #: The lag the group leader measured when it placed the task here (None: unknown).
        self.lag_at_assignment = lag_at_assignment
        #: Changelog records applied since it was placed here.
        self.applied = 0
        #: Records between its stores and the changelogs' ends, as last measured (None: not
        #: measured yet). The ends are high watermarks: under load an active's open
        #: transaction keeps this above zero by up to one commit's worth of records.
        self.lag: int | None = None
        #: ``time.monotonic()`` when the lag first fell within the acceptable recovery lag.
        self.caught_up_at: float | None = None

    def describe(self) -> dict[str, Any]:
        """Plain data for ``/assignment``: offsets are the next changelog offset not applied."""
        return {
            "task": str(self.id),
            "warmup": self.warmup,
            "lag_at_assignment": self.lag_at_assignment,
            "lag": self.lag,
            "records_applied": self.applied,
            "changelogs": [
                {"topic": tp.topic, "partition": tp.partition, "offset": part.changelog_offset}
                for tp, part in sorted(self.changelogs.items())
            ],
        }

    def __repr__(self) -> str:
        return f"<StandbyTask {self.id}{' warm-up' if self.warmup else ''}>"


class StandbyUpdater:
    """Tails the changelogs of the worker's standby tasks into their stores.

    ``consumer`` is a started ``read_committed`` consumer in no group, used by nothing else;
    ``admin`` gives the changelogs' beginning and end offsets (to check a store's offset is
    still inside the changelog before resuming from it, as restore does). ``accept`` maps the
    source topic of each table whose changelog is that topic to what processing stores of its
    records (``TaskManager.source_filters``): a standby applies such a record as restore does,
    re-encoded, or not at all where processing dead-letters it. With ``committed`` (the
    group's committed offsets), such a standby also stops at the committed offset of its
    source partition (the module doc); without it, it tails the topic to its end.
    """

    def __init__(
        self,
        consumer: ConsumerClient,
        admin: ChangelogOffsets,
        *,
        poll_timeout_ms: int = 200,
        max_records: int = 10_000,
        caught_up_lag: int = 10_000,
        lag_interval: float = 2.0,
        accept: Mapping[str, Accept] | None = None,
        committed: CommittedReader | None = None,
    ) -> None:
        self.consumer = consumer
        self.admin = admin
        self.poll_timeout_ms = poll_timeout_ms
        self.max_records = max_records
        #: A standby within this many records of the end is reported caught up (once).
        self.caught_up_lag = caught_up_lag
        #: Seconds between measurements of the standbys' lags (one ListOffsets each).
        self.lag_interval = lag_interval
        self.accept = dict(accept or {})
        self.committed = committed
        #: Source partitions serving as changelogs -> the group's committed offset, as last read.
        self._limits: dict[TopicPartition, int] = {}
        self._limits_read = 0.0
        self._limits_failing = False
        #: Source partitions paused at their limit.
        self._paused: set[TopicPartition] = set()
        self._lags_measured = 0.0
        self.tasks: dict[TaskId, StandbyTask] = {}
        self._parts: dict[TopicPartition, StorePartition] = {}
        self._owner: dict[TopicPartition, StandbyTask] = {}
        #: Checked against the changelog's [beginning, end] since last (re)assigned here.
        self._validated: dict[TopicPartition, int] = {}
        self._dirty = False
        self._changed = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self.records_applied = 0
        self.failures = 0

    # -- what the worker calls -------------------------------------------------------------

    def update(self, tasks: Mapping[TaskId, StandbyTask]) -> None:
        """Make ``tasks`` this worker's standby tasks, at once.

        Synchronous on purpose: when it returns, no store partition outside ``tasks`` will be
        written by this updater again, whatever its loop was awaiting.
        """
        previous = self._parts
        parts = {tp: part for task in tasks.values() for tp, part in task.changelogs.items()}
        owner = {tp: task for task in tasks.values() for tp in task.changelogs}
        for tp in list(self._validated):
            if tp not in parts or parts[tp] is not previous.get(tp):
                del self._validated[tp]
        for task in tasks.values():
            old = self.tasks.get(task.id)
            if old is not None and old.changelogs == task.changelogs:
                task.applied, task.lag, task.caught_up_at = old.applied, old.lag, old.caught_up_at
        self.tasks = dict(tasks)
        self._parts = parts
        self._owner = owner
        self._dirty = True
        self._changed.set()

    def start(self) -> None:
        if self._runner is None:
            self._runner = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self.update({})
        runner, self._runner = self._runner, None
        if runner is not None:
            await cancel_and_wait({"standby changelog reader": runner})
        # Straight to stop(), no assign([]) first: aiokafka's fetcher, cancelled while it
        # reacts to losing its assignment, swallows the cancellation and stop() never returns.
        with contextlib.suppress(Exception):
            await self.consumer.stop()

    def describe(self) -> list[dict[str, Any]]:
        return [task.describe() for _, task in sorted(self.tasks.items())]

    # -- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                if self._dirty:
                    await self._reassign()
                    continue
                if not self._parts:
                    self._changed.clear()
                    await self._changed.wait()
                    continue
                await self._poll()
                if time.monotonic() - self._limits_read >= self.lag_interval:
                    await self._read_limits()
                    if not self._dirty:
                        self._hold_at_limits()
                if time.monotonic() - self._lags_measured >= self.lag_interval:
                    await self._measure_lags()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                log.warning(
                    "standby update failed (%s: %s); resuming from the stores' offsets",
                    type(exc).__name__,
                    exc,
                )
                self._validated.clear()
                self._dirty = True
                await asyncio.sleep(RETRY_BACKOFF)

    async def _reassign(self) -> None:
        self._dirty = False
        parts = dict(self._parts)
        fresh = [tp for tp in parts if tp not in self._validated]
        if fresh:
            begins = await self.admin.beginning_offsets(fresh)
            ends = await self.admin.end_offsets(fresh)
            if self._dirty:
                return  # the standby set changed meanwhile: start over with the new one
            for tp in fresh:
                start, wiped = resume_offset(tp, parts[tp], begins[tp], ends[tp])
                if wiped:
                    self._owner[tp].applied = 0
                self._validated[tp] = start
        self._limits = {tp: limit for tp, limit in self._limits.items() if tp in parts}
        await self._read_limits()
        if self._dirty:
            return
        self.consumer.assign(list(parts))
        held = [tp for tp in self._paused if tp in parts]
        if held:
            self.consumer.resume(held)  # held again below if still at their limits
        self._paused.clear()
        for tp, part in parts.items():
            offset = part.changelog_offset
            self.consumer.seek(tp, offset if offset is not None else self._validated[tp])
        self._hold_at_limits()
        if parts:
            log.info(
                "standby tasks: %s",
                ", ".join(
                    f"{task.id}{' (warm-up)' if task.warmup else ''}"
                    for _, task in sorted(self.tasks.items())
                ),
            )

    async def _poll(self) -> None:
        fetched = await self.consumer.getmany(self.poll_timeout_ms, self.max_records)
        for raw_tp, records in fetched.items():
            tp = TopicPartition(raw_tp[0], raw_tp[1])
            self._apply(tp, records)
        # Step each store past commit markers and aborted records the consumer skipped.
        for tp in list(self._parts):
            if self._dirty:
                return
            position = await self.consumer.position(tp)
            part = self._parts.get(tp)
            if part is None or self._dirty:
                return
            stored = part.changelog_offset
            limit = self._limit(tp)
            if limit is not None:
                position = min(position, limit)
            if stored is None or position > stored:
                part.write({}, position)
        self._hold_at_limits()

    async def _measure_lags(self) -> None:
        self._lags_measured = time.monotonic()
        parts = dict(self._parts)
        ends = await self.admin.end_offsets(list(parts))
        if self._dirty:
            return
        for task in self.tasks.values():
            lag = 0
            for tp, part in task.changelogs.items():
                end = ends.get(tp)
                if end is None or part is not parts.get(tp):
                    break
                limit = self._limit(tp)
                if limit is not None:
                    end = min(end, limit)  # a source topic: what was processed, not its end
                lag += max(0, end - (part.changelog_offset or 0))
            else:
                task.lag = lag
                if task.caught_up_at is None and lag <= self.caught_up_lag:
                    task.caught_up_at = time.monotonic()
                    log.info(
                        "standby %s%s caught up: %d record(s) behind its changelogs' end "
                        "(%d applied since placed here)",
                        task.id,
                        " (warm-up)" if task.warmup else "",
                        lag,
                        task.applied,
                    )

    def _apply(self, tp: TopicPartition, records: Any) -> None:
        part = self._parts.get(tp)
        if part is None or not records:
            return  # no longer a standby here: its store belongs to an active task now
        stored = part.changelog_offset
        accept = self.accept.get(tp.topic)
        end = records[-1].offset + 1
        limit = self._limit(tp)
        if limit is not None and end > limit:
            # Records the active task has not committed yet stay out: the store ends at the
            # limit, and the consumer goes back there (paused until the limit moves on).
            records = [r for r in records if r.offset < limit]
            end = limit
            self.consumer.seek(tp, max(limit, stored or 0))
        # A source topic serving as changelog goes through ``accept``: what processing stored.
        batch = changelog_batch(records, accept, since=stored)
        if stored is None or end > stored:
            part.write(batch.writes, end)
            self.records_applied += batch.kept
            self._owner[tp].applied += batch.kept

    # -- source topics serving as changelogs: the committed offset as the limit -------------

    def _limit(self, tp: TopicPartition) -> int | None:
        """Where a standby of ``tp`` stops (None: at the changelog's end)."""
        if self.committed is None or tp.topic not in self.accept:
            return None
        return self._limits.get(tp, 0)  # nothing committed (or not read yet): nothing processed

    async def _read_limits(self) -> None:
        """Read the group's committed offsets of the source partitions followed (the caller
        then pauses or resumes them: :meth:`_hold_at_limits`). A failed read keeps the limits
        as they were: they only hold the standby back."""
        self._limits_read = time.monotonic()
        committed = self.committed
        if committed is None:
            return
        parts = self._parts
        sources = [tp for tp in parts if tp.topic in self.accept]
        if not sources:
            return
        try:
            found = await within(committed(sources), LIMITS_TIMEOUT)
        except Exception as exc:
            # Once per run of failures: the standbys concerned hold where they are meanwhile.
            (log.debug if self._limits_failing else log.warning)(
                "standby: reading the group's committed offsets failed (%s: %s); standbys of "
                "tables built from topics hold at their last limits until a reading succeeds",
                type(exc).__name__,
                exc,
            )
            self._limits_failing = True
            return
        self._limits_failing = False
        if parts is not self._parts:
            return  # the standby set changed meanwhile: the next reading is for the new one
        self._limits.update((tp, offset or 0) for tp, offset in found.items() if tp in parts)

    def _hold_at_limits(self) -> None:
        """Pause each source partition whose store reached its limit; resume the others."""
        for tp, part in self._parts.items():
            limit = self._limit(tp)
            if limit is None:
                continue
            held = (part.changelog_offset or 0) >= limit
            if held and tp not in self._paused:
                self.consumer.pause([tp])
                self._paused.add(tp)
            elif not held and tp in self._paused:
                self.consumer.resume([tp])
                self._paused.discard(tp)
