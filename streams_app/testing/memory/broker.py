"""The in-memory Kafka cluster: partition logs, the transaction coordinator, group coordinator.

What is modelled, because exactly-once depends on it:

- **Logs.** Topics with partitions; every entry takes an offset: records (key, value, headers,
  timestamp, producer id/epoch/sequence) and transaction *markers* (commit/abort control
  records). The high watermark is the next offset; the *last stable offset* is the first offset
  of the earliest open transaction on the partition (else the high watermark).
  ``read_committed`` readers stop at the LSO and skip aborted records and markers;
  ``read_uncommitted`` readers see open and aborted records, and skip markers.
- **Idempotent producers.** Each producer gets a producer id; each record a per-partition
  sequence number; a repeated sequence (a retried batch) is dropped, not appended again.
- **Transactions.** ``transactional.id`` -> producer id + epoch. A new producer with the same id
  bumps the epoch, which fences the old one, and aborts the transaction it left open. A
  transaction open longer than its ``transaction.timeout.ms`` (manual clock) is aborted and its
  producer fenced. Offsets sent to a transaction (TxnOffsetCommit) are pending until it ends:
  committed with it, dropped with it; meanwhile a ``require_stable`` offset fetch waits.
- **Consumer groups.** Members, generations, the range assignor, eager rebalances (every member
  revokes everything and rejoins; the generation moves on once all have rejoined, or when the
  rebalance timeout expels the laggards), session timeouts (a killed or frozen worker's members
  are expelled ``session.timeout.ms`` later), KIP-447 checks on TxnOffsetCommit (unknown member
  or stale generation -> :class:`~streams_app.transport.errors.CommitFailedError`), plain
  offset commits with the same checks.
- **Compaction**, on request (:meth:`MemoryKafka.compact`): for compacted topics, only the
  latest committed record per key stays below the LSO; offsets never move.

What is not: replication, leaders, ISR and broker failures; quotas, batching, linger and
compression; message size limits; retention by time or size; log start offsets other than 0;
cooperative rebalancing and static membership; ``max.poll.interval.ms`` (a worker that stops
polling is expelled only by the rebalance timeout of a rebalance it does not join);
``auto_offset_reset`` other than earliest/latest. Null-key records are spread round robin
(aiokafka picks a random partition). Everything happens at once: a send is acknowledged when it
returns, so flushes never wait.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from aiokafka.partitioner import murmur2

from streams_app.testing.clock import ManualClock, Parked, TimerHandle, wake_all
from streams_app.transport.base import GroupMetadata, TopicPartition
from streams_app.transport.errors import (
    CommitFailedError,
    ProducerFencedError,
    TransportError,
)

if TYPE_CHECKING:
    from streams_app.testing.memory.clients import MemoryConsumer, MemoryTransport

TxnState = Literal["open", "committed", "aborted"]


# -- logs ----------------------------------------------------------------------------------


@dataclass(slots=True)
class MemoryRecord:
    """A record as consumers receive it (a ``transport.base.RecordLike``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]


@dataclass(slots=True)
class RecordMetadata:
    """Where a produced record landed (satisfies ``RecordMetadataLike``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass
class Transaction:
    id: int
    transactional_id: str
    producer_id: int
    epoch: int
    started_at: float
    state: TxnState = "open"
    #: Partitions holding records of this transaction, with the first offset on each.
    partitions: dict[TopicPartition, int] = field(default_factory=dict)
    #: group id -> offsets committed by this transaction (TxnOffsetCommit).
    offsets: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    #: group id -> the metadata strings committed with those offsets.
    offset_metadata: dict[str, dict[TopicPartition, str]] = field(default_factory=dict)
    timer: TimerHandle | None = None


@dataclass
class Entry:
    """One offset of a partition log: a record, or a transaction marker (``control``)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    producer_id: int = -1
    epoch: int = -1
    sequence: int = -1
    txn: Transaction | None = None
    control: Literal["commit", "abort"] | None = None

    def visible(self, read_committed: bool) -> bool:
        if self.control is not None:
            return False
        if read_committed and self.txn is not None:
            return self.txn.state == "committed"
        return True


