"""The transport protocols on the in-memory cluster: what a worker talks to in a broker-free test.

Each client belongs to an *owner* (the test driver's name for a worker): its waits are parked
under that owner on the manual clock, so the driver can tell when the worker is blocked, and a
frozen owner's clients stop where they are. Errors are the runtime's own
(:mod:`streams_app.transport.errors`), raised where the real transport raises them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from aiokafka.partitioner import murmur2

from streams_app.testing.clock import Parked, wake_all
from streams_app.testing.memory.broker import (
    Group,
    Member,
    MemoryRecord,
    PartitionLog,
    RecordMetadata,
    Transaction,
    to_record,
)
from streams_app.transport.base import (
    BrokerLimits,
    CommittedOffset,
    ConsumerConfig,
    GroupMetadata,
    ProducerConfig,
    RebalanceListener,
    RecordBatch,
    RecordLike,
    RecordMetadataLike,
    TopicPartition,
    TopicSpec,
)
from streams_app.transport.errors import (
    AbortedByCoordinatorError,
    CommitFailedError,
    ProducerFencedError,
    SendFailedError,
    TransportError,
)

if TYPE_CHECKING:
    from streams_app.testing.memory.broker import MemoryKafka


def _tp(tp: tuple[str, int]) -> TopicPartition:
    return TopicPartition(tp[0], tp[1])


class MemoryTransport:
    """Makes the clients of one worker (``owner``) on a :class:`MemoryKafka`."""

    def __init__(self, broker: MemoryKafka, owner: str | None = None) -> None:
        self.broker = broker
        self.owner = owner

    @property
    def address(self) -> str:
        return f"memory://{self.broker.name}"

    def consumer(self, config: ConsumerConfig) -> MemoryConsumer:
        return MemoryConsumer(self.broker, self.owner, config)

    def producer(self, config: ProducerConfig) -> MemoryProducer:
        return MemoryProducer(self.broker, self.owner, config)

    def admin(self) -> MemoryAdmin:
        return MemoryAdmin(self.broker, self.owner)

    def partition_for_key(self, key: bytes, partitions: int) -> int:
        return (int(murmur2(key)) & 0x7FFFFFFF) % partitions

    def __repr__(self) -> str:
        return f"MemoryTransport({self.broker.name!r}, owner={self.owner!r})"


class _Client:
    def __init__(self, broker: MemoryKafka, owner: str | None) -> None:
        self.broker = broker
        self.owner = owner
        self.killed = False
        self.closed = False

    def kill(self) -> None:
        """The process died: the client does nothing more, says goodbye to nobody."""
        self.killed = True

    async def _enter(self) -> None:
        """Every call that reaches the cluster: wait while frozen, refuse once dead."""
        await self.broker.hold_if_frozen(self.owner)
        if self.killed:
            raise TransportError("the client's process was killed")
        if self.closed:
            raise TransportError("the client is closed")


# -- consumer ------------------------------------------------------------------------------


class MemoryConsumer(_Client):
    """A consumer: group member (``subscribe``) or manually assigned (``assign``).

    Rebalances happen inside :meth:`getmany`, as in Java's ``poll``: the revocation callback is
    awaited before the member rejoins, the assignment callback once the group has moved to the
    new generation; a callback's exception is raised from the next ``getmany``.
    """

    def __init__(self, broker: MemoryKafka, owner: str | None, config: ConsumerConfig) -> None:
        super().__init__(broker, owner)
        self.config = config
        self.read_committed = config.isolation_level == "read_committed"
        self.topics: list[str] = []
        self.listener: RebalanceListener | None = None
        self.subscribed = False
        self.member: Member | None = None
        self._assignment: set[TopicPartition] = set()
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self._listener_error: Exception | None = None
        self._wakeups: set[Parked] = set()
        self._woken = False
        self._rotation = 0
        self.started = False

    @property
    def group(self) -> Group | None:
        if self.config.group_id is None:
            return None
        return self.broker.group(self.config.group_id)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        await self._enter()
        self.started = True

    async def stop(self) -> None:
        """Leave the group (LeaveGroup: the others rebalance at once) and close."""
        if self.closed or self.killed:
            return
        await self.broker.hold_if_frozen(self.owner)
        self._leave()
        self.closed = True

    def kill(self) -> None:
        """The process died: no LeaveGroup; the member is expelled after its session timeout."""
        if self.killed:
            return
        self.killed = True
        group, member = self.group, self.member
        if group is not None and member is not None and member.member_id in group.members:
            self.broker._schedule_expiry(group, member)
        wake_all(self._wakeups)

    def wakeup(self) -> None:
        """Make a parked :meth:`getmany` return (empty) now: the driver uses it after asking the
        worker to commit or stop, instead of advancing time to the poll timeout."""
        self._woken = True
        wake_all(self._wakeups)

    def _leave(self) -> None:
        group, member = self.group, self.member
        if group is not None and member is not None:
            self.broker.remove_member(group, member)
        self.member = None
        self._assignment = set()
        self.positions.clear()

    # -- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: Collection[str], listener: RebalanceListener) -> None:
        if self.config.group_id is None:
            raise TransportError("subscribe() needs a consumer with a group_id")
        self.topics = sorted(set(topics))
        self.listener = listener
        self.subscribed = True
        group, member = self.group, self.member
        if group is not None and member is not None and member.topics != frozenset(self.topics):
            member.topics = frozenset(self.topics)
            self.broker.prepare_rebalance(group)
        self.broker.changed()

    def unsubscribe(self) -> None:
        self._leave()
        self.subscribed = False
        self.topics = []

    def assign(self, partitions: Collection[TopicPartition]) -> None:
        if self.subscribed:
            raise TransportError("assign() on a consumer that subscribed to topics")
        wanted = {_tp(tp) for tp in partitions}
        self._assignment = wanted
        self.positions = {tp: p for tp, p in self.positions.items() if tp in wanted}
        self.paused &= wanted

    def fetch_ready(self) -> bool:
        # Rebalances happen inside getmany here (as in Java's poll), callbacks included: the
        # model never polls while a commit is in flight, so it commits as Kafka Streams does.
        return False

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    # -- fetching --------------------------------------------------------------------------

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[RecordLike]]:
        if self._listener_error is not None:
            error, self._listener_error = self._listener_error, None
            raise error
        await self._enter()
        limit = max_records or self.config.max_poll_records
        clock = self.broker.clock
        deadline = clock.monotonic() + max(0, timeout_ms) / 1000
        while True:
            await self._enter()
            if self.subscribed and await self._poll_group():
                return {}
            batch = await self._fetch(limit)
            if batch:
                return batch
            remaining = deadline - clock.monotonic()
            if remaining < 1e-6 or self._woken:  # the clock counts whole microseconds
                self._woken = False
                return {}
            await clock.park(
                self.owner,
                timeout=remaining,
                reason=f"getmany({self.config.client_id})",
                wakers=(self.broker.waiters, self._wakeups),
            )

    async def _poll_group(self) -> bool:
        """Take part in the group protocol; True if a rebalance callback ran."""
        group = self.group
        assert group is not None
        member = self.member
        if member is not None and group.members.get(member.member_id) is not member:
            # Expelled (session or rebalance timeout) or fenced: give everything up, rejoin.
            self.member = None
            lost, self._assignment = self._assignment, set()
            self.positions.clear()
            if member.generation >= 0:
                await self._call("on_partitions_revoked", lost)
                return True
            member = None
        if member is None:
            member = self.broker.join(group, self)
            self.member = member
        if group.state == "PreparingRebalance" and not member.joined:
            revoked, self._assignment = self._assignment, set()
            self.positions.clear()
            await self._call("on_partitions_revoked", revoked)  # awaited before rejoining
            if group.members.get(member.member_id) is member:
                self.broker.rejoin(group, member)
            return True
        if group.state == "Stable" and member.generation != group.generation:
            member.generation = group.generation
            self._assignment = set(member.assignment)
            self.positions.clear()
            self.paused.clear()
            await self._call("on_partitions_assigned", set(member.assignment))
            return True
        return False

    async def _call(self, name: str, partitions: set[TopicPartition]) -> None:
        listener = self.listener
        if listener is None:
            return
        try:
            await getattr(listener, name)(set(partitions))
        except Exception as exc:  # as the real transport: re-raised from the next getmany
            self._listener_error = exc

    async def _fetch(self, limit: int) -> dict[TopicPartition, list[MemoryRecord]]:
        tps = sorted(tp for tp in self._assignment if tp not in self.paused)
        if not tps:
            return {}
        start = self._rotation % len(tps)
        self._rotation += 1
        out: dict[TopicPartition, list[MemoryRecord]] = {}
        for tp in tps[start:] + tps[:start]:
            if limit <= 0:
                break
            if not self.broker.has_partition(tp):
                continue
            log = self.broker.log(tp)
            position = self._position_now(tp, log)
            if position is None:
                continue  # its committed offset is pending in an open transaction
            entries, position = log.read(position, self.read_committed, limit)
            self.positions[tp] = position
            if entries:
                out[tp] = [to_record(tp, e) for e in entries]
                limit -= len(entries)
        return out

    def _position_now(self, tp: TopicPartition, log: PartitionLog) -> int | None:
        """The fetch position; for a partition without one: the committed offset (unless a
        transaction holds it: None) or the reset policy. Out of range: the reset policy."""
        position = self.positions.get(tp)
        if position is None:
            group = self.group
            if group is not None:
                if tp in group.pending:
                    return None
                position = group.offsets.get(tp)
        if position is None or not 0 <= position <= log.high_watermark:
            position = log.high_watermark if self.config.auto_offset_reset == "latest" else 0
        self.positions[tp] = position
        return position

    def caught_up(self) -> bool:
        """Nothing fetchable on any assigned, unpaused partition (for the driver)."""
        for tp in self._assignment:
            if tp in self.paused or not self.broker.has_partition(tp):
                continue
            log = self.broker.log(tp)
            position = self.positions.get(tp)
            if position is None or log.has_deliverable(position, self.read_committed):
                return False
        return True

    def seek(self, tp: TopicPartition, offset: int) -> None:
        key = _tp(tp)
        if key not in self._assignment:
            raise TransportError(f"{key} is not assigned to this consumer")
        self.positions[key] = offset

    async def position(self, tp: TopicPartition) -> int:
        key = _tp(tp)
        if key not in self._assignment:
            raise TransportError(f"{key} is not assigned to this consumer")
        while True:
            await self._enter()
            log = self.broker.log(key)
            position = self._position_now(key, log)
            if position is not None:
                return position
            await self._wait_stable("position")

    async def _wait_stable(self, what: str) -> None:
        await self.broker.clock.park(
            self.owner,
            timeout=None,
            reason=f"{what}: offsets pending in an open transaction",
            wakers=(self.broker.waiters,),
        )

    # -- offsets ---------------------------------------------------------------------------

    async def committed_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """OffsetFetch with require_stable: waits while a transaction holds any of them."""
        group = self.group
        if group is None:
            raise TransportError("committed_offsets() needs a consumer with a group_id")
        tps = [_tp(tp) for tp in partitions]
        while True:
            await self._enter()
            if not any(tp in group.pending for tp in tps):
                return {tp: group.offsets.get(tp) for tp in tps}
            await self._wait_stable("committed_offsets")

    async def committed_offsets_with_metadata(
        self, partitions: Collection[TopicPartition], *, stable: bool = True
    ) -> dict[TopicPartition, CommittedOffset | None]:
        if stable:
            found = await self.committed_offsets(partitions)
        else:
            await self._enter()
            if self.group is None:
                raise TransportError("committed_offsets() needs a consumer with a group_id")
            found = {_tp(tp): self.group.offsets.get(_tp(tp)) for tp in partitions}
        group = self.group
        assert group is not None
        return {
            tp: None
            if offset is None
            else CommittedOffset(offset, group.offset_metadata.get(tp, ""))
            for tp, offset in found.items()
        }

    def fetched_lag(self, tp: TopicPartition) -> int | None:
        """The model answers every fetch at once: 1 if a record is readable past the position
        (the runtime only asks whether there is any), else 0."""
        key = _tp(tp)
        if key not in self._assignment or not self.broker.has_partition(key):
            return None
        position = self.positions.get(key)
        if position is None:
            return None
        return 1 if self.broker.log(key).has_deliverable(position, self.read_committed) else 0

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """A plain OffsetCommit, checked against the member's generation."""
        if not offsets:
            return
        await self._enter()
        group = self.group
        if group is None:
            raise TransportError("commit() needs a consumer with a group_id")
        member = self.member
        if self.subscribed or member is not None:
            if member is None:
                raise CommitFailedError(
                    f"offset commit rejected: not a member of group {group.group_id!r}"
                )
            self.broker.check_membership(group, member.member_id, member.generation)
        elif group.state != "Empty":
            raise CommitFailedError(
                f"offset commit rejected: group {group.group_id!r} has members and this "
                "consumer is not one of them"
            )
        meta = metadata or {}
        for tp, offset in offsets.items():
            group.offsets[_tp(tp)] = offset
            group.offset_metadata[_tp(tp)] = meta.get(tp, "")
        self.broker.changed()

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        self.paused.update(_tp(tp) for tp in partitions if _tp(tp) in self._assignment)

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        self.paused.difference_update(_tp(tp) for tp in partitions)
        self.broker.changed()

    def group_metadata(self) -> GroupMetadata:
        group = self.group
        if group is None:
            raise TransportError("group_metadata() needs a consumer with a group_id")
        if self.member is None:
            return GroupMetadata(group.group_id, -1, "")
        return group.metadata(self.member.member_id)

    def highwater(self, tp: TopicPartition) -> int | None:
        if _tp(tp) not in self._assignment:
            return None
        return self.broker.log(_tp(tp)).high_watermark

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        if _tp(tp) not in self._assignment:
            return None
        return self.broker.log(_tp(tp)).last_stable_offset

    def partition_hosts(self) -> Mapping[TopicPartition, str]:
        """Every member's ``application_server`` and its partitions of the current generation,
        as the real group's leader distributes them."""
        group = self.group
        if group is None or self.member is None:
            return {}
        hosts: dict[TopicPartition, str] = {}
        for member in group.members.values():
            address = member.consumer.config.application_server
            if address and member.generation == group.generation:
                hosts.update(dict.fromkeys(member.assignment, address))
        return hosts

    def __repr__(self) -> str:
        return f"<MemoryConsumer {self.config.client_id} owner={self.owner}>"


