"""Agent RPC (``ask``, ``map``, ``join``, ``kvmap``) on Faust's wire format.

**Requests** are records on the agent's topic, the value encoded as usual, with Faust's
headers ``Faust-Ag-ReplyTo`` (the caller's reply topic) and ``Faust-Ag-CorrelationId``. They
are sent through a plain idempotent producer, outside any transaction: inside the asker's
transaction the request would stay invisible until the asker commits, and the asker commits
only after the reply. (Faust's older envelope, a ``@ReqRepRequest`` JSON object, is read too.)

**Replies** are what a generator agent yields while processing a request, sent to the reply
topic as Faust's ``@ReqRepResponse`` JSON object **inside the replying worker's transaction**:
a caller reading its reply topic ``read_committed`` sees a reply only if the work that produced
it committed. When the caller is the same worker, the reply is also handed over in-process at
once (it could not be read before this worker commits, and this worker cannot commit while the
caller waits): if that transaction then aborts, the caller's record is aborted with it.

**What is exactly-once.** A reply reflects the callee's committed processing of the request,
and the caller's outputs commit once. Correlation ids made while processing a record are
deterministic (``<app id>:<topic>:<partition>:<offset>:<n>``), and a worker sends each request
once: when an abort replays the caller's record, its ``ask`` waits for the reply to the request
already sent (or takes it from the replies received) instead of asking again, so the callee
processes the request once. If the *caller's worker crashes* between sending a request and
committing, its successor asks again and the callee processes the request a second time:
across a crash of the caller, the callee's side effects are at-least-once.

Each worker process listens on its own reply topic, ``<reply_to_prefix><process id>`` (one
partition, ``delete`` policy, retention ``reply_expires``), unless ``reply_to`` names one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streams_app.aio import cancel_and_wait
from streams_app.codecs import _reconstruct, json_dumps, json_loads
from streams_app.runtime.plain_producer import PlainProducer
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    ConsumerConfig,
    TopicPartition,
    TopicSpec,
    Transport,
)

if TYPE_CHECKING:
    from streams_app.app.faust_settings import AppSettings

log = logging.getLogger(__name__)

REPLY_TO_HEADER = "Faust-Ag-ReplyTo"
CORRELATION_HEADER = "Faust-Ag-CorrelationId"
_REQUEST_NS = b"@ReqRepRequest"
#: Replies kept after they arrived, for an ask replayed after an abort.
KEEP_REPLIES = 10_000


def request_headers(
    headers: Sequence[tuple[str, bytes]],
) -> tuple[str | None, str | None]:
    """(reply_to, correlation_id) when a consumed record's headers make it an RPC request."""
    reply_to = correlation_id = None
    for name, value in headers:
        if name == REPLY_TO_HEADER:
            reply_to = value.decode()
        elif name == CORRELATION_HEADER:
            correlation_id = value.decode()
    if reply_to is None or correlation_id is None:
        return None, None
    return reply_to, correlation_id


def unwrap_envelope(raw_value: bytes) -> tuple[str, str, Any] | None:
    """Faust's ``@ReqRepRequest`` envelope: (reply_to, correlation_id, inner payload)."""
    if _REQUEST_NS not in raw_value:
        return None
    try:
        payload = json_loads(raw_value)
    except ValueError:
        return None
    return envelope_of(payload)


def envelope_of(payload: Any) -> tuple[str, str, Any] | None:
    """The envelope of :func:`unwrap_envelope` in a value already decoded from JSON."""
    if not isinstance(payload, dict):
        return None
    meta = payload.get("__faust")
    if not isinstance(meta, dict) or meta.get("ns") != "@ReqRepRequest":
        return None
    return str(payload["reply_to"]), str(payload["correlation_id"]), payload.get("value")


def encode_reply(key: Any, value: Any, correlation_id: str) -> bytes:
    """Faust's ``ReqRepResponse`` record, byte for byte."""
    return json_dumps(
        {
            "key": key,
            "value": value,
            "correlation_id": correlation_id,
            "__faust": {"ns": "@ReqRepResponse"},
        }
    )


def decode_reply(raw_value: bytes) -> tuple[str, Any] | None:
    try:
        payload = json_loads(raw_value)
    except ValueError:
        return None
    if not isinstance(payload, dict) or "correlation_id" not in payload:
        return None
    return str(payload["correlation_id"]), _reconstruct(payload.get("value"))


