"""The real transport: the protocols of :mod:`streams_app.transport.base` on Kafka.

Built on :mod:`streams_app.kafka`, our KIP-447 extension of aiokafka. This module only adapts
signatures and translates errors into :mod:`streams_app.transport.errors`; it touches nothing
private of aiokafka.

Error translation, by what the runtime must do (see ``transport/errors.py``):

==========================================================  =========================
aiokafka / streams_app.kafka                                 raised to the runtime
==========================================================  =========================
ProducerFenced, INVALID_PRODUCER_EPOCH (47), PRODUCER_FENCED  ProducerFencedError
(90), anywhere in the cause chain
INVALID_TXN_STATE (48) on EndTxn(commit): the coordinator    AbortedByCoordinatorError
had aborted the transaction                                  (a ProducerFencedError)
TxnOffsetCommit 22/25/27/82, a membership with generation    CommitFailedError
-1 / no member id, consumer CommitFailedError
a send of the transaction failed (at the broker, or in       SendFailedError
``send`` itself)
the producer's sender died (transaction manager FATAL), or   FatalProducerError
an earlier broker-side send failure left a sequence gap
other Kafka errors inside a transaction                      TransactionAbortableError
==========================================================  =========================
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import aiokafka.errors as aerrors
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as AioTopicPartition

from streams_app.errors import AuthorizationError, BrokerUnavailable, ConfigError, StreamsAppError
from streams_app.kafka import (
    InvalidGroupMetadataError,
    KafkaAdmin,
    OffsetCommitFencedError,
    ProducerUnusableError,
    StableConsumer,
    TransactionalProducer,
    TransactionSendFailedError,
    is_aborted_by_coordinator,
    is_fencing_error,
)
from streams_app.kafka import logs as kafka_logs
from streams_app.kafka.admin import unavailable
from streams_app.kafka.assignor import (
    AddressRangeAssignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    frame_user_data,
    unframe_user_data,
)
from streams_app.kafka.ops_admin import OpsAdmin, OpsAdminError, OpsAdminUnanswered, ProducerState
from streams_app.kafka.placement import CONSUMER_OFFSETS, coordinator_partition
from streams_app.transport.base import (
    BrokerLimits,
    CommittedOffset,
    ConsumerConfig,
    GroupAssignor,
    GroupMetadata,
    LeftOpen,
    LeftOpenCheck,
    MemberAssignment,
    MemberSubscription,
    ProducerConfig,
    RawAppend,
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
    FatalProducerError,
    GroupProtocolMismatchError,
    ProducerFencedError,
    RecordRejectedError,
    SendFailedError,
    TransactionAbortableError,
    TransactionLeftOpenError,
    TransportError,
    is_record_rejected,
)

log = logging.getLogger(__name__)

#: The aiokafka client arguments ``security=`` may carry (passed through verbatim, never logged).
SECURITY_KEYS = frozenset(
    {
        "security_protocol",
        "ssl_context",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
    }
)

#: How long a transactional producer's start (bootstrap + InitProducerId) may take. aiokafka
#: retries InitProducerId forever, e.g. while ``__transaction_state`` cannot be created.
START_TIMEOUT_S = 60.0
#: How long ``committed_offsets`` waits out an open transaction holding the offsets. The
#: broker aborts such a transaction after its transaction.timeout.ms (ours: 10 s).
COMMITTED_OFFSETS_TIMEOUT_S = 60.0


def _aio(tp: tuple[str, int]) -> AioTopicPartition:
    return AioTopicPartition(tp[0], tp[1])


def _ours(tp: tuple[str, int]) -> TopicPartition:
    return TopicPartition(tp[0], tp[1])


_QUOTED = re.compile(r"'([^']+)'")


def authorization_error(
    exc: BaseException,
    principal: str,
    *,
    topic_operation: str,
    topic: str | None = None,
    group: str | None = None,
    transactional_id: str | None = None,
) -> AuthorizationError | None:
    """The missing ACL behind ``exc`` (or anything in its cause chain), or None.

    Authorization failures are fatal, as in Kafka Streams: retrying cannot help until an
    operator adds the ACL, and aborting and retrying forever would look like a stalled worker.
    ``topic_operation`` is what the caller was doing with topics (READ when fetching, WRITE
    when producing, CREATE when creating them).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TransactionSendFailedError):
            for failure in current.failures:
                found = authorization_error(
                    failure, principal, topic_operation=topic_operation, topic=topic
                )
                if found is not None:
                    return found
        text = str(current)
        if isinstance(current, aerrors.TransactionalIdAuthorizationFailed):
            name = transactional_id or _first_name(text) or "?"
            return AuthorizationError("WRITE", "transactional id", name, principal)
        if isinstance(current, aerrors.GroupAuthorizationFailedError):
            name = group or _first_name(text) or text.rsplit(":", 1)[-1].strip() or "?"
            return AuthorizationError("READ", "group", name, principal)
        if isinstance(current, aerrors.TopicAuthorizationFailedError):
            name = _first_name(text) or topic or text.rsplit(":", 1)[-1].strip() or "?"
            return AuthorizationError(topic_operation, "topic", name, principal)
        if isinstance(current, aerrors.ClusterAuthorizationFailedError):
            operation = "CREATE" if topic_operation == "CREATE" else "CLUSTER_ACTION"
            return AuthorizationError(operation, "cluster", "kafka-cluster", principal)
        current = current.__cause__ or current.__context__
    return None


