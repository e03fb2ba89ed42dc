"""Stream time: co-partitioned inputs in timestamp order, and stream-time punctuation.

- Two input topics whose records interleave in time reach their agents smallest timestamp
  first, whatever order the consumer fetches them in: fetched a few records at a time (the task
  waits for a partition it knows has records on the broker), and fetched one topic long before
  the other (the task waits up to ``max_task_idle`` for the partition with nothing yet).
- ``@app.timer(interval, on="stream_time")`` fires once per task as the task's stream time
  crosses each multiple of the interval, inside the transaction of the records that moved it (a
  crash before the commit leaves nothing of it, and the replay fires it once), and never again
  for a crossing that committed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streams_app import App
from streams_app.app.context import current_task
from streams_app.readback import group_lag, read_topics
from streams_app.testing import DriverFactory
from tests.runtime.helpers import running_worker, wait_until
from tests.windows.data import BASE
from tests.windows.test_vs_kafka_streams import create_topics

# -- co-partitioned inputs in timestamp order (real broker) -----------------------------------


def merge_app(app_id: str, unique: str, **settings: Any) -> App:
    """Two topics, two agents, one output: the output's order is the processing order."""
    app = App(app_id, topic_partitions=1, **settings)
    clicks = app.topic(f"clicks-{unique}", key_type=str, value_type=int)
    views = app.topic(f"views-{unique}", key_type=str, value_type=int)
    merged = app.topic(f"merged-{unique}", key_type=str, value_type=dict)

    @app.agent(clicks)
    async def on_click(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            await merged.send(key="c", value={"ts": event.timestamp, "n": event.value})

    @app.agent(views)
    async def on_view(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            await merged.send(key="v", value={"ts": event.timestamp, "n": event.value})

    return app


async def produce_stamped(bootstrap: str, topic: str, stamps: list[int]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for n, ts in enumerate(stamps):
            await producer.send(topic, key=b"k", value=b"%d" % n, partition=0, timestamp_ms=ts)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.mark.kafka
async def test_co_partitioned_inputs_in_timestamp_order(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    clicks = [BASE + 20 * i for i in range(300)]  # 0, 20, 40, ...
    views = [BASE + 20 * i + 10 for i in range(300)]  # 10, 30, 50, ...
    expected = sorted(
        [("c", ts) for ts in clicks] + [("v", ts) for ts in views], key=lambda x: x[1]
    )

    async def merged(app_id: str, topic: str) -> list[tuple[str, int]]:
        await wait_until(
            lambda: _no_lag(bootstrap_servers, app_id, [f"clicks-{unique}", f"views-{unique}"]),
            timeout=120,
        )
        records = (await read_topics(bootstrap_servers, [topic]))[topic]
        return [(r.key.decode(), json.loads(r.value)["ts"]) for r in records]

    # 1. Both topics already hold their records; the consumer returns 7 at a time, in whatever
    #    order it fetched them. Views were written first.
    await create_topics(bootstrap_servers, [f"clicks-{unique}", f"views-{unique}"], 1)
    await produce_stamped(bootstrap_servers, f"views-{unique}", views)
    await produce_stamped(bootstrap_servers, f"clicks-{unique}", clicks)
    first = f"merge1-{unique}"
    app = merge_app(first, unique, broker=bootstrap_servers, max_poll_records=7)
    async with running_worker(app, tmp_path / "one"):
        assert await merged(first, f"merged-{unique}") == expected

    # 2. Only clicks exist when the worker starts; views (earlier in time) are written once the
    #    worker holds clicks it may not process yet: it waits up to max_task_idle for them.
    u2 = f"{unique}b"
    second = f"merge2-{u2}"
    await create_topics(bootstrap_servers, [f"clicks-{u2}", f"views-{u2}"], 1)
    await produce_stamped(bootstrap_servers, f"clicks-{u2}", clicks)
    app = merge_app(second, u2, broker=bootstrap_servers, max_task_idle=30.0)
    async with running_worker(app, tmp_path / "two") as worker:

        def holding_clicks() -> bool:
            groups = [g for task in worker.tasks.running() for g in task.groups()]
            return any(g.buffered for g in groups)

        await wait_until(holding_clicks, timeout=60)
        assert worker.records_processed == 0  # waiting for views, not processing without them
        # Then views, and a later click and view: the very last record always waits out
        # max_task_idle for a record before it, so the test reads only up to the one before.
        await produce_stamped(bootstrap_servers, f"views-{u2}", [*views, BASE + 100_001])
        await produce_stamped(bootstrap_servers, f"clicks-{u2}", [BASE + 100_000])
        topic = f"merged-{u2}"

        async def all_but_last() -> bool:
            return len((await read_topics(bootstrap_servers, [topic]))[topic]) > len(expected)

        await wait_until(all_but_last, timeout=120, interval=0.2)
        records = (await read_topics(bootstrap_servers, [topic]))[topic]
        order = [(r.key.decode(), json.loads(r.value)["ts"]) for r in records]
        assert order == [*expected, ("c", BASE + 100_000)]


async def _no_lag(bootstrap: str, group: str, topics: list[str]) -> bool:
    return not await group_lag(bootstrap, group, topics)


# -- stream-time punctuation (the harness: in memory and on the real broker) -------------------

INTERVAL = 10  # seconds


def ticking_app() -> App:
    app = App("stream-ticks", topic_partitions=2)
    source = app.topic("ticks-in", key_type=str, value_type=int)
    ticks = app.topic("ticks", key_type=str, value_type=dict)
    fired = app.Table("fired", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def consume(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.timer(INTERVAL, on="stream_time")
    async def tick() -> None:
        task = current_task.get()
        assert task is not None
        fired["count"] += 1  # the task's partition of the table
        await ticks.send(
            key=str(task.partition),
            value={"stream_time": task.stream_time, "count": fired["count"]},
        )

    return app


async def test_stream_time_timer_fires_per_task_once_even_through_crashes(
    topology_driver: DriverFactory,
) -> None:
    t0 = BASE  # a multiple of 10 s
    async with topology_driver(ticking_app()) as driver:

        async def pipe(partition: int, ts: int) -> None:
            await driver.pipe("ticks-in", 1, key="k", timestamp=ts, partition=partition)
            await driver.run_until_idle()

        async def fired() -> list[tuple[str, int, int]]:
            return [
                (r.key, r.value["stream_time"], r.value["count"])
                for r in await driver.read("ticks")
            ]

        # The first record of each task fires it (Kafka Streams aligns stream-time punctuation
        # to the epoch); records that stay below the next multiple of 10 s do not.
        await pipe(0, t0 + 1_000)
        await pipe(1, t0 + 2_000)
        await pipe(0, t0 + 9_000)
        assert sorted(await fired()) == [("0", t0 + 1_000, 1), ("1", t0 + 2_000, 1)]

        # Crossing t0 + 10 s fires task 0's timer once; a crash before its commit leaves
        # nothing, and the replay fires it once, in its own committed transaction.
        driver.crash_on("commit_transaction")
        await driver.pipe("ticks-in", 1, key="k", timestamp=t0 + 12_000, partition=0)
        await driver.run_until_crash()
        assert sorted(await fired()) == [("0", t0 + 1_000, 1), ("1", t0 + 2_000, 1)]
        await driver.restart()
        assert sorted(await fired()) == [
            ("0", t0 + 1_000, 1),
            ("0", t0 + 12_000, 2),
            ("1", t0 + 2_000, 1),
        ]

        # A crossing that committed does not fire again after a crash: stream time resumes
        # from the offsets' metadata, and so does the timer's next due time.
        driver.crash_on("after_commit_transaction")
        await driver.pipe("ticks-in", 1, key="k", timestamp=t0 + 25_000, partition=1)
        await driver.run_until_crash()
        await driver.restart()
        await pipe(1, t0 + 27_000)  # below t0 + 30 s: nothing
        await pipe(0, t0 + 19_000)  # below t0 + 20 s: nothing
        assert sorted(await fired()) == [
            ("0", t0 + 1_000, 1),
            ("0", t0 + 12_000, 2),
            ("1", t0 + 2_000, 1),
            ("1", t0 + 25_000, 2),
        ]
        assert await driver.table("fired") == {"count": 2}


# -- record time from the value; invalid times go to the dead-letter topic ---------------------


def stamped_app() -> App:
    app = App("stamped", topic_partitions=1)
    source = app.topic("readings", key_type=str, value_type=dict, timestamp_fn=lambda v: v["at"])
    seen = app.topic("seen", key_type=str, value_type=int)

    @app.agent(source)
    async def keep(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            await seen.send(key=event.key, value=event.timestamp)

    return app


async def test_timestamp_fn_gives_records_their_time_and_bad_times_are_dead_lettered(
    topology_driver: DriverFactory,
) -> None:
    from streams_app.runtime.errors_policy import H_ERROR_TYPE

    async with topology_driver(stamped_app()) as driver:
        await driver.pipe("readings", {"at": BASE / 1000 + 0.25}, key="a")
        await driver.pipe("readings", {"at": None}, key="b")  # no time: dead-lettered
        await driver.pipe("readings", {"at": -5}, key="c")  # negative: dead-lettered
        await driver.pipe("readings", {"at": BASE // 1000 + 1}, key="d")
        await driver.run_until_idle()
        assert await driver.read_key_values("seen") == [
            ("a", BASE + 250),
            ("d", BASE + 1_000),
        ]
        dead = await driver.read("readings.dlq")
        assert [r.header(H_ERROR_TYPE) for r in dead] == [b"InvalidTimestamp"] * 2
        assert await driver.committed_offsets("readings") == {0: 4}  # nothing lost or stuck