# -- producer ------------------------------------------------------------------------------


class _Appended:
    __slots__ = ("offset", "timestamp")

    def __init__(self, offset: int, timestamp: int) -> None:
        self.offset = offset
        self.timestamp = timestamp


class MemoryBatch:
    """Records for one partition, appended whole (a ``RecordBatch``), at most ``max_bytes``."""

    __slots__ = ("_broker", "_bytes", "closed", "max_bytes", "records")

    def __init__(self, max_bytes: int, broker: MemoryKafka) -> None:
        self.max_bytes = max_bytes
        self._broker = broker
        self._bytes = 0
        self.closed = False
        self.records: list[
            tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]
        ] = []

    def append(
        self,
        *,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> _Appended | None:
        if self.closed:
            raise TransportError("the batch is closed")
        size = 24 + len(key or b"") + len(value or b"") + sum(len(k) + len(v) for k, v in headers)
        if self.records and self._bytes + size > self.max_bytes:
            return None  # full (the first record always fits)
        if timestamp is None:
            timestamp = int(self._broker.clock.time() * 1000)
        self.records.append((timestamp, key, value, tuple((str(k), bytes(v)) for k, v in headers)))
        self._bytes += size
        return _Appended(len(self.records) - 1, timestamp)

    def close(self) -> None:
        self.closed = True

    def record_count(self) -> int:
        return len(self.records)


class MemoryProducer(_Client):
    """An idempotent (optionally transactional) producer; sends are acknowledged at once."""

    def __init__(self, broker: MemoryKafka, owner: str | None, config: ProducerConfig) -> None:
        super().__init__(broker, owner)
        self.config = config
        self.producer_id = -1
        self.epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        self._in_transaction = False
        self._futures: list[asyncio.Future[RecordMetadataLike]] = []
        self._fenced: ProducerFencedError | None = None
        self.started = False
        #: Fault injection: the next send is delivered twice (a retry after a lost ack).
        self.duplicate_next_send = False

    @property
    def transactional(self) -> bool:
        return self.config.transactional_id is not None

    @property
    def _idempotent(self) -> bool:
        return self.transactional or self.config.enable_idempotence

    async def start(self) -> None:
        await self._enter()
        if self.config.transactional_id is not None:
            state = self.broker.init_producer_id(
                self.config.transactional_id, self.config.transaction_timeout_ms / 1000
            )
            self.producer_id, self.epoch = state.producer_id, state.epoch
        elif self._idempotent:
            self.producer_id, self.epoch = self.broker.new_producer_id(), 0
        self.started = True

    async def stop(self) -> None:
        """Close; an open transaction stays open (aborted by a successor or its timeout)."""
        self.closed = True

    def _require_transactional(self, what: str) -> str:
        tid = self.config.transactional_id
        if tid is None:
            raise TransportError(f"{what} needs a transactional producer (no transactional_id)")
        return tid

    def _fence(self, exc: ProducerFencedError) -> ProducerFencedError:
        self._fenced = exc
        return exc

    async def begin_transaction(self) -> None:
        await self._enter()
        self._require_transactional("begin_transaction")
        if self._fenced is not None:
            raise ProducerFencedError(str(self._fenced))
        if self._in_transaction:
            raise TransportError("begin_transaction: a transaction is already open")
        self._in_transaction = True
        self._futures = []

    async def send(
        self,
        topic: str,
        *,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadataLike]:
        await self._enter()
        if self.transactional and not self._in_transaction:
            raise TransportError("send outside a transaction on a transactional producer")
        broker = self.broker
        try:
            p = broker.partition_for(topic, key, partition)
        except TransportError as exc:
            raise SendFailedError(f"send to topic {topic!r} failed: {exc}") from exc
        tp = TopicPartition(topic, p)
        future: asyncio.Future[RecordMetadataLike] = asyncio.get_running_loop().create_future()
        if self.transactional:
            self._futures.append(future)
        txn: Transaction | None = None
        tid = self.config.transactional_id
        if tid is not None:
            try:
                state = broker.check_epoch(tid, self.producer_id, self.epoch)
            except ProducerFencedError as exc:
                future.set_exception(self._fence(exc))
                return future
            txn = broker.current_transaction(state)
        timestamp = int(broker.clock.time() * 1000) if timestamp_ms is None else timestamp_ms
        offset = self._append(tp, [(timestamp, key, value, tuple(headers or ()))], txn)
        if self.config.acks == 0:
            offset = -1  # acks=0: the client never learns the offset
        future.set_result(RecordMetadata(topic, p, offset, timestamp))
        return future

    def _append(
        self,
        tp: TopicPartition,
        records: Sequence[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]],
        txn: Transaction | None,
    ) -> int:
        """Append records with consecutive sequence numbers; the first one's offset. A
        duplicated send (``duplicate_next_send``) is delivered twice, as a retry would be."""
        base = self._sequences.get(tp, 0) if self._idempotent else -1
        if self._idempotent:
            self._sequences[tp] = base + len(records)
        copies = 2 if self.duplicate_next_send else 1
        self.duplicate_next_send = False
        first = -1
        for _ in range(copies):
            for index, (timestamp, key, value, headers) in enumerate(records):
                offset = self.broker.append(
                    tp,
                    key=key,
                    value=value,
                    headers=headers,
                    timestamp=timestamp,
                    producer_id=self.producer_id,
                    epoch=self.epoch,
                    sequence=base + index if base >= 0 else -1,
                    txn=txn,
                )
                if first < 0:
                    first = offset
        if txn is not None and tp not in txn.partitions:
            txn.partitions[tp] = first
        return first

    # -- the batch path (BatchingProducerClient) -----------------------------------------

    def create_batch(self) -> MemoryBatch:
        return MemoryBatch(self.config.max_batch_size, self.broker)

    async def send_batch(
        self, batch: RecordBatch, topic: str, partition: int
    ) -> asyncio.Future[RecordMetadataLike]:
        """Append a closed batch at once; the future resolves with its first record's metadata
        (timestamp -1: CreateTime, as aiokafka reports it)."""
        await self._enter()
        if not isinstance(batch, MemoryBatch):
            raise TransportError("send_batch needs a batch from this producer's create_batch")
        if self.transactional and not self._in_transaction:
            raise TransportError("send outside a transaction on a transactional producer")
        tp = TopicPartition(topic, self.broker.partition_for(topic, None, partition))
        future: asyncio.Future[RecordMetadataLike] = asyncio.get_running_loop().create_future()
        if self.transactional:
            self._futures.append(future)
        txn: Transaction | None = None
        tid = self.config.transactional_id
        if tid is not None:
            try:
                state = self.broker.check_epoch(tid, self.producer_id, self.epoch)
            except ProducerFencedError as exc:
                future.set_exception(self._fence(exc))
                return future
            txn = self.broker.current_transaction(state)
        first = self._append(tp, batch.records, txn)
        if self.config.acks == 0:
            future.set_result(None)  # type: ignore[arg-type]  # acks=0: no offsets
        else:
            future.set_result(RecordMetadata(topic, tp.partition, first, -1))
        return future

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        if topic not in self.broker.topics:
            return None
        return self.broker.partition_for(topic, key, partition)

    async def wait_for_topic(self, topic: str) -> None:
        await self._enter()
        if topic not in self.broker.topics:
            raise TransportError(f"no metadata for topic {topic!r}: it does not exist")

    def _check_sends(self) -> None:
        failures = [f.exception() for f in self._futures if f.done() and not f.cancelled()]
        errors = [e for e in failures if e is not None]
        for error in errors:
            if isinstance(error, ProducerFencedError):
                raise ProducerFencedError(str(error)) from error
        if errors:
            raise SendFailedError(f"{len(errors)} send(s) failed: {errors[0]}") from errors[0]

    async def flush(self) -> None:
        await self._enter()
        self._check_sends()
        if not self.transactional:
            self._futures = []

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        await self._enter()
        tid = self._require_transactional("send_offsets_to_transaction")
        if not self._in_transaction:
            raise TransportError("send_offsets_to_transaction outside a transaction")
        if self._fenced is not None:
            raise ProducerFencedError(str(self._fenced))
        try:
            state = self.broker.check_epoch(tid, self.producer_id, self.epoch)
        except ProducerFencedError as exc:
            raise self._fence(exc) from None
        meta = metadata or {}
        self.broker.add_offsets(
            state,
            {_tp(tp): o for tp, o in offsets.items()},
            group,
            {_tp(tp): meta.get(tp, "") for tp in offsets},
        )

    async def commit_transaction(self) -> None:
        await self._enter()
        tid = self._require_transactional("commit_transaction")
        if not self._in_transaction:
            raise TransportError("commit_transaction without an open transaction")
        if self._fenced is not None:
            raise ProducerFencedError(str(self._fenced))
        self._check_sends()
        self._end_transaction(tid, commit=True)

    async def abort_transaction(self) -> None:
        """Abort the open transaction; a no-op when none is open."""
        await self._enter()
        tid = self._require_transactional("abort_transaction")
        if self._fenced is not None:
            raise ProducerFencedError(str(self._fenced))
        if not self._in_transaction:
            return
        self._end_transaction(tid, commit=False)

    def _end_transaction(self, tid: str, *, commit: bool) -> None:
        """EndTxn: the coordinator checks our epoch first, so a fenced producer ends nothing."""
        try:
            state = self.broker.check_epoch(tid, self.producer_id, self.epoch)
        except ProducerFencedError as exc:
            known = self.broker.producers.get(tid)
            timed_out = (
                known is not None
                and known.producer_id == self.producer_id
                and known.timed_out_epoch == self.epoch
            )
            if commit and timed_out:  # the coordinator aborted it: a known abort
                exc = AbortedByCoordinatorError(
                    f"{exc} (EndTxn(commit) answered INVALID_TXN_STATE: the coordinator had "
                    "aborted the transaction)"
                )
            raise self._fence(exc) from None
        if state.current is not None:
            self.broker.end_transaction(state.current, commit=commit)
        self._in_transaction = False
        self._futures = []

    def __repr__(self) -> str:
        return f"<MemoryProducer {self.config.transactional_id or self.config.client_id}>"