def _first_name(text: str) -> str | None:
    found = _QUOTED.search(text)
    return found.group(1) if found else None


class KafkaTransport:
    """Makes the Kafka clients of one worker.

    ``security`` holds aiokafka client arguments for TLS/SASL (``security_protocol``,
    ``ssl_context``, ``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``, ...)
    and is passed through verbatim to every client; its values are never logged or shown.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        security: Mapping[str, Any] | None = None,
        principal: str | None = None,
    ) -> None:
        security = dict(security or {})
        unknown = sorted(set(security) - SECURITY_KEYS)
        if unknown:
            raise ConfigError(
                "security",
                f"unknown key(s) {unknown}",
                f"use only aiokafka's security arguments: {sorted(SECURITY_KEYS)}",
            )
        if not bootstrap_servers:
            raise ConfigError("broker", "no bootstrap servers given", "set broker=host:port")
        self._bootstrap = bootstrap_servers
        self._security = security
        user = security.get("sasl_plain_username")
        #: Who the broker thinks we are, for errors naming a missing ACL.
        self.principal = principal or (f"User:{user}" if user else "User:ANONYMOUS")
        kafka_logs.install()
        kafka_logs.register_client(bootstrap_servers, security)

    def __repr__(self) -> str:
        return f"KafkaTransport({self._bootstrap!r}, security keys={sorted(self._security)})"

    @property
    def address(self) -> str:
        return self._bootstrap

    def consumer(self, config: ConsumerConfig) -> KafkaConsumerClient:
        return KafkaConsumerClient(self._bootstrap, config, self._security, self.principal)

    def producer(self, config: ProducerConfig) -> KafkaProducerClient:
        return KafkaProducerClient(self._bootstrap, config, self._security, self.principal)

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(self._bootstrap, self._security, self.principal)

    def partition_for_key(self, key: bytes, partitions: int) -> int:
        return (int(murmur2(key)) & 0x7FFFFFFF) % partitions

    def unreachable_since(self) -> float | None:
        """Wall-clock time since when no bootstrap server answers (None: one does); see
        :func:`streams_app.kafka.logs.unreachable_since`."""
        return kafka_logs.unreachable_since([s.strip() for s in self._bootstrap.split(",")])


# -- consumer ------------------------------------------------------------------------------


class _ListenerAdapter(ConsumerRebalanceListener):  # type: ignore[misc]
    """Our RebalanceListener as aiokafka's (aiokafka awaits both callbacks).

    aiokafka only *logs* an exception raised in a callback and carries on with the rebalance;
    we keep it and re-raise it from the next ``getmany`` (as Java's ``poll`` does), so that the
    runtime learns its revocation commit or assignment setup failed.
    """

    def __init__(self, listener: RebalanceListener, client: KafkaConsumerClient) -> None:
        self._listener = listener
        self._client = client

    async def on_partitions_revoked(self, revoked: Collection[tuple[str, int]]) -> None:
        try:
            await self._listener.on_partitions_revoked({_ours(tp) for tp in revoked})
        except Exception as exc:
            log.exception("on_partitions_revoked failed; re-raised from the next getmany")
            self._client._listener_error = exc

    async def on_partitions_assigned(self, assigned: Collection[tuple[str, int]]) -> None:
        try:
            await self._listener.on_partitions_assigned({_ours(tp) for tp in assigned})
        except Exception as exc:
            log.exception("on_partitions_assigned failed; re-raised from the next getmany")
            self._client._listener_error = exc


class _AssignorAdapter:
    """A :class:`~streams_app.transport.base.GroupAssignor` as aiokafka runs assignors.

    aiokafka calls ``name``, ``metadata``, ``assign`` and ``on_assignment`` on whatever object
    is in ``partition_assignment_strategy`` (an instance works as well as the class-level
    assignors it ships), and our coordinator awaits ``prepare_assignment`` before ``assign``
    (``streams_app.kafka.consumer``). This adapter converts between aiokafka's structs and the
    transport's plain ones, and carries the members' web addresses next to the assignor's own
    user data, as :class:`~streams_app.kafka.assignor.AddressRangeAssignor` does under range:
    ``partition_hosts`` works whichever protocol the group chose.
    """

    version = 0

    def __init__(self, assignor: GroupAssignor, hosts: AddressRangeAssignor) -> None:
        self._assignor = assignor
        self._hosts = hosts
        self.name = assignor.name

    def metadata(self, topics: Collection[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(
            self.version,
            sorted(topics),
            frame_user_data(
                self._assignor.subscription_data(), encode_subscription(self._hosts.address)
            ),
        )

    async def prepare_assignment(self) -> None:
        await self._assignor.prepare()

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        subscriptions: dict[str, MemberSubscription] = {}
        addresses: dict[str, str | None] = {}
        for member_id, meta in members.items():
            ours, address = unframe_user_data(bytes(meta.user_data or b""))
            subscriptions[member_id] = MemberSubscription(tuple(meta.subscription), ours)
            addresses[member_id] = decode_subscription(address)
        counts: dict[str, int] = {}
        for subscription in subscriptions.values():
            for topic in subscription.topics:
                partitions = cluster.partitions_for_topic(topic)
                if partitions:
                    counts[topic] = len(partitions)
        planned = self._assignor.assign(subscriptions, counts)
        hosts: dict[str, dict[str, list[int]]] = {}
        for member_id, assignment in planned.items():
            host = addresses.get(member_id)
            if host is not None:
                for topic, partition in assignment.partitions:
                    hosts.setdefault(host, {}).setdefault(topic, []).append(partition)
        host_data = encode_assignment(hosts)
        out: dict[str, ConsumerProtocolMemberAssignment] = {}
        for member_id in members:
            assignment = planned.get(member_id, MemberAssignment(()))
            by_topic: dict[str, list[int]] = {}
            for topic, partition in assignment.partitions:
                by_topic.setdefault(topic, []).append(partition)
            out[member_id] = ConsumerProtocolMemberAssignment(
                self.version,
                sorted((topic, sorted(ps)) for topic, ps in by_topic.items()),
                frame_user_data(assignment.user_data, host_data),
            )
        return out

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        ours, host_data = unframe_user_data(bytes(assignment.user_data or b""))
        self._hosts.hosts = decode_assignment(host_data)
        self._assignor.on_assignment(
            MemberAssignment(tuple(_ours(tp) for tp in assignment.partitions()), ours)
        )


class KafkaConsumerClient:
    """``ConsumerClient`` on :class:`streams_app.kafka.StableConsumer`.

    Range assignor (co-partitioned topics land together), committed offsets read with
    ``require_stable``, heartbeats during ``on_partitions_assigned``. ``subscribe``/``assign``
    may be called before ``start``; they take effect once started (``start`` does not wait for
    the first assignment). ``rebalance_timeout_ms=None`` means ``max_poll_interval_ms``, as in
    Java (aiokafka's default is the session timeout: a revocation callback that outlasts it
    gets the member dropped from the group).
    """

    def __init__(
        self,
        bootstrap: str,
        config: ConsumerConfig,
        security: Mapping[str, Any],
        principal: str = "User:ANONYMOUS",
    ) -> None:
        self._bootstrap = bootstrap
        self._config = config
        self._security = security
        self._principal = principal
        self._consumer: StableConsumer | None = None
        self._pending: tuple[str, Any] | None = None
        self._listener_error: Exception | None = None
        self._leaving: asyncio.Task[None] | None = None
        #: Range assignment that also publishes ``application_server`` to the group.
        self._assignor = AddressRangeAssignor(config.application_server)

    @property
    def _c(self) -> StableConsumer:
        if self._consumer is None:
            raise TransportError("the consumer is not started")
        return self._consumer

    async def start(self) -> None:
        config = self._config
        consumer = StableConsumer(
            bootstrap_servers=self._bootstrap,
            client_id=config.client_id,
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            isolation_level=config.isolation_level,
            enable_auto_commit=config.enable_auto_commit,
            auto_offset_reset=config.auto_offset_reset,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            max_poll_records=config.max_poll_records,
            fetch_max_wait_ms=config.fetch_max_wait_ms,
            # Java's default; aiokafka's (the session timeout) drops a member whose
            # revocation commit takes longer than the session timeout.
            rebalance_timeout_ms=config.rebalance_timeout_ms or config.max_poll_interval_ms,
            partition_assignment_strategy=self._assignors(),
            **self._security,
        )
        try:
            await consumer.start()
        except aerrors.KafkaConnectionError as exc:
            await consumer.stop()
            raise await unavailable(self._bootstrap, self._security) from exc
        except aerrors.KafkaError as exc:
            await consumer.stop()
            raise self._denied(exc) or TransportError(f"consumer start failed: {exc!r}") from exc
        self._consumer = consumer
        if self._pending is not None:
            kind, arg = self._pending
            self._pending = None
            if kind == "subscribe":
                topics, listener = arg
                self.subscribe(topics, listener)
            else:
                self.assign(arg)

    def _assignors(self) -> tuple[Any, ...]:
        """Ours first, range second: the broker picks the first protocol every member offers,
        so a group that still has members of an older version (range only) keeps working,
        with range's co-partitioned assignment and no standbys, until they are gone."""
        if self._config.assignor is None:
            return (self._assignor,)
        return (_AssignorAdapter(self._config.assignor, self._assignor), self._assignor)

    def request_rebalance(self) -> None:
        if self._consumer is not None:
            self._consumer.request_rejoin()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    def subscribe(self, topics: Collection[str], listener: RebalanceListener) -> None:
        if self._consumer is None:
            self._pending = ("subscribe", (list(topics), listener))
            return
        consumer, topics = self._consumer, list(topics)

        def subscribe(_: object = None) -> None:
            consumer.subscribe(topics=topics, listener=_ListenerAdapter(listener, self))

        leaving = self._leaving
        if leaving is not None and not leaving.done():
            # Join as a new member only once the LeaveGroup of ``unsubscribe`` is through.
            leaving.add_done_callback(subscribe)
        else:
            subscribe()

    def unsubscribe(self) -> None:
        """Leave the group (LeaveGroup); a later ``subscribe`` joins as a new member."""
        self._pending = None
        if self._consumer is not None:
            self._leaving = self._consumer.unsubscribe()

    def assign(self, partitions: Collection[TopicPartition]) -> None:
        if self._consumer is None:
            self._pending = ("assign", list(partitions))
            return
        self._consumer.assign([_aio(tp) for tp in partitions])

    def fetch_ready(self) -> bool:
        # aiokafka's fetched_records waits for the assignment while one is in progress; with
        # timeout 0 it awaits nothing else, so this check and the poll cannot be interleaved.
        consumer = self._consumer
        return consumer is not None and not consumer._subscription.reassignment_in_progress

    def assignment(self) -> set[TopicPartition]:
        if self._consumer is None:
            return set()
        return {_ours(tp) for tp in self._consumer.assignment()}

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[RecordLike]]:
        if self._listener_error is not None:
            error, self._listener_error = self._listener_error, None
            raise error
        try:
            batch = await self._c.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except aerrors.InconsistentGroupProtocolError as exc:
            raise GroupProtocolMismatchError(
                f"consumer group {self._config.group_id!r} has members that speak another "
                "assignment protocol (workers of another framework, e.g. faust-streaming, still "
                "running or not yet past their session timeout)"
            ) from exc
        except aerrors.KafkaError as exc:
            raise self._denied(exc) or TransportError(f"fetch failed: {exc!r}") from exc
        return {_ours(tp): records for tp, records in batch.items()}

    def _denied(self, exc: BaseException) -> AuthorizationError | None:
        return authorization_error(
            exc, self._principal, topic_operation="READ", group=self._config.group_id
        )

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._c.seek(_aio(tp), offset)

    async def position(self, tp: TopicPartition) -> int:
        try:
            return int(await self._c.position(_aio(tp)))
        except aerrors.IllegalStateError as exc:
            raise TransportError(f"{tp} is not assigned to this consumer") from exc

    async def committed_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        try:
            found = await self._c.committed_offsets(partitions, timeout=COMMITTED_OFFSETS_TIMEOUT_S)
        except (aerrors.KafkaError, aerrors.IllegalOperation) as exc:
            denied = self._denied(exc)
            raise denied or TransportError(f"reading committed offsets failed: {exc}") from exc
        return {_ours(tp): offset for tp, offset in found.items()}

    async def committed_offsets_with_metadata(
        self, partitions: Collection[TopicPartition], *, stable: bool = True
    ) -> dict[TopicPartition, CommittedOffset | None]:
        try:
            found = await self._c.committed_offsets_and_metadata(
                partitions, timeout=COMMITTED_OFFSETS_TIMEOUT_S, stable=stable
            )
        except (aerrors.KafkaError, aerrors.IllegalOperation) as exc:
            raise TransportError(f"reading committed offsets failed: {exc}") from exc
        return {
            _ours(tp): None if om is None else CommittedOffset(om.offset, om.metadata or "")
            for tp, om in found.items()
        }

    def fetched_lag(self, tp: TopicPartition) -> int | None:
        try:
            state = self._c._subscription.subscription.assignment.state_value(_aio(tp))
        except (AttributeError, KeyError):
            return None
        if state is None or not state.has_valid_position:
            return None
        end = state.lso if self._config.isolation_level == "read_committed" else state.highwater
        if end is None or end < 0:
            return None
        return max(0, int(end) - int(state.position))

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        if not offsets:
            return
        meta = metadata or {}
        try:
            await self._c.commit(
                {_aio(tp): OffsetAndMetadata(o, meta.get(tp, "")) for tp, o in offsets.items()}
            )
        except (aerrors.CommitFailedError, aerrors.IllegalStateError) as exc:
            raise CommitFailedError(f"offset commit rejected: {exc}") from exc
        except (aerrors.KafkaError, aerrors.IllegalOperation) as exc:
            raise TransportError(f"offset commit failed: {exc!r}") from exc

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        self._c.pause(*(_aio(tp) for tp in partitions))

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        self._c.resume(*(_aio(tp) for tp in partitions))

    def group_metadata(self) -> GroupMetadata:
        if self._consumer is None:
            if self._config.group_id is None:
                raise TransportError("group_metadata() needs a consumer with a group_id")
            return GroupMetadata(self._config.group_id, -1, "")
        try:
            return self._consumer.group_metadata()
        except aerrors.IllegalOperation as exc:
            raise TransportError(str(exc)) from exc

    def highwater(self, tp: TopicPartition) -> int | None:
        if self._consumer is None:
            return None
        try:
            found = self._consumer.highwater(_aio(tp))
        except (AssertionError, AttributeError, aerrors.IllegalStateError):
            return None  # not assigned (any more), or no subscription yet
        return None if found is None else int(found)

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        if self._consumer is None:
            return None
        try:
            found = self._consumer.last_stable_offset(_aio(tp))
        except (AssertionError, AttributeError, aerrors.IllegalStateError):
            return None
        return None if found is None or found < 0 else int(found)

    def partition_hosts(self) -> Mapping[TopicPartition, str]:
        return {_ours(tp): address for tp, address in self._assignor.hosts.items()}


