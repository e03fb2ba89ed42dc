"""Restoring store partitions from their changelog topic partitions.

What is read, per partition (``stored`` is the partition's ``changelog_offset``, ``[begin, end]``
the changelog's beginning offset and high watermark):

- ``stored is None``: the partition never saw the changelog: read ``[begin, end)``;
- ``begin <= stored <= end``: the store already holds everything before ``stored``: read only
  the tail ``[stored, end)`` (nothing at all when ``stored == end``);
- ``stored > end``: the changelog was deleted (and recreated) under the store, which may hold
  the only copy of the table: restore refuses (:class:`ChangelogBeyondEnd`), and the worker
  stops naming the table and both offsets, for an operator to re-seed the changelog from the
  store or wipe the store (``streams-app -A app changelog reseed|wipe``). Kafka Streams wipes
  and restores here, losing the table silently (issue 35, item 5). A standby's copy is wiped
  (``refuse=False``): the active task's store is the one that counts;
- ``stored < begin`` (retention removed records the store never saw): the state cannot be
  trusted: wipe it, read ``[begin, end)``.

The end is the high watermark (read_uncommitted ListOffsets), not the last stable offset, as in
Kafka Streams since KAFKA-10167: restore is complete only once every transaction that wrote to
the changelog before restore started has been resolved, so the store cannot miss a write that is
about to commit. The consumer is ``read_committed``: records of aborted transactions and the
commit/abort markers are skipped, and its position steps over them, so a partition whose tail
holds only markers still reaches the end. The end is where restore may stop, not a cut: a fetch
that returns records committed beyond it (a previous owner still writing when restore read the
end) has them applied too, and the stored offset is the position past them.

Each fetched batch of a partition is applied with one ``StorePartition.write(batch, next
offset)``: data and offset move together. A RocksDB partition keeps recent writes in memory for
up to a second or two before they reach the database (write-behind, ``state.rocksdb``), so that
the data and offset a kill would lose are bounded, restore *checkpoints* each partition
(:meth:`StorePartition.checkpoint`) every ``CHECKPOINT_RECORDS`` records and
``CHECKPOINT_SECONDS``, when it finishes, and when it stops on an error: a restore killed
part-way resumes from its last checkpoint, not from the beginning (before, a restore killed
within its first second started again from offset 0, and one killed soon after it finished
restored its whole last stretch again).

Why resuming is exactly right: a checkpoint writes, in one atomic RocksDB batch, the latest value
of every key among the committed changelog records below offset ``X`` together with ``X`` itself,
never one without the other (``point_in_time`` WAL recovery replays whole batches only). The
changelog holds whole values (the latest record per key wins), so applying ``[X, end)`` on top of
that state gives exactly what applying ``[begin, end)`` from scratch gives; records of aborted
transactions are never applied (the consumer is ``read_committed``), whichever run reads them.
And a restoring task processes nothing until its partitions reach the end, so no commit of the
task ever starts from a partly restored store.

**A table whose changelog is its source topic** (a table built from a compacted topic,
docs/joins.md) is restored only up to the offset its task has *committed* on that topic
(``limits``), not to the end: what lies beyond was not processed yet, and restoring it would
let earlier stream records meet later table values. A store beyond that offset is wiped and
restored from the beginning (a standby stops at the group's committed offset, so its store is
normally kept: runtime/standby.py). Each of its records goes through ``accept`` first: a
record processing dead-letters (undecodable, no valid time) is skipped by restore too, and the
others are stored as processing encodes them (a JSON key written with other spacing is the same
row), so restored state equals processed state. A GlobalTable built from a topic passes
``accept`` with no limit (it is read to the end, outside the group: runtime/global_tables.py).

A read_committed consumer cannot read past an open transaction. If the previous owner of a
partition left one open (a zombie, or a crashed worker that is not restarted on the same state
dir), restore waits for the broker to abort it (``transaction.timeout.ms``); a partition that
makes no progress for ``stall_timeout`` seconds raises :class:`RestoreStalledError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from streams_app.state.base import StorePartition
from streams_app.state.errors import ChangelogBeyondEnd, RestoreStalledError
from streams_app.transport.base import RecordLike, TopicPartition

log = logging.getLogger(__name__)

#: Longer than the default transaction.timeout.ms (10 s) with room to spare: a transaction a
#: dead producer left open is aborted by the broker well within it.
DEFAULT_STALL_TIMEOUT = 60.0
#: A partition held this long (or half its stall timeout, if shorter) gets one warning that says
#: why: the worker is not ready meanwhile, and the stall timeout (``restore_timeout``) is long.
STALL_WARNING_S = 30.0
#: Restore progress is checkpointed after this many records of a partition (Kafka Streams
#: checkpoints a restoring store every 10,000 records too)...
CHECKPOINT_RECORDS = 10_000
#: ... or this many seconds, whichever comes first.
CHECKPOINT_SECONDS = 1.0


class ChangelogOffsets(Protocol):
    """What restore needs of an :class:`~streams_app.transport.base.AdminClient`."""

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]: ...

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]: ...


class ChangelogReader(Protocol):
    """What restore needs of a :class:`~streams_app.transport.base.ConsumerClient`."""

    def assign(self, partitions: Collection[TopicPartition]) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[RecordLike]]: ...

    async def position(self, tp: TopicPartition) -> int: ...


@dataclass(frozen=True)
class RestoreResult:
    """What restoring one changelog partition did."""

    changelog: TopicPartition
    #: The store's changelog offset before restore (None: never written, or wiped).
    stored_offset: int | None
    #: Where reading started and the changelog offset stored at the end (equal: nothing read).
    from_offset: int
    to_offset: int
    #: Changelog records applied (tombstones included; aborted records and markers excluded).
    records: int
    #: Whether the partition's state was dropped first (offset outside [beginning, end]).
    wiped: bool
    seconds: float

    @property
    def read_anything(self) -> bool:
        return self.to_offset != self.from_offset


ProgressCallback = Callable[[TopicPartition, int, int], None]
#: What restore applies of a source topic's record serving as a changelog: the bytes processing
#: would have stored (key, value: None for a tombstone), or None where processing
#: dead-lettered it (then it changed nothing).
Accept = Callable[[RecordLike], "tuple[bytes, bytes | None] | None"]


@dataclass
class ChangelogBatch:
    """What a store gets of a run of changelog records (:func:`changelog_batch`)."""

    #: The latest value of each key (None: a tombstone), in the store's encoding.
    writes: dict[bytes, bytes | None]
    #: Records that went into ``writes`` (a key written twice counts twice).
    kept: int
    #: Records without a key: a changelog never has them, a source topic may (never stored).
    keyless: int


def changelog_batch(
    records: Sequence[RecordLike],
    accept: Accept | None,
    *,
    since: int | None = None,
    rejected: Callable[[int], object] | None = None,
) -> ChangelogBatch:
    """Restore's, a standby's and a global table's one reading of changelog records: from
    offset ``since`` on, the keyed ones, through ``accept`` where the changelog is a source
    topic (what processing would have stored; the offset of one it refuses goes to
    ``rejected``), the latest write of a key winning. One reading, so that the three
    stores a changelog feeds hold what processing holds."""
    writes: dict[bytes, bytes | None] = {}
    kept = keyless = 0
    for record in records:
        if since is not None and record.offset < since:
            continue  # fetched before a re-seek: already in the store
        key = record.key
        if key is None:
            keyless += 1
            continue
        if accept is None:
            value = record.value
        else:
            stored = accept(record)
            if stored is None:  # processing dead-letters it: it changed nothing
                if rejected is not None:
                    rejected(record.offset)
                continue
            key, value = stored
        writes[key] = value
        kept += 1
    return ChangelogBatch(writes, kept, keyless)


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}[{tp[1]}]"


def resume_offset(
    tp: TopicPartition, part: StorePartition, begin: int, end: int, *, refuse: bool = False
) -> tuple[int, bool]:
    """Where reading ``tp`` must start for ``part`` (the rules of the module docstring), and
    whether ``part`` had to be wiped first. Restore and standby tasks share this rule; with
    ``refuse``, a store beyond the changelog's end raises :class:`ChangelogBeyondEnd`."""
    stored = part.changelog_offset
    if stored is None:
        if next(iter(part.items()), None) is not None:
            # Data without an offset cannot come from this package's writes; trust nothing.
            log.warning("state of %s has data but no changelog offset: wiping", _name(tp))
            part.wipe()
            return begin, True
        return begin, False
    if begin <= stored <= end:
        return stored, False
    if refuse and stored > end:
        raise ChangelogBeyondEnd({(tp[0], tp[1]): (stored, end)})
    why = (
        "beyond the changelog's end (was it recreated?)"
        if stored > end
        else ("before the changelog's beginning (records were deleted)")
    )
    log.warning(
        "state of %s is at changelog offset %d, %s; changelog spans [%d, %d]: wiping "
        "it and restoring from the beginning",
        _name(tp),
        stored,
        why,
        begin,
        end,
    )
    part.wipe()
    return begin, True