class PartitionLog:
    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        #: Indexed by offset; ``None`` where compaction removed the entry.
        self.entries: list[Entry | None] = []
        #: Open transactions with records here -> their first offset here.
        self.open: dict[int, int] = {}
        #: (producer id) -> (epoch, last sequence, offset) for idempotent de-duplication.
        self.sequences: dict[int, tuple[int, int, int]] = {}

    @property
    def high_watermark(self) -> int:
        return len(self.entries)

    @property
    def last_stable_offset(self) -> int:
        return min(self.open.values()) if self.open else len(self.entries)

    def bound(self, read_committed: bool) -> int:
        return self.last_stable_offset if read_committed else self.high_watermark

    def append(self, entry: Entry) -> int:
        entry.offset = len(self.entries)
        self.entries.append(entry)
        return entry.offset

    def read(
        self, position: int, read_committed: bool, max_records: int
    ) -> tuple[list[Entry], int]:
        """Deliverable entries from ``position``, and the position after them.

        The position steps over markers and skipped (aborted) records it scans, as a consumer's
        does once it has fetched them; it stops right after the last record returned when
        ``max_records`` cut the read short.
        """
        bound = self.bound(read_committed)
        out: list[Entry] = []
        entries = self.entries
        while position < bound and len(out) < max_records:
            entry = entries[position]
            position += 1
            if entry is not None and entry.visible(read_committed):
                out.append(entry)
        return out, position

    def has_deliverable(self, position: int, read_committed: bool) -> bool:
        bound = self.bound(read_committed)
        entries = self.entries
        for offset in range(position, bound):
            entry = entries[offset]
            if entry is not None and entry.visible(read_committed):
                return True
        return position < bound  # markers to step over are progress too


@dataclass
class Topic:
    name: str
    partitions: list[PartitionLog]
    configs: dict[str, str]
    round_robin: Iterator[int]

    @property
    def compacted(self) -> bool:
        return "compact" in self.configs.get("cleanup.policy", "")


# -- groups --------------------------------------------------------------------------------


@dataclass
class Member:
    member_id: str
    consumer: MemoryConsumer
    topics: frozenset[str]
    rebalance_timeout: float
    session_timeout: float
    #: The generation this member was last assigned in (-1: none yet).
    generation: int = -1
    assignment: frozenset[TopicPartition] = frozenset()
    #: Rejoined the rebalance in progress.
    joined: bool = True
    expiry: TimerHandle | None = None


@dataclass
class Group:
    group_id: str
    generation: int = 0
    state: Literal["Empty", "PreparingRebalance", "Stable"] = "Empty"
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    #: The metadata string committed with each offset ("" when none was given).
    offset_metadata: dict[TopicPartition, str] = field(default_factory=dict)
    #: Partitions whose offsets sit in an open transaction (require_stable waits for them).
    pending: dict[TopicPartition, Transaction] = field(default_factory=dict)
    rebalance_deadline: TimerHandle | None = None
    rebalances: int = 0

    def metadata(self, member_id: str) -> GroupMetadata:
        member = self.members.get(member_id)
        if member is None or member.generation < 0:
            return GroupMetadata(self.group_id, -1, "")
        return GroupMetadata(self.group_id, member.generation, member_id)