# -- producer ------------------------------------------------------------------------------


class KafkaProducerClient:
    """``ProducerClient`` on :class:`streams_app.kafka.TransactionalProducer`.

    With a ``transactional_id``: exactly-once (KIP-447 offsets, send gate). Without: a plain
    producer (acks=all + idempotence for at-least-once, acks=0 for at-most-once) whose
    transactional methods raise :class:`TransportError`.

    ``send`` returns aiokafka's own future (no per-record wrapping, it is the hot path): when
    it fails, it fails with aiokafka's exception. ``flush`` and ``commit_transaction`` report
    such failures as :class:`SendFailedError`.
    """

    _PRUNE_AT = 10_000

    def __init__(
        self,
        bootstrap: str,
        config: ProducerConfig,
        security: Mapping[str, Any],
        principal: str = "User:ANONYMOUS",
    ) -> None:
        self._principal = principal
        if config.transactional_id is not None and config.acks not in ("all", -1):
            raise ConfigError(
                "acks", f"{config.acks!r} with a transactional producer", "use acks='all'"
            )
        if config.enable_idempotence and config.acks not in ("all", -1):
            raise ConfigError(
                "acks",
                f"{config.acks!r} with enable_idempotence=True",
                "use acks='all', or enable_idempotence=False for at-most-once",
            )
        self._bootstrap = bootstrap
        self._config = config
        self._security = security
        self._producer: TransactionalProducer | None = None
        # Non-transactional sends since the last flush (the transactional producer tracks its own).
        self._unflushed: list[asyncio.Future[Any]] = []

    @property
    def transactional(self) -> bool:
        return self._config.transactional_id is not None

    @property
    def _p(self) -> TransactionalProducer:
        if self._producer is None:
            raise TransportError("the producer is not started")
        return self._producer

    async def start(self) -> None:
        config = self._config
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self._bootstrap,
            "client_id": config.client_id,
            "acks": config.acks,
            "enable_idempotence": config.enable_idempotence,
            "request_timeout_ms": config.request_timeout_ms,
            "linger_ms": config.linger_ms,
            "max_batch_size": config.max_batch_size,
            "max_request_size": config.max_request_size,
            "compression_type": config.compression_type,
        }
        if config.transactional_id is not None:
            kwargs["transactional_id"] = config.transactional_id
            kwargs["transaction_timeout_ms"] = config.transaction_timeout_ms
            kwargs["transaction_version"] = config.transaction_version
        try:
            producer = TransactionalProducer(**kwargs, **self._security)
        except (ValueError, RuntimeError) as exc:
            raise ConfigError("producer", str(exc), "check the producer settings") from exc
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                await producer.start()
        except aerrors.KafkaConnectionError as exc:
            await producer.stop()
            raise await unavailable(self._bootstrap, self._security) from exc
        except TimeoutError as exc:
            await producer.stop()
            raise BrokerUnavailable(
                self._bootstrap,
                f"no transaction coordinator completed InitProducerId within "
                f"{START_TIMEOUT_S:g} s; check transaction.state.log.replication.factor and "
                "min.isr against the number of brokers",
            ) from exc
        except aerrors.IncompatibleBrokerVersion as exc:
            await producer.stop()
            if config.transaction_version == 2:
                raise ConfigError(
                    "transaction_version",
                    str(exc),
                    "leave transaction_version unset (version 2 where the cluster has it)",
                ) from exc
            raise self._translate(exc) from exc
        except aerrors.KafkaError as exc:
            await producer.stop()
            raise self._translate(exc) from exc
        self._producer = producer

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    def _translate(self, exc: BaseException) -> BaseException:
        """The transport error for ``exc`` (``exc`` itself when it is not a Kafka error)."""
        producer = self._producer
        tid = self._config.transactional_id
        if isinstance(exc, StreamsAppError):
            return exc
        denied = authorization_error(
            exc, self._principal, topic_operation="WRITE", transactional_id=tid
        )
        if denied is not None:
            return denied
        if is_fencing_error(exc):
            return self._fenced()
        if isinstance(exc, TransactionSendFailedError):
            for failure in exc.failures:
                if is_fencing_error(failure):
                    return self._translate(failure)
        if isinstance(exc, ProducerUnusableError | aerrors.ProducerClosed) or (
            producer is not None and producer.fatal_error is not None
        ):
            return FatalProducerError(f"producer {tid!r} is unusable, recreate it: {exc}")
        if isinstance(exc, OffsetCommitFencedError | InvalidGroupMetadataError):
            return CommitFailedError(str(exc))
        if isinstance(exc, TransactionSendFailedError):
            if any(is_record_rejected(failure) for failure in exc.failures):
                return RecordRejectedError(str(exc))
            return SendFailedError(str(exc))
        if isinstance(exc, aerrors.IllegalOperation):
            return TransportError(str(exc))
        if isinstance(exc, aerrors.KafkaError):
            if self.transactional:
                return TransactionAbortableError(f"transaction failed: {exc!r}")
            return TransportError(f"producer error: {exc!r}")
        return exc

    def _fenced(self) -> ProducerFencedError:
        return ProducerFencedError(
            f"producer with transactional.id {self._config.transactional_id!r} was fenced: a "
            "newer instance took the id, or the broker aborted its transaction after "
            f"transaction.timeout.ms ({self._config.transaction_timeout_ms} ms)"
        )

    def _not_transactional(self, what: str) -> TransportError:
        return TransportError(f"{what} needs a transactional producer (no transactional_id set)")

    async def begin_transaction(self) -> None:
        if not self.transactional:
            raise self._not_transactional("begin_transaction")
        try:
            await self._p.begin_transaction()
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

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
        try:
            fut: asyncio.Future[RecordMetadataLike] = await self._p.send(
                topic,
                value=value,
                key=key,
                partition=partition,
                timestamp_ms=timestamp_ms,
                headers=headers,
            )
        except aerrors.IllegalOperation as exc:
            raise TransportError(str(exc)) from exc
        except aerrors.KafkaError as exc:
            raise self._send_failed(topic, exc) from exc
        return self._sent(fut)

    def _send_failed(self, topic: str, exc: aerrors.KafkaError) -> BaseException:
        mapped = self._translate(exc)
        if is_record_rejected(exc):
            mapped = RecordRejectedError(f"send to topic {topic!r} refused: {exc!r}")
        elif not isinstance(mapped, ProducerFencedError | FatalProducerError | AuthorizationError):
            mapped = SendFailedError(f"send to topic {topic!r} failed: {exc!r}")
        return mapped

    def _sent(self, fut: asyncio.Future[RecordMetadataLike]) -> asyncio.Future[RecordMetadataLike]:
        if not self.transactional:
            self._unflushed.append(fut)
            if len(self._unflushed) >= self._PRUNE_AT:
                self._unflushed = [f for f in self._unflushed if not f.done() or _failed(f)]
        return fut

    # -- the batch path (BatchingProducerClient) ------------------------------------------

    def create_batch(self) -> RecordBatch:
        batch: RecordBatch = self._p.create_batch()
        return batch

    def raw_append(self, batch: RecordBatch) -> RawAppend | None:
        # aiokafka's BatchBuilder.append serializes (we give it bytes: no serializers), numbers
        # the record, then calls its C builder's append: the runtime numbers them itself.
        if type(batch) is not BatchBuilder:
            return None
        builder: Any = batch
        if builder._key_serializer is not None or builder._value_serializer is not None:
            return None
        if builder.record_count() or builder.closed():
            return None
        append: RawAppend = builder._builder.append
        return append

    def seal_batch(self, batch: RecordBatch, records: int) -> None:
        # The accumulator advances the partition's sequence number by the batch's record count,
        # which BatchBuilder keeps in _relative_offset: a wrong count breaks the sequence.
        assert type(batch) is BatchBuilder
        builder: Any = batch
        builder._relative_offset = records
        builder.close()

    async def send_batch(
        self, batch: RecordBatch, topic: str, partition: int
    ) -> asyncio.Future[RecordMetadataLike]:
        """Enqueue a closed batch; the future resolves with its first record's metadata."""
        try:
            fut: asyncio.Future[RecordMetadataLike] = await self._p.send_batch(
                batch, topic, partition=partition
            )
        except aerrors.IllegalOperation as exc:
            raise TransportError(str(exc)) from exc
        except aerrors.KafkaError as exc:
            raise self._send_failed(topic, exc) from exc
        return self._sent(fut)

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        producer = self._producer  # not ``_p``: a property call on every record sent
        if producer is None:
            raise TransportError("the producer is not started")
        try:
            return producer.choose_partition(topic, key, partition)
        except ValueError as exc:
            raise TransportError(str(exc)) from exc

    def keyed_partitions(self, topic: str) -> dict[bytes, int] | None:
        """The producer's remembered key -> partition answers for ``topic``, live (see
        ``TransactionalProducer.keyed_partitions``); None before it is started or while the
        topic's metadata is unknown."""
        producer = self._producer
        return None if producer is None else producer.keyed_partitions(topic)

    async def wait_for_topic(self, topic: str) -> None:
        try:
            await self._p.partitions_for(topic)
        except aerrors.KafkaError as exc:
            raise TransportError(f"no metadata for topic {topic!r}: {exc!r}") from exc

    async def flush(self) -> None:
        """Wait for every send so far; raise :class:`SendFailedError` if any failed.

        Transactional: the sends of the current transaction (they stay tracked, so the commit
        refuses too). Otherwise: the sends since the previous ``flush``.
        """
        producer = self._p
        try:
            if self.transactional:
                failures = await producer.wait_for_sends()
            else:
                await producer.flush()
                unflushed, self._unflushed = self._unflushed, []
                failures = [_failure(f) for f in unflushed if _failed(f)]
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        if failures:
            raise self._translate(TransactionSendFailedError(failures))

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        if not self.transactional:
            raise self._not_transactional("send_offsets_to_transaction")
        meta = metadata or {}
        try:
            await self._p.send_offsets_to_transaction(
                {_aio(tp): OffsetAndMetadata(o, meta.get(tp, "")) for tp, o in offsets.items()},
                group,
            )
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def commit_transaction(self) -> None:
        if not self.transactional:
            raise self._not_transactional("commit_transaction")
        try:
            await self._p.commit_transaction()
        except Exception as exc:
            if is_aborted_by_coordinator(exc):
                raise AbortedByCoordinatorError(
                    f"{self._fenced()} (EndTxn(commit) was answered INVALID_TXN_STATE: the "
                    "coordinator had aborted the transaction)"
                ) from exc
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    # -- what a transaction given up left open (LeftoverAbortingProducerClient) ------------

    def producer_identity(self) -> tuple[int, int] | None:
        if self._producer is None or not self.transactional:
            return None
        return self._producer.producer_id_and_epoch

    async def left_open_before_start(self, *, request_timeout_ms: int) -> list[LeftOpen]:
        tid = self._config.transactional_id
        if tid is None:
            return []
        admin = OpsAdmin(self._bootstrap, request_timeout_ms=request_timeout_ms, **self._security)
        try:
            async with asyncio.timeout(2 * request_timeout_ms / 1000):  # bootstrap, then ask
                await admin.start()
                found = (await admin.describe_transactions([tid])).get(tid)
        except Exception as exc:  # the start itself waits for the cluster, and says why
            log.debug("could not describe transactional id %s before start: %s", tid, exc)
            return []
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
        # Only an ongoing one: a prepared commit is committed by the coordinator (its records
        # must never be aborted), and once prepared the epoch may already be the next one.
        if found is None or found.state != "Ongoing":
            return []
        return [
            LeftOpen(TopicPartition(topic, partition), found.producer_id, found.producer_epoch)
            for topic, partition in found.partitions
        ]

    async def leaderless(self, partitions: Collection[TopicPartition]) -> set[TopicPartition]:
        wanted = set(partitions)
        if not wanted or self._producer is None:
            return wanted
        client = self._producer.client
        try:
            async with asyncio.timeout(self._config.request_timeout_ms / 1000):
                fetched = await client.force_metadata_update()
        except Exception:
            fetched = False
        if not fetched:  # no fresh metadata: nobody can say the leaders are there
            return wanted
        cluster = client.cluster
        return {tp for tp in wanted if cluster.leader_for_partition(_aio(tp)) in (None, -1)}

    async def abort_left_open(
        self, left: Collection[LeftOpen], *, request_timeout_ms: int
    ) -> LeftOpenCheck:
        """ABORT markers where an entry's producer id still has its epoch's transaction open.

        Asked once the new producer's InitProducerId has returned: the coordinator has ended
        those transactions by then, so one still open on a partition is one whose marker was
        never written (see :class:`~streams_app.transport.base.LeftoverAbortingProducerClient`).
        Each partition is answered on its own: one without a leader (the very case that skips
        markers) comes back unanswered, for the caller to ask again, and does not void the
        others. DescribeProducers needs READ on the topics: a partition that refuses it cannot
        be checked, and that is logged. WriteTxnMarkers needs CLUSTER_ACTION on a secured
        cluster: a transaction found open and refused its abort raises
        :class:`TransactionLeftOpenError`."""
        check = LeftOpenCheck()
        entries = sorted(set(left))
        if not entries:
            return check
        admin = OpsAdmin(self._bootstrap, request_timeout_ms=request_timeout_ms, **self._security)
        try:
            await admin.start()
        except BrokerUnavailable as exc:
            check.unanswered = {entry: str(exc) for entry in entries}
            return check
        try:
            where = await _where(admin, entries, check)
            answer = await admin.describe_producers_each(set(where.values()))
            for (topic, index), why in sorted(answer.refused.items()):
                log.warning(
                    "could not check %s[%d] for a transaction left open by the transaction "
                    "given up (%s): run `streams-app txn hanging` to see whether one holds its "
                    "last stable offset",
                    topic,
                    index,
                    why,
                )
            for entry, tp in where.items():
                if tp in answer.unanswered:
                    check.unanswered[entry] = answer.unanswered[tp]
                    continue
                state = _open_by(answer.states.get(tp, ()), entry)
                if state is None:
                    continue
                try:
                    await admin.abort_transaction(
                        tp,
                        producer_id=entry.producer_id,
                        producer_epoch=state.producer_epoch,
                        coordinator_epoch=state.coordinator_epoch,
                    )
                except OpsAdminUnanswered as exc:
                    check.unanswered[entry] = str(exc)
                    continue
                except (OpsAdminError, aerrors.KafkaError) as exc:
                    raise TransactionLeftOpenError(
                        f"the transaction this worker gave up (producer id {entry.producer_id}, "
                        f"epoch {entry.producer_epoch}) is still open on {tp[0]}[{tp[1]}] from "
                        f"offset {state.current_txn_start_offset}, and aborting it failed "
                        f"({exc}). Going on would let the next commit commit its records. "
                        "Stopping. Fix: abort it with `streams-app txn hanging --abort` (or "
                        "grant this worker CLUSTER_ACTION), then restart"
                    ) from exc
                check.aborted[entry] = state.current_txn_start_offset
            return check
        finally:
            await admin.close()

    async def abort_transaction(self) -> None:
        """Abort the open transaction; a no-op when none is open."""
        if not self.transactional:
            raise self._not_transactional("abort_transaction")
        try:
            await self._p.abort_transaction()
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc


