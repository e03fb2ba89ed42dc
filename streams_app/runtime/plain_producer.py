"""A plain idempotent producer (acks=all, no transaction), started on first use.

For what must not wait for, or be undone by, the worker's transaction: sends from tasks,
services and commands, and RPC requests (a request sent inside the asker's transaction would
be invisible until the asker commits, which it cannot do before the reply arrives).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from streams_app.transport.base import ProducerClient, ProducerConfig, RecordMetadataLike, Transport


class PlainProducer:
    def __init__(self, transport: Transport, client_id: str) -> None:
        self._transport = transport
        self._config = ProducerConfig(
            transactional_id=None, acks="all", enable_idempotence=True, client_id=client_id
        )
        self._client: ProducerClient | None = None
        self._starting = asyncio.Lock()

    async def client(self) -> ProducerClient:
        if self._client is None:
            async with self._starting:
                if self._client is None:
                    client = self._transport.producer(self._config)
                    await client.start()
                    self._client = client
        return self._client

    async def send(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadataLike]:
        client = await self.client()
        return await client.send(
            topic,
            key=key,
            value=value,
            partition=partition,
            headers=list(headers) if headers else None,
            timestamp_ms=timestamp_ms,
        )

    async def flush(self) -> None:
        if self._client is not None:
            await self._client.flush()

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.flush()
            finally:
                await client.stop()
