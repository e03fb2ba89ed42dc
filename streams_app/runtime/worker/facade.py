"""The worker as topology code sees it: :class:`~streams_app.topology.contract.Runtime`.

The concern it owns: what agents, timers, topics, tables, channels and pages call while the
worker runs (``current_runtime`` holds this object for the worker's whole run). Sends are the
record collector's own bound methods (``collector.py``), handed out as this object's, so an
agent's ``topic.send`` reaches the producer through no extra call; the rest (RPC ``ask``,
channels, table reads outside a record (``runtime/local_reads.py``), topic declaration, the
worker's state) is here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from streams_app.errors import TopologyError
from streams_app.runtime import local_reads, rpc
from streams_app.runtime.scope import current_parkable, in_processing
from streams_app.runtime.worker.collector import RecordCollector
from streams_app.runtime.worker.failures import AgentFailed
from streams_app.topology.contract import (
    MISSING,
    ChannelLike,
    Event,
    Headers,
    TableLike,
    TopicLike,
    current_event,
)
from streams_app.transport.base import TopicSpec

if TYPE_CHECKING:
    from streams_app.runtime.worker.root import Worker


class _OutsideProcessing:
    """The task scope of channel values sent from outside processing (a timer, a task, a page):
    no partition is theirs, so tables read the committed state (``Table._transaction`` sees
    ``outside_processing`` and never opens a table here) and refuse writes."""

    tables: dict[str, Any] = {}
    outside_processing = True

    def open_table(self, table: TableLike) -> Any:
        raise TopologyError(
            f"table {table.name!r} was used by an agent reading a channel fed from outside "
            "processing: there is no partition to write; send to a topic instead"
        )


class WorkerRuntime:
    def __init__(self, worker: Worker, collector: RecordCollector) -> None:
        self.worker = worker
        # The collector's bound methods are this object's: no call in between (hot path).
        self.send_nowait = collector.send_nowait
        self.send_run_nowait = collector.send_run_nowait
        self.send_results_nowait = collector.send_results_nowait
        self.send_encoded = collector.send_encoded
        self.send = collector.send
        self.send_soon = collector.send_soon
        self.forward = collector.forward
        self._clients = collector.clients

    async def ask(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        headers: Headers | None = None,
        timestamp: float | None = None,
        reply_to: str | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        raw_key, raw_value = topic.encode(key, value)
        if correlation_id is None:
            event = current_event.get()
            if event is not None and event.offset >= 0 and in_processing.get():
                event.asks += 1
                correlation_id = (
                    f"{self.worker.conf.id}:{event.topic}:{event.partition}:{event.offset}:"
                    f"{event.asks}"
                )
            else:
                correlation_id = rpc.RpcClient.new_correlation_id()
        if isinstance(headers, Mapping):
            extra = [
                (k, v if isinstance(v, bytes) else str(v).encode()) for k, v in headers.items()
            ]
        else:
            extra = list(headers or ())
        parkable = current_parkable.get() if in_processing.get() else None
        if parkable is not None:
            parkable.park()
        try:
            return await self._clients.rpc.ask(
                topic.name,
                key=raw_key,
                value=raw_value,
                partition=partition,
                headers=extra,
                timestamp_ms=None if timestamp is None else int(timestamp * 1000),
                correlation_id=correlation_id,
                reply_to=reply_to,
            )
        finally:
            if parkable is not None:
                parkable.unpark()

    async def channel_send(
        self,
        channel: ChannelLike,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
    ) -> None:
        if in_processing.get():
            self._feed_channel(channel, key, value, headers)
            return
        # From a task or service: the channel's agents run under the processing lock, like a
        # batch, so that what they send joins a transaction at a quiescent point.
        worker = self.worker
        parts = worker.require_parts()
        async with worker.lock:
            self._feed_channel(channel, key, value, headers)
            try:
                await parts.batch.settle()
            except AgentFailed as failed:
                await parts.failures.on_agent_failures(failed.failures)

    def _feed_channel(
        self, channel: ChannelLike, key: Any, value: Any, headers: Headers | None
    ) -> None:
        source = current_event.get()
        scope: Any = source.task if source is not None else _OutsideProcessing()
        items = tuple(headers.items()) if isinstance(headers, Mapping) else tuple(headers or ())
        event = Event(
            channel.name,
            source.partition if source is not None else 0,
            -1,
            int(self.worker.clock.time() * 1000),
            key,
            value,
            items,
            None,
            None,
            scope,
        )
        for actor in self.worker.runner.channel_targets(channel.name):
            actor.input.feed(event)

    def table_items(self, table: TableLike) -> Iterator[tuple[Any, Any]]:
        """Committed items of every partition of ``table`` this worker holds
        (runtime/local_reads.py)."""
        parts = self.worker.parts
        store = self.worker.stores.get(table.name)
        if store is None or parts is None:
            return iter(())
        held = local_reads.held_partitions(table, parts.plan, parts.tasks)
        return local_reads.items(table, store, held)

    def table_lookup(self, table: TableLike, key: Any) -> Any:
        """``key``'s committed value in the partitions of ``table`` this worker holds, its own
        partition first (runtime/local_reads.py): a read outside of any record."""
        worker = self.worker
        parts = worker.parts
        store = worker.stores.get(table.name)
        if store is None or parts is None:
            return MISSING
        held = local_reads.held_partitions(table, parts.plan, parts.tasks)
        count = parts.plan.table_partitions[table.name]
        return local_reads.lookup(
            table, store, held, key, worker.transport.partition_for_key, count
        )

    def global_lookup(self, table: TableLike, key: Any) -> Any:
        parts = self.worker.parts
        if parts is None or parts.global_tables is None:
            return MISSING
        return parts.global_tables.lookup(table, key)

    async def declare(self, topic: TopicLike) -> None:
        worker = self.worker
        admin = worker.require_parts().admin
        counts = await admin.partition_counts([topic.name])
        if topic.name in counts:
            return
        await admin.create_topics(
            [
                TopicSpec(
                    topic.name,
                    topic.partitions or worker.conf.topic_partitions,
                    topic.replicas or worker.conf.topic_replication_factor,
                    topic.config,
                )
            ]
        )

    def topic(self, name: str) -> TopicLike:
        """The app's topic called ``name``: topology code naming a topic declares it (as
        ``app.topic(name)`` would)."""
        return self.worker.app.topic(name)

    @property
    def rebalancing(self) -> bool:
        return self.worker.rebalancing

    @property
    def should_stop(self) -> bool:
        return self.worker.stop_requested

    async def sleep(self, seconds: float) -> None:
        await self.worker.sleep_unless_stopped(seconds)

    def is_leader(self) -> bool:
        return self.worker.is_leader()

    def wall_time(self) -> float:
        return self.worker.clock.time()
