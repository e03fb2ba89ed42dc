"""Topic administration, offsets and the broker capability check the runtime needs at start.

Built on aiokafka's public clients: ``AIOKafkaAdminClient`` for metadata and CreateTopics, and a
group-less ``AIOKafkaConsumer`` (read_uncommitted) for ListOffsets, which already routes each
partition to its leader and retries leader changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, TypeVar

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.structs import TopicPartition as AioTopicPartition

from streams_app.aio import within
from streams_app.errors import BrokerTooOld, BrokerUnavailable, StreamsAppError, TopologyError
from streams_app.kafka.diagnose import diagnose
from streams_app.kafka.protocol import (
    OFFSET_FETCH_KEY,
    OFFSET_FETCH_VERSION,
    TXN_OFFSET_COMMIT_KEY,
    TXN_OFFSET_COMMIT_VERSION,
)
from streams_app.kafka.txn_protocol import list_everywhere
from streams_app.transport.base import BrokerLimits, TopicPartition, TopicSpec

log = logging.getLogger(__name__)

T = TypeVar("T")
#: A request failed because the broker it went to is down (or frozen).
_NODE_DOWN = (
    aerrors.KafkaConnectionError,
    aerrors.NodeNotReadyError,
    aerrors.RequestTimedOutError,
)

#: What exactly-once v2 needs from every broker: (api key, minimum version, name).
EXACTLY_ONCE_APIS = (
    (TXN_OFFSET_COMMIT_KEY, TXN_OFFSET_COMMIT_VERSION, "TxnOffsetCommit"),
    (OFFSET_FETCH_KEY, OFFSET_FETCH_VERSION, "OffsetFetch"),
)


def security_kwargs(client_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The TLS/SASL part of aiokafka client arguments."""
    return {
        k: v
        for k, v in client_kwargs.items()
        if k in ("security_protocol", "ssl_context") or k.startswith("sasl_")
    }


async def unavailable(bootstrap: str, security: Mapping[str, Any]) -> StreamsAppError:
    """The error for clients that could not start: the diagnosed cause (authentication, a
    TLS/SASL mismatch), else :class:`BrokerUnavailable` naming the address."""
    return await diagnose(bootstrap, security) or BrokerUnavailable(bootstrap)


