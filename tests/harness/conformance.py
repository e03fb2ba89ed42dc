"""Transport-level scenarios run on the in-memory Kafka model and on the real broker.

Each scenario drives the transport protocols directly (no runtime), deterministically, and
returns a *trace*: offsets where records landed, last stable offsets and high watermarks, what
``read_committed`` and ``read_uncommitted`` readers see, positions, group offsets and the
errors raised. The model is faithful where these traces are equal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from streams_app.testing.backends import Backend, MemoryBackend
from streams_app.testing.faults import HarnessTransport, Switch
from streams_app.transport.base import (
    ConsumerClient,
    ConsumerConfig,
    GroupMetadata,
    ProducerClient,
    ProducerConfig,
    TopicPartition,
)

Trace = list[tuple[Any, ...]]


class Recorder:
    """A rebalance listener that writes down what happened to its member, in order (empty
    revocations left out: aiokafka reports one at the first join, the model does not)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.assigned: set[TopicPartition] = set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if revoked:
            self.events.append(("revoked", len(revoked)))
        self.assigned = set()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", len(assigned)))
        self.assigned = set(assigned)


class Kit:
    """The clients of one scenario on one backend (topic and group names suffixed on a real
    broker, so scenarios never share state)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.memory = isinstance(backend, MemoryBackend)
        self.transport = HarnessTransport(backend.transport("kit"), Switch("kit"), backend.names)
        self._clients: list[Any] = []
        #: getmany timeout: the model answers at once, a real broker needs a moment.
        self.poll_ms = 0 if self.memory else 100

    async def close(self) -> None:
        for client in reversed(self._clients):
            with contextlib.suppress(Exception):
                await client.stop()

    async def topic(self, name: str, partitions: int) -> str:
        await self.backend.create_topic(name, partitions, {})
        return name

    async def producer(
        self, transactional_id: str | None = None, *, timeout_ms: int = 10_000
    ) -> ProducerClient:
        producer = self.transport.producer(
            ProducerConfig(
                transactional_id=transactional_id,
                transaction_timeout_ms=timeout_ms,
                linger_ms=0,
                client_id="conformance",
            )
        )
        await producer.start()
        self._clients.append(producer)
        return producer

    async def consumer(
        self, group_id: str | None = None, *, isolation: str = "read_committed"
    ) -> ConsumerClient:
        consumer = self.transport.consumer(
            ConsumerConfig(
                group_id=group_id,
                isolation_level=isolation,
                session_timeout_ms=6_000,
                heartbeat_interval_ms=500,
                client_id="conformance",
            )
        )
        await consumer.start()
        self._clients.append(consumer)
        return consumer

    async def send(self, producer: ProducerClient, topic: str, key: str, partition: int) -> int:
        future = await producer.send(topic, key=key.encode(), value=b"v", partition=partition)
        if not producer.transactional or not future.done():
            await producer.flush()
        return int(future.result().offset)

    async def ends(self, topic: str, partitions: int) -> list[tuple[int, int]]:
        """(last stable offset, high watermark) per partition."""
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        stable = await self.backend.stable_offsets(tps)
        high = await self.backend.end_offsets(tps)
        return [(stable[tp], high[tp]) for tp in tps]

    async def read(self, topic: str, *, committed: bool) -> list[tuple[int, int, str]]:
        records = await self.backend.read(topic, committed=committed)
        return sorted((r.partition, r.offset, (r.key or b"").decode()) for r in records)

    async def poll_until(
        self, consumers: list[ConsumerClient], done: Callable[[], bool], timeout: float = 30.0
    ) -> None:
        """Poll every consumer (rebalances happen while polling) until ``done()``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done():
            if loop.time() > deadline:
                raise TimeoutError("the group did not settle")
            for consumer in consumers:
                await consumer.getmany(self.poll_ms)

    async def wait_for(self, what: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
        """Real broker: poll a broker-side state (with a deadline); model: it already holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await what():
            if loop.time() > deadline:
                raise TimeoutError("the broker did not reach the state in time")
            await asyncio.sleep(0.1)

    async def drain(self, consumer: ConsumerClient, tp: TopicPartition) -> list[int]:
        """Fetch from ``tp`` until nothing more comes; the offsets returned."""
        offsets: list[int] = []
        idle = 0
        while idle < (1 if self.memory else 3):
            batch = await consumer.getmany(self.poll_ms)
            got = [r.offset for r in batch.get(tp, ())]
            offsets.extend(got)
            idle = 0 if got else idle + 1
        return offsets


async def error_of(call: Awaitable[Any]) -> str:
    try:
        await call
    except Exception as exc:
        return type(exc).__name__
    return "ok"


# -- scenarios -----------------------------------------------------------------------------


async def commit_abort_and_markers(kit: Kit) -> Trace:
    """Committed, aborted and plain writes; markers take offsets; readers and positions."""
    trace: Trace = []
    topic = await kit.topic("conf-commit", 2)
    txn = await kit.producer("conf-commit-txn")
    plain = await kit.producer()
    await txn.begin_transaction()
    trace.append(("txn1", [await kit.send(txn, topic, f"c{i}", 0) for i in range(3)]))
    await txn.commit_transaction()
    await txn.begin_transaction()
    trace.append(("txn2", [await kit.send(txn, topic, f"a{i}", 0) for i in range(2)]))
    trace.append(("txn2 p1", await kit.send(txn, topic, "a-p1", 1)))
    await txn.abort_transaction()
    # A broker writes the markers just after EndTxn returns; the model at once. Wait for them
    # so that the next record's offset does not depend on that race.
    await kit.wait_for(lambda: _stable(kit, topic, 2))
    trace.append(("plain", await kit.send(plain, topic, "p", 0)))
    trace.append(("ends", await kit.ends(topic, 2)))
    trace.append(("committed", await kit.read(topic, committed=True)))
    trace.append(("uncommitted", await kit.read(topic, committed=False)))
    reader = await kit.consumer(None)
    tp = TopicPartition(topic, 0)
    reader.assign([tp])
    reader.seek(tp, 0)
    trace.append(("fetched", await kit.drain(reader, tp)))
    trace.append(("position past the markers", await reader.position(tp)))
    reader.seek(tp, 4)  # inside the aborted transaction: skipped up to the next record
    trace.append(("fetched from 4", await kit.drain(reader, tp)))
    return trace


async def open_transaction_holds_the_lso(kit: Kit) -> Trace:
    trace: Trace = []
    topic = await kit.topic("conf-open", 1)
    txn = await kit.producer("conf-open-txn")
    plain = await kit.producer()
    await txn.begin_transaction()
    trace.append(("open", [await kit.send(txn, topic, f"o{i}", 0) for i in range(2)]))
    trace.append(("plain", await kit.send(plain, topic, "after", 0)))
    trace.append(("ends while open", await kit.ends(topic, 1)))
    trace.append(("committed while open", await kit.read(topic, committed=True)))
    trace.append(("uncommitted while open", await kit.read(topic, committed=False)))
    await txn.commit_transaction()
    await kit.wait_for(lambda: _stable(kit, topic, 1))
    trace.append(("ends", await kit.ends(topic, 1)))
    trace.append(("committed", await kit.read(topic, committed=True)))
    return trace


async def a_new_producer_fences_the_old_one(kit: Kit) -> Trace:
    trace: Trace = []
    topic = await kit.topic("conf-fence", 1)
    old = await kit.producer("conf-fence-txn")
    await old.begin_transaction()
    trace.append(("old sends", await kit.send(old, topic, "old", 0)))
    new = await kit.producer("conf-fence-txn")  # InitProducerId: fences, aborts the old txn
    trace.append(("old commit", await error_of(old.commit_transaction())))
    await new.begin_transaction()
    trace.append(("new sends", await kit.send(new, topic, "new", 0)))
    await new.commit_transaction()
    await kit.wait_for(lambda: _stable(kit, topic, 1))
    trace.append(("ends", await kit.ends(topic, 1)))
    trace.append(("committed", await kit.read(topic, committed=True)))
    trace.append(("uncommitted", await kit.read(topic, committed=False)))
    return trace


async def stale_generation_is_fenced(kit: Kit) -> Trace:
    """KIP-447: offsets committed under an old generation are refused; the txn aborts."""
    trace: Trace = []
    topic = await kit.topic("conf-gen", 2)
    group = "conf-gen-group"
    first, second = Recorder(), Recorder()
    c1 = await kit.consumer(group)
    c1.subscribe([topic], first)
    await kit.poll_until([c1], lambda: len(first.assigned) == 2)
    before: GroupMetadata = c1.group_metadata()
    c2 = await kit.consumer(group)
    c2.subscribe([topic], second)
    await kit.poll_until(
        [c1, c2],
        lambda: (
            len(first.assigned) == 1
            and len(second.assigned) == 1
            and c1.group_metadata().generation_id > before.generation_id
        ),
    )
    after = c1.group_metadata()
    trace.append(("generation moved on", after.generation_id > before.generation_id))
    # Eager: the first member revokes everything before anyone gets the new assignment.
    trace.append(("first member", first.events))
    trace.append(("second member", second.events))
    producer = await kit.producer("conf-gen-txn")
    tp = sorted(first.assigned)[0]
    await producer.begin_transaction()
    await kit.send(producer, topic, "stale", tp.partition)
    trace.append(
        ("stale offsets", await error_of(producer.send_offsets_to_transaction({tp: 1}, before)))
    )
    await producer.abort_transaction()
    await producer.begin_transaction()
    await kit.send(producer, topic, "current", tp.partition)
    await producer.send_offsets_to_transaction({tp: 2}, after)
    await producer.commit_transaction()
    await kit.wait_for(lambda: _stable(kit, topic, 2))
    committed = await c2.committed_offsets([tp])
    trace.append(("committed offset", committed[tp]))
    trace.append(("committed", [(o, k) for p, o, k in await kit.read(topic, committed=True)]))
    return trace


async def require_stable_waits_for_the_transaction(kit: Kit) -> Trace:
    trace: Trace = []
    topic = await kit.topic("conf-stable", 1)
    group = "conf-stable-group"
    member, recorder = await kit.consumer(group), Recorder()
    member.subscribe([topic], recorder)
    await kit.poll_until([member], lambda: len(recorder.assigned) == 1)
    tp = TopicPartition(topic, 0)
    producer = await kit.producer("conf-stable-txn")
    await producer.begin_transaction()
    await kit.send(producer, topic, "x", 0)
    await producer.send_offsets_to_transaction({tp: 1}, member.group_metadata())
    reader = await kit.consumer(group)
    fetch = asyncio.ensure_future(reader.committed_offsets([tp]))
    if kit.memory:
        for _ in range(5):
            await asyncio.sleep(0)
    else:
        await asyncio.wait({fetch}, timeout=1.5)
    trace.append(("answered while the transaction is open", fetch.done()))
    await producer.commit_transaction()
    trace.append(("after the commit", (await asyncio.wait_for(fetch, 30))[tp]))
    return trace


async def transaction_timeout_aborts_and_fences(kit: Kit) -> Trace:
    trace: Trace = []
    topic = await kit.topic("conf-timeout", 1)
    producer = await kit.producer("conf-timeout-txn", timeout_ms=2_000)
    await producer.begin_transaction()
    trace.append(("sent", await kit.send(producer, topic, "late", 0)))
    if isinstance(kit.backend, MemoryBackend):
        kit.backend.clock.advance(2.5)
    await kit.wait_for(lambda: _stable(kit, topic, 1), timeout=30)
    trace.append(("commit after the timeout", await error_of(producer.commit_transaction())))
    trace.append(("ends", await kit.ends(topic, 1)))
    trace.append(("committed", await kit.read(topic, committed=True)))
    trace.append(("uncommitted", await kit.read(topic, committed=False)))
    return trace


async def _stable(kit: Kit, topic: str, partitions: int) -> bool:
    return all(lso == hw for lso, hw in await kit.ends(topic, partitions))


SCENARIOS: dict[str, Callable[[Kit], Awaitable[Trace]]] = {
    "commit_abort_and_markers": commit_abort_and_markers,
    "open_transaction_holds_the_lso": open_transaction_holds_the_lso,
    "a_new_producer_fences_the_old_one": a_new_producer_fences_the_old_one,
    "stale_generation_is_fenced": stale_generation_is_fenced,
    "require_stable_waits_for_the_transaction": require_stable_waits_for_the_transaction,
    "transaction_timeout_aborts_and_fences": transaction_timeout_aborts_and_fences,
}