def range_assign(
    members: Collection[Member], partition_counts: dict[str, int]
) -> dict[str, set[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, consecutive partition ranges to members sorted by id."""
    out: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
    topics = sorted({t for m in members for t in m.topics})
    for topic in topics:
        count = partition_counts.get(topic)
        if not count:
            continue
        subscribed = sorted(m.member_id for m in members if topic in m.topics)
        per, extra = divmod(count, len(subscribed))
        start = 0
        for index, member_id in enumerate(subscribed):
            length = per + (1 if index < extra else 0)
            out[member_id].update(TopicPartition(topic, p) for p in range(start, start + length))
            start += length
    return out


# -- the cluster ---------------------------------------------------------------------------


@dataclass
class ProducerState:
    """The transaction coordinator's view of one transactional.id."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout: float
    current: Transaction | None = None
    #: The epoch whose transaction the coordinator timed out (and bumped past): its EndTxn
    #: (commit) is answered INVALID_TXN_STATE, as Kafka 4.3 answers it under version 2.
    timed_out_epoch: int | None = None


class MemoryKafka:
    """An in-memory Kafka cluster; make one per test and hand :meth:`transport` to workers."""

    def __init__(self, clock: ManualClock | None = None, *, name: str = "memory") -> None:
        self.clock = clock or ManualClock()
        self.name = name
        self.topics: dict[str, Topic] = {}
        self.groups: dict[str, Group] = {}
        self.producers: dict[str, ProducerState] = {}
        self.transactions: list[Transaction] = []
        self._producer_ids = itertools.count(1000)
        self._txn_ids = itertools.count(1)
        self._member_ids = itertools.count(1)
        #: Waits (fetches, offset fetches, rebalances) that any change of the cluster ends.
        self.waiters: set[Parked] = set()
        #: Owners whose clients are frozen (a SIGSTOPped process): their waits hold.
        self.frozen: set[str] = set()
        self.frozen_waiters: set[Parked] = set()

    def transport(self, owner: str | None = None) -> MemoryTransport:
        from streams_app.testing.memory.clients import MemoryTransport

        return MemoryTransport(self, owner)

    def changed(self) -> None:
        """Something visible changed: every parked fetch or rebalance wait looks again."""
        wake_all(self.waiters)

    # -- topics --------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> Topic:
        existing = self.topics.get(name)
        if existing is not None:
            return existing
        if partitions < 1:
            raise TransportError(f"topic {name!r} needs at least one partition")
        topic = Topic(
            name,
            [PartitionLog(TopicPartition(name, p)) for p in range(partitions)],
            dict(configs or {}),
            itertools.cycle(range(partitions)),
        )
        self.topics[name] = topic
        self.changed()
        return topic

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise TransportError(f"unknown topic {name!r} (the memory cluster has no such topic)")
        return topic

    def log(self, tp: TopicPartition) -> PartitionLog:
        topic = self.topic(tp[0])
        if not 0 <= tp[1] < len(topic.partitions):
            raise TransportError(f"topic {tp[0]!r} has no partition {tp[1]}")
        return topic.partitions[tp[1]]

    def has_partition(self, tp: TopicPartition) -> bool:
        topic = self.topics.get(tp[0])
        return topic is not None and 0 <= tp[1] < len(topic.partitions)

    def partition_for(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """aiokafka's default partitioner for keys (murmur2, as Java's); round robin for None."""
        t = self.topic(topic)
        if partition is not None:
            if not 0 <= partition < len(t.partitions):
                raise TransportError(f"topic {topic!r} has no partition {partition}")
            return partition
        if key is None:
            return next(t.round_robin)
        return (int(murmur2(key)) & 0x7FFFFFFF) % len(t.partitions)

    def append(
        self,
        tp: TopicPartition,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
        timestamp: int | None = None,
        producer_id: int = -1,
        epoch: int = -1,
        sequence: int = -1,
        txn: Transaction | None = None,
    ) -> int:
        """Append one record; a repeated (producer id, epoch, sequence) returns the first offset."""
        log = self.log(tp)
        if producer_id >= 0 and sequence >= 0:
            seen = log.sequences.get(producer_id)
            if seen is not None and seen[0] == epoch and sequence <= seen[1]:
                return seen[2] if sequence == seen[1] else -1  # a duplicate: dropped
        if timestamp is None:
            timestamp = int(self.clock.time() * 1000)
        offset = log.append(
            Entry(
                -1,
                timestamp,
                None if key is None else bytes(key),
                None if value is None else bytes(value),
                tuple((str(k), bytes(v)) for k, v in headers),
                producer_id,
                epoch,
                sequence,
                txn,
            )
        )
        if producer_id >= 0 and sequence >= 0:
            log.sequences[producer_id] = (epoch, sequence, offset)
        if txn is not None and txn.id not in log.open:
            log.open[txn.id] = offset
        self.changed()
        return offset

    # -- producers and transactions ------------------------------------------------------

    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    def init_producer_id(self, transactional_id: str, timeout: float) -> ProducerState:
        """InitProducerId: fence any older producer of this id and abort what it left open."""
        state = self.producers.get(transactional_id)
        if state is None:
            state = ProducerState(transactional_id, self.new_producer_id(), 0, timeout)
            self.producers[transactional_id] = state
            return state
        if state.current is not None:
            self.end_transaction(state.current, commit=False)
        state.epoch += 1
        state.timeout = timeout
        return state

    def check_epoch(self, transactional_id: str, producer_id: int, epoch: int) -> ProducerState:
        state = self.producers.get(transactional_id)
        if state is None or state.producer_id != producer_id or state.epoch != epoch:
            raise ProducerFencedError(
                f"producer with transactional.id {transactional_id!r} was fenced: a newer "
                "instance took the id, or its transaction timed out (memory cluster)"
            )
        return state

    def current_transaction(self, state: ProducerState) -> Transaction:
        """The open transaction of ``state``, begun on first use (AddPartitionsToTxn)."""
        txn = state.current
        if txn is None:
            txn = Transaction(
                next(self._txn_ids),
                state.transactional_id,
                state.producer_id,
                state.epoch,
                self.clock.monotonic(),
            )
            state.current = txn
            self.transactions.append(txn)
            txn.timer = self.clock.call_later(state.timeout, lambda: self._time_out(state, txn))
        return txn

    def _time_out(self, state: ProducerState, txn: Transaction) -> None:
        """transaction.timeout.ms passed: abort, and bump the epoch so the producer is fenced."""
        if txn.state != "open" or state.current is not txn:
            return
        self.end_transaction(txn, commit=False)
        state.timed_out_epoch = state.epoch
        state.epoch += 1

    def add_offsets(
        self,
        state: ProducerState,
        offsets: dict[TopicPartition, int],
        group: GroupMetadata,
        metadata: dict[TopicPartition, str] | None = None,
    ) -> None:
        """TxnOffsetCommit with KIP-447's membership check."""
        if group.generation_id < 0 or not group.member_id:
            raise CommitFailedError(
                f"offsets for group {group.group_id!r} carry no valid membership (generation "
                f"{group.generation_id}, member {group.member_id!r})"
            )
        g = self.group(group.group_id)
        self.check_membership(g, group.member_id, group.generation_id)
        txn = self.current_transaction(state)
        txn.offsets.setdefault(g.group_id, {}).update(offsets)
        meta = metadata or {}
        txn.offset_metadata.setdefault(g.group_id, {}).update(
            {tp: meta.get(tp, "") for tp in offsets}
        )
        for tp in offsets:
            g.pending[tp] = txn

    def end_transaction(self, txn: Transaction, *, commit: bool) -> None:
        """EndTxn: a marker on every partition of the transaction, offsets applied or dropped."""
        if txn.state != "open":
            return
        txn.state = "committed" if commit else "aborted"
        if txn.timer is not None:
            txn.timer.cancel()
        now = int(self.clock.time() * 1000)
        for tp in txn.partitions:
            log = self.log(tp)
            log.append(
                Entry(
                    -1,
                    now,
                    None,
                    None,
                    (),
                    txn.producer_id,
                    txn.epoch,
                    -1,
                    txn,
                    "commit" if commit else "abort",
                )
            )
            log.open.pop(txn.id, None)
        for group_id, offsets in txn.offsets.items():
            group = self.group(group_id)
            for tp, offset in offsets.items():
                if group.pending.get(tp) is txn:
                    del group.pending[tp]
                if commit:
                    group.offsets[tp] = offset
                    group.offset_metadata[tp] = txn.offset_metadata.get(group_id, {}).get(tp, "")
        state = self.producers.get(txn.transactional_id)
        if state is not None and state.current is txn:
            state.current = None
        self.changed()

    def open_transactions(self) -> list[Transaction]:
        return [t for t in self.transactions if t.state == "open"]

    # -- groups --------------------------------------------------------------------------

    def group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def check_membership(self, group: Group, member_id: str, generation: int) -> None:
        if member_id not in group.members:
            raise CommitFailedError(
                f"group {group.group_id!r} has no member {member_id!r} (UNKNOWN_MEMBER_ID): it "
                "was expelled or left; its partitions belong to another member now"
            )
        if generation != group.generation:
            raise CommitFailedError(
                f"group {group.group_id!r} is at generation {group.generation}, the commit "
                f"carries {generation} (ILLEGAL_GENERATION): the group rebalanced"
            )

    def join(self, group: Group, consumer: MemoryConsumer) -> Member:
        config = consumer.config
        member = Member(
            f"{config.client_id}-{next(self._member_ids):06d}",
            consumer,
            frozenset(consumer.topics),
            (config.rebalance_timeout_ms or config.max_poll_interval_ms) / 1000,
            config.session_timeout_ms / 1000,
        )
        group.members[member.member_id] = member
        if consumer.owner in self.frozen:
            self._schedule_expiry(group, member)
        self.prepare_rebalance(group, joining=member)
        self.maybe_complete_rebalance(group)
        return member

    def prepare_rebalance(self, group: Group, joining: Member | None = None) -> None:
        if group.state != "PreparingRebalance":
            group.state = "PreparingRebalance"
            for member in group.members.values():
                member.joined = member is joining
            timeout = max((m.rebalance_timeout for m in group.members.values()), default=0.0)
            group.rebalance_deadline = self.clock.call_later(
                timeout, lambda: self._rebalance_timed_out(group)
            )
        self.changed()

    def rejoin(self, group: Group, member: Member) -> None:
        member.joined = True
        self.maybe_complete_rebalance(group)

    def maybe_complete_rebalance(self, group: Group) -> None:
        if group.state != "PreparingRebalance":
            return
        if not all(m.joined for m in group.members.values()):
            return
        if group.rebalance_deadline is not None:
            group.rebalance_deadline.cancel()
            group.rebalance_deadline = None
        group.generation += 1
        group.rebalances += 1
        if not group.members:
            group.state = "Empty"
        else:
            counts = {name: len(t.partitions) for name, t in self.topics.items()}
            assignment = range_assign(group.members.values(), counts)
            for member in group.members.values():
                member.assignment = frozenset(assignment[member.member_id])
            group.state = "Stable"
        self.changed()

    def _rebalance_timed_out(self, group: Group) -> None:
        group.rebalance_deadline = None
        for member in [m for m in group.members.values() if not m.joined]:
            self.remove_member(group, member, rebalance=False)
        self.maybe_complete_rebalance(group)

    def remove_member(self, group: Group, member: Member, *, rebalance: bool = True) -> None:
        if group.members.pop(member.member_id, None) is None:
            return
        if member.expiry is not None:
            member.expiry.cancel()
        if rebalance:
            if group.members:
                self.prepare_rebalance(group)
                self.maybe_complete_rebalance(group)
            else:
                if group.rebalance_deadline is not None:
                    group.rebalance_deadline.cancel()
                    group.rebalance_deadline = None
                group.state = "Empty"
                group.generation += 1
        self.changed()

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        if member.expiry is None or member.expiry.cancelled:
            member.expiry = self.clock.call_later(
                member.session_timeout, lambda: self.remove_member(group, member)
            )

    def stop_heartbeats(self, owner: str | None) -> None:
        """``owner`` stopped heartbeating (killed or frozen): expire its members later."""
        for group in self.groups.values():
            for member in list(group.members.values()):
                if member.consumer.owner == owner and owner is not None:
                    self._schedule_expiry(group, member)

    def resume_heartbeats(self, owner: str) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                if member.consumer.owner == owner and member.expiry is not None:
                    member.expiry.cancel()
                    member.expiry = None

    # -- freezing (SIGSTOP) --------------------------------------------------------------

    def freeze(self, owner: str) -> None:
        """Every client of ``owner`` stops where it is; its group members stop heartbeating."""
        self.frozen.add(owner)
        self.stop_heartbeats(owner)

    def thaw(self, owner: str) -> None:
        self.frozen.discard(owner)
        self.resume_heartbeats(owner)
        wake_all(self.frozen_waiters)

    async def hold_if_frozen(self, owner: str | None) -> None:
        while owner is not None and owner in self.frozen:
            await self.clock.park(
                owner, timeout=None, reason="frozen", wakers=(self.frozen_waiters,)
            )

    # -- compaction and inspection -------------------------------------------------------

    def compact(self, topic: str | None = None) -> int:
        """Compact compacted topics (or ``topic``): below the LSO keep only the latest
        committed record per key, drop aborted records; offsets stay. Returns entries removed."""
        removed = 0
        for t in [self.topic(topic)] if topic else list(self.topics.values()):
            if topic is None and not t.compacted:
                continue
            for log in t.partitions:
                stable = log.last_stable_offset
                latest: dict[bytes | None, int] = {}
                for entry in log.entries[:stable]:
                    if entry is not None and entry.visible(read_committed=True):
                        latest[entry.key] = entry.offset
                for offset in range(stable):
                    entry = log.entries[offset]
                    if entry is None or entry.control is not None:
                        continue
                    if not entry.visible(read_committed=True) or latest.get(entry.key) != offset:
                        log.entries[offset] = None
                        removed += 1
        return removed

    def read(
        self, topic: str, *, read_committed: bool = True, partition: int | None = None
    ) -> list[MemoryRecord]:
        """Every deliverable record of ``topic`` (up to the LSO when ``read_committed``)."""
        t = self.topic(topic)
        out: list[MemoryRecord] = []
        for log in t.partitions:
            if partition is not None and log.tp.partition != partition:
                continue
            entries, _ = log.read(0, read_committed, len(log.entries) + 1)
            out.extend(to_record(log.tp, e) for e in entries)
        return out

    def describe(self) -> str:
        """The cluster's state in a few lines, for failure messages."""
        lines = []
        for t in self.topics.values():
            ends = ", ".join(
                f"{log.tp.partition}: lso {log.last_stable_offset} hw {log.high_watermark}"
                for log in t.partitions
            )
            lines.append(f"  topic {t.name}: {ends}")
        for g in self.groups.values():
            members = ", ".join(
                f"{m.member_id}(gen {m.generation}, {len(m.assignment)} partitions"
                f"{', joined' if m.joined else ''}{', expiring' if m.expiry else ''})"
                for m in g.members.values()
            )
            lines.append(f"  group {g.group_id}: {g.state} gen {g.generation}; {members}")
        for txn in self.open_transactions():
            lines.append(
                f"  open transaction {txn.transactional_id!r} (epoch {txn.epoch}) on "
                f"{sorted(txn.partitions)} since t={txn.started_at:.3f}s"
            )
        return "\n".join(lines)


def to_record(tp: TopicPartition, entry: Entry) -> MemoryRecord:
    return MemoryRecord(
        tp.topic, tp.partition, entry.offset, entry.timestamp, entry.key, entry.value, entry.headers
    )
