"""The transport a driven worker talks through: crash switch, crash points, and topic names.

:class:`HarnessTransport` wraps a real transport (the in-memory model, or
:class:`~streams_app.transport.kafka.KafkaTransport` on a real broker) and adds what a test
needs from the outside, without touching the runtime:

- **A crash switch.** :meth:`Switch.kill` is a SIGKILL: from then on nothing the worker does
  reaches Kafka (every call raises :class:`~streams_app.transport.errors.TransportError`), and
  closing its clients does not abort its transaction. The driver then cancels the worker's
  task; the transaction it left open stays open until a successor with the same
  transactional.id fences it, or its timeout aborts it.
- **Crash points.** :meth:`Switch.arm` makes the worker die *at* a call: before it reaches
  Kafka (``"commit_transaction"``), or right after Kafka accepted it
  (``"after_commit_transaction"``), optionally on the n-th such call or the n-th send to one
  topic. The calling task freezes there, as a killed process would, until the driver reaps it.
- **Names.** On a shared real broker every topic, group id and transactional id gets a suffix
  (``orders`` -> ``orders.3f9c1a``), so a topology module with fixed names runs in many tests
  without them seeing each other's data; the worker never sees the suffix.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams_app.transport.base import (
    AdminClient,
    AppendedRecord,
    BatchingProducerClient,
    BrokerLimits,
    CommittedOffset,
    ConsumerClient,
    ConsumerConfig,
    GroupMetadata,
    ProducerClient,
    ProducerConfig,
    RebalanceListener,
    RecordBatch,
    RecordLike,
    RecordMetadataLike,
    TopicPartition,
    TopicSpec,
    Transport,
)
from streams_app.transport.errors import TransportError

#: Calls a crash point can name (prefix ``after_`` for "right after Kafka accepted it").
CRASH_OPS = frozenset(
    {
        "start",
        "getmany",
        "commit",
        "committed_offsets",
        "begin_transaction",
        "send",
        "send_batch",
        "flush",
        "send_offsets_to_transaction",
        "commit_transaction",
        "abort_transaction",
    }
)


class Names:
    """Maps the names a topology uses to the names on the broker (identity without suffix)."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix
        self._tail = f".{suffix}" if suffix else ""

    def __bool__(self) -> bool:
        return bool(self.suffix)

    def topic(self, name: str) -> str:
        return name + self._tail

    def local(self, name: str) -> str:
        if self._tail and name.endswith(self._tail):
            return name[: -len(self._tail)]
        return name

    def tp(self, tp: tuple[str, int]) -> TopicPartition:
        return TopicPartition(self.topic(tp[0]), tp[1])

    def local_tp(self, tp: tuple[str, int]) -> TopicPartition:
        return TopicPartition(self.local(tp[0]), tp[1])

    def id(self, value: str | None) -> str | None:
        return None if value is None else value + self._tail


@dataclass
class CrashPoint:
    """Die at the ``nth`` matching call of ``op`` (to ``topic``, for sends)."""

    op: str
    nth: int = 1
    topic: str | None = None
    seen: int = 0
    fired: bool = False

    def matches(self, op: str, topic: str | None) -> bool:
        return op == self.op and (self.topic is None or topic == self.topic)


