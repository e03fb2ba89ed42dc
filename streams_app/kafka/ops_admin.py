"""The admin calls operators' tools make: transactions (KIP-664), the raw log, groups, topics.

The runtime's :class:`~streams_app.kafka.admin.KafkaAdmin` does what a worker needs at start;
this client serves ``streams-app txn|status|tables|reset`` and :mod:`streams_app.readback`:

- ListTransactions on every broker (each answers for the transactional ids it coordinates),
  DescribeTransactions routed to each id's coordinator, DescribeProducers to partition leaders;
- an ABORT marker written to a partition leader (WriteTxnMarkers), for hanging transactions;
- Fetch ``read_uncommitted`` returning the partition's bytes *as stored*: aiokafka's consumer
  drops control batches and never shows the batch headers (producer id, epoch, flags) an
  operator inspects;
- group description (members and their assignment), committed offsets, group deletion, an
  offset commit outside any generation (what reset tools do), topic listing and deletion.

Every call that goes to "the node that owns X" refreshes the metadata and tries again a few times
when the answer says ownership moved (NOT_LEADER, NOT_COORDINATOR, loading), like the Java admin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol.admin import DeleteGroupsRequest
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition as AioTopicPartition

from streams_app.errors import BrokerUnavailable, StreamsAppError
from streams_app.kafka.assignor import decode_subscription
from streams_app.kafka.txn_protocol import (
    AbortMarkerRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    TransactionListing,
    list_everywhere,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
TP = tuple[str, int]

#: Error codes these calls act on (aiokafka's table names some, not all).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
TRANSACTIONAL_ID_NOT_FOUND = 105
_MOVED = {
    UNKNOWN_TOPIC_OR_PARTITION,
    LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
}
_NODE_DOWN = (aerrors.KafkaConnectionError, aerrors.NodeNotReadyError, aerrors.RequestTimedOutError)
_COORDINATOR_MOVING = (
    aerrors.GroupCoordinatorNotAvailableError,
    aerrors.GroupLoadInProgressError,
    aerrors.NotCoordinatorForGroupError,
)
_TRANSACTION_COORDINATOR = 1
_ATTEMPTS = 10


class OpsAdminError(StreamsAppError):
    """A broker refused an operator's request; the message names the call, the code and why."""


class OpsAdminUnanswered(OpsAdminError):
    """The node owning what was asked never answered within the attempts (no leader, leader
    unreachable, ownership still moving): unlike a refusal, asking again later may succeed."""


def error_name(code: int) -> str:
    if code == TRANSACTIONAL_ID_NOT_FOUND:
        return "TRANSACTIONAL_ID_NOT_FOUND"
    error = aerrors.for_code(code)
    return str(getattr(error, "message", f"error {code}"))


class _Moved(Exception):
    """Ownership moved (leader or coordinator): refresh the metadata, then retry."""


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    #: When the open transaction began (ms since the epoch); -1 when none is open.
    start_time_ms: int
    #: The open transaction's partitions (when preparing: those still without a marker).
    partitions: tuple[TP, ...]