def _failed(fut: asyncio.Future[Any]) -> bool:
    return fut.done() and (fut.cancelled() or fut.exception() is not None)


def _failure(fut: asyncio.Future[Any]) -> BaseException:
    if fut.cancelled():
        return asyncio.CancelledError("the send was cancelled")
    exc = fut.exception()
    assert exc is not None
    return exc


# -- admin ---------------------------------------------------------------------------------


class KafkaAdminClient:
    """``AdminClient`` on :class:`streams_app.kafka.KafkaAdmin`, with errors translated."""

    def __init__(
        self, bootstrap: str, security: Mapping[str, Any], principal: str = "User:ANONYMOUS"
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._principal = principal
        self._admin: KafkaAdmin | None = None

    @property
    def _a(self) -> KafkaAdmin:
        if self._admin is None:
            raise TransportError("the admin client is not started")
        return self._admin

    async def start(self) -> None:
        admin = KafkaAdmin(self._bootstrap, client_id="streams-app-admin", **self._security)
        await admin.start()  # raises BrokerUnavailable itself
        self._admin = admin

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        try:
            return await self._a.partition_counts(topics)
        except aerrors.KafkaError as exc:
            denied = authorization_error(exc, self._principal, topic_operation="DESCRIBE")
            raise denied or TransportError(f"describing topics failed: {exc!r}") from exc

    async def create_topics(self, specs: Collection[TopicSpec]) -> None:
        try:
            await self._a.create_topics(specs)
        except aerrors.KafkaError as exc:
            names = sorted(spec.name for spec in specs)
            denied = authorization_error(exc, self._principal, topic_operation="CREATE")
            raise denied or TransportError(f"creating topics {names} failed: {exc!r}") from exc

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        try:
            return await self._a.end_offsets(partitions)
        except aerrors.KafkaError as exc:
            raise TransportError(f"listing end offsets failed: {exc!r}") from exc

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        try:
            return await self._a.beginning_offsets(partitions)
        except aerrors.KafkaError as exc:
            raise TransportError(f"listing beginning offsets failed: {exc!r}") from exc

    async def broker_limits(self) -> list[BrokerLimits] | None:
        try:
            return await self._a.broker_limits()
        except aerrors.KafkaError as exc:
            raise TransportError(f"reading the brokers' configs failed: {exc!r}") from exc

    async def topic_configs(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, str]]:
        try:
            return await self._a.topic_configs(topics, keys)
        except aerrors.KafkaError as exc:
            raise TransportError(f"reading topic configs failed: {exc!r}") from exc

    async def check_exactly_once_support(self) -> None:
        try:
            await self._a.check_exactly_once_support()
        except aerrors.KafkaError as exc:
            raise TransportError(f"reading the brokers' API versions failed: {exc!r}") from exc

    async def open_transactions(self, prefix: str) -> list[str]:
        try:
            return await self._a.open_transactions(prefix)
        except aerrors.KafkaError as exc:
            raise TransportError(f"listing open transactions failed: {exc!r}") from exc