class Switch:
    """The life of one worker incarnation, as the test controls it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False
        self.reason = ""
        self.crashed = asyncio.Event()
        self.points: list[CrashPoint] = []
        #: Set whenever one of the worker's consumers returns from getmany (a loop turn).
        self.turned = asyncio.Event()

    def arm(self, op: str, *, nth: int = 1, topic: str | None = None) -> CrashPoint:
        base = op.removeprefix("after_")
        if base not in CRASH_OPS:
            raise ValueError(
                f"unknown crash point {op!r}: use one of {sorted(CRASH_OPS)}, optionally "
                "prefixed with 'after_'"
            )
        if nth < 1:
            raise ValueError("nth counts from 1")
        point = CrashPoint(op, nth, topic)
        self.points.append(point)
        return point

    def kill(self, reason: str) -> None:
        """SIGKILL: nothing from now on reaches Kafka."""
        if not self.dead:
            self.dead = True
            self.reason = reason
            self.crashed.set()

    def refuse(self) -> None:
        if self.dead:
            raise TransportError(f"worker {self.name} was killed ({self.reason})")

    def _hit(self, op: str, topic: str | None) -> bool:
        self.refuse()
        for point in self.points:
            if point.fired or not point.matches(op, topic):
                continue
            point.seen += 1
            if point.seen == point.nth:
                point.fired = True
                where = f"{op}" + (f" to {topic!r}" if topic else "") + f" #{point.nth}"
                self.kill(f"crash point {where}")
                return True
        return False

    async def check(self, op: str, topic: str | None = None) -> None:
        """Called at every crash-point-able call: refuse if dead, die here if armed."""
        if self._hit(op, topic):
            # Frozen where it died; the driver cancels the worker's task.
            await asyncio.get_running_loop().create_future()

    def check_now(self, op: str, topic: str | None = None) -> None:
        """The same for a synchronous call (appending to a batch): it cannot freeze, so it
        raises; nothing after this reaches Kafka either way."""
        if self._hit(op, topic):
            self.refuse()


@dataclass(slots=True)
class _Record:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]


class HarnessTransport:
    """A :class:`Transport` that adds the crash switch and topic names to ``inner``."""

    def __init__(self, inner: Transport, switch: Switch, names: Names | None = None) -> None:
        self.inner = inner
        self.switch = switch
        self.names = names or Names()
        self.consumers: list[HarnessConsumer] = []
        self.producers: list[HarnessProducer] = []
        self.admins: list[HarnessAdmin] = []

    @property
    def address(self) -> str:
        return self.inner.address

    @property
    def main_consumer(self) -> HarnessConsumer | None:
        """The worker's group consumer (the most recent one that subscribed)."""
        for consumer in reversed(self.consumers):
            if consumer.config.group_id is not None:
                return consumer
        return None

    def consumer(self, config: ConsumerConfig) -> HarnessConsumer:
        names = self.names
        inner = self.inner.consumer(dataclasses.replace(config, group_id=names.id(config.group_id)))
        consumer = HarnessConsumer(inner, config, self.switch, names)
        self.consumers.append(consumer)
        return consumer

    def producer(self, config: ProducerConfig) -> HarnessProducer:
        names = self.names
        inner = self.inner.producer(
            dataclasses.replace(config, transactional_id=names.id(config.transactional_id))
        )
        # Offer the runtime the batch path exactly when the wrapped client has it.
        if isinstance(inner, BatchingProducerClient):
            producer: HarnessProducer = HarnessBatchingProducer(inner, self.switch, names)
        else:
            producer = HarnessProducer(inner, self.switch, names)
        self.producers.append(producer)
        return producer

    def admin(self) -> HarnessAdmin:
        admin = HarnessAdmin(self.inner.admin(), self.switch, self.names)
        self.admins.append(admin)
        return admin

    def partition_for_key(self, key: bytes, partitions: int) -> int:
        return self.inner.partition_for_key(key, partitions)