class KafkaAdmin:
    """Implements ``streams_app.transport.base.AdminClient``.

    ``client_kwargs`` go to both aiokafka clients verbatim (security settings, client_id, ...).
    """

    def __init__(
        self, bootstrap_servers: str, *, request_timeout_ms: int = 30_000, **client_kwargs: Any
    ) -> None:
        self._address = bootstrap_servers
        self._security = security_kwargs(client_kwargs)
        self._timeout = request_timeout_ms / 1000
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            **client_kwargs,
        )
        self._offsets = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            isolation_level="read_uncommitted",
            enable_auto_commit=False,
            **client_kwargs,
        )
        self._started = False

    async def start(self) -> None:
        try:
            await self._admin.start()
            await self._offsets.start()
        except aerrors.KafkaConnectionError as exc:
            await self.close()
            raise await unavailable(self._address, self._security) from exc
        # The group-less consumer's start made a task (aiokafka's NoGroupCoordinator) that
        # its stop cancels and awaits: cancelled before its first step, it raises the
        # CancelledError into stop(), and an app command that is done at once exited 1 with it.
        # One turn of the loop lets the task begin (it then ends quietly when cancelled).
        await asyncio.sleep(0)
        self._started = True

    async def close(self) -> None:
        await self._offsets.stop()
        await self._admin.close()
        self._started = False

    # -- topics ------------------------------------------------------------------------------

    async def _any_node(self, request: Callable[[], Awaitable[T]]) -> T:
        """``request()``, again while it fails for want of the node it picked.

        aiokafka's admin client sends metadata requests to one random broker of the metadata,
        which lists a dead broker until its session expires, and does not try another: with one
        broker of three down, a third of the calls fail. Each retry picks again.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        while True:
            try:
                return await request()
            except _NODE_DOWN:
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(0.1)

    async def _describe(self, topics: Collection[str]) -> dict[str, list[dict[str, Any]]]:
        """Partitions of each existing topic (missing topics are left out)."""
        if not topics:
            return {}
        names = sorted(set(topics))
        described = await self._any_node(lambda: self._admin.describe_topics(names))
        found: dict[str, list[dict[str, Any]]] = {}
        for topic in described:
            error = aerrors.for_code(topic["error_code"])
            if error is aerrors.NoError:
                found[topic["topic"]] = topic["partitions"]
            elif error not in (aerrors.UnknownTopicOrPartitionError, aerrors.InvalidTopicError):
                raise error(topic["topic"])
        return found

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        return {name: len(parts) for name, parts in (await self._describe(topics)).items()}

    async def create_topics(self, specs: Collection[TopicSpec]) -> None:
        """Create the topics that do not exist yet; existing ones are left alone.

        Raises :class:`TopologyError` naming the topic and the broker's reason for any topic the
        broker refuses. Returns once every created partition has a leader in the metadata, so
        producers and consumers started next can use them.
        """
        existing = await self._describe([spec.name for spec in specs])
        missing = [spec for spec in specs if spec.name not in existing]
        if not missing:
            return
        new_topics = [
            NewTopic(
                spec.name,
                spec.partitions,
                spec.replication_factor,
                topic_configs=dict(spec.configs),
            )
            for spec in missing
        ]
        response = await self._any_node(
            lambda: self._admin.create_topics(new_topics, timeout_ms=int(self._timeout * 1000))
        )
        for name, code, message in response.topic_errors:
            error = aerrors.for_code(code)
            if error in (aerrors.NoError, aerrors.TopicAlreadyExistsError):
                continue
            if error in (
                aerrors.TopicAuthorizationFailedError,
                aerrors.ClusterAuthorizationFailedError,
            ):
                raise error(f"{{{name!r}}}: {message or 'not authorized to create it'}")
            raise TopologyError(
                f"cannot create topic {name!r}: the broker answered {error.message}"
                f"{': ' + message if message else ''}. Fix the topic's settings (partitions, "
                "replication factor, configs) or create it yourself."
            )
        await self._wait_for_leaders({spec.name: spec.partitions for spec in missing})

    async def _wait_for_leaders(self, partitions: dict[str, int]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        while True:
            described = await self._describe(partitions)
            ready = all(
                len(described.get(name, ())) >= count
                and all(part["leader"] >= 0 for part in described[name])
                for name, count in partitions.items()
            )
            if ready:
                return
            if loop.time() > deadline:
                raise TopologyError(
                    f"topics {sorted(partitions)} were created but their partitions have no "
                    f"leader after {self._timeout:g} s; check the brokers' health"
                )
            await asyncio.sleep(0.05)

    # -- offsets -----------------------------------------------------------------------------

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """High watermarks (read_uncommitted): past any open transaction, as restore needs."""
        if not partitions:
            return {}
        tps = [AioTopicPartition(tp.topic, tp.partition) for tp in partitions]
        found = await self._offsets.end_offsets(tps)
        return {TopicPartition(tp.topic, tp.partition): int(o) for tp, o in found.items()}

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        tps = [AioTopicPartition(tp.topic, tp.partition) for tp in partitions]
        found = await self._offsets.beginning_offsets(tps)
        return {TopicPartition(tp.topic, tp.partition): int(o) for tp, o in found.items()}

    # -- capabilities ------------------------------------------------------------------------

    async def api_versions(self) -> dict[str, dict[int, tuple[int, int]]]:
        """ApiVersions of every broker in the metadata that answers, by ``host:port``.

        A broker that is down is left out (the metadata lists it until its session expires):
        one dead broker of three must not stop a worker from starting. Raises
        :class:`BrokerUnavailable` only when no broker answers.
        """
        client = self._admin._client
        await client.force_metadata_update()
        versions: dict[str, dict[int, tuple[int, int]]] = {}
        unreachable: list[str] = []
        for broker in client.cluster.brokers():
            address = f"{broker.host}:{broker.port}"
            try:
                response = await client.send(broker.nodeId, ApiVersionRequest())
            except _NODE_DOWN as exc:
                log.warning("broker %s did not answer ApiVersions (%s)", address, exc)
                unreachable.append(address)
                continue
            versions[address] = {key: (low, high) for key, low, high in response.api_versions}
        if not versions:
            raise BrokerUnavailable(", ".join(unreachable) or self._address)
        return versions

    async def check_exactly_once_support(self) -> None:
        """Raise :class:`BrokerTooOld` unless every broker has TxnOffsetCommit v3+ and
        OffsetFetch v7+ (KIP-447, Kafka 2.5+)."""
        for address, versions in (await self.api_versions()).items():
            for key, needed, name in EXACTLY_ONCE_APIS:
                low, high = versions.get(key, (-1, -1))
                if not low <= needed <= high:
                    have = f"v{low}-v{high}" if high >= 0 else "no version"
                    raise BrokerTooOld(
                        f"the Kafka broker at {address} supports {name} {have}, but "
                        f"exactly-once v2 needs {name} v{needed} (KIP-447, Kafka 2.5 or newer). "
                        "Fix: upgrade the brokers, or run with processing_guarantee="
                        "'at_least_once'."
                    )

    # -- transactions (KIP-664) --------------------------------------------------------------

    async def open_transactions(self, prefix: str) -> list[str]:
        """Transactional ids starting with ``prefix`` that have a transaction open now.

        ListTransactions (KIP-664) on every broker at once, each briefly: every broker answers
        for the ids its ``__transaction_state`` partitions hold, and lists only the ids the
        principal may DESCRIBE. A broker that does not answer leaves its ids out; none
        answering raises.
        """
        client = self._admin._client
        await client.force_metadata_update()
        nodes = sorted(b.nodeId for b in client.cluster.brokers())
        listings, missing = await list_everywhere(
            client.send, nodes, states=("Ongoing",), timeout=_LIMITS_TIMEOUT_S
        )
        for node, failure in sorted(missing.items()):
            if isinstance(failure, BaseException):
                if not isinstance(failure, (*_NODE_DOWN, TimeoutError)):
                    raise failure
                log.info("broker %d did not answer ListTransactions", node)
            else:
                log.info(
                    "ListTransactions on broker %d: %s", node, aerrors.for_code(failure).__name__
                )
        if len(missing) == len(nodes):
            raise aerrors.KafkaError(f"no broker of {nodes} answered ListTransactions")
        ids = {listing.transactional_id for listing in listings}
        return sorted(txn_id for txn_id in ids if txn_id.startswith(prefix))

    # -- configs -----------------------------------------------------------------------------

    async def broker_limits(self) -> list[BrokerLimits] | None:
        """The limits our settings must fit, per broker (DescribeConfigs on each broker).

        Returns None when the principal may not describe the cluster's configs (an ACL the
        worker does not otherwise need): the check is then skipped, not the worker.
        """
        client = self._admin._client
        await client.force_metadata_update()
        brokers = {b.nodeId: f"{b.host}:{b.port}" for b in client.cluster.brokers()}
        keys = {name: None for name in _LIMIT_KEYS}

        async def ask(node: int) -> Any:
            resource = ConfigResource(ConfigResourceType.BROKER, str(node), keys)
            return (await self._admin.describe_configs([resource]))[0]

        # Every broker at once, briefly: one that is down or frozen must not delay the start
        # (its limits are normally the same as the others').
        answers = await asyncio.gather(
            *(within(ask(node), _LIMITS_TIMEOUT_S) for node in sorted(brokers)),
            return_exceptions=True,
        )
        responses = []
        for node, answer in zip(sorted(brokers), answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, (*_NODE_DOWN, TimeoutError)):
                    raise answer
                log.info("broker %s did not answer DescribeConfigs: not checked", brokers[node])
                continue
            responses.append(answer)
        limits = []
        for response in responses:
            for error_code, _message, _type, name, entries in _resources(response):
                error = aerrors.for_code(error_code)
                if error is aerrors.ClusterAuthorizationFailedError:
                    return None
                if error is not aerrors.NoError:
                    log.info("DescribeConfigs of broker %s failed: %s", name, error.__name__)
                    continue
                values = {entry[0]: entry[1] for entry in entries}
                limits.append(
                    BrokerLimits(
                        broker=brokers.get(int(name), name),
                        transaction_max_timeout_ms=_int(values, "transaction.max.timeout.ms"),
                        group_min_session_timeout_ms=_int(values, "group.min.session.timeout.ms"),
                        group_max_session_timeout_ms=_int(values, "group.max.session.timeout.ms"),
                        message_max_bytes=_int(values, "message.max.bytes"),
                    )
                )
        return limits

    async def topic_configs(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, str]]:
        if not topics or not keys:
            return {}
        wanted = {key: None for key in sorted(set(keys))}
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, name, dict(wanted))
            for name in sorted(set(topics))
        ]
        responses = await self._any_node(lambda: self._admin.describe_configs(resources))
        found: dict[str, dict[str, str]] = {}
        for response in responses:
            for error_code, _message, _type, name, entries in _resources(response):
                if error_code:
                    continue  # not authorized or gone: nothing to check against
                found[name] = {
                    entry[0]: str(entry[1])
                    for entry in entries
                    if entry[0] in wanted and entry[1] is not None
                }
        return found


_LIMITS_TIMEOUT_S = 3.0
_LIMIT_KEYS = (
    "transaction.max.timeout.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "message.max.bytes",
)


def _resources(response: Any) -> list[tuple[int, str, int, str, list[Any]]]:
    return [(r[0], r[1], r[2], r[3], r[4]) for r in response.resources]


def _int(values: dict[str, Any], key: str) -> int | None:
    value = values.get(key)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
