"""Invariant 11: the Kafka client layer alone, Jepsen style (no stream processor involved).

Modelled on Kafka's ``TransactionalMessageCopier`` in group mode (``group_mode_transactions_test``)
and Jepsen's Kafka checker. A seeder writes unique integers to an input topic over ``duration``
seconds; ``copiers`` transactional copiers, each its own process, in one consumer group, read it
``read_committed``, copy each record to an output topic inside a transaction that also carries
their consumer offsets, and abort about a third of their transactions at random, seeking back to
their committed offsets. Meanwhile brokers are bounced (a random one, the copiers' transaction
coordinator, the group coordinator) and so are the copiers: one is SIGKILLed and restarted under
its transactional id, one SIGTERMed and restarted, one frozen (SIGSTOP) past its session timeout
and thawed: a zombie whose partitions were given to another copier while its transaction was
open. A ``read_committed`` reader watches the output throughout.

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
faust-streaming runs on (TxnOffsetCommit v0: the group id only, so nothing fences a zombie).

One copier process: ``python -m streams_app.chaos.copier --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams_app.aio import within
from streams_app.chaos.reader import ConcurrentReader, partitions_of, scan
from streams_app.kafka import StableConsumer, TransactionalProducer
from streams_app.testing.workers import WorkerProcess
from streams_app.transport.base import GroupMetadata

log = logging.getLogger(__name__)

STREAMS_APP_CLIENT = "streams_app"
AIOKAFKA_CLIENT = "aiokafka"
ANOMALIES = ("lost_write", "duplicate", "aborted_read", "inconsistent_offset", "nonmonotonic")
SESSION_TIMEOUT = 6.0
#: What a copier logs once it has partitions (the parent waits for it).
ASSIGNED = "copier assigned"

# -- one copier (its own process) ----------------------------------------------------------


@dataclass
class CopierStats:
    committed: int = 0
    aborted: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, copier: Copier) -> None:
        self.copier = copier

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.copier.lock:  # never in the middle of a transaction
            self.copier.group = None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.copier.on_assigned(list(assigned))


class Copier:
    """A consumer in the group and a transactional producer, copying in transactions."""

    def __init__(
        self,
        *,
        bootstrap: str,
        client: str,
        source: str,
        sink: str,
        sink_partitions: int,
        group_id: str,
        transactional_id: str,
        rng: random.Random,
        abort_ratio: float,
    ) -> None:
        self.bootstrap = bootstrap
        self.client = client
        self.source = source
        self.sink = sink
        self.sink_partitions = sink_partitions
        self.group_id = group_id
        self.transactional_id = transactional_id
        self.rng = rng
        self.abort_ratio = abort_ratio
        self.stats = CopierStats()
        self.lock = asyncio.Lock()
        self.group: GroupMetadata | None = None
        self.committed: dict[TopicPartition, int] = {}
        self.consumer: Any = None
        self.producer: Any = None

    def _new_consumer(self) -> Any:
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group_id,
            "isolation_level": "read_committed",
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": int(SESSION_TIMEOUT * 1000),
            "heartbeat_interval_ms": 1000,
            "rebalance_timeout_ms": 60_000,
            "max_poll_records": 300,
            "client_id": self.transactional_id,
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
            "client_id": self.transactional_id,
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

    async def run(self, stop: asyncio.Event) -> None:
        self.consumer = self._new_consumer()
        self.consumer.subscribe([self.source], listener=_Listener(self))
        await _retry(self.consumer.start, "consumer start")
        await self._restart_producer()
        try:
            while not stop.is_set():
                try:
                    batch = await self.consumer.getmany(timeout_ms=200, max_records=300)
                except aerrors.KafkaError as exc:
                    self.stats.error(f"fetch:{type(exc).__name__}")
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
            else:
                # Plain aiokafka sends the group id alone (TxnOffsetCommit v0): a marker only.
                self.group = GroupMetadata(self.group_id, -1, "")
            await self._read_committed(assigned)
            log.info("%s: %d partitions", ASSIGNED, len(assigned))

    async def _read_committed(self, partitions: list[TopicPartition]) -> None:
        """Seek ``partitions`` to the group's committed offsets, as the broker has them."""
        consumer = self.consumer
        if self.client == STREAMS_APP_CLIENT:
            found = await consumer.committed_offsets(partitions)
        else:
            found = {tp: await consumer.committed(tp) for tp in partitions}
        self.committed = {}
        for tp in partitions:
            offset = found.get(tp)
            self.committed[tp] = 0 if offset is None else int(offset)
            consumer.seek(tp, self.committed[tp])

    async def _copy(self, batch: dict[TopicPartition, list[Any]]) -> None:
        async with self.lock:
            group = self.group
            batch = {tp: recs for tp, recs in batch.items() if tp in self.committed}
            if group is None or not batch:
                return
            offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items()}
            abort = self.rng.random() < self.abort_ratio
            producer = self.producer
            ending = False
            try:
                await producer.begin_transaction()
                for tp, records in batch.items():
                    for record in records:
                        await producer.send(
                            self.sink,
                            key=record.key,
                            value=record.value,
                            partition=tp.partition % self.sink_partitions,
                            headers=[("src", b"%d:%d" % (tp.partition, record.offset))],
                        )
                if self.client == STREAMS_APP_CLIENT:
                    await producer.send_offsets_to_transaction(offsets, group)
                else:
                    await producer.send_offsets_to_transaction(offsets, self.group_id)
                if abort:
                    await producer.abort_transaction()
                    self.stats.aborted += 1
                    self._rewind()
                    return
                ending = True
                await producer.commit_transaction()
            except Exception as exc:
                self.stats.error(type(exc).__name__)
                log.info("transaction failed: %r", exc)
                if ending:
                    await self._recover_unknown_outcome()
                else:
                    await self._recover()
                return
            self.stats.committed += 1
            self.committed.update(offsets)

    def _rewind(self) -> None:
        for tp, offset in self.committed.items():
            with contextlib.suppress(Exception):
                self.consumer.seek(tp, offset)

    async def _recover_unknown_outcome(self) -> None:
        """The commit was sent and failed without a definite answer: the coordinator may have
        committed it (a broker that went away mid-commit completes it when it comes back).
        A new producer's InitProducerId settles whatever the coordinator holds; then the
        offsets are read back from the broker, never rewound to the ones held here, which
        would copy committed records a second time (as the worker does:
        ``runtime.commit.MIGRATED``)."""
        await self._restart_producer()
        partitions = list(self.committed)
        await _retry(lambda: self._read_committed(partitions), "reading the committed offsets")

    async def _recover(self) -> None:
        """Abort if the producer can, else replace it; either way rewind to committed."""
        try:
            await within(self.producer.abort_transaction(), 30)
            self.stats.aborted += 1
        except Exception as exc:
            self.stats.error(f"abort:{type(exc).__name__}")
            await self._restart_producer()
        self._rewind()