async def restore_partitions(
    partitions: Mapping[TopicPartition, StorePartition],
    consumer: ChangelogReader,
    admin: ChangelogOffsets,
    *,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    poll_timeout_ms: int = 50,
    max_records: int | None = None,
    on_progress: ProgressCallback | None = None,
    limits: Mapping[TopicPartition, int] | None = None,
    accept: Mapping[TopicPartition, Accept] | None = None,
) -> dict[TopicPartition, RestoreResult]:
    """Bring each store partition up to the end of its changelog partition (or to its
    ``limits`` offset: a source topic serving as changelog, read up to the committed offset;
    its records filtered by ``accept``; see the module doc).

    ``partitions`` maps each changelog partition to the store partition it restores. The
    ``consumer`` must be a started, ``read_committed`` consumer in no group, dedicated to
    restoring: it is assigned the partitions that need reading and unassigned when done (or on
    error). ``on_progress(changelog, position, end)`` is called once per partition to read when
    reading starts (``position`` is then the start offset) and after each batch that moved it.

    ``poll_timeout_ms`` is short because a tail of only commit markers and aborted records
    (what a SIGKILLed owner leaves behind) yields no records: each poll then waits the whole
    timeout before the position shows the end, and that wait is on every failover's path.

    Raises :class:`RestoreStalledError` when a partition makes no progress for
    ``stall_timeout`` seconds. Partitions restored before that keep their progress (each batch
    is stored with its offset), so a later attempt continues from there.
    """
    if not partitions:
        return {}
    started = time.monotonic()
    tps = list(partitions)
    # Both at once: one round trip instead of two before anything is read.
    beginnings, ends = await asyncio.gather(admin.beginning_offsets(tps), admin.end_offsets(tps))
    limits = limits or {}
    for tp, limit in limits.items():
        if tp in ends:
            ends[tp] = max(beginnings[tp], min(ends[tp], limit))

    results: dict[TopicPartition, RestoreResult] = {}
    # changelog partition -> (stored offset before restore, wiped?, start offset, end offset)
    plans: dict[TopicPartition, tuple[int | None, bool, int, int]] = {}
    beyond = {
        (tp[0], tp[1]): (stored, ends[tp])
        for tp, part in partitions.items()
        if (stored := part.changelog_offset) is not None and stored > ends[tp] and tp not in limits
    }
    if beyond:  # nothing is wiped: every partition concerned is named at once
        raise ChangelogBeyondEnd(beyond)
    for tp, part in partitions.items():
        begin, end = beginnings[tp], ends[tp]
        stored = part.changelog_offset
        start, wiped = resume_offset(tp, part, begin, end, refuse=tp not in limits)
        if start >= end:
            if part.changelog_offset != end:
                part.write({}, end)
            results[tp] = RestoreResult(tp, stored, start, end, 0, wiped, 0.0)
        else:
            plans[tp] = (stored, wiped, start, end)

    if not plans:
        return results

    log.info(
        "restoring %d changelog partition(s): %s",
        len(plans),
        ", ".join(f"{_name(tp)} [{s}, {e})" for tp, (_, _, s, e) in plans.items()),
    )
    consumer.assign(list(plans))
    try:
        for tp, (_, _, start, end) in plans.items():
            consumer.seek(tp, start)
            if on_progress is not None:
                on_progress(tp, start, end)
        results.update(
            await _read(
                plans,
                partitions,
                consumer,
                started,
                stall_timeout,
                poll_timeout_ms,
                max_records,
                on_progress,
                accept or {},
                limits,
            )
        )
    finally:
        # Stop fetching in the background; a consumer already failing must not hide the error.
        with contextlib.suppress(Exception):
            consumer.assign([])
    return results


