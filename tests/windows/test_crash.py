"""Windows through crashes: a worker SIGKILLed three times while windows are open and closing.

The input (out-of-order and late records, ``data.generate``) is written in four parts, in small
pieces; during each of the first three, the worker is killed at a moment it holds a transaction
with final results in it (windows open, closing and expiring), and restarts on the same state
directory. Afterwards, read_committed: every closed window's final count was
emitted exactly once and equals the independent expectation (a stream time that did not resume
where it committed would accept late records, or re-emit closed windows, and show here); the
changelog's compacted view holds exactly the windows retention keeps; and the stream time
committed with the offsets is each partition's largest timestamp.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from streams_app.readback import group_lag, read_topics, wait_committed
from streams_app.runtime.stream_time import decode_metadata
from streams_app.testing.workers import WorkerProcess
from tests.runtime.helpers import KafkaObserver, wait_until
from tests.windows.apps import KINDS, windowed_counts_app
from tests.windows.data import Rec, closed_by_end, expected, generate
from tests.windows.test_vs_kafka_streams import create_topics, produce_with
from tests.windows.test_windows import live_windows, stored

pytestmark = pytest.mark.kafka


async def test_windows_exactly_once_through_three_sigkills(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    seed = 31
    data = generate(seed=seed, per_partition=1_500, partial=False)
    want = expected(data)
    app_id, topic, prefix = f"wcrash-{unique}", f"views-{unique}", f"final-{unique}-"
    await create_topics(bootstrap_servers, [topic], data.partitions)
    worker = WorkerProcess(
        "tests.windows.crash_app",
        state_dir=tmp_path / "state",
        log_path=tmp_path / "worker.log",
        env={
            "STREAMS_APP_BROKER": bootstrap_servers,
            "STREAMS_APP_SESSION_TIMEOUT": "3",
            "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
            "STREAMS_APP_MAX_POLL_RECORDS": "200",
            # Transactions stay open for a while (as in Kafka's EOS system test), so kills
            # land inside one.
            "STREAMS_APP_COMMIT_INTERVAL": "1.5",
            "WINDOW_TEST_APP": app_id,
            "WINDOW_TEST_INPUT": topic,
            "WINDOW_TEST_PREFIX": prefix,
        },
    )

    async def mid_transaction() -> bool:
        return await observer.in_transaction([prefix + kind for kind in KINDS])

    # Each partition's records cut in four consecutive parts, written one part after the other.
    parts: list[list[Rec]] = [[] for _ in range(4)]
    for records in data.by_partition().values():
        quarter = -(-len(records) // 4)
        for i in range(4):
            parts[i] += records[i * quarter : (i + 1) * quarter]
    worker.start()
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    # One producer for every piece: starting one per 50-record piece (60 of them) took most
    # of the test (83 s of its call against 30 s now, on the loaded machine).
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        await asyncio.to_thread(worker.wait_assigned)
        kills = 0
        for index, part in enumerate(parts):
            # Written in small pieces; after each, if the worker holds a transaction with final
            # results in it (an output's high watermark above its last stable offset), it is
            # killed, once per part but the last.
            for start in range(0, len(part), 50):
                await produce_with(producer, topic, part[start : start + 50])
                if kills != index or index == len(parts) - 1:
                    continue
                try:  # the worker commits every 1.5 s: its open transaction shows meanwhile
                    await wait_until(mid_transaction, timeout=5, interval=0.005)
                except TimeoutError:
                    continue
                else:
                    worker.kill()
                    kills += 1
                    worker.start()
                    await asyncio.to_thread(worker.wait_assigned)
        assert kills == len(parts) - 1, f"only {kills} kills landed inside a transaction"

        async def done() -> bool:
            return not await group_lag(bootstrap_servers, app_id, [topic])

        await wait_until(done, timeout=240, interval=0.3)
        assert worker.terminate() == 0, worker.tail()
    finally:
        await producer.stop()
        await observer.__aexit__()
        if worker.running:
            worker.kill()
    assert worker.starts == 4

    final = closed_by_end(data, want.finals)
    # The last transaction's markers reach __consumer_offsets and the outputs separately:
    # read the outputs once none of them holds an open transaction.
    await wait_committed(
        bootstrap_servers, app_id, [topic], outputs=[prefix + kind for kind in KINDS]
    )
    outputs = await read_topics(bootstrap_servers, [prefix + kind for kind in KINDS])
    for kind in KINDS:
        emitted: Counter[tuple[str, int, int, int]] = Counter()
        for record in outputs[prefix + kind]:
            key = json.loads(record.key)
            emitted[(key["key"], key["start"], key["end"], json.loads(record.value))] += 1
        want_kind = Counter({(*w, n): 1 for w, n in final[kind].items()})
        assert emitted == want_kind, (
            f"{kind}: extra {sorted((emitted - want_kind).elements())[:3]}, "
            f"missing {sorted((want_kind - emitted).elements())[:3]}"
        )

    # The kills hit open transactions: records of aborted ones are visible read_uncommitted.
    names = [prefix + kind for kind in KINDS] + [f"{app_id}-{kind}-changelog" for kind in KINDS]
    everything = await read_topics(bootstrap_servers, names, isolation_level="read_uncommitted")
    committed = await read_topics(bootstrap_servers, names)
    aborted = sum(len(everything[n]) - len(committed[n]) for n in names)
    assert aborted > 0, "no kill landed inside a transaction"

    live = live_windows(data, want.finals)
    tables = windowed_counts_app(app_id, input_topic=topic, out_prefix=prefix, sizes=data.sizes)
    changelogs = await read_topics(
        bootstrap_servers, [f"{app_id}-{kind}-changelog" for kind in KINDS]
    )
    for kind in KINDS:
        table = tables.tables[kind]
        folded: dict[object, object] = {}
        for record in changelogs[f"{app_id}-{kind}-changelog"]:
            window = table.key_codec.loads(record.key)
            if record.value is None:
                folded.pop(window, None)
            else:
                folded[window] = table.value_codec.loads(record.value)
        assert stored(folded.items()) == live[kind], kind

    # Stream time resumed where it committed: it is each partition's largest timestamp now.
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(data.partitions)]
        committed = await admin.list_consumer_group_offsets(app_id, partitions=tps)
    finally:
        await admin.close()
    for tp in tps:
        meta = decode_metadata(committed[tp].metadata)
        largest = max(r.ts for r in data.records if r.partition == tp.partition)
        assert meta.partition_time == largest
        assert meta.tables == dict.fromkeys(KINDS, largest)
