"""StreamsProducer: the worker's one producer, its transaction, and the send gate.

Modelled on Kafka Streams' ``StreamsProducer``. Under exactly-once v2 a worker has exactly one
transactional producer for all its tasks; a transaction begins lazily with the first record and
ends at the next commit. Two rules are enforced here rather than trusted to the client:

- **The send gate.** aiokafka ends a transaction with COMMIT even when a record sent inside it
  failed, silently losing that record. Every send future of the open transaction is kept and
  checked after the flush; one failure turns the commit into an abort.
- **A broken producer is replaced, never reused.** After a fatal error (fenced, sequence gap,
  unknown producer id) a new producer is created with the same transactional.id; its
  InitProducerId bumps the epoch and aborts anything the old one left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence

from streams_app.transport.base import (
    GroupMetadata,
    ProducerClient,
    ProducerConfig,
    RecordMetadataLike,
    TopicPartition,
    Transport,
)
from streams_app.transport.errors import SendFailedError, TransportError

log = logging.getLogger(__name__)


class StreamsProducer:
    def __init__(self, transport: Transport, config: ProducerConfig) -> None:
        self._transport = transport
        self._config = config
        self._client: ProducerClient | None = None
        self._in_transaction = False
        self._pending: list[asyncio.Future[RecordMetadataLike]] = []
        # Agents and the dispatch loop may send concurrently; only one of them may begin.
        self._begin_lock = asyncio.Lock()
        self.transactions_committed = 0
        self.transactions_aborted = 0
        self.recreated = 0

    @property
    def exactly_once(self) -> bool:
        return self._config.transactional_id is not None

    @property
    def transactional_id(self) -> str | None:
        return self._config.transactional_id

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    @property
    def pending_sends(self) -> int:
        return len(self._pending)

    @property
    def client(self) -> ProducerClient:
        if self._client is None:
            raise RuntimeError("the producer is not started")
        return self._client

    async def start(self) -> None:
        client = self._transport.producer(self._config)
        await client.start()
        self._client = client

    async def stop(self) -> None:
        client, self._client = self._client, None
        self._pending.clear()
        self._in_transaction = False
        if client is not None:
            with contextlib.suppress(Exception):
                await client.stop()

    async def recreate(self) -> None:
        """Throw the producer away and start a new one (fencing the old epoch)."""
        await self.stop()
        self.recreated += 1
        await self.start()

    async def maybe_begin(self) -> None:
        if not self.exactly_once or self._in_transaction:
            return
        async with self._begin_lock:
            if not self._in_transaction:
                await self.client.begin_transaction()
                self._in_transaction = True

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
        if self.exactly_once and not self._in_transaction:
            await self.maybe_begin()
        future = await self.client.send(
            topic,
            key=key,
            value=value,
            partition=partition,
            headers=headers,
            timestamp_ms=timestamp_ms,
        )
        self._pending.append(future)
        return future

    async def flush_and_check(self) -> None:
        """Wait until every record of this commit is acknowledged; raise if any failed."""
        if not self._pending:
            return
        await self.client.flush()
        pending, self._pending = self._pending, []
        if not all(f.done() for f in pending):
            await asyncio.wait(pending)
        for future in pending:
            if future.cancelled():
                raise SendFailedError("a record's send was cancelled before it was acknowledged")
            exc = future.exception()
            if exc is not None:
                raise SendFailedError(f"a record could not be sent: {type(exc).__name__}: {exc}")

    async def commit(
        self, offsets: Mapping[TopicPartition, int], group: GroupMetadata | None
    ) -> None:
        """Exactly-once: offsets into the transaction, then EndTxn(commit).

        The caller has already flushed and checked every send (:meth:`flush_and_check`).
        """
        if not self.exactly_once:
            return
        if not self._in_transaction:
            if not offsets:
                return
            await self.maybe_begin()
        if offsets:
            if group is None:
                raise TransportError("exactly-once commit without consumer group metadata")
            await self.client.send_offsets_to_transaction(offsets, group)
        await self.client.commit_transaction()
        self._in_transaction = False
        self.transactions_committed += 1

    async def abort(self) -> None:
        """Abort the open transaction; if the producer cannot, replace it (which aborts too)."""
        self._pending.clear()
        if not self.exactly_once or not self._in_transaction:
            return
        try:
            await self.client.abort_transaction()
            self._in_transaction = False
            self.transactions_aborted += 1
        except Exception as exc:  # a fatal producer cannot abort: InitProducerId will
            log.warning("abort failed (%s); recreating the producer", type(exc).__name__)
            self._in_transaction = False
            self.transactions_aborted += 1
            await self.recreate()
