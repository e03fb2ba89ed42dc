"""Invariant 11: the Kafka client layer alone, Jepsen style (no stream processor involved).

Modelled on Kafka's ``TransactionalMessageCopier`` in group mode (``group_mode_transactions_test``)
and Jepsen's Kafka checker. A seeder writes unique integers to an input topic over ``duration``
seconds; ``copiers`` transactional copiers in one consumer group read it ``read_committed``, copy
each record to an output topic inside a transaction that also carries their consumer offsets, and
abort about a third of their transactions at random, seeking back to their committed offsets.
Meanwhile brokers are bounced (a random one, the copiers' transaction coordinator, the group
coordinator) and a copier's producer is crashed mid-transaction and replaced under its
transactional id. A
``read_committed`` reader watches the output throughout.

Checked at the end (``read_committed``), as Jepsen's checker names them:

- ``lost_write``: an input value never copied;
- ``duplicate``: an input value copied more than once;
- ``aborted_read``: an output offset the concurrent reader was given is not committed (G1a);
- ``inconsistent_offset``: the concurrent reader saw a different value at an offset than the
  final read, or the group's committed offsets do not equal the input's end offsets;
- ``nonmonotonic``: copies of one input partition out of input order in an output partition.

``client="streams_app"`` runs our KIP-447 extension (``streams_app.kafka``: TxnOffsetCommit v3
with the generation snapshotted at assignment, ``require_stable`` offsets, the send gate,
abortable fencing); ``client="aiokafka"`` the same loop on plain aiokafka 0.14, the client layer
faust-streaming runs on (TxnOffsetCommit v0: group id only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams_app.chaos.reader import ConcurrentReader, partitions_of, scan
from streams_app.kafka import StableConsumer, TransactionalProducer
from streams_app.transport.base import GroupMetadata

log = logging.getLogger(__name__)

STREAMS_APP_CLIENT = "streams_app"
AIOKAFKA_CLIENT = "aiokafka"
ANOMALIES = ("lost_write", "duplicate", "aborted_read", "inconsistent_offset", "nonmonotonic")


@dataclass
class CopierResult:
    client: str
    records: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    faults: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    anomalies: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    examples: list[str] = field(default_factory=list)
    drained: bool = False
    seconds: float = 0.0

    def add(self, anomaly: str, count: int, example: str | None = None) -> None:
        if count > 0:
            self.anomalies[anomaly] += count
            if example and len(self.examples) < 10:
                self.examples.append(f"{anomaly}: {example}")

    @property
    def violations(self) -> int:
        return sum(self.anomalies.values())

    def asdict(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "records": self.records,
            "transactions_committed": self.transactions_committed,
            "transactions_aborted": self.transactions_aborted,
            "errors": dict(self.errors),
            "faults": dict(self.faults),
            "anomalies": dict(self.anomalies),
            "examples": self.examples,
            "drained": self.drained,
            "seconds": round(self.seconds, 1),
        }


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, copier: Copier) -> None:
        self.copier = copier

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.copier.lock:  # never in the middle of a transaction
            self.copier.group = None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.copier.on_assigned(list(assigned))


class Copier:
    """One transactional copier: a consumer in the group and a transactional producer."""

    def __init__(
        self,
        index: int,
        *,
        bootstrap: str,
        client: str,
        source: str,
        sink: str,
        sink_partitions: int,
        group_id: str,
        transactional_id: str,
        result: CopierResult,
        rng: random.Random,
        abort_ratio: float,
    ) -> None:
        self.index = index
        self.bootstrap = bootstrap
        self.client = client
        self.source = source
        self.sink = sink
        self.sink_partitions = sink_partitions
        self.group_id = group_id
        self.transactional_id = transactional_id
        self.result = result
        self.rng = rng
        self.abort_ratio = abort_ratio
        self.lock = asyncio.Lock()
        self.group: GroupMetadata | None = None
        self.committed: dict[TopicPartition, int] = {}
        self.consumer: Any = None
        self.producer: Any = None
        self.task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._crash = False

    # -- clients -------------------------------------------------------------------------

    def _new_consumer(self) -> Any:
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group_id,
            "isolation_level": "read_committed",
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "rebalance_timeout_ms": 60_000,
            "max_poll_records": 300,
            "client_id": f"copier-{self.index}",
        }
        if self.client == STREAMS_APP_CLIENT:
            return StableConsumer(**kwargs)
        return AIOKafkaConsumer(**kwargs)

    def _new_producer(self) -> Any:
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "transactional_id": self.transactional_id,
            "enable_idempotence": True,
            "acks": "all",
            "linger_ms": 5,
            "max_batch_size": 4096,  # several batches in flight per transaction
            "transaction_timeout_ms": 20_000,
            "request_timeout_ms": 15_000,
            "client_id": f"copier-{self.index}",
        }
        if self.client == STREAMS_APP_CLIENT:
            return TransactionalProducer(**kwargs)
        return AIOKafkaProducer(**kwargs)

    async def _restart_producer(self) -> None:
        if self.producer is not None:
            with contextlib.suppress(Exception):
                await self.producer.stop()
        self.producer = self._new_producer()
        await _retry(self.producer.start, "producer start")

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self.task = asyncio.create_task(self._run(), name=f"copier-{self.index}")

    async def stop(self) -> None:
        self._stop.set()
        if self.task is not None:
            try:
                await asyncio.wait_for(self.task, 60)
            except TimeoutError:
                self.task.cancel()
            except Exception as exc:
                log.warning("copier %d ended with %r", self.index, exc)
            self.task = None

    def crash_producer(self) -> None:
        """In the next transaction, after its records are sent: drop the producer without
        ending the transaction (a crash, as far as Kafka can tell) and start a new one with the
        same transactional id, whose InitProducerId fences the old one and aborts its work."""
        self._crash = True

    async def _run(self) -> None:
        self.consumer = self._new_consumer()
        self.consumer.subscribe([self.source], listener=_Listener(self))
        await _retry(self.consumer.start, "consumer start")
        await self._restart_producer()
        try:
            while not self._stop.is_set():
                try:
                    batch = await self.consumer.getmany(timeout_ms=200, max_records=300)
                except aerrors.KafkaError as exc:
                    self.result.errors[f"fetch:{type(exc).__name__}"] += 1
                    await asyncio.sleep(0.2)
                    continue
                if batch:
                    await self._copy(batch)
        finally:
            with contextlib.suppress(Exception):
                await self.consumer.stop()
            with contextlib.suppress(Exception):
                await self.producer.stop()

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        async with self.lock:
            consumer = self.consumer
            if self.client == STREAMS_APP_CLIENT:
                self.group = consumer.group_metadata()
                found = await consumer.committed_offsets(assigned)
            else:
                # Plain aiokafka sends the group id alone (TxnOffsetCommit v0): a marker only.
                self.group = GroupMetadata(self.group_id, -1, "")
                found = {tp: await consumer.committed(tp) for tp in assigned}
            self.committed = {}
            for tp in assigned:
                offset = found.get(tp)
                self.committed[tp] = 0 if offset is None else int(offset)
                consumer.seek(tp, self.committed[tp])

    # -- one transaction ---------------------------------------------------------------------

    async def _copy(self, batch: dict[TopicPartition, list[Any]]) -> None:
        async with self.lock:
            group = self.group
            batch = {tp: recs for tp, recs in batch.items() if tp in self.committed}
            if group is None or not batch:
                return
            offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items()}
            abort = self.rng.random() < self.abort_ratio
            producer = self.producer
            try:
                await producer.begin_transaction()
                futures = []
                for tp, records in batch.items():
                    for record in records:
                        futures.append(
                            await producer.send(
                                self.sink,
                                key=record.key,
                                value=record.value,
                                partition=tp.partition % self.sink_partitions,
                                headers=[("src", b"%d:%d" % (tp.partition, record.offset))],
                            )
                        )
                if self._crash:
                    self._crash = False
                    await asyncio.gather(*futures, return_exceptions=True)
                    await self._restart_producer()
                    self._rewind()
                    return
                if self.client == STREAMS_APP_CLIENT:
                    await producer.send_offsets_to_transaction(offsets, group)
                else:
                    await producer.send_offsets_to_transaction(offsets, self.group_id)
                if abort:
                    await producer.abort_transaction()
                    self.result.transactions_aborted += 1
                    self._rewind()
                    return
                await producer.commit_transaction()
            except Exception as exc:
                self.result.errors[type(exc).__name__] += 1
                log.info("copier %d: transaction failed: %r", self.index, exc)
                await self._recover()
                return
            self.result.transactions_committed += 1
            self.committed.update(offsets)

    def _rewind(self) -> None:
        for tp, offset in self.committed.items():
            with contextlib.suppress(Exception):
                self.consumer.seek(tp, offset)

    async def _recover(self) -> None:
        """Abort if the producer can, else replace it; either way rewind to committed."""
        try:
            await asyncio.wait_for(self.producer.abort_transaction(), 30)
            self.result.transactions_aborted += 1
        except Exception as exc:
            self.result.errors[f"abort:{type(exc).__name__}"] += 1
            await self._restart_producer()
        self._rewind()


async def _retry(start: Callable[[], Awaitable[Any]], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await start()
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise
            log.info("%s failed (%r); retrying", what, exc)
            await asyncio.sleep(1.0)


BrokerFault = Callable[[str], Coroutine[Any, Any, None]]


async def run_copier_check(
    bootstrap: str,
    *,
    suffix: str,
    client: str,
    records: int,
    duration: float,
    seed: int,
    copiers: int = 3,
    abort_ratio: float = 1 / 3,
    fault: BrokerFault | None = None,
    faults: int = 3,
    drain_timeout: float = 180.0,
) -> CopierResult:
    """Run the workload once; ``fault(kind)`` bounces a broker (``kind`` is ``broker_kill``,
    ``txn_coordinator_kill`` or ``group_coordinator_kill``; it receives the group and
    transactional ids through the closure its caller made)."""
    started = time.monotonic()
    rng = random.Random(f"copier-{seed}")
    result = CopierResult(client=client)
    source, sink = f"copier-in-{suffix}", f"copier-out-{suffix}"
    group = f"copier-{suffix}"
    in_partitions, out_partitions = 6, 3
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(source, in_partitions, 3), NewTopic(sink, out_partitions, 3)]
        )
    finally:
        await admin.close()

    workers = [
        Copier(
            i,
            bootstrap=bootstrap,
            client=client,
            source=source,
            sink=sink,
            sink_partitions=out_partitions,
            group_id=group,
            transactional_id=f"{group}-{i}",
            result=result,
            rng=random.Random(f"copier-{seed}-{i}"),
            abort_ratio=abort_ratio,
        )
        for i in range(copiers)
    ]
    for w in workers:
        w.start()
    reader = ConcurrentReader(bootstrap, [sink], value_of=lambda r: int(r.value))
    reader.start()

    values_sent = await _seed_and_bounce(
        bootstrap, source, records, duration, rng, workers, fault, faults, result
    )
    result.records = values_sent
    result.drained = await _wait_drained(bootstrap, group, source, drain_timeout)
    for w in workers:
        await w.stop()
    await reader.stop()
    await _check(bootstrap, source, sink, group, values_sent, reader, result)
    result.seconds = time.monotonic() - started
    return result


async def _seed_and_bounce(
    bootstrap: str,
    source: str,
    records: int,
    duration: float,
    rng: random.Random,
    workers: list[Copier],
    fault: BrokerFault | None,
    faults: int,
    result: CopierResult,
) -> int:
    """Write ``records`` unique integers over ``duration`` seconds; bounce brokers and crash a
    copier at evenly spread points meanwhile."""
    kinds = ["broker_kill", "txn_coordinator_kill", "group_coordinator_kill"]
    events: list[tuple[float, str]] = [
        ((i + 1) * duration / (faults + 2), kinds[i % len(kinds)]) for i in range(faults)
    ]
    events.append((duration * (faults + 1) / (faults + 2), "copier_crash"))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    started = time.monotonic()
    sent = 0
    pending: list[asyncio.Task[None]] = []
    try:
        chunk = 200
        while sent < records:
            due = started + sent * duration / records
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            while events and time.monotonic() - started >= events[0][0]:
                _, kind = events.pop(0)
                result.faults[kind] += 1
                if kind == "copier_crash":
                    workers[rng.randrange(len(workers))].crash_producer()
                elif fault is not None:
                    pending.append(asyncio.create_task(fault(kind)))
            futures = []
            for value in range(sent, min(records, sent + chunk)):
                futures.append(await producer.send(source, key=b"%d" % value, value=b"%d" % value))
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
            failed = sum(isinstance(o, BaseException) for o in outcomes)
            if failed:
                raise RuntimeError(f"the copier seeder could not write {failed} records")
            sent = min(records, sent + chunk)
        for task in pending:
            await task
    finally:
        await producer.stop()
    return sent


async def _wait_drained(bootstrap: str, group: str, source: str, timeout: float) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer: Any = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        tps = await partitions_of(consumer, [source])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                ends = await consumer.end_offsets(tps)
                found = await admin.list_consumer_group_offsets(group, partitions=tps)
                if all(tp in found and found[tp].offset >= ends[tp] for tp in tps):
                    return True
            await asyncio.sleep(0.5)
        return False
    finally:
        await consumer.stop()
        await admin.close()


async def _check(
    bootstrap: str,
    source: str,
    sink: str,
    group: str,
    records: int,
    reader: ConcurrentReader,
    result: CopierResult,
) -> None:
    counts = bytearray(records)
    final: dict[int, dict[int, int]] = defaultdict(dict)
    last: dict[tuple[int, int], int] = {}

    def on_record(record: Any) -> None:
        value = int(record.value)
        final[record.partition][record.offset] = value
        if 0 <= value < records:
            if counts[value] == 1:
                result.add("duplicate", 1, f"value {value} copied again at {record.offset}")
            counts[value] = min(255, counts[value] + 1)
        src_p, src_o = (int(x) for x in dict(record.headers)["src"].split(b":"))
        previous = last.get((record.partition, src_p), -1)
        if src_o <= previous:
            result.add(
                "nonmonotonic",
                1,
                f"out[{record.partition}]@{record.offset}: in[{src_p}]@{src_o} after @{previous}",
            )
        last[(record.partition, src_p)] = src_o

    await scan(bootstrap, [sink], on_record)
    lost = [v for v in range(records) if counts[v] == 0]
    result.add("lost_write", len(lost), f"value {lost[0]} never copied" if lost else None)
    # What the concurrent reader saw must be exactly what is committed, offset for offset.
    consumer: Any = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        for (topic, partition), offsets in reader.offsets.items():
            committed = final.get(partition, {})
            values = reader.values.get((topic, partition), ())
            for offset, value in zip(offsets, values, strict=True):
                if offset not in committed:
                    result.add(
                        "aborted_read",
                        1,
                        f"{topic}[{partition}]@{offset} read during the run, not committed",
                    )
                elif committed[offset] != value:
                    result.add(
                        "inconsistent_offset",
                        1,
                        f"{topic}[{partition}]@{offset}: {value} during the run, "
                        f"{committed[offset]} at the end",
                    )
        tps = await partitions_of(consumer, [source])
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await admin.close()
    for tp in tps:
        offset = found[tp].offset if tp in found else -1
        if offset != ends[tp]:
            result.add(
                "inconsistent_offset",
                1,
                f"{tp.topic}[{tp.partition}]: committed {offset}, end {ends[tp]}",
            )