async def kill_or_stop(inner: Any) -> None:
    """Close a dead worker's client the way a killed process leaves it: the in-memory clients
    know how (no LeaveGroup, no abort); a real client is closed without aborting (aiokafka's
    consumer does send LeaveGroup on close, so the group moves on at once, not after the
    session timeout)."""
    kill: Callable[[], None] | None = getattr(inner, "kill", None)
    if kill is not None:
        kill()
        return
    close = getattr(inner, "stop", None) or getattr(inner, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


class _Listener:
    def __init__(self, inner: RebalanceListener, names: Names) -> None:
        self.inner = inner
        self.names = names

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.inner.on_partitions_revoked({self.names.local_tp(tp) for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.inner.on_partitions_assigned({self.names.local_tp(tp) for tp in assigned})


class HarnessConsumer:
    def __init__(
        self, inner: ConsumerClient, config: ConsumerConfig, switch: Switch, names: Names
    ) -> None:
        self.inner = inner
        self.config = config
        self.switch = switch
        self.names = names
        #: Inside getmany: the worker's loop has finished everything it fetched before.
        self.polling = False
        #: How many times getmany returned.
        self.returns = 0

    async def start(self) -> None:
        await self.switch.check("start")
        await self.inner.start()

    async def stop(self) -> None:
        if self.switch.dead:
            await kill_or_stop(self.inner)
        else:
            await self.inner.stop()

    def subscribe(self, topics: Collection[str], listener: RebalanceListener) -> None:
        self.switch.refuse()
        names = self.names
        self.inner.subscribe(
            [names.topic(t) for t in topics], _Listener(listener, names) if names else listener
        )

    def unsubscribe(self) -> None:
        if not self.switch.dead:
            self.inner.unsubscribe()

    def request_rebalance(self) -> None:
        """Passed on when the wrapped consumer can (a real group consumer), else nothing."""
        request = getattr(self.inner, "request_rebalance", None)
        if request is not None and not self.switch.dead:
            request()

    def assign(self, partitions: Collection[TopicPartition]) -> None:
        if not self.switch.dead:
            self.inner.assign([self.names.tp(tp) for tp in partitions])

    def assignment(self) -> set[TopicPartition]:
        return {self.names.local_tp(tp) for tp in self.inner.assignment()}

    def fetch_ready(self) -> bool:
        return self.inner.fetch_ready()

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[RecordLike]]:
        switch = self.switch
        await switch.check("getmany")
        self.polling = True
        try:
            batch = await self.inner.getmany(timeout_ms, max_records)
        finally:
            self.polling = False
            self.returns += 1
        await switch.check("after_getmany")
        switch.turned.set()
        names = self.names
        if not names:
            return batch
        return {
            names.local_tp(tp): [
                _Record(
                    names.local(r.topic),
                    r.partition,
                    r.offset,
                    r.timestamp,
                    r.key,
                    r.value,
                    r.headers,
                )
                for r in records
            ]
            for tp, records in batch.items()
        }

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if not self.switch.dead:
            self.inner.seek(self.names.tp(tp), offset)

    async def position(self, tp: TopicPartition) -> int:
        self.switch.refuse()
        return await self.inner.position(self.names.tp(tp))

    async def committed_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        await self.switch.check("committed_offsets")
        names = self.names
        found = await self.inner.committed_offsets([names.tp(tp) for tp in partitions])
        await self.switch.check("after_committed_offsets")
        return {names.local_tp(tp): offset for tp, offset in found.items()}

    async def committed_offsets_with_metadata(
        self, partitions: Collection[TopicPartition], *, stable: bool = True
    ) -> dict[TopicPartition, CommittedOffset | None]:
        await self.switch.check("committed_offsets")
        names = self.names
        found = await self.inner.committed_offsets_with_metadata(
            [names.tp(tp) for tp in partitions], stable=stable
        )
        await self.switch.check("after_committed_offsets")
        return {names.local_tp(tp): offset for tp, offset in found.items()}

    def fetched_lag(self, tp: TopicPartition) -> int | None:
        if self.switch.dead:
            return None
        return self.inner.fetched_lag(self.names.tp(tp))

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        await self.switch.check("commit")
        names = self.names
        await self.inner.commit(
            {names.tp(tp): o for tp, o in offsets.items()},
            None if metadata is None else {names.tp(tp): m for tp, m in metadata.items()},
        )
        await self.switch.check("after_commit")

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        if not self.switch.dead:
            self.inner.pause([self.names.tp(tp) for tp in partitions])

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        if not self.switch.dead:
            self.inner.resume([self.names.tp(tp) for tp in partitions])

    def group_metadata(self) -> GroupMetadata:
        # The group id stays the broker's (suffixed) one: it goes back to the producer as is.
        self.switch.refuse()
        return self.inner.group_metadata()

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.inner.highwater(self.names.tp(tp))

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self.inner.last_stable_offset(self.names.tp(tp))

    def partition_hosts(self) -> Mapping[TopicPartition, str]:
        local = self.names.local_tp
        return {local(tp): address for tp, address in self.inner.partition_hosts().items()}


class HarnessProducer:
    """Send futures are the inner client's: their metadata names the broker's topic (the
    runtime only reads offsets from them)."""

    def __init__(self, inner: ProducerClient, switch: Switch, names: Names) -> None:
        self.inner = inner
        self.switch = switch
        self.names = names

    @property
    def transactional(self) -> bool:
        return self.inner.transactional

    async def start(self) -> None:
        await self.switch.check("start")
        await self.inner.start()

    async def stop(self) -> None:
        if self.switch.dead:
            await kill_or_stop(self.inner)
        else:
            await self.inner.stop()

    async def begin_transaction(self) -> None:
        await self.switch.check("begin_transaction")
        await self.inner.begin_transaction()
        await self.switch.check("after_begin_transaction")

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
        switch = self.switch
        await switch.check("send", topic)
        future = await self.inner.send(
            self.names.topic(topic),
            value=value,
            key=key,
            partition=partition,
            headers=headers,
            timestamp_ms=timestamp_ms,
        )
        await switch.check("after_send", topic)
        return future

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        await self.switch.check("send_offsets_to_transaction")
        names = self.names
        await self.inner.send_offsets_to_transaction(
            {names.tp(tp): o for tp, o in offsets.items()},
            group,
            None if metadata is None else {names.tp(tp): m for tp, m in metadata.items()},
        )
        await self.switch.check("after_send_offsets_to_transaction")

    async def commit_transaction(self) -> None:
        await self.switch.check("commit_transaction")
        await self.inner.commit_transaction()
        await self.switch.check("after_commit_transaction")

    async def abort_transaction(self) -> None:
        await self.switch.check("abort_transaction")
        await self.inner.abort_transaction()
        await self.switch.check("after_abort_transaction")

    async def flush(self) -> None:
        await self.switch.check("flush")
        await self.inner.flush()
        await self.switch.check("after_flush")


class _HarnessBatch:
    """A batch whose appends are crash points (``send``, per record, like the record path)."""

    __slots__ = ("inner", "switch", "topic")

    def __init__(self, inner: RecordBatch, topic: str | None, switch: Switch) -> None:
        self.inner = inner
        self.topic = topic
        self.switch = switch

    def append(
        self,
        *,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> AppendedRecord | None:
        self.switch.check_now("send", self.topic)
        appended = self.inner.append(timestamp=timestamp, key=key, value=value, headers=headers)
        if appended is not None:
            self.switch.check_now("after_send", self.topic)
        return appended

    def close(self) -> None:
        self.inner.close()

    def record_count(self) -> int:
        return self.inner.record_count()


class HarnessBatchingProducer(HarnessProducer):
    """The batch path (``BatchingProducerClient``) of a client that has one.

    The runtime asks for a partition (``choose_partition``) right before it opens a batch for
    the topic, with no await in between, so a new batch is labelled with that topic: sends to
    one topic can be crash points on this path too.
    """

    inner: BatchingProducerClient

    def __init__(self, inner: BatchingProducerClient, switch: Switch, names: Names) -> None:
        super().__init__(inner, switch, names)
        self.inner = inner
        self._topic: str | None = None

    def create_batch(self) -> RecordBatch:
        self.switch.refuse()
        return _HarnessBatch(self.inner.create_batch(), self._topic, self.switch)

    async def send_batch(
        self, batch: RecordBatch, topic: str, partition: int
    ) -> asyncio.Future[RecordMetadataLike]:
        switch = self.switch
        await switch.check("send_batch", topic)
        inner_batch = batch.inner if isinstance(batch, _HarnessBatch) else batch
        future = await self.inner.send_batch(inner_batch, self.names.topic(topic), partition)
        await switch.check("after_send_batch", topic)
        return future

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        self.switch.refuse()
        self._topic = topic
        return self.inner.choose_partition(self.names.topic(topic), key, partition)

    async def wait_for_topic(self, topic: str) -> None:
        self.switch.refuse()
        await self.inner.wait_for_topic(self.names.topic(topic))


class HarnessAdmin:
    def __init__(self, inner: AdminClient, switch: Switch, names: Names) -> None:
        self.inner = inner
        self.switch = switch
        self.names = names

    async def start(self) -> None:
        await self.switch.check("start")
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        self.switch.refuse()
        names = self.names
        found = await self.inner.partition_counts([names.topic(t) for t in topics])
        return {names.local(t): n for t, n in found.items()}

    async def create_topics(self, specs: Collection[TopicSpec]) -> None:
        self.switch.refuse()
        await self.inner.create_topics(
            [dataclasses.replace(spec, name=self.names.topic(spec.name)) for spec in specs]
        )

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self.switch.refuse()
        names = self.names
        found = await self.inner.end_offsets([names.tp(tp) for tp in partitions])
        return {names.local_tp(tp): o for tp, o in found.items()}

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self.switch.refuse()
        names = self.names
        found = await self.inner.beginning_offsets([names.tp(tp) for tp in partitions])
        return {names.local_tp(tp): o for tp, o in found.items()}

    async def check_exactly_once_support(self) -> None:
        self.switch.refuse()
        await self.inner.check_exactly_once_support()

    async def broker_limits(self) -> list[BrokerLimits] | None:
        self.switch.refuse()
        return await self.inner.broker_limits()

    async def topic_configs(
        self, topics: Collection[str], keys: Collection[str]
    ) -> dict[str, dict[str, str]]:
        self.switch.refuse()
        names = self.names
        found = await self.inner.topic_configs([names.topic(t) for t in topics], keys)
        return {names.local(t): configs for t, configs in found.items()}

    async def open_transactions(self, prefix: str) -> list[str]:
        self.switch.refuse()
        names = self.names
        found = await self.inner.open_transactions(prefix)
        # Only this harness's own ids (another run's would map to an id nobody uses).
        return [names.local(tid) for tid in found if names.id(names.local(tid)) == tid]
