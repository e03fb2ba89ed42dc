"""A hand-made run of the EOS test topology, written straight to Kafka, to test the verifier.

``write_run`` writes what a correct run of ``topologies.eos_test`` commits (input, echo, running
sum/min/cnt, the repartition hop, max, changelogs, the group's offsets), with the mistakes named
in :class:`Corruption` deliberately added, so each test can check that the verifier finds exactly
the mistake it was given and nothing else.
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata

from streams_app.chaos.systems import StoreSnapshot, StreamsAppSystem, WorkerSettings
from streams_app.lineage import lineage_headers

PARTITIONS = 2
BUCKETS = 1000


@dataclass
class Corruption:
    #: Echo the input (partition 0, offset 3) a second time, in a later committed transaction.
    duplicate_echo: bool = False
    #: Write a wrong running sum for (0, 5).
    wrong_sum: bool = False
    #: Leave out the cnt record of (1, 2).
    missing_cnt: bool = False
    #: An echo record in an aborted transaction (returned as seen by the concurrent reader).
    aborted_echo: bool = False
    #: Outputs of partition 1's last input committed under an older generation (a zombie).
    zombie_generation: bool = False
    #: Partition 0's second half committed by another transactional id in the same generation
    #: (a static member restarted on a new state dir): a hand-over, not a mistake.
    static_handover: bool = False
    #: Partition 0's inputs committed by two transactional ids taking turns in one generation
    #: (a zombie of the same generation).
    ids_taking_turns: bool = False
    #: Commit offsets one short of the end of data partition 0.
    short_offsets: bool = False
    #: A store snapshot holding a value the changelog never committed.
    dirty_store: bool = False
    #: Leave a transaction open on the echo topic.
    open_transaction: bool = False


@dataclass
class Written:
    system: StreamsAppSystem
    concurrent: dict[tuple[str, int], array[int]] = field(default_factory=dict)
    stores: list[StoreSnapshot] = field(default_factory=list)
    producers: list[Any] = field(default_factory=list)


def make_system(bootstrap: str, suffix: str, tmp: Path) -> StreamsAppSystem:
    settings = WorkerSettings(6.0, 1.0, 10.0, None, 1)
    return StreamsAppSystem(bootstrap, suffix, tmp, settings)


def _lineage(
    topic: str, partition: int, offset: int, gen: int = 1, txn_id: bytes = b"worker-a"
) -> list[tuple[str, bytes]]:
    return [
        *lineage_headers(topic, partition, offset),
        ("txn_id", txn_id),
        ("generation", b"%d" % gen),
    ]


def _txn_id(corruption: Corruption, partition: int, offset: int, records: int) -> bytes:
    """The transactional id the outputs of one input name (see :class:`Corruption`)."""
    if partition == 0 and corruption.static_handover and offset >= records // 2:
        return b"worker-b"
    if partition == 0 and corruption.ids_taking_turns and offset % 10 >= 5:
        return b"worker-b"
    return b"worker-a"


async def write_run(
    bootstrap: str, suffix: str, tmp: Path, corruption: Corruption, records: int = 40
) -> Written:
    system = make_system(bootstrap, suffix, tmp)
    t = system.topics
    written = Written(system)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in [t.data, *t.outputs]])
    finally:
        await admin.close()

    rng = random.Random(7)
    inputs = {
        p: [(rng.randrange(5), rng.randrange(10_000)) for _ in range(records)] for p in (0, 1)
    }
    # Keys of partition 1 are 100.. so keys never span partitions (as with murmur2 keys).
    inputs[1] = [(100 + k, v) for k, v in inputs[1]]

    plain = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await plain.start()
    try:
        for p, rows in inputs.items():
            for key, value in rows:
                await plain.send_and_wait(t.data, key=b"%d" % key, value=b"%d" % value, partition=p)
    finally:
        await plain.stop()

    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"synthetic-{suffix}")
    await txn.start()
    written.producers.append(txn)
    seen: dict[tuple[str, int], list[int]] = {}

    async def send(topic: str, partition: int, key: int, value: int, headers: Any) -> int:
        meta = await (
            await txn.send(
                topic, key=b"%d" % key, value=b"%d" % value, partition=partition, headers=headers
            )
        )
        seen.setdefault((topic, partition), []).append(meta.offset)
        return int(meta.offset)

    # Hop 1, one transaction per input partition.
    rep_records: dict[int, list[tuple[int, int, int]]] = {0: [], 1: []}  # rp -> (off, value)
    finals: dict[str, dict[tuple[int, int], int]] = {"sum": {}, "min": {}, "cnt": {}, "max": {}}
    for p, rows in inputs.items():
        sums: dict[int, int] = {}
        mins: dict[int, int] = {}
        cnts: dict[int, int] = {}
        await txn.begin_transaction()
        for o, (key, value) in enumerate(rows):
            gen = 0 if corruption.zombie_generation and p == 1 and o == len(rows) - 1 else 1
            headers = _lineage(t.data, p, o, gen, _txn_id(corruption, p, o, len(rows)))
            await send(t.echo, p, key, value, headers)
            sums[key] = sums.get(key, 0) + value
            mins[key] = min(mins.get(key, value), value)
            cnts[key] = cnts.get(key, 0) + 1
            total = sums[key] + (1 if corruption.wrong_sum and (p, o) == (0, 5) else 0)
            await send(t.sum, p, key, total, headers)
            await send(t.min, p, key, mins[key], headers)
            if not (corruption.missing_cnt and (p, o) == (1, 2)):
                await send(t.cnt, p, key, cnts[key], headers)
            bucket = value % BUCKETS
            rp = bucket % PARTITIONS
            offset = await send(t.repartition, rp, bucket, value, headers)
            rep_records[rp].append((offset, value, bucket))
        for key in sums:
            finals["sum"][(p, key)] = sums[key]
            finals["min"][(p, key)] = mins[key]
            finals["cnt"][(p, key)] = cnts[key]
        await txn.commit_transaction()

    # Hop 2: max per bucket over each repartition partition, in offset order.
    await txn.begin_transaction()
    for rp, rows in rep_records.items():
        highs: dict[int, int] = {}
        for offset, value, bucket in rows:
            highs[bucket] = max(highs.get(bucket, value), value)
            await send(t.max, rp, bucket, highs[bucket], _lineage(t.repartition, rp, offset))
        for bucket, high in highs.items():
            finals["max"][(rp, bucket)] = high
    await txn.commit_transaction()

    # Changelogs: the final value of every key, in its partition.
    await txn.begin_transaction()
    changelog_ends: dict[tuple[str, int], int] = {}
    for table, values in finals.items():
        topic = t.changelogs[table]
        for (p, key), value in sorted(values.items()):
            offset = await send(topic, p, key, value, None)
            changelog_ends[(table, p)] = offset + 1
    await txn.commit_transaction()

    if corruption.duplicate_echo:
        await txn.begin_transaction()
        key, value = inputs[0][3]
        await send(t.echo, 0, key, value, _lineage(t.data, 0, 3))
        await txn.commit_transaction()
    if corruption.aborted_echo:
        await txn.begin_transaction()
        key, value = inputs[0][0]
        await send(t.echo, 0, key, value, _lineage(t.data, 0, 0))
        await txn.abort_transaction()

    # Group offsets: everything consumed (one short on data[0] if asked).
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=system.group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for topic in t.inputs for p in range(PARTITIONS)]
        ends = await consumer.end_offsets(tps)
        if corruption.short_offsets:
            ends[TopicPartition(t.data, 0)] -= 1
        consumer.assign(tps)
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in ends.items()})
    finally:
        await consumer.stop()

    # Stores: each worker's copy of every changelog partition, at the changelog's end.
    for (table, p), end in changelog_ends.items():
        items = {b"%d" % key: b"%d" % value for (q, key), value in finals[table].items() if q == p}
        if corruption.dirty_store and (table, p) == ("sum", 0):
            first = sorted(items)[0]
            items[first] = b"%d" % (int(items[first]) + 1_000_000)
        written.stores.append(StoreSnapshot("worker-0", table, p, end, items))

    written.concurrent = {
        key: array("q", offsets) for key, offsets in seen.items()
    }  # the concurrent reader was given all of them, the aborted one included
    if corruption.open_transaction:
        await txn.begin_transaction()
        await send(t.echo, 1, 0, 0, _lineage(t.data, 1, 0))
        written.concurrent[(t.echo, 1)].pop()  # nobody read_committed can see it
    else:
        await txn.stop()
        written.producers.clear()
    return written
