"""The batched send path on the real broker: order, delivery futures, oversized records.

Records sent while processing go into per-partition batches (``StreamsProducer``); these tests
pin what that must not change: a partition's records keep their order (also when a record too
big for a batch takes the record-by-record path in between), an agent may await a record's
delivery future without deadlocking the worker, and the future reports where it landed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams_app import App
from streams_app.readback import read_topics
from tests.runtime.helpers import running_worker, wait_until

GUARANTEES = ["exactly_once_v2", "at_least_once"]


@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_order_holds_across_batches_and_oversized_records(
    bootstrap_servers: str, unique: str, tmp_path: Path, guarantee: str
) -> None:
    app = App(
        f"order-{unique}",
        broker=bootstrap_servers,
        topic_partitions=2,
        processing_guarantee=guarantee,
        producer_max_batch_size=16 * 1024,  # many batches per transaction
    )
    source = app.topic(f"in-{unique}", key_type=str, value_type=int)
    sink = app.topic(f"out-{unique}", key_type=str, value_serializer="raw")

    @app.agent(source)
    async def fan_out(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            # Every 50th record is bigger than half a batch: it goes record by record.
            padding = b"x" * (10_000 if value % 50 == 0 else 10)
            for part in range(3):
                await sink.send(key=key, value=b"%d:%d:" % (value, part) + padding)

    keys = [f"k{i % 5}" for i in range(400)]
    async with running_worker(app, tmp_path / "s"):
        async with app.producer() as producer:
            for i, key in enumerate(keys):
                await producer.send(source, key=key, value=i)

        async def all_out() -> bool:
            out = await read_topics(bootstrap_servers, [f"out-{unique}"])
            return len(out[f"out-{unique}"]) >= 3 * len(keys)

        await wait_until(all_out)

    out = (await read_topics(bootstrap_servers, [f"out-{unique}"]))[f"out-{unique}"]
    per_key: dict[str, list[tuple[int, int]]] = {}
    for record in sorted(out, key=lambda r: (r.partition, r.offset)):
        value, part, _ = record.value.split(b":", 2)
        per_key.setdefault(record.key.decode(), []).append((int(value), int(part)))
    for key, sent in per_key.items():
        expected = [(i, p) for i, k in enumerate(keys) if k == key for p in range(3)]
        if guarantee == "exactly_once_v2":
            assert sent == expected, key
        else:  # duplicates allowed, order of first deliveries not
            assert sorted(set(sent)) == expected, key


@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_an_agent_may_await_its_delivery_future(
    bootstrap_servers: str, unique: str, tmp_path: Path, guarantee: str
) -> None:
    app = App(
        f"await-{unique}",
        broker=bootstrap_servers,
        topic_partitions=1,
        processing_guarantee=guarantee,
    )
    source = app.topic(f"in-{unique}", key_type=str, value_type=int)
    sink = app.topic(f"out-{unique}", key_type=str, value_type=int)
    landed: list[tuple[str, int, int]] = []

    @app.agent(source)
    async def forward(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            future = await sink.send(key=key, value=value)
            metadata = await future  # delivered before the commit: must not wait for it
            assert future.done() and future.exception() is None
            assert future.result().offset == metadata.offset
            landed.append((metadata.topic, metadata.partition, metadata.offset))

    async with running_worker(app, tmp_path / "s"):
        async with app.producer() as producer:
            for i in range(30):
                await producer.send(source, key=f"k{i}", value=i)
        await wait_until(lambda: len(landed) >= 30)

    out = (await read_topics(bootstrap_servers, [f"out-{unique}"]))[f"out-{unique}"]
    assert [json.loads(r.value) for r in out][:30] == list(range(30))
    offsets = {(r.topic, r.partition, r.offset) for r in out}
    assert set(landed) <= offsets  # each future named the offset its record got