def _open_by(states: Iterable[ProducerState], entry: LeftOpen) -> ProducerState | None:
    """The entry's transaction, if the partition's leader shows it still open."""
    for state in states:
        if (
            state.producer_id == entry.producer_id
            and state.producer_epoch == entry.producer_epoch
            and state.has_open_transaction
        ):
            return state
    return None


async def _where(
    admin: OpsAdmin, entries: Sequence[LeftOpen], check: LeftOpenCheck
) -> dict[LeftOpen, tuple[str, int]]:
    """The partition to ask for each entry: its own, or its group's ``__consumer_offsets``
    partition. A group's that cannot be found yet is unanswered; where the topic cannot be
    described (no permission) or does not exist, nothing can be checked: dropped, warned."""
    where: dict[LeftOpen, tuple[str, int]] = {}
    for entry in entries:
        if entry.group is None:
            where[entry] = (entry.tp[0], entry.tp[1])
            continue
        try:
            count = len(await admin.partitions(CONSUMER_OFFSETS))
        except OpsAdminError as exc:
            log.warning("could not check the offsets of group %r (%s)", entry.group, exc)
            continue
        except aerrors.KafkaError as exc:
            check.unanswered[entry] = f"{CONSUMER_OFFSETS} unknown ({type(exc).__name__})"
            continue
        where[entry] = (CONSUMER_OFFSETS, coordinator_partition(entry.group, count))
    return where
