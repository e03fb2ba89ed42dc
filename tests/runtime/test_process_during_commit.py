"""Processing while the commit is in flight (``process_during_commit``), on the real broker.

A saturated worker (CPU-bound, with a backlog) finds records already fetched at every
exactly-once commit: it processes them while the commit's gate, offsets and EndTxn are in
flight, holding their sends back until EndTxn returns. What must hold: those records are
counted once, their outputs land in the next transaction, the table's store gets only
committed writes (a restart on the same state dir continues every count), and an agent may
await a send made meanwhile.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from streams_app import App
from streams_app.readback import read_topics
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import running_worker, wait_until

RECORDS = 6_000
#: CPU per record: the worker counts as saturated (runtime.worker.SATURATED) and processes
#: while its commits are in flight; without it the test worker waits on fetches as much.
BUSY_S = 0.0002


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _app(unique: str, bootstrap: str, **settings: object) -> App:
    app = App(f"meanwhile-{unique}", broker=bootstrap, topic_partitions=3, **settings)
    events = app.topic(f"in-{unique}", key_type=str, value_serializer="raw")
    totals = app.topic(f"out-{unique}", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(events)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            _busy(BUSY_S)  # CPU-bound, as a worker with a backlog is: it is saturated
            counts[key] += 1
            future = await totals.send(key=key, value=counts[key])
            if value.endswith(b"000"):  # now and then, wait for the delivery (held or not)
                metadata = await future
                assert metadata.offset >= 0

    return app


async def _produce(bootstrap: str, unique: str, keys: list[str], first: int) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for i, key in enumerate(keys, start=first):
            await producer.send(f"in-{unique}", key=key.encode(), value=b"%08d" % i)
        await producer.flush()
    finally:
        await producer.stop()


async def _outputs(bootstrap: str, unique: str) -> list[tuple[str, int]]:
    out = (await read_topics(bootstrap, [f"out-{unique}"]))[f"out-{unique}"]
    return [(r.key.decode(), json.loads(r.value)) for r in out]


def _assert_counted_once(outputs: list[tuple[str, int]], keys: list[str]) -> None:
    per_key: dict[str, list[int]] = {}
    for key, value in outputs:
        per_key.setdefault(key, []).append(value)
    expected = Counter(keys)
    assert set(per_key) == set(expected)
    for key, values in per_key.items():
        assert values == list(range(1, expected[key] + 1)), key


@pytest.mark.parametrize("during_commit", [True, False])
async def test_records_processed_during_commits_count_once_and_survive_a_restart(
    bootstrap_servers: str, unique: str, tmp_path: Path, during_commit: bool
) -> None:
    app = _app(unique, bootstrap_servers, commit_interval=0.05, process_during_commit=during_commit)
    keys = [f"k{i % 101}" for i in range(RECORDS)]
    await create_topics(bootstrap_servers, TopicSpec(f"in-{unique}", 3, 1))
    await _produce(bootstrap_servers, unique, keys, 0)  # a backlog: commits find fetched records
    state = tmp_path / "state"
    async with running_worker(app, state) as worker:

        async def all_out() -> bool:
            return len(await _outputs(bootstrap_servers, unique)) >= len(keys)

        await wait_until(all_out)
        meanwhile = worker.processed_during_commit
        commits = worker.producer.transactions_committed
    if during_commit:
        assert meanwhile > 0, "no record was processed while a commit was in flight"
        assert meanwhile < RECORDS
    else:
        assert meanwhile == 0
    assert commits > 1
    _assert_counted_once(await _outputs(bootstrap_servers, unique), keys)

    # The store holds exactly the committed counts: a restart on the same state dir (tail-only
    # restore) goes on counting from them.
    more = [f"k{i % 101}" for i in range(300)]
    async with running_worker(app, state):
        await _produce(bootstrap_servers, unique, more, RECORDS)

        async def all_more() -> bool:
            return len(await _outputs(bootstrap_servers, unique)) >= len(keys) + len(more)

        await wait_until(all_more)
    _assert_counted_once(await _outputs(bootstrap_servers, unique), keys + more)