async def _read(
    plans: Mapping[TopicPartition, tuple[int | None, bool, int, int]],
    partitions: Mapping[TopicPartition, StorePartition],
    consumer: ChangelogReader,
    started: float,
    stall_timeout: float,
    poll_timeout_ms: int,
    max_records: int | None,
    on_progress: ProgressCallback | None,
    accept: Mapping[TopicPartition, Accept],
    limited: Collection[TopicPartition],
) -> dict[TopicPartition, RestoreResult]:
    run = _Run(plans, partitions, started, accept, limited)
    try:
        while run.pending:
            fetched = await consumer.getmany(poll_timeout_ms, max_records)
            now = time.monotonic()
            for raw_tp, records in fetched.items():
                tp = TopicPartition(raw_tp[0], raw_tp[1])
                if tp in run.pending and records:
                    run.apply(tp, records, now)
            now = time.monotonic()
            for tp in list(run.pending):
                position = await consumer.position(tp)
                run.moved(tp, position, now, on_progress)
            run.check_stalls(now, stall_timeout)
            await asyncio.sleep(0)
    finally:
        # Finished, failed or cancelled (the task revoked mid-restore): what was read stays.
        run.checkpoint_all()

    if run.keyless:
        log.warning("skipped %d changelog record(s) without a key", run.keyless)
    for tp, result in run.results.items():
        log.info(
            "restored %s: %d record(s), offsets [%d, %d)%s in %.2fs",
            _name(tp),
            result.records,
            result.from_offset,
            result.to_offset,
            ", after wiping" if result.wiped else "",
            result.seconds,
        )
    return run.results