async def _retry(
    start: Callable[[], Coroutine[Any, Any, Any]], what: str, timeout: float = 120.0
) -> None:
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m streams_app.chaos.copier",
        description="One transactional copier of the client-level check; SIGTERM to stop.",
    )
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--client", choices=(STREAMS_APP_CLIENT, AIOKAFKA_CLIENT), required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--sink-partitions", type=int, required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--abort-ratio", type=float, default=1 / 3)
    p.add_argument("--stats", type=Path, required=True, help="JSON file, rewritten every second")
    return p


async def _main(args: argparse.Namespace) -> None:
    copier = Copier(
        bootstrap=args.bootstrap,
        client=args.client,
        source=args.source,
        sink=args.sink,
        sink_partitions=args.sink_partitions,
        group_id=args.group,
        transactional_id=args.transactional_id,
        rng=random.Random(args.seed),
        abort_ratio=args.abort_ratio,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def dump() -> None:
        args.stats.write_text(json.dumps(asdict(copier.stats)))

    async def dump_every_second() -> None:
        while True:
            await asyncio.sleep(1.0)
            dump()

    dumper = asyncio.create_task(dump_every_second())
    try:
        await copier.run(stop)
    finally:
        dumper.cancel()
        dump()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    asyncio.run(_main(args))
    return 0


# -- the check -----------------------------------------------------------------------------


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


BrokerFault = Callable[[str], Coroutine[Any, Any, None]]
BROKER_BOUNCES = ("broker_kill", "txn_coordinator_kill", "group_coordinator_kill")
CLIENT_BOUNCES = ("copier_kill", "copier_zombie", "copier_sigterm")


class _Copiers:
    """The copier processes of one check, and their stats files."""

    def __init__(self, workdir: Path, argv: Callable[[int, Path], list[str]], count: int) -> None:
        self.workdir = workdir
        self._argv = argv
        self.procs: list[WorkerProcess] = []
        self.stats_files: list[Path] = []
        for i in range(count):
            self.procs.append(
                WorkerProcess(
                    "copier",
                    state_dir=workdir,
                    log_path=workdir / f"copier-{i}.log",
                    name=f"copier-{i}",
                    argv=[],
                )
            )
        self._starts = [0] * count

    def start(self, index: int) -> None:
        self._starts[index] += 1
        stats = self.workdir / f"copier-{index}-{self._starts[index]}.json"
        self.stats_files.append(stats)
        proc = self.procs[index]
        proc.argv = self._argv(index, stats)
        proc.start()

    def add_stats(self, result: CopierResult) -> None:
        for path in self.stats_files:
            with contextlib.suppress(OSError, ValueError):
                stats = json.loads(path.read_text())
                result.transactions_committed += stats["committed"]
                result.transactions_aborted += stats["aborted"]
                for name, n in stats["errors"].items():
                    result.errors[name] += n


async def run_copier_check(
    bootstrap: str,
    *,
    suffix: str,
    client: str,
    records: int,
    duration: float,
    seed: int,
    workdir: Path,
    copiers: int = 3,
    abort_ratio: float = 1 / 3,
    fault: BrokerFault | None = None,
    faults: int = 3,
    drain_timeout: float = 180.0,
) -> CopierResult:
    """Run the workload once. ``fault(kind)`` bounces a broker (``kind`` is one of
    :data:`BROKER_BOUNCES`); ``faults`` of those strike, and the three copier bounces."""
    started = time.monotonic()
    result = CopierResult(client=client)
    source, sink = f"copier-in-{suffix}", f"copier-out-{suffix}"
    group = f"copier-{suffix}"
    in_partitions, out_partitions = 6, 3
    workdir.mkdir(parents=True, exist_ok=True)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(source, in_partitions, 3), NewTopic(sink, out_partitions, 3)]
        )
    finally:
        await admin.close()

    def argv(index: int, stats: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "streams_app.chaos.copier",
            f"--bootstrap={bootstrap}",
            f"--client={client}",
            f"--source={source}",
            f"--sink={sink}",
            f"--sink-partitions={out_partitions}",
            f"--group={group}",
            f"--transactional-id={group}-{index}",
            f"--seed={seed * 100 + index}",
            f"--abort-ratio={abort_ratio}",
            f"--stats={stats}",
        ]

    procs = _Copiers(workdir, argv, copiers)
    reader = ConcurrentReader(bootstrap, [sink], value_of=lambda r: int(r.value))
    try:
        for i in range(copiers):
            procs.start(i)
        for proc in procs.procs:
            await asyncio.to_thread(proc.wait_for_log, ASSIGNED, 120.0)
        reader.start()
        result.records = await _seed_and_bounce(
            bootstrap, source, records, duration, random.Random(seed), procs, fault, faults, result
        )
        result.drained = await _wait_drained(bootstrap, group, source, drain_timeout)
    finally:
        for proc in procs.procs:
            if proc.running:
                await asyncio.to_thread(proc.terminate, 60.0)
        await reader.stop()
    procs.add_stats(result)
    await _check(bootstrap, source, sink, group, result.records, reader, result)
    result.seconds = time.monotonic() - started
    return result