@dataclass(frozen=True)
class ProducerState:
    """A partition leader's record of one producer (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    #: Timestamp of the producer's last batch on the partition (ms).
    last_timestamp_ms: int
    #: Epoch of the coordinator that wrote this producer's last marker; -1: none yet.
    coordinator_epoch: int
    #: First offset of the producer's open transaction on the partition; -1: none open.
    current_txn_start_offset: int

    @property
    def has_open_transaction(self) -> bool:
        return self.current_txn_start_offset >= 0


@dataclass
class ProducersAnswer:
    """One round of DescribeProducers, partition by partition (``describe_producers_each``)."""

    #: The active producers of each partition that answered (none: the partition does not exist).
    states: dict[TP, list[ProducerState]]
    #: Partitions that gave no answer yet (no leader, leader unreachable or moving), and why.
    unanswered: dict[TP, str]
    #: Partitions whose leader refused the request (no READ permission, ...), and why.
    refused: dict[TP, str]


@dataclass(frozen=True)
class FetchedLog:
    """One Fetch (read_uncommitted) of one partition: the stored bytes and the offsets."""

    topic: str
    partition: int
    fetch_offset: int
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TP, ...]
    #: The member's web server (published in its subscription's user data), if any.
    web: str | None = None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    #: Empty, Stable, PreparingRebalance, CompletingRebalance or Dead.
    state: str
    protocol: str
    members: tuple[GroupMember, ...]


def _producer_states(response: Any) -> Iterable[tuple[TP, int, str, list[ProducerState]]]:
    """A DescribeProducers response, partition by partition: (tp, code, ": message", states)."""
    for topic, parts, _tags in response.topics:
        for index, code, message, producers, _t in parts:
            states = [ProducerState(*fields[:6]) for fields in producers]
            yield (topic, index), code, f": {message}" if message else "", states


def _member(fields: tuple[Any, ...]) -> GroupMember:
    """A DescribeGroups member (v0-v3 and v4+ differ only by group_instance_id after the id)."""
    member_id, client_id, host = fields[0], fields[-4], fields[-3]
    raw_metadata, raw_assignment = fields[-2], fields[-1]
    assignment: tuple[TP, ...] = ()
    if raw_assignment:
        decoded = ConsumerProtocolMemberAssignment.decode(raw_assignment)
        assignment = tuple(sorted((tp.topic, tp.partition) for tp in decoded.partitions()))
    web = None
    if raw_metadata:
        with contextlib.suppress(Exception):  # another client's protocol: no address
            web = decode_subscription(ConsumerProtocolMemberMetadata.decode(raw_metadata).user_data)
    return GroupMember(member_id, client_id, host, assignment, web)


class OpsAdmin:
    """Admin calls for operator tools. ``client_kwargs`` go to the aiokafka clients verbatim."""

    def __init__(
        self, bootstrap_servers: str, *, request_timeout_ms: int = 30_000, **client_kwargs: Any
    ) -> None:
        self.address = bootstrap_servers
        self._timeout = request_timeout_ms / 1000
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            client_id="streams-app-ops",
            **client_kwargs,
        )
        self._consumer_kwargs = dict(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            enable_auto_commit=False,
            client_id="streams-app-ops",
            **client_kwargs,
        )
        #: The offsets consumers (read_uncommitted: False, read_committed: True), each made and
        #: started on first use, not at start: most uses ask no offsets, and each consumer is a
        #: bootstrap of its own.
        self._consumers: dict[bool, AIOKafkaConsumer] = {}
        self._starting = asyncio.Lock()

    async def start(self) -> OpsAdmin:
        try:
            await self._admin.start()
        except aerrors.KafkaConnectionError as exc:
            await self.close()
            raise BrokerUnavailable(self.address) from exc
        return self

    async def close(self) -> None:
        consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            await consumer.stop()
        await self._admin.close()

    async def _consumer(self, *, committed: bool) -> AIOKafkaConsumer:
        """The read_committed or the read_uncommitted offsets consumer, started."""
        async with self._starting:
            consumer = self._consumers.get(committed)
            if consumer is None:
                isolation = "read_committed" if committed else "read_uncommitted"
                consumer = AIOKafkaConsumer(isolation_level=isolation, **self._consumer_kwargs)
                try:
                    await consumer.start()
                except aerrors.KafkaConnectionError as exc:
                    await consumer.stop()
                    raise BrokerUnavailable(self.address) from exc
                self._consumers[committed] = consumer
        return consumer

    async def __aenter__(self) -> OpsAdmin:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ----------------------------------------------------------------------------

    @property
    def _client(self) -> Any:
        return self._admin._client

    async def _send(self, node_id: int, request: Any) -> Any:
        client = self._client
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        while not await client.ready(node_id):
            if loop.time() > deadline:
                raise aerrors.NodeNotReadyError(f"broker {node_id} is not reachable")
            await asyncio.sleep(0.1)
        return await client.send(node_id, request)

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` again (after a metadata refresh) while ownership moves or a node is down."""
        last: BaseException | None = None
        for attempt in range(_ATTEMPTS):
            try:
                return await call()
            except (_Moved, *_NODE_DOWN) as exc:
                last = exc
                await asyncio.sleep(min(0.1 * 2**attempt, 1.0))
                await self._client.force_metadata_update()
        raise OpsAdminUnanswered(f"{what}: still failing after {_ATTEMPTS} attempts ({last})")

    def broker_ids(self) -> list[int]:
        return sorted(broker.nodeId for broker in self._client.cluster.brokers())

    async def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; raises :class:`OpsAdminError` at once if it does not exist
        (one Metadata request, which never creates it: the client's own metadata wait would
        poll for ``request_timeout_ms``, logging an error each time)."""
        cached = self._client.cluster.partitions_for_topic(topic)
        if cached:
            return sorted(cached)
        if not await self._topic_exists(topic):
            raise OpsAdminError(f"topic {topic!r} does not exist on {self.address}")
        try:
            found = await self._client._wait_on_metadata(topic)
        except aerrors.UnknownTopicOrPartitionError:
            raise OpsAdminError(f"topic {topic!r} does not exist on {self.address}") from None
        return sorted(found)

    async def _topic_exists(self, topic: str) -> bool:
        request = MetadataRequest([topic], allow_auto_topic_creation=False)
        response = await self._admin._send_request(request)
        for found in response.to_object()["topics"]:
            if found["topic"] == topic:
                return bool(found["error_code"] != UNKNOWN_TOPIC_OR_PARTITION)
        return False

    async def _leader(self, tp: TP) -> int:
        cluster = self._client.cluster
        leader = cluster.leader_for_partition(AioTopicPartition(*tp))
        if leader is None or leader < 0:
            await self.partitions(tp[0])
            leader = cluster.leader_for_partition(AioTopicPartition(*tp))
        if leader is None or leader < 0:
            raise _Moved(f"{tp[0]}[{tp[1]}] has no leader")
        return int(leader)

    async def _by_leader(self, partitions: Iterable[TP]) -> dict[int, list[TP]]:
        grouped: defaultdict[int, list[TP]] = defaultdict(list)
        for tp in partitions:
            grouped[await self._leader(tp)].append(tp)
        return grouped

    # -- transactions (KIP-664) --------------------------------------------------------------

    async def list_transactions(
        self,
        *,
        states: Collection[str] = (),
        producer_ids: Collection[int] = (),
        running_longer_than_ms: int = -1,
    ) -> tuple[list[TransactionListing], list[int]]:
        """Every transactional id known to the coordinators, and the brokers that did not answer.

        Each broker coordinates the ids of its ``__transaction_state`` partitions, so the union
        of all answers is the cluster's list. ``running_longer_than_ms`` is applied by brokers
        that support ListTransactions v1; callers filter by start time themselves otherwise.
        """
        await self._client.force_metadata_update()
        listings, missing = await list_everywhere(
            self._send,
            self.broker_ids(),
            states=states,
            producer_ids=producer_ids,
            running_longer_than_ms=running_longer_than_ms,
        )
        unreachable: list[int] = []
        for node_id, failure in sorted(missing.items()):
            if isinstance(failure, BaseException):
                if not isinstance(failure, _NODE_DOWN):
                    raise failure
                log.warning("broker %d did not answer ListTransactions (%s)", node_id, failure)
            elif failure != COORDINATOR_LOAD_IN_PROGRESS:
                raise OpsAdminError(f"ListTransactions on broker {node_id}: {error_name(failure)}")
            unreachable.append(node_id)
        return listings, unreachable

    async def _transaction_coordinator(self, transactional_id: str) -> int:
        try:
            node = await self._client.coordinator_lookup(_TRANSACTION_COORDINATOR, transactional_id)
        except _COORDINATOR_MOVING as exc:
            raise _Moved(str(exc)) from exc
        return int(node)

    async def describe_transactions(
        self, transactional_ids: Collection[str]
    ) -> dict[str, TransactionDescription | None]:
        """Each id's description from its coordinator; None for an id the coordinator does not
        know (never used, or expired after ``transactional.id.expiration.ms``)."""
        out: dict[str, TransactionDescription | None] = {}
        pending = sorted(set(transactional_ids))

        async def attempt() -> None:
            by_node: defaultdict[int, list[str]] = defaultdict(list)
            for txn_id in pending:
                by_node[await self._transaction_coordinator(txn_id)].append(txn_id)
            moved = False
            for node_id, ids in by_node.items():
                response = await self._send(node_id, DescribeTransactionsRequest(ids))
                for state in response.transaction_states:
                    code, txn_id, txn_state, timeout, start, pid, epoch, topics, _tags = state
                    if code in _MOVED:
                        moved = True
                        continue
                    pending.remove(txn_id)
                    if code == TRANSACTIONAL_ID_NOT_FOUND:
                        out[txn_id] = None
                        continue
                    if code:
                        raise OpsAdminError(
                            f"DescribeTransactions of {txn_id!r}: {error_name(code)}"
                        )
                    partitions = tuple(
                        sorted((topic, p) for topic, parts, _t in topics for p in parts)
                    )
                    out[txn_id] = TransactionDescription(
                        txn_id, node_id, txn_state, pid, epoch, timeout, start, partitions
                    )
            if moved or pending:
                raise _Moved("transaction coordinator moved")

        if pending:
            await self._retrying("DescribeTransactions", attempt)
        return out

    async def describe_producers(self, partitions: Collection[TP]) -> dict[TP, list[ProducerState]]:
        """The active producers of each partition, from its leader."""
        out: dict[TP, list[ProducerState]] = {}
        pending = set(partitions)

        async def attempt() -> None:
            for node_id, tps in (await self._by_leader(sorted(pending))).items():
                response = await self._send(node_id, DescribeProducersRequest(tps))
                for tp, code, message, states in _producer_states(response):
                    if code in _MOVED:
                        continue
                    if code:
                        raise OpsAdminError(
                            f"DescribeProducers of {tp[0]}[{tp[1]}]: {error_name(code)}{message}"
                        )
                    out[tp] = states
                    pending.discard(tp)
            if pending:
                raise _Moved("partition leaders moved")

        if pending:
            await self._retrying("DescribeProducers", attempt)
        return out

    async def describe_producers_each(self, partitions: Collection[TP]) -> ProducersAnswer:
        """One round of DescribeProducers where each partition stands alone: a partition without
        a leader, or whose leader does not answer, is reported as unanswered and does not void
        the answers of the others (:meth:`describe_producers` wants them all). A partition that
        does not exist is answered: no producer can have anything open there. No retry: the
        caller decides when to ask again."""
        answer = ProducersAnswer({}, {}, {})
        by_node: defaultdict[int, list[TP]] = defaultdict(list)
        with contextlib.suppress(*_NODE_DOWN, aerrors.KafkaError):
            await self._client.force_metadata_update()
        for tp in sorted(set(partitions)):
            try:
                by_node[await self._leader(tp)].append(tp)
            except _Moved as exc:
                exists = await self._partition_exists(tp)
                if exists is False:
                    answer.states[tp] = []
                else:
                    answer.unanswered[tp] = str(exc)
            except OpsAdminError:  # the topic does not exist
                answer.states[tp] = []
            except (*_NODE_DOWN, aerrors.KafkaError) as exc:
                answer.unanswered[tp] = f"its leader is unknown ({type(exc).__name__})"
        for node_id, tps in sorted(by_node.items()):
            try:
                response = await self._send(node_id, DescribeProducersRequest(tps))
            except (*_NODE_DOWN, aerrors.KafkaError) as exc:
                for tp in tps:
                    answer.unanswered[tp] = f"its leader, broker {node_id}, did not answer ({exc})"
                continue
            for tp, code, message, states in _producer_states(response):
                if code in _MOVED:
                    answer.unanswered[tp] = f"{error_name(code)} from broker {node_id}"
                elif code:
                    answer.refused[tp] = f"{error_name(code)}{message}"
                else:
                    answer.states[tp] = states
            for tp in tps:
                if tp not in answer.states and tp not in answer.refused:
                    answer.unanswered.setdefault(tp, f"broker {node_id} sent no answer for it")
        return answer

    async def _partition_exists(self, tp: TP) -> bool | None:
        """Whether the partition exists (None: the cluster did not say)."""
        try:
            return tp[1] in await self.partitions(tp[0])
        except OpsAdminError:
            return False
        except (*_NODE_DOWN, aerrors.KafkaError):
            return None

    async def abort_transaction(
        self, tp: TP, *, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Write an ABORT marker for ``producer_id`` on ``tp`` (its leader writes it).

        Needs the CLUSTER_ACTION permission on a secured cluster, like Kafka's
        ``kafka-transactions.sh abort``.
        """
        request = AbortMarkerRequest(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            partitions=[tp],
        )

        async def attempt() -> None:
            response = await self._send(await self._leader(tp), request)
            for _pid, topics, _tags in response.markers:
                for _name, parts, _t in topics:
                    for _index, code, _t2 in parts:
                        if code in _MOVED:
                            raise _Moved("partition leader moved")
                        if code:
                            raise OpsAdminError(
                                f"WriteTxnMarkers(ABORT) for producer {producer_id} epoch "
                                f"{producer_epoch} on {tp[0]}[{tp[1]}]: {error_name(code)}"
                            )

        await self._retrying("WriteTxnMarkers", attempt)

    # -- the raw log -------------------------------------------------------------------------

    async def fetch(self, tp: TP, offset: int, *, max_bytes: int = 1 << 20) -> FetchedLog:
        """The partition's stored batches from ``offset`` (read_uncommitted), as bytes.

        The first batch may start before ``offset`` (the broker returns whole batches) and the
        last may be cut short by ``max_bytes``.
        """
        request = FetchRequest(
            max_wait_time=0,
            min_bytes=0,
            max_bytes=max_bytes,
            isolation_level=0,
            topics=[(tp[0], [(tp[1], offset, max_bytes)])],
        )

        async def attempt() -> FetchedLog:
            response = await self._send(await self._leader(tp), request)
            if getattr(response, "error_code", 0):
                raise OpsAdminError(f"Fetch of {tp[0]}[{tp[1]}]: {error_name(response.error_code)}")
            for _topic, parts in response.topics:
                for part in parts:
                    code, high, lso = part[1], part[2], part[3]
                    log_start = part[4] if response.API_VERSION >= 5 else -1
                    if code in _MOVED:
                        raise _Moved("partition leader moved")
                    if code == OFFSET_OUT_OF_RANGE:
                        # The broker sends no offsets with this error (-1): ask for them.
                        raise OpsAdminError(
                            f"offset {offset} is outside {tp[0]}[{tp[1]}], which "
                            f"{await self._holds(tp)}; pick --from in that range"
                        )
                    if code:
                        raise OpsAdminError(f"Fetch of {tp[0]}[{tp[1]}]: {error_name(code)}")
                    return FetchedLog(
                        tp[0], tp[1], offset, bytes(part[-1] or b""), high, lso, log_start
                    )
            raise OpsAdminError(f"Fetch of {tp[0]}[{tp[1]}]: the broker sent no data for it")

        return await self._retrying("Fetch", attempt)

    # -- offsets -----------------------------------------------------------------------------

    async def end_offsets(
        self, partitions: Collection[TP], *, committed: bool = False
    ) -> dict[TP, int]:
        """High watermarks, or (``committed``) last stable offsets: where read_committed ends."""
        if not partitions:
            return {}
        consumer = await self._consumer(committed=committed)
        found = await consumer.end_offsets([AioTopicPartition(*tp) for tp in partitions])
        return {(tp.topic, tp.partition): int(o) for tp, o in found.items()}

    async def _holds(self, tp: TP) -> str:
        """The partition's offset range, in words (``holds offsets 0..18``)."""
        start = (await self.beginning_offsets([tp]))[tp]
        end = (await self.end_offsets([tp]))[tp]
        if end <= start:
            return f"holds no records (log start offset {start}, high watermark {end})"
        return f"holds offsets {start}..{end - 1} (high watermark {end})"

    async def beginning_offsets(self, partitions: Collection[TP]) -> dict[TP, int]:
        if not partitions:
            return {}
        consumer = await self._consumer(committed=False)
        found = await consumer.beginning_offsets([AioTopicPartition(*tp) for tp in partitions])
        return {(tp.topic, tp.partition): int(o) for tp, o in found.items()}

    # -- groups ------------------------------------------------------------------------------

    async def group_coordinator(self, group_id: str) -> int:
        """The group's coordinator, waiting while it is being elected or loaded (the first use
        of any group creates ``__consumer_offsets``)."""

        async def attempt() -> int:
            try:
                return int(await self._admin.find_coordinator(group_id))
            except _COORDINATOR_MOVING as exc:
                raise _Moved(str(exc)) from exc

        return await self._retrying(f"FindCoordinator({group_id!r})", attempt)

    async def describe_group(self, group_id: str) -> GroupDescription:
        async def attempt() -> GroupDescription:
            node_id = await self.group_coordinator(group_id)
            responses = await self._admin.describe_consumer_groups(
                [group_id], group_coordinator_id=node_id
            )
            for response in responses:
                for group in response.groups:
                    code, gid, state, _ptype, protocol, members = group[:6]
                    if gid != group_id:
                        continue
                    if code in _MOVED:
                        raise _Moved(error_name(code))
                    if code:
                        raise OpsAdminError(f"DescribeGroups of {group_id!r}: {error_name(code)}")
                    return GroupDescription(
                        group_id, state, protocol, tuple(_member(m) for m in members)
                    )
            return GroupDescription(group_id, "Dead", "", ())

        return await self._retrying(f"DescribeGroups({group_id!r})", attempt)

    async def committed_offsets(
        self, group_id: str, partitions: Collection[TP] | None = None
    ) -> dict[TP, int]:
        """The group's committed offsets (only partitions that have one)."""
        tps = [AioTopicPartition(*tp) for tp in partitions] if partitions else None
        node_id = await self.group_coordinator(group_id)
        found = await self._admin.list_consumer_group_offsets(
            group_id, group_coordinator_id=node_id, partitions=tps
        )
        return {
            (tp.topic, tp.partition): int(meta.offset)
            for tp, meta in found.items()
            if meta is not None and meta.offset >= 0
        }

    async def delete_group(self, group_id: str) -> bool:
        """Delete the group and its committed offsets; False if it did not exist.

        The coordinator refuses (NON_EMPTY_GROUP) while any member is alive.
        """
        node_id = await self.group_coordinator(group_id)
        response = await self._send(node_id, DeleteGroupsRequest([group_id]))
        for gid, code in response.results:
            if gid != group_id:
                continue
            if code == GROUP_ID_NOT_FOUND:
                return False
            if code == NON_EMPTY_GROUP:
                raise OpsAdminError(
                    f"group {group_id!r} has live members (NON_EMPTY_GROUP): stop its workers"
                )
            if code:
                raise OpsAdminError(f"DeleteGroups of {group_id!r}: {error_name(code)}")
        return True

    async def commit_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        """Commit ``offsets`` for an *empty* group, outside any generation (as reset tools do)."""
        by_topic: defaultdict[str, list[tuple[int, int, str]]] = defaultdict(list)
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic[topic].append((partition, offset, ""))
        request = OffsetCommitRequest(
            group_id,
            OffsetCommitRequest.DEFAULT_GENERATION_ID,
            "",
            OffsetCommitRequest.DEFAULT_RETENTION_TIME,
            list(by_topic.items()),
        )
        node_id = await self.group_coordinator(group_id)
        response = await self._send(node_id, request)
        for topic, parts in response.topics:
            for partition, code in parts:
                if code:
                    raise OpsAdminError(
                        f"committing {group_id!r} offsets of {topic}[{partition}]: "
                        f"{error_name(code)}"
                    )

    # -- topics and configs ------------------------------------------------------------------

    async def list_topics(self) -> list[str]:
        return sorted(await self._admin.list_topics())

    async def delete_topics(self, topics: Collection[str]) -> None:
        if not topics:
            return
        response = await self._admin.delete_topics(sorted(topics))
        for entry in response.topic_error_codes:
            name, code = entry[0], entry[1]
            if code and code != UNKNOWN_TOPIC_OR_PARTITION:
                raise OpsAdminError(f"deleting topic {name!r}: {error_name(code)}")

    async def broker_config(self, name: str) -> str | None:
        """One broker setting as the brokers report it (the first that answers)."""
        for node_id in self.broker_ids():
            resource = ConfigResource(ConfigResourceType.BROKER, str(node_id), {name: None})
            try:
                responses = await self._admin.describe_configs([resource])
            except _NODE_DOWN:
                continue
            for response in responses:
                for resource_entry in response.resources:
                    for entry in resource_entry[4]:
                        if entry[0] == name:
                            return None if entry[1] is None else str(entry[1])
        return None
