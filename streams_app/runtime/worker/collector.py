"""The record collector: every record a worker's agents and timers send, on its way out.

The concern it owns (Kafka Streams' ``RecordCollector``): encoding what it is given, the lineage
and transaction headers, which producer a send goes through (inside processing: the
transactional producer, so the record joins the open transaction; outside it, for tasks,
services, pages and signal receivers: the plain idempotent producer, so an abort of processing
never takes it back), ``send_soon``'s records until the next commit, ``group_by``'s forwards of
the original bytes, and an RPC request's reply.

The send path is the hot path: :meth:`RecordCollector.send_nowait` is what ``Topic.send`` calls
for almost every record (an agent's send needs no coroutine when the open batch takes the
record), and the worker's runtime hands it out as its own bound method, so nothing stands
between ``Topic.send`` and the producer. The lineage header (:mod:`streams_app.lineage`) is
one tuple a record, its value the offset formatted into the source partition's format, made
once.

:class:`OutsideClients` makes the clients of what is sent outside any transaction on first use:
the plain producer and the RPC client (``ask`` and replies to this process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from streams_app.app.faust_settings import AppSettings
from streams_app.lineage import SRC_HEADER, lineage_headers, source_format
from streams_app.runtime import rpc
from streams_app.runtime.plain_producer import PlainProducer
from streams_app.runtime.producer import RunRow
from streams_app.runtime.rpc import RpcClient
from streams_app.runtime.scope import in_processing
from streams_app.topology.contract import (
    Collected,
    Event,
    Headers,
    ResultRow,
    SendFuture,
    TopicLike,
    current_event,
)
from streams_app.transport.base import AdminClient, GroupMetadata, Transport

H_TXN_ID = "txn_id"
H_GENERATION = "generation"


class TransactionalSends(Protocol):
    """What the collector needs of the worker's transactional producer
    (:class:`~streams_app.runtime.producer.StreamsProducer`)."""

    @property
    def transactional_id(self) -> str | None: ...

    def send_nowait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
    ) -> SendFuture | None: ...

    def send_run_nowait(self, topic: str, rows: Sequence[RunRow]) -> int: ...

    async def send(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> SendFuture: ...


class _NotStarted:
    """The transactional producer before the worker has one: nothing joins a transaction yet."""

    transactional_id = None

    def send_nowait(self, *_: Any) -> None:
        return None

    def send_run_nowait(self, *_: Any) -> int:
        return 0

    async def send(self, topic: str, **_: Any) -> SendFuture:
        raise RuntimeError(f"a send to {topic!r} inside processing before the worker started")


class OutsideClients:
    """The plain producer and the RPC client, made on first use."""

    def __init__(self, transport: Transport, conf: AppSettings) -> None:
        self.transport = transport
        self.conf = conf
        #: Set at start: the process id names this worker's reply topic; the admin client
        #: creates it.
        self.process_id: str | None = None
        self.admin: AdminClient | None = None
        self._plain: PlainProducer | None = None
        self._rpc: RpcClient | None = None

    @property
    def plain(self) -> PlainProducer:
        if self._plain is None:
            self._plain = PlainProducer(self.transport, f"{self.conf.id}-plain")
        return self._plain

    @property
    def rpc(self) -> RpcClient:
        if self._rpc is None:
            self._rpc = RpcClient.for_app(
                self.transport, self.plain, self.conf, self.process_id, self.admin
            )
        return self._rpc

    @property
    def rpc_if_made(self) -> RpcClient | None:
        return self._rpc

    async def stop_rpc(self) -> None:
        if self._rpc is not None:
            await self._rpc.stop()

    async def stop_plain(self) -> None:
        if self._plain is not None:
            await self._plain.stop()


class RecordCollector:
    def __init__(self, conf: AppSettings, clients: OutsideClients) -> None:
        self.conf = conf
        self.clients = clients
        self._producer: TransactionalSends = _NotStarted()
        self._group: Callable[[], GroupMetadata | None] = lambda: None
        #: (topic, partition) -> the ``src`` header's value as a format of the offset,
        #: ``b"topic:partition:%d"`` (``lineage.source_format``), made once (the split
        #: format's headers are made each time: not the default, not hot).
        self._lineage: dict[tuple[str, int], bytes] = {}
        #: The defaults: the compact lineage header only. A send without headers of its own
        #: then takes the short path of :meth:`headers`.
        self._lineage_only = (
            conf.lineage_headers
            and conf.lineage_format == "compact"
            and not conf.transaction_headers
        )
        #: send_soon's records until the next flush: (inside processing, topic, options).
        self._soon: list[tuple[bool, TopicLike, dict[str, Any]]] = []

    def attach(
        self, producer: TransactionalSends, group: Callable[[], GroupMetadata | None]
    ) -> None:
        """At start: the transactional producer, and where the group's current generation is
        (for the transaction headers)."""
        self._producer = producer
        self._group = group

    # -- the sends of agents and timers (contract.Runtime) -----------------------------------

    def send_nowait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: float | None,
    ) -> SendFuture | None:
        """A send inside the transaction that needs no await (see
        :meth:`StreamsProducer.send_nowait`); None when the caller must await
        :meth:`send_encoded`. Outside processing it is always None: the plain producer has
        no such path."""
        if not in_processing.get():
            return None
        if headers is None and self._lineage_only:  # :meth:`headers`' common case, inline
            event = current_event.get()
            if event is None or event.offset < 0:
                out = None
            else:
                fmt = self._lineage.get((event.topic, event.partition)) or self._format(event)
                out = [(SRC_HEADER, fmt % event.offset)]
        else:
            out = self.headers(headers)
        return self._producer.send_nowait(
            topic,
            key,
            value,
            partition,
            out,
            None if timestamp is None else round(timestamp * 1000),
        )

    def send_run_nowait(self, topic: str, rows: Sequence[ResultRow]) -> int:
        """A run of results to ``topic`` inside the transaction, ``(key, value, timestamp_ms,
        event)`` each (encoded; ``event``: the record each came of, for its lineage headers):
        how many of them, from the first, went without an await (the caller sends the rest one
        by one, with that record current). 0 outside processing, as :meth:`send_nowait`."""
        if not in_processing.get():
            return 0
        if self._lineage_only and rows:
            run = self._lineage_run(rows)
            if run is not None:
                return self._producer.send_run_nowait(topic, run)
        headers_of = self.headers_of  # rows of several partitions, or of no record
        out = [(key, value, headers_of(None, event), ms) for key, value, ms, event in rows]
        return self._producer.send_run_nowait(topic, out)

    def send_results_nowait(
        self, topic: TopicLike, results: Sequence[Collected], raw_keys: bool
    ) -> int:
        """``Runtime.send_results_nowait``: the results of one run of one partition's records,
        encoded and given their lineage header in one pass (``Topic.encode_sourced_run``)
        where the headers are the default ones; else as :meth:`send_run_nowait`."""
        if not in_processing.get():
            return 0
        first = results[0][4] if results else None
        if not self._lineage_only or first is None or first.offset < 0:
            return self.send_run_nowait(topic.name, topic.encode_results(results))
        fmt = self._lineage.get((first.topic, first.partition)) or self._format(first)
        rows = topic.encode_sourced_run(results, SRC_HEADER, fmt, raw_keys)
        return self._producer.send_run_nowait(topic.name, rows)

    def _lineage_run(self, rows: Sequence[ResultRow]) -> list[RunRow] | None:
        """:meth:`send_run_nowait`'s rows with their lineage header when every row is of a
        record of the first row's partition (a run's results are: the dispatcher hands over
        one partition's records at a time), in one comprehension; None otherwise (a row of
        no record, of another partition): each row then takes :meth:`headers_of`."""
        first = rows[0][3]
        if first is None or first.offset < 0:
            return None
        topic, partition = first.topic, first.partition
        fmt = self._lineage.get((topic, partition)) or self._format(first)
        out: list[RunRow] = [
            (key, value, [(SRC_HEADER, fmt % event.offset)], ms)
            for key, value, ms, event in rows
            if event is not None
            and event.partition == partition
            and event.topic == topic
            and event.offset >= 0
        ]
        return out if len(out) == len(rows) else None

    async def send_encoded(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: float | None,
    ) -> SendFuture:
        return await self.send_raw(
            topic, key, value, headers, partition, timestamp, in_processing.get()
        )

    async def send(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> SendFuture:
        raw_key, raw_value = topic.encode(key, value)
        return await self.send_raw(
            topic.name, raw_key, raw_value, headers, partition, timestamp, in_processing.get()
        )

    def send_soon(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        options = {"key": key, "value": value, "headers": headers, "partition": partition}
        self._soon.append((in_processing.get(), topic, options))

    async def forward(
        self, topic: TopicLike, event: Event, *, key: Any = None, partition: int | None = None
    ) -> SendFuture:
        """``event``'s original value bytes to ``topic`` under ``key`` (group_by, through)."""
        raw_key = event.raw_key if key is None else topic.key_codec.dumps(key)
        return await self.send_raw(
            topic.name,
            raw_key,
            event.raw_value,
            event.headers or None,
            partition,
            event.timestamp / 1000 if event.timestamp >= 0 else None,
            in_processing.get(),
        )

    async def reply(self, event: Event, value: Any) -> None:
        """A generator agent yielded while processing an RPC request: the reply, inside the
        transaction (and to a waiter in this process at once)."""
        assert event.reply_to is not None and event.correlation_id is not None
        raw = rpc.encode_reply(event.key, value, event.correlation_id)
        await self.send_raw(event.reply_to, None, raw, None, None, None, in_processing.get())
        client = self.clients.rpc_if_made
        if client is not None:
            client.resolve(event.correlation_id, rpc.decode_reply(raw)[1])  # type: ignore[index]

    # -- send_soon's records ---------------------------------------------------------------------

    async def flush_soon(self) -> None:
        """Send what ``send_soon`` holds (before a commit: it joins the transaction)."""
        while self._soon:
            pending, self._soon = self._soon, []
            for transactional, topic, options in pending:
                raw_key, raw_value = topic.encode(options["key"], options["value"])
                await self.send_raw(
                    topic.name,
                    raw_key,
                    raw_value,
                    options["headers"],
                    options["partition"],
                    None,
                    transactional,
                )

    def drop_soon(self) -> None:
        """Forget what ``send_soon`` holds (an abort: what sent it runs again)."""
        self._soon.clear()

    @property
    def soon_pending(self) -> bool:
        return bool(self._soon)

    # -- headers and producers ---------------------------------------------------------------------

    def headers(self, headers: Headers | None) -> list[tuple[str, bytes]] | None:
        """The caller's headers plus lineage and transaction headers (when configured)."""
        return self.headers_of(headers, current_event.get())

    def headers_of(
        self, headers: Headers | None, event: Event | None
    ) -> list[tuple[str, bytes]] | None:
        """:meth:`headers` of a send made for ``event`` (None: for no record)."""
        if headers is None and self._lineage_only:  # the common case, on every send
            if event is None or event.offset < 0:
                return None
            fmt = self._lineage.get((event.topic, event.partition)) or self._format(event)
            return [(SRC_HEADER, fmt % event.offset)]
        conf = self.conf
        if headers is None and not conf.lineage_headers and not conf.transaction_headers:
            return None  # no list built and dropped
        out = header_list(headers)
        if conf.lineage_headers and event is not None and event.offset >= 0:
            if conf.lineage_format == "compact":
                fmt = self._lineage.get((event.topic, event.partition)) or self._format(event)
                out.append((SRC_HEADER, fmt % event.offset))
            else:
                out += lineage_headers(event.topic, event.partition, event.offset, split=True)
        if conf.transaction_headers:
            group = self._group()
            out.append((H_TXN_ID, (self._producer.transactional_id or "").encode()))
            out.append((H_GENERATION, b"%d" % (group.generation_id if group else -1)))
        return out or None

    def _format(self, event: Event) -> bytes:
        """The ``src`` header's format for the event's partition, made once."""
        fmt = self._lineage[(event.topic, event.partition)] = source_format(
            event.topic, event.partition
        )
        return fmt

    async def send_raw(
        self,
        topic: str,
        raw_key: bytes | None,
        raw_value: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: float | None,
        transactional: bool,
    ) -> SendFuture:
        timestamp_ms = None if timestamp is None else round(timestamp * 1000)
        if not transactional:
            # Tasks, services, pages, signal receivers: outside any transaction.
            return await self.clients.plain.send(
                topic,
                key=raw_key,
                value=raw_value,
                partition=partition,
                headers=header_list(headers) or None,
                timestamp_ms=timestamp_ms,
            )
        return await self._producer.send(
            topic,
            key=raw_key,
            value=raw_value,
            partition=partition,
            headers=self.headers(headers),
            timestamp_ms=timestamp_ms,
        )


def header_list(headers: Headers | None) -> list[tuple[str, bytes]]:
    """Headers as the producer takes them: a list of (name, bytes) pairs."""
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        return [(k, v if isinstance(v, bytes) else str(v).encode()) for k, v in headers.items()]
    return list(headers)