class _Run:
    """One restore's progress per changelog partition: records applied, positions, and when
    each partition was last checkpointed (module doc)."""

    def __init__(
        self,
        plans: Mapping[TopicPartition, tuple[int | None, bool, int, int]],
        partitions: Mapping[TopicPartition, StorePartition],
        started: float,
        accept: Mapping[TopicPartition, Accept] | None = None,
        limited: Collection[TopicPartition] = (),
    ) -> None:
        now = time.monotonic()
        self.partitions = partitions
        self.accept = accept or {}
        #: Partitions read up to a limit below their end (a source topic's committed offset).
        self.limited = set(limited)
        self.started = started
        self.pending = dict(plans)
        self.results: dict[TopicPartition, RestoreResult] = {}
        self.counts = dict.fromkeys(plans, 0)
        self.positions = {tp: start for tp, (_, _, start, _) in plans.items()}
        self.progressed_at = dict.fromkeys(plans, now)
        self.warned: set[TopicPartition] = set()
        self.keyless = 0
        #: Records applied since each partition's last checkpoint, and when that was.
        self.unchecked = dict.fromkeys(plans, 0)
        self.checked_at = dict.fromkeys(plans, now)

    def apply(self, tp: TopicPartition, records: Sequence[RecordLike], now: float) -> None:
        end = self.pending[tp][3]
        if tp in self.limited and records[-1].offset >= end:
            # A source topic's records beyond its task's committed offset are not processed
            # yet: they stay out, and ``moved`` stores the limit itself as the offset.
            records = [r for r in records if r.offset < end]
            if not records:
                return
        # A changelog's records beyond ``end`` are kept: they were committed after restore
        # read its end (a previous owner still writing, a zombie's restore), and ``moved``
        # stores the consumer's position past them. Dropping them while storing that
        # position lost those writes (issue 38: the 10M networked chaos run).
        batch = changelog_batch(records, self.accept.get(tp))
        self.keyless += batch.keyless
        self.counts[tp] += batch.kept
        self.partitions[tp].write(batch.writes, records[-1].offset + 1)
        self.unchecked[tp] += len(records)
        if (
            self.unchecked[tp] >= CHECKPOINT_RECORDS
            or now - self.checked_at[tp] >= CHECKPOINT_SECONDS
        ):
            self.checkpoint(tp, now)

    def checkpoint(self, tp: TopicPartition, now: float) -> None:
        self.partitions[tp].checkpoint()
        self.unchecked[tp] = 0
        self.checked_at[tp] = now

    def checkpoint_all(self) -> None:
        for tp, unchecked in self.unchecked.items():
            if unchecked:
                with contextlib.suppress(Exception):  # a closed store must not hide the error
                    self.partitions[tp].checkpoint()

    def moved(
        self, tp: TopicPartition, position: int, now: float, on_progress: ProgressCallback | None
    ) -> None:
        end = self.pending[tp][3]
        if position != self.positions[tp]:
            self.positions[tp] = position
            self.progressed_at[tp] = now
            if on_progress is not None:
                on_progress(tp, position, end)
        if position >= end:
            part = self.partitions[tp]
            # The tail may end in markers or aborted records: store the position past them
            # (not past a limit: a source topic's records beyond it are not processed yet).
            if tp in self.limited:
                position = end
            if part.changelog_offset != position:
                part.write({}, position)
            self.checkpoint(tp, now)
            stored, wiped, start, _ = self.pending.pop(tp)
            self.results[tp] = RestoreResult(
                tp, stored, start, position, self.counts[tp], wiped, now - self.started
            )

    def check_stalls(self, now: float, stall_timeout: float) -> None:
        warn_after = min(STALL_WARNING_S, stall_timeout / 2)
        for tp, (_, _, _, end) in self.pending.items():
            waited = now - self.progressed_at[tp]
            if waited > warn_after and tp not in self.warned:
                self.warned.add(tp)
                log.warning(
                    "restoring %s: no progress for %.0f s at offset %d (end %d): a transaction "
                    "left open on the changelog holds its last stable offset there. The restore "
                    "goes on when it ends (the broker aborts it at its transaction timeout) and "
                    "fails after %g s (restore_timeout); one that never ends is a hanging "
                    "transaction: `streams-app txn hanging --topic %s` finds it, --abort ends it",
                    _name(tp),
                    waited,
                    self.positions[tp],
                    end,
                    stall_timeout,
                    tp[0],
                )
        stalled = {
            _name(tp): (self.positions[tp], end)
            for tp, (_, _, _, end) in self.pending.items()
            if now - self.progressed_at[tp] > stall_timeout
        }
        if stalled:
            # Keep the progress made past markers, so a retry starts exactly where this stopped.
            for tp in self.pending:
                if self.partitions[tp].changelog_offset != self.positions[tp]:
                    self.partitions[tp].write({}, self.positions[tp])
                self.checkpoint(tp, now)
            raise RestoreStalledError(stalled, stall_timeout)
