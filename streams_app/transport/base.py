"""The Kafka operations the runtime uses, as protocols a transport implements.

Kept deliberately small: only what exactly-once processing needs. Everything is asyncio; every
offset is "the next record to read", as in Kafka's own APIs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable


class TopicPartition(NamedTuple):
    """Interchangeable with ``aiokafka.TopicPartition`` (tuples compare and hash by value)."""

    topic: str
    partition: int


@runtime_checkable
class RecordLike(Protocol):
    """A consumed record. aiokafka's ``ConsumerRecord`` satisfies it without conversion."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]


class CommittedOffset(NamedTuple):
    """A group's committed offset of one partition and the metadata string stored with it.

    The runtime keeps each task's stream time there (``runtime.stream_time``), as Kafka Streams
    does: it commits in the same transaction as the offset, so it is exactly as durable.
    """

    offset: int
    metadata: str = ""


class RecordMetadataLike(Protocol):
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class GroupMetadata:
    """The consumer group membership a transaction's offsets are committed under (KIP-447).

    The runtime snapshots it when partitions are assigned and never reads live values: aiokafka
    resets generation and member id to -1/"" on errors, and the broker accepts a TxnOffsetCommit
    with those defaults *without* any fencing check.
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None

    @property
    def is_valid(self) -> bool:
        return self.generation_id >= 0 and bool(self.member_id)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerLimits:
    """The broker settings a worker's own settings must fit (read with DescribeConfigs).

    A value is None when the broker did not report it."""

    broker: str
    transaction_max_timeout_ms: int | None = None
    group_min_session_timeout_ms: int | None = None
    group_max_session_timeout_ms: int | None = None
    message_max_bytes: int | None = None


@dataclass(frozen=True)
class MemberSubscription:
    """One group member as the leader sees it at a rebalance: its topics and its user data."""

    topics: tuple[str, ...]
    user_data: bytes


@dataclass(frozen=True)
class MemberAssignment:
    """What the leader hands one member: its partitions and user data for it alone."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes = b""


class GroupAssignor(Protocol):
    """A partition assignor the runtime provides and a transport runs inside the group protocol.

    Kafka's consumer protocol lets every member attach bytes to its JoinGroup subscription and
    lets the leader attach bytes to each member's assignment; this is how Kafka Streams carries
    task offsets to the leader and standby tasks back (KIP-441). ``prepare`` runs on the leader
    before ``assign`` (it may ask the broker for end offsets); ``assign`` and the other calls
    must not block.
    """

    @property
    def name(self) -> str:
        """The protocol name every member must agree on."""
        ...

    def subscription_data(self) -> bytes:
        """This member's user data for its next JoinGroup (read just before it is sent)."""
        ...

    async def prepare(self) -> None: ...

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        partition_counts: Mapping[str, int],
    ) -> dict[str, MemberAssignment]:
        """Every member's assignment, by member id; ``partition_counts`` covers every topic any
        member subscribes to that exists."""
        ...

    def on_assignment(self, assignment: MemberAssignment) -> None:
        """This member's assignment, just before ``on_partitions_assigned`` runs."""
        ...


@dataclass(frozen=True)
class ConsumerConfig:
    """Consumer settings the runtime chooses per processing guarantee (see runtime.guarantees)."""

    group_id: str | None
    isolation_level: str = "read_committed"
    enable_auto_commit: bool = False
    auto_offset_reset: str = "earliest"
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    max_poll_records: int = 1_000
    fetch_max_wait_ms: int = 100
    rebalance_timeout_ms: int | None = None
    client_id: str = "streams-app"
    #: Static membership (``group.instance.id``, KIP-345); None: a dynamic member.
    group_instance_id: str | None = None
    #: The group's partition assignor (None: range, which keeps co-partitioned topics together).
    #: A transport that cannot run custom assignors uses range, and the runtime gets no
    #: standby tasks.
    assignor: GroupAssignor | None = field(default=None, compare=False)
    #: Where this member's web server is (``http://host:port``), published to the group so
    #: every member knows which address owns which partition (Kafka Streams'
    #: ``application.server``); None publishes nothing.
    application_server: str | None = None


