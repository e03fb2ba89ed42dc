"""A table built from a topic and a stream-table join on the real broker, exactly once through
a SIGKILL: every order enriched once, each with its customer as the table was at the
order's time (the table restored from its source topic, its changelog, up to the committed
offset after each restart)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streams_app.readback import read_topics
from streams_app.testing.workers import WorkerProcess
from tests.ops.support import app_cli
from tests.runtime.helpers import KafkaObserver, wait_until
from tests.windows.data import BASE
from tests.windows.test_vs_kafka_streams import create_topics

#: The customers topic as the app declares it (tests/joins/enrichment_app.py), which the worker
#: checks at start: its table restores from it.
COMPACTED = {"cleanup.policy": "compact"}

pytestmark = pytest.mark.kafka

ORDERS = 4_000
CUSTOMERS = 40
#: Every customer's second version is valid from here: orders before it meet the first.
UPDATED_AT = BASE + (ORDERS // 2) * 10 + 5


async def produce_input(bootstrap: str, suffix: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()

    async def send(topic: str, key: str, value: dict[str, object], ts: int) -> asyncio.Future:
        return await producer.send(
            topic, key=key.encode(), value=json.dumps(value).encode(), timestamp_ms=ts
        )

    try:
        futures = []
        # In time order within each partition (a partition is read in offset order).
        for version, ts in ((1, BASE - 1_000), (2, UPDATED_AT)):
            for c in range(CUSTOMERS):
                futures.append(await send(f"customers-{suffix}", f"c{c}", {"v": version}, ts))
        for i in range(ORDERS):
            order = {"id": i, "amount": 1}
            futures.append(
                await send(f"orders-{suffix}", f"c{i % CUSTOMERS}", order, BASE + i * 10)
            )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def test_stream_table_join_exactly_once_through_a_sigkill(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    suffix = unique
    await create_topics(
        bootstrap_servers,
        [f"customers-{suffix}", f"orders-{suffix}", f"enriched-{suffix}"],
        2,
        {f"customers-{suffix}": COMPACTED},  # as the app declares it
    )
    # Everything is written first: each task meets both topics from its first fetch and
    # processes them in timestamp order, so which version each order meets is decided.
    await produce_input(bootstrap_servers, suffix)
    env = {
        "STREAMS_APP_BROKER": bootstrap_servers,
        "STREAMS_APP_SESSION_TIMEOUT": "3",
        "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
        "STREAMS_APP_MAX_POLL_RECORDS": "100",
        # A quiet machine joins the 4,000 orders in well under a second: with the default
        # 0.1 s commit interval everything could be committed before the kill lands. With 1 s,
        # the kill at 20-60 % of the output strikes an open transaction.
        "STREAMS_APP_COMMIT_INTERVAL": "1",
        "TEST_SUFFIX": suffix,
    }
    worker = WorkerProcess(
        "tests.joins.enrichment_app",
        state_dir=tmp_path / "state",
        log_path=tmp_path / "worker.log",
        env=env,
    )
    rng = random.Random()
    worker.start()
    try:
        async with KafkaObserver(bootstrap_servers) as observer:
            await asyncio.to_thread(worker.wait_assigned)
            # One kill keeps it short for make test (tests/runtime/test_crash.py kills three
            # times, marked slow); where it lands is random.
            for fraction in [rng.uniform(0.2, 0.6)]:
                threshold = int(ORDERS * fraction)

                async def reached(t: int = threshold) -> bool:
                    return await observer.end_total(f"enriched-{suffix}") >= t

                await wait_until(reached, timeout=120, interval=0.02)
                worker.kill()
                # The kill interrupted the run: orders were left to process after it.
                group = f"enrich-{suffix}"
                assert await observer.committed_total(group, f"orders-{suffix}") < ORDERS
                worker.start()
                await asyncio.to_thread(worker.wait_assigned)
            await wait_until(
                lambda: observer.committed_equals_end(f"enrich-{suffix}", f"orders-{suffix}"),
                timeout=120,
                interval=0.2,
            )
        assert worker.terminate() == 0, worker.tail()
    finally:
        if worker.running:
            worker.kill()
    assert worker.starts == 2
    read = await read_topics(bootstrap_servers, [f"enriched-{suffix}"])
    outputs = [json.loads(r.value) for r in read[f"enriched-{suffix}"]]
    ids = sorted(o["id"] for o in outputs)
    assert ids == list(range(ORDERS)), "each order enriched exactly once"
    wrong = [
        o for o in outputs if o["customer"] != {"v": 1 if BASE + o["id"] * 10 < UPDATED_AT else 2}
    ]
    assert not wrong, f"{len(wrong)} orders met the wrong customer version, e.g. {wrong[:3]}"
    # The CLI reads the table (no worker running: from its changelog, the source topic).
    done = app_cli("tests.joins.enrichment_app", env, "tables", "customers", "c7")
    assert (done.returncode, json.loads(done.stdout)) == (0, {"v": 2}), done.stderr
    assert f"changelog customers-{suffix}" in done.stderr
