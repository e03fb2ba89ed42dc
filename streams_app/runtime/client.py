"""The runtime of an app command (``python app.py <command>``): a client, not a worker.

A command joins no consumer group and owns no partition. What it sends goes through a plain
idempotent producer (acks=all), flushed before the command exits; ``agent.ask`` works through
a reply topic of its own. It holds no table partition: a table read finds nothing (the
table's default, as a Faust command that started no worker); channels need a worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streams_app.runtime.plain_producer import PlainProducer
from streams_app.runtime.rpc import RpcClient
from streams_app.topology.contract import MISSING, Event, SendFuture
from streams_app.transport.base import AdminClient, TopicSpec, Transport

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.topology.contract import ChannelLike, TableLike, TopicLike


class ClientRuntime:
    def __init__(self, app: App, transport: Transport | None = None) -> None:
        self.app = app
        self.transport = transport or app.transport()
        self.producer = PlainProducer(self.transport, f"{app.conf.id}-client")
        self._admin: AdminClient | None = None
        self._rpc: RpcClient | None = None
        self._pending: list[Any] = []

    async def start(self) -> None:
        admin = self.transport.admin()
        await admin.start()  # raises BrokerUnavailable naming the address
        self._admin = admin

    async def stop(self) -> None:
        try:
            if self._pending:
                await asyncio.gather(*self._pending, return_exceptions=True)
            await self.producer.flush()
        finally:
            if self._rpc is not None:
                await self._rpc.stop()
            await self.producer.stop()
            if self._admin is not None:
                await self._admin.close()

    @property
    def rpc(self) -> RpcClient:
        if self._rpc is None:
            self._rpc = RpcClient.for_app(
                self.transport, self.producer, self.app.conf, None, self._admin
            )
        return self._rpc

    async def send(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> SendFuture:
        raw_key, raw_value = topic.encode(key, value)
        return await self.send_encoded(
            topic.name, raw_key, raw_value, headers, partition, timestamp
        )

    def send_nowait(self, topic: str, *_args: Any) -> None:
        return None  # the plain producer has no synchronous path: await send_encoded()

    def send_run_nowait(self, topic: str, *_args: Any) -> int:
        return 0  # nor for runs: each one is sent with send()

    def send_results_nowait(self, *_args: Any) -> int:
        return 0

    async def send_encoded(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None,
        partition: int | None,
        timestamp: float | None,
    ) -> SendFuture:
        items = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
        future = await self.producer.send(
            topic,
            key=key,
            value=value,
            partition=partition,
            headers=items or None,
            timestamp_ms=None if timestamp is None else int(timestamp * 1000),
        )
        self._pending.append(future)
        return future

    def send_soon(self, topic: TopicLike, **options: Any) -> None:
        self._pending.append(asyncio.ensure_future(self.send(topic, **options)))

    async def forward(
        self, topic: TopicLike, event: Event, *, key: Any = None, partition: int | None = None
    ) -> SendFuture:
        raise RuntimeError("forwarding an event needs a running worker")

    def table_items(self, table: TableLike) -> Iterator[tuple[Any, Any]]:
        return iter(())

    def table_lookup(self, table: TableLike, key: Any) -> Any:
        return MISSING  # a command holds no partition: reads see the table's default

    def global_lookup(self, table: TableLike, key: Any) -> Any:
        return MISSING

    async def declare(self, topic: TopicLike) -> None:
        assert self._admin is not None
        if topic.name in await self._admin.partition_counts([topic.name]):
            return
        conf = self.app.conf
        await self._admin.create_topics(
            [
                TopicSpec(
                    topic.name,
                    topic.partitions or conf.topic_partitions,
                    topic.replicas or conf.topic_replication_factor,
                    topic.config,
                )
            ]
        )

    async def ask(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        reply_to: str | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        raw_key, raw_value = topic.encode(key, value)
        items = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
        return await self.rpc.ask(
            topic.name,
            key=raw_key,
            value=raw_value,
            partition=partition,
            headers=items,
            timestamp_ms=None if timestamp is None else int(timestamp * 1000),
            correlation_id=correlation_id or RpcClient.new_correlation_id(),
            reply_to=reply_to,
        )

    async def channel_send(self, channel: ChannelLike, **options: Any) -> None:
        raise RuntimeError("channels are in-process: send to a channel from a worker")

    @property
    def rebalancing(self) -> bool:
        return False

    @property
    def should_stop(self) -> bool:
        return False

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def is_leader(self) -> bool:
        return False

    def topic(self, name: str) -> TopicLike:
        return self.app.topic(name)

    def wall_time(self) -> float:
        return time.time()