async def _seed_and_bounce(
    bootstrap: str,
    source: str,
    records: int,
    duration: float,
    rng: random.Random,
    procs: _Copiers,
    fault: BrokerFault | None,
    faults: int,
    result: CopierResult,
) -> int:
    """Write ``records`` unique integers over ``duration`` seconds; bounce brokers and copiers
    at evenly spread points meanwhile (a broker bounce runs beside the writes)."""
    kinds = [BROKER_BOUNCES[i % len(BROKER_BOUNCES)] for i in range(faults)] + list(CLIENT_BOUNCES)
    rng.shuffle(kinds)
    events = [((i + 1) * duration / (len(kinds) + 1), kind) for i, kind in enumerate(kinds)]
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
                if kind in CLIENT_BOUNCES:
                    index = rng.randrange(len(procs.procs))
                    pending.append(asyncio.create_task(_bounce_copier(procs, index, kind)))
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


async def _bounce_copier(procs: _Copiers, index: int, kind: str) -> None:
    proc = procs.procs[index]
    if kind == "copier_zombie":
        proc.pause()  # past the session timeout, below the transaction timeout (20 s)
        await asyncio.sleep(SESSION_TIMEOUT + 4.0)
        proc.resume()
        return
    if kind == "copier_kill":
        await asyncio.to_thread(proc.kill)
    else:
        await asyncio.to_thread(proc.terminate, 60.0)
    procs.start(index)


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
    consumer: Any = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        tps = await partitions_of(consumer, [source])
        ends = await consumer.end_offsets(tps)
        found = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await consumer.stop()
        await admin.close()
    for tp in tps:
        offset = found[tp].offset if tp in found else -1
        if offset != ends[tp]:
            result.add(
                "inconsistent_offset",
                1,
                f"{tp.topic}[{tp.partition}]: committed {offset}, end {ends[tp]}",
            )


if __name__ == "__main__":
    sys.exit(main())