# -- admin ---------------------------------------------------------------------------------


class MemoryAdmin(_Client):
    async def start(self) -> None:
        await self._enter()

    async def close(self) -> None:
        self.closed = True

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        await self._enter()
        return {t: len(self.broker.topics[t].partitions) for t in topics if t in self.broker.topics}

    async def create_topics(self, specs: Collection[TopicSpec]) -> None:
        await self._enter()
        for spec in specs:
            self.broker.create_topic(spec.name, spec.partitions, dict(spec.configs))

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        await self._enter()
        return {_tp(tp): self.broker.log(_tp(tp)).high_watermark for tp in partitions}

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        await self._enter()
        for tp in partitions:
            self.broker.log(_tp(tp))  # raises for unknown partitions
        return {_tp(tp): 0 for tp in partitions}

    async def broker_limits(self) -> list[BrokerLimits] | None:
        await self._enter()
        return None  # the model has no broker configs to check against

    async def topic_configs(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, str]]:
        await self._enter()
        return {}  # the model enforces no topic config: nothing to check against

    async def check_exactly_once_support(self) -> None:
        await self._enter()

    async def open_transactions(self, prefix: str) -> list[str]:
        await self._enter()
        return sorted(
            {
                txn.transactional_id
                for txn in self.broker.open_transactions()
                if txn.transactional_id.startswith(prefix)
            }
        )
