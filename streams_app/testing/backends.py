"""Where a :class:`~streams_app.testing.driver.TopologyDriver` runs: the in-memory Kafka model,
or a real broker. Both give the driver the same few operations; the driver does the rest."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from streams_app.testing.clock import ManualClock
from streams_app.testing.faults import Names
from streams_app.testing.memory import MemoryKafka, MemoryRecord
from streams_app.transport.base import (
    ProducerConfig,
    RecordLike,
    TopicPartition,
    TopicSpec,
    Transport,
)


@dataclass(frozen=True)
class RawInput:
    """A record to append to an input topic, already encoded."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class Piped:
    """Where a piped record landed."""

    topic: str
    partition: int
    offset: int


class Backend:
    """What the driver needs from where the records live."""

    name: Literal["memory", "kafka"]
    clock: ManualClock
    names: Names

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def transport(self, owner: str) -> Transport:
        raise NotImplementedError

    async def partition_count(self, topic: str) -> int | None:
        raise NotImplementedError

    async def create_topic(self, topic: str, partitions: int, configs: Mapping[str, str]) -> None:
        raise NotImplementedError

    async def produce(self, topic: str, records: Sequence[RawInput]) -> list[Piped]:
        raise NotImplementedError

    async def read(self, topic: str, *, committed: bool) -> list[RecordLike]:
        raise NotImplementedError

    async def end_offsets(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks."""
        raise NotImplementedError

    async def stable_offsets(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        """Last stable offsets (what read_committed readers can reach)."""
        raise NotImplementedError

    async def group_offsets(
        self, group_id: str, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        raise NotImplementedError

    async def open_transactions(self, topics: Collection[str]) -> list[str]:
        """Partitions of ``topics`` with an open transaction (LSO below the high watermark)."""
        raise NotImplementedError

    async def markers_written(self, transactional_ids: Collection[str]) -> None:
        """Return once the transactions of ``transactional_ids`` that ended (EndTxn accepted)
        have their markers on every partition. The model writes them with EndTxn itself."""


class MemoryBackend(Backend):
    """The in-memory Kafka model (:class:`~streams_app.testing.memory.MemoryKafka`)."""

    name: Literal["memory", "kafka"] = "memory"

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.broker = MemoryKafka(self.clock)
        self.names = Names()

    def transport(self, owner: str) -> Transport:
        return self.broker.transport(owner)

    async def partition_count(self, topic: str) -> int | None:
        t = self.broker.topics.get(topic)
        return None if t is None else len(t.partitions)

    async def create_topic(self, topic: str, partitions: int, configs: Mapping[str, str]) -> None:
        self.broker.create_topic(topic, partitions, dict(configs))

    async def produce(self, topic: str, records: Sequence[RawInput]) -> list[Piped]:
        """As an idempotent producer outside any transaction (acks=all)."""
        broker = self.broker
        out = []
        for r in records:
            p = broker.partition_for(topic, r.key, r.partition)
            offset = broker.append(
                TopicPartition(topic, p),
                key=r.key,
                value=r.value,
                headers=r.headers,
                timestamp=r.timestamp,
            )
            out.append(Piped(topic, p, offset))
        return out

    async def read(self, topic: str, *, committed: bool) -> list[RecordLike]:
        if topic not in self.broker.topics:
            return []
        return list(self.broker.read(topic, read_committed=committed))

    async def end_offsets(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.broker.log(tp).high_watermark for tp in tps}

    async def stable_offsets(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.broker.log(tp).last_stable_offset for tp in tps}

    async def group_offsets(
        self, group_id: str, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        group = self.broker.groups.get(group_id)
        return {tp: None if group is None else group.offsets.get(tp) for tp in tps}

    async def open_transactions(self, topics: Collection[str]) -> list[str]:
        wanted = set(topics)
        return sorted(
            f"{tp.topic}[{tp.partition}]"
            for txn in self.broker.open_transactions()
            for tp in txn.partitions
            if tp.topic in wanted or not wanted
        )


class KafkaBackend(Backend):
    """A real broker through :class:`~streams_app.transport.kafka.KafkaTransport`; names get a
    per-driver suffix so tests sharing the broker never see each other's topics or groups."""

    name: Literal["memory", "kafka"] = "kafka"

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        suffix: str | None = None,
        clock: ManualClock | None = None,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        from streams_app.transport.kafka import KafkaTransport

        self.bootstrap_servers = bootstrap_servers
        self.clock = clock or ManualClock()
        self.names = Names(suffix or uuid.uuid4().hex[:8])
        self._security = dict(security or {})
        self._transport = KafkaTransport(bootstrap_servers, security=self._security)
        self._feeder: Any = None
        self._admin: Any = None
        self._stable: Any = None
        self._groups: Any = None
        self._ops: Any = None

    def transport(self, owner: str) -> Transport:
        return self._transport

    async def open(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.admin import AIOKafkaAdminClient

        from streams_app.kafka import KafkaAdmin

        feeder = self._transport.producer(
            ProducerConfig(transactional_id=None, client_id="streams-app-harness-feeder")
        )
        await feeder.start()
        self._feeder = feeder
        self._admin = KafkaAdmin(self.bootstrap_servers, **self._security)
        await self._admin.start()
        self._stable = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            isolation_level="read_committed",
            enable_auto_commit=False,
            **self._security,
        )
        await self._stable.start()
        self._groups = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers, **self._security
        )
        await self._groups.start()

    async def close(self) -> None:
        for client, method in (
            (self._feeder, "stop"),
            (self._admin, "close"),
            (self._stable, "stop"),
            (self._groups, "close"),
            (self._ops, "close"),
        ):
            if client is not None:
                with contextlib.suppress(Exception):
                    await getattr(client, method)()

    def _tps(self, tps: Collection[TopicPartition]) -> list[TopicPartition]:
        return [self.names.tp(tp) for tp in tps]

    async def partition_count(self, topic: str) -> int | None:
        name = self.names.topic(topic)
        found: dict[str, int] = await self._admin.partition_counts([name])
        return found.get(name)

    async def create_topic(self, topic: str, partitions: int, configs: Mapping[str, str]) -> None:
        await self._admin.create_topics(
            [TopicSpec(self.names.topic(topic), partitions, 1, dict(configs))]
        )

    async def produce(self, topic: str, records: Sequence[RawInput]) -> list[Piped]:
        name = self.names.topic(topic)
        futures = [
            await self._feeder.send(
                name,
                key=r.key,
                value=r.value,
                partition=r.partition,
                headers=list(r.headers) or None,
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        await self._feeder.flush()
        out = []
        for future in futures:
            metadata = future.result()
            out.append(Piped(topic, metadata.partition, metadata.offset))
        return out

    async def read(self, topic: str, *, committed: bool) -> list[RecordLike]:
        from streams_app.readback import read_topics

        name = self.names.topic(topic)
        data = await read_topics(
            self.bootstrap_servers,
            [name],
            isolation_level="read_committed" if committed else "read_uncommitted",
            security=self._security or None,
        )
        out: list[RecordLike] = [
            MemoryRecord(topic, r.partition, r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in data[name]
        ]
        return out

    async def end_offsets(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        found: dict[TopicPartition, int] = await self._admin.end_offsets(self._tps(tps))
        return {self.names.local_tp(tp): o for tp, o in found.items()}

    async def stable_offsets(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        from aiokafka.structs import TopicPartition as AioTP

        if not tps:
            return {}
        names = self.names
        found = await self._stable.end_offsets([AioTP(names.topic(t), p) for t, p in tps])
        return {names.local_tp((tp.topic, tp.partition)): int(o) for tp, o in found.items()}

    async def group_offsets(
        self, group_id: str, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        from aiokafka.structs import TopicPartition as AioTP

        names = self.names
        group = names.id(group_id)
        found = await self._groups.list_consumer_group_offsets(
            group, partitions=[AioTP(names.topic(t), p) for t, p in tps]
        )
        out: dict[TopicPartition, int | None] = {}
        for tp in tps:
            meta = found.get(AioTP(names.topic(tp[0]), tp[1]))
            out[TopicPartition(tp[0], tp[1])] = (
                None if meta is None or meta.offset < 0 else int(meta.offset)
            )
        return out

    async def open_transactions(self, topics: Collection[str]) -> list[str]:
        counts = await self._admin.partition_counts([self.names.topic(t) for t in topics])
        tps = [TopicPartition(self.names.local(t), p) for t, n in counts.items() for p in range(n)]
        if not tps:
            return []
        high = await self.end_offsets(tps)
        stable = await self.stable_offsets(tps)
        return sorted(
            f"{tp.topic}[{tp.partition}]" for tp in tps if stable.get(tp, 0) < high.get(tp, 0)
        )

    async def markers_written(
        self, transactional_ids: Collection[str], *, timeout: float = 30.0
    ) -> None:
        """A broker answers EndTxn once the coordinator has logged PrepareCommit (or
        PrepareAbort) and writes the markers after that: until then a ``read_committed``
        reader does not see the transaction. A worker that died right after EndTxn leaves
        exactly that; wait, through DescribeTransactions, until its coordinator is done."""
        if not transactional_ids:
            return
        from streams_app.kafka.ops_admin import OpsAdmin

        if self._ops is None:
            self._ops = await OpsAdmin(self.bootstrap_servers, **self._security).start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            described = await self._ops.describe_transactions(transactional_ids)
            preparing = sorted(
                f"{txn_id} ({d.state})"
                for txn_id, d in described.items()
                if d is not None and d.state.startswith("Prepare")
            )
            if not preparing:
                return
            if loop.time() >= deadline:
                raise TimeoutError(
                    f"transactions still being completed after {timeout:g}s: {preparing}"
                )
            await asyncio.sleep(0.01)  # the coordinator has no event to await from here