class RpcClient:
    """Sends requests, listens on reply topics, and hands each reply to whoever waits for it."""

    def __init__(
        self,
        transport: Transport,
        producer: PlainProducer,
        *,
        app_id: str,
        reply_to: str,
        replication_factor: int,
        reply_expires: float,
    ) -> None:
        self.transport = transport
        self.producer = producer
        self.app_id = app_id
        self.reply_to = reply_to
        self.replication_factor = replication_factor
        self.reply_expires = reply_expires
        self._admin: AdminClient | None = None
        self._own_admin = False
        self._consumer: ConsumerClient | None = None
        self._listening: set[str] = set()
        self._listen_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._waiters: dict[str, list[asyncio.Future[Any]]] = {}
        self._replies: OrderedDict[str, Any] = OrderedDict()
        self._sent: OrderedDict[str, None] = OrderedDict()
        self.requests_sent = 0
        self.replies_received = 0

    @classmethod
    def for_app(
        cls,
        transport: Transport,
        producer: PlainProducer,
        conf: AppSettings,
        process_id: str | None,
        admin: AdminClient | None,
    ) -> RpcClient:
        """The RPC client of a worker or an app command: its reply topic is ``reply_to`` if
        set, else one of its own (named after ``process_id``, or a fresh id), created through
        ``admin`` when given."""
        process = process_id or cls.new_correlation_id()
        client = cls(
            transport,
            producer,
            app_id=conf.id,
            reply_to=conf.reply_to or f"{conf.reply_to_prefix}{process}",
            replication_factor=conf.topic_replication_factor,
            reply_expires=conf.reply_expires,
        )
        if admin is not None:
            client.bind_admin(admin)
        return client

    def bind_admin(self, admin: AdminClient) -> None:
        self._admin = admin

    @staticmethod
    def new_correlation_id() -> str:
        return str(uuid.uuid4())

    async def ask(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: Sequence[tuple[str, bytes]],
        timestamp_ms: int | None,
        correlation_id: str,
        reply_to: str | None = None,
    ) -> Any:
        """Send the request (once per correlation id) and wait for its reply."""
        target = reply_to or self.reply_to
        await self.listen(target)
        if correlation_id in self._replies:
            return self._replies[correlation_id]
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(correlation_id, []).append(future)
        try:
            if correlation_id not in self._sent:
                self._remember(self._sent, correlation_id, None)
                try:
                    sent = await self.producer.send(
                        topic,
                        key=key,
                        value=value,
                        partition=partition,
                        headers=[
                            *headers,
                            (REPLY_TO_HEADER, target.encode()),
                            (CORRELATION_HEADER, correlation_id.encode()),
                        ],
                        timestamp_ms=timestamp_ms,
                    )
                    await sent
                except BaseException:
                    self._sent.pop(correlation_id, None)  # not sent: a retry must send it
                    raise
                self.requests_sent += 1
            return await future
        finally:
            waiting = self._waiters.get(correlation_id)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(future)
                if not waiting:
                    del self._waiters[correlation_id]

    def resolve(self, correlation_id: str, value: Any) -> None:
        """A reply arrived (read from a reply topic, or sent by this very worker)."""
        if correlation_id not in self._replies:
            self.replies_received += 1
        self._remember(self._replies, correlation_id, value)
        for future in self._waiters.pop(correlation_id, ()):
            if not future.done():
                future.set_result(value)

    @staticmethod
    def _remember(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > KEEP_REPLIES:
            cache.popitem(last=False)

    # -- listening ----------------------------------------------------------------------------

    async def listen(self, topic: str) -> None:
        if topic in self._listening:
            return
        async with self._listen_lock:
            if topic in self._listening:
                return
            admin = self._admin
            if admin is None:
                admin = self.transport.admin()
                await admin.start()
                self._admin = admin
                self._own_admin = True
            await admin.create_topics(
                [
                    TopicSpec(
                        topic,
                        1,
                        self.replication_factor,
                        {
                            "cleanup.policy": "delete",
                            "retention.ms": str(int(self.reply_expires * 1000)),
                        },
                    )
                ]
            )
            tp = TopicPartition(topic, 0)
            end = (await admin.end_offsets([tp]))[tp]
            if self._consumer is None:
                self._consumer = self.transport.consumer(
                    ConsumerConfig(
                        group_id=None,
                        isolation_level="read_committed",
                        fetch_max_wait_ms=50,
                        client_id=f"{self.app_id}-replies",
                    )
                )
                await self._consumer.start()
            self._listening.add(topic)
            self._consumer.assign([TopicPartition(t, 0) for t in sorted(self._listening)])
            self._consumer.seek(tp, end)
            if self._reader is None:
                self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=200)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading replies failed (%s); retrying", type(exc).__name__)
                await asyncio.sleep(0.5)
                continue
            for records in batch.values():
                for record in records:
                    if record.value is None:
                        continue
                    reply = decode_reply(record.value)
                    if reply is not None:
                        self.resolve(*reply)

    async def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await cancel_and_wait({"rpc reply reader": reader})
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()
        if self._own_admin and self._admin is not None:
            with contextlib.suppress(Exception):
                await self._admin.close()
            self._admin = None
        for waiting in self._waiters.values():
            for future in waiting:
                future.cancel()
        self._waiters.clear()