@dataclass(frozen=True)
class ProducerConfig:
    """Producer settings the runtime chooses per processing guarantee (see runtime.guarantees)."""

    transactional_id: str | None
    acks: int | str = "all"
    enable_idempotence: bool = True
    transaction_timeout_ms: int = 10_000
    #: Kafka's transaction protocol version: None = 2 where the cluster has it, else 1.
    transaction_version: int | None = None
    request_timeout_ms: int = 30_000
    linger_ms: int = 5
    max_batch_size: int = 256 * 1024
    #: The largest request (and so the largest record) the producer sends.
    max_request_size: int = 1024 * 1024
    compression_type: str | None = None
    client_id: str = "streams-app"


class RebalanceListener(Protocol):
    """Called around a (eager) rebalance. ``on_partitions_revoked`` runs before the rejoin."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class ConsumerClient(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Leave the group (if any) and close."""
        ...

    def subscribe(self, topics: Collection[str], listener: RebalanceListener) -> None: ...

    def unsubscribe(self) -> None:
        """Leave the group; a later ``subscribe`` joins as a new member (after being fenced)."""
        ...

    def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Manual assignment, no group (used for changelog restore)."""
        ...

    def assignment(self) -> set[TopicPartition]: ...

    def fetch_ready(self) -> bool:
        """Whether ``getmany(timeout_ms=0)`` answers at once, from what is already fetched.
        False while the group rebalances: the client then waits for the new assignment
        whatever the timeout, and the worker must not wait there while it holds its
        processing lock (a commit in flight: runtime/commit.py)."""
        ...

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[RecordLike]]: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    async def position(self, tp: TopicPartition) -> int:
        """The next offset to fetch; past transaction markers once they have been fetched."""
        ...

    async def committed_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets, waiting out pending transactional commits.

        Implementations must use OffsetFetch with ``require_stable`` (KIP-447): a partition
        whose offsets are part of a still-open transaction (a zombie's) is not answered until
        that transaction completes, or the new owner would start from a stale offset.
        """
        ...

    async def committed_offsets_with_metadata(
        self, partitions: Collection[TopicPartition], *, stable: bool = True
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """:meth:`committed_offsets` with each offset's metadata string (same stability rules).

        ``stable=False`` answers at once with the last *committed* values, even for partitions
        whose newer offsets an open transaction holds: never a place to start from, but their
        metadata names the worker that committed them (:mod:`streams_app.runtime.fencing`)."""
        ...

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """A plain (non-transactional) offset commit, for at-least-once and at-most-once;
        ``metadata`` (per partition, default empty) is stored with the offsets."""
        ...

    def fetched_lag(self, tp: TopicPartition) -> int | None:
        """Records known to be on the broker past the consumer's position, as of the last fetch
        response for ``tp`` (its last stable offset under read_committed, else its high
        watermark); None while no fetch has answered for it. Kafka Streams' task idling
        (KIP-695) waits for a partition with lag instead of processing its siblings without it.
        """
        ...

    def pause(self, partitions: Collection[TopicPartition]) -> None: ...

    def resume(self, partitions: Collection[TopicPartition]) -> None: ...

    def group_metadata(self) -> GroupMetadata:
        """The membership as of now (the runtime snapshots it at assignment)."""
        ...

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's end offset as of the last fetch response (no request; None before
        one): what consumer lag is measured against."""
        ...

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        """The partition's last stable offset as of the last fetch response (None before one):
        read_committed readers cannot pass it while a transaction is open before it."""
        ...

    def partition_hosts(self) -> Mapping[TopicPartition, str]:
        """Which member's ``application_server`` owns each partition of the group, as of the
        last assignment (empty when the members publish no address)."""
        ...


@runtime_checkable
class RebalanceRequester(Protocol):
    """A group consumer that can ask its group for a rebalance (Java's ``enforceRebalance``):
    the probing rebalances that move warmed-up tasks. Optional: transports without it never
    probe."""

    def request_rebalance(self) -> None: ...


class ProducerClient(Protocol):
    @property
    def transactional(self) -> bool: ...

    async def start(self) -> None:
        """For a transactional producer: InitProducerId, which fences any older instance with
        the same transactional.id and aborts the transaction it left open."""
        ...

    async def stop(self) -> None: ...

    async def begin_transaction(self) -> None: ...

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
        """Enqueue a record; the returned future resolves when the broker acknowledged it."""
        ...

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """TxnOffsetCommit carrying ``group``'s generation and member id (KIP-447), and per
        partition the ``metadata`` string (default empty) committed with the offset."""
        ...

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...

    async def flush(self) -> None: ...


class AppendedRecord(Protocol):
    """What appending a record to a batch reports: its offset within the batch."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...


class RecordBatch(Protocol):
    """Records for one partition, built in memory and enqueued whole (aiokafka's BatchBuilder)."""

    def append(
        self,
        *,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = ...,
    ) -> AppendedRecord | None:
        """Add a record; None when the batch is full (the first record always fits)."""
        ...

    def close(self) -> None: ...

    def record_count(self) -> int: ...


@runtime_checkable
class BatchingProducerClient(ProducerClient, Protocol):
    """A producer that also takes whole batches: the runtime's fast path, optional.

    Enqueuing a batch costs one call and one future instead of one per record; the runtime
    falls back to :meth:`ProducerClient.send` with transports that lack it.
    """

    def create_batch(self) -> RecordBatch: ...

    async def send_batch(
        self, batch: RecordBatch, topic: str, partition: int
    ) -> asyncio.Future[RecordMetadataLike]:
        """Enqueue a closed batch; the future resolves with its *first* record's metadata."""
        ...

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        """The partition a record goes to (``partition``, checked, or the default partitioner's
        choice for ``key``); None while the topic's metadata is not known yet."""
        ...

    async def wait_for_topic(self, topic: str) -> None:
        """Fetch the topic's metadata (raises if the topic does not exist)."""
        ...


#: Appends one record to a batch in one call: (the record's offset in the batch, timestamp,
#: key, value, headers as a list) -> where it landed, or None when the batch is full.
RawAppend = Callable[
    [int, int | None, bytes | None, bytes | None, Sequence[tuple[str, bytes]]],
    AppendedRecord | None,
]


@runtime_checkable
class DirectBatchingProducerClient(BatchingProducerClient, Protocol):
    """A batching producer whose batches the runtime may fill through the builder itself.

    aiokafka's ``BatchBuilder.append`` is a Python method around a C one; with a worker's
    output and changelog records all going through it, calling the C method directly is
    about a third of a microsecond less per record (BENCHMARKS.md, Other leads). The caller
    then numbers the records and says how many there were before the batch is sent: the
    producer's sequence numbers advance by that count.
    """

    def raw_append(self, batch: RecordBatch) -> RawAppend | None:
        """The direct appender of ``batch``, or None when it has none (use ``append``)."""
        ...

    def seal_batch(self, batch: RecordBatch, records: int) -> None:
        """Close ``batch``, filled with ``records`` records through its direct appender."""
        ...


class LeftOpen(NamedTuple):
    """A partition a transaction given up wrote to, with the producer id and epoch it wrote
    with: where the coordinator's ABORT marker may have been skipped."""

    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    #: Set for the offsets the transaction sent: ``tp`` is then :data:`GROUP_OFFSETS`, and the
    #: check asks the partition of ``__consumer_offsets`` that holds this group.
    group: str | None = None


#: The ``__consumer_offsets`` partition of :attr:`LeftOpen.group`, not resolved yet.
GROUP_OFFSETS = TopicPartition("__consumer_offsets", -1)


@dataclass
class LeftOpenCheck:
    """One round of :meth:`LeftoverAbortingProducerClient.abort_left_open`. Every entry asked
    about that is in neither map was answered: nothing of that transaction is open there."""

    #: Found still open, and aborted here: the offset the transaction began at.
    aborted: dict[LeftOpen, int] = field(default_factory=dict)
    #: Not answered yet (no leader, leader unreachable, no answer in time), and why.
    unanswered: dict[LeftOpen, str] = field(default_factory=dict)


@runtime_checkable
class LeftoverAbortingProducerClient(ProducerClient, Protocol):
    """A transactional producer that can end what a transaction it gave up left open.

    The coordinator ends an abandoned transaction (timed out, or fenced by the next
    InitProducerId) by writing ABORT markers to its partitions, but Kafka 4.3 skips the marker
    of a partition that has no leader at that moment (its metadata cache answers "no leader
    endpoint", which the marker sender takes for a deleted partition). The records stay an open
    transaction of the producer id there, and the next transaction of the same producer id
    that writes to the partition *joins* it: its commit marker commits the aborted records too.
    Optional: transports without it never check."""

    def producer_identity(self) -> tuple[int, int] | None:
        """The producer id and epoch of the open (or last) transaction; None before start."""
        ...

    async def left_open_before_start(self, *, request_timeout_ms: int) -> list[LeftOpen]:
        """Before :meth:`start`: the partitions of a transaction our transactional id still has
        ongoing at its coordinator (a process killed in the middle of one), with the producer
        id and epoch that wrote them. The InitProducerId of :meth:`start` aborts it, and that
        abort's markers are the ones a partition without a leader misses. Best effort: an id
        the coordinator cannot describe yet gives none."""
        ...

    async def leaderless(self, partitions: Collection[TopicPartition]) -> set[TopicPartition]:
        """Those of ``partitions`` that have no leader in freshly fetched metadata (one that
        cannot be fetched counts as none: the caller then checks rather than trusts)."""
        ...

    async def abort_left_open(
        self, left: Collection[LeftOpen], *, request_timeout_ms: int
    ) -> LeftOpenCheck:
        """Ask each entry's partition (each on its own: one without a leader does not hold up
        the others) whether its producer id still has a transaction of its epoch open there,
        and write an ABORT marker where it has. Raises
        :class:`~streams_app.transport.errors.TransactionLeftOpenError` for one found open that
        the broker refuses to abort."""
        ...


class AdminClient(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        """Partition count of each topic that exists; missing topics are left out."""
        ...

    async def create_topics(self, specs: Collection[TopicSpec]) -> None:
        """Create the topics that do not exist yet; existing ones are left alone."""
        ...

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """High watermarks (read_uncommitted ListOffsets): restore reads up to these."""
        ...

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]: ...

    async def check_exactly_once_support(self) -> None:
        """Raise BrokerTooOld unless the broker has TxnOffsetCommit v3 and OffsetFetch v7."""
        ...

    async def broker_limits(self) -> list[BrokerLimits] | None:
        """Each broker's limits; None when the principal may not describe broker configs."""
        ...

    async def topic_configs(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, str]]:
        """The settings ``keys`` of each existing topic the principal may describe, as the
        broker reports them (its defaults included; a setting without a value left out)."""
        ...

    async def open_transactions(self, prefix: str) -> list[str]:
        """The transactional ids starting with ``prefix`` that have a transaction open now
        (KIP-664 ListTransactions on every broker, state ``Ongoing``). Raises TransportError
        when no broker answered; a broker that did not answer only leaves its ids out."""
        ...


class Transport(Protocol):
    """Makes the clients of one worker."""

    @property
    def address(self) -> str:
        """Where the brokers are, for error messages."""
        ...

    def consumer(self, config: ConsumerConfig) -> ConsumerClient: ...

    def producer(self, config: ProducerConfig) -> ProducerClient: ...

    def admin(self) -> AdminClient: ...

    def partition_for_key(self, key: bytes, partitions: int) -> int:
        """The partition the default partitioner sends ``key`` to (murmur2, as Kafka's Java
        client): where a table's key lives, for interactive queries."""
        ...
