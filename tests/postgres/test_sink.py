"""The PostgreSQL sink in-process, on the real broker and a real PostgreSQL.

The happy path (rows and offsets land together; the offsets point past the last landed record),
the error policy (retry, stop, dlq), poison records, the database connection dropped under the
sink, and a database that is down at start (named by host:port, never with its password).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from streams_app import App, WorkerStopped
from streams_app.app.postgres import SinkRecord
from streams_app.postgres.sink import SinkRunner
from streams_app.readback import read_topics
from streams_app.runtime.errors_policy import H_ERROR_TYPE, H_SOURCE_OFFSET
from tests.postgres.helpers import query, running
from tests.runtime.helpers import produce_keyed, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

Handler = Callable[[Any, list[SinkRecord]], Awaitable[None]]


def make_app(bootstrap: str, unique: str, handler: Handler, **sink: Any) -> App:
    app = App(
        f"sk-{unique}",
        broker=bootstrap,
        topic_partitions=3,
        retry_backoff=0.05,
        session_timeout=6,
        heartbeat_interval=2,
    )
    topic = app.topic(f"sk-in-{unique}", key_type=str, value_type=int)
    app.postgres_sink(
        topic,
        name="land",
        handler=handler,
        schema="CREATE TABLE IF NOT EXISTS landed (k text, v int, p int, o bigint)",
        **sink,
    )
    return app


async def insert(conn: Any, records: list[SinkRecord]) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO landed VALUES (%s, %s, %s, %s)",
            [(r.key, r.value, r.partition, r.offset) for r in records],
        )


async def landed(dsn: str) -> list[Any]:
    return await query(dsn, "SELECT k, v, p, o FROM landed")


async def count_at_least(dsn: str, n: int) -> bool:
    return len(await landed(dsn)) >= n


async def stored_offsets(dsn: str, group: str) -> dict[int, int]:
    rows = await query(
        dsn,
        "SELECT partition, next_offset FROM streams_app_offsets WHERE group_id = %s",
        (group,),
    )
    return {p: n for p, n in rows if n is not None}


def past_last(rows: list[Any]) -> dict[int, int]:
    last: dict[int, int] = {}
    for _, _, p, o in rows:
        last[p] = max(last.get(p, -1), o)
    return {p: o + 1 for p, o in last.items()}


async def test_sink_lands_records_and_offsets(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    app = make_app(bootstrap_servers, unique, insert)
    async with running(SinkRunner(app.sinks["land"], dsn=postgres_dsn)) as runner:
        sent = await produce_keyed(bootstrap_servers, f"sk-in-{unique}", 1000, seed=1)
        await wait_until(lambda: count_at_least(postgres_dsn, 1000), timeout=60)
        assert runner.metrics()["records_landed"] == 1000
    rows = await landed(postgres_dsn)
    assert sorted((k, v) for k, v, _, _ in rows) == sorted(sent)
    assert len({(p, o) for _, _, p, o in rows}) == 1000
    assert await stored_offsets(postgres_dsn, f"sk-{unique}-sink-land") == past_last(rows)


async def test_retry_policy_lands_everything_once_after_failures(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    failures = {"left": 3}

    async def flaky(conn: Any, records: list[SinkRecord]) -> None:
        await insert(conn, records)  # rolled back with the failure below
        if failures["left"] and any(r.value == 77 for r in records):
            failures["left"] -= 1
            raise RuntimeError("refused by the business rules (for now)")

    app = make_app(bootstrap_servers, unique, flaky, error_policy="retry")
    async with running(SinkRunner(app.sinks["land"], dsn=postgres_dsn)):
        await produce_keyed(bootstrap_servers, f"sk-in-{unique}", 300, seed=2)
        await _send_values(bootstrap_servers, f"sk-in-{unique}", [77])
        await wait_until(lambda: count_at_least(postgres_dsn, 301), timeout=60)
    rows = await landed(postgres_dsn)
    assert failures["left"] == 0
    assert len(rows) == 301 and len({(p, o) for _, _, p, o in rows}) == 301


async def test_stop_policy_stops_and_lands_nothing_of_the_batch(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    async def refuse(conn: Any, records: list[SinkRecord]) -> None:
        await insert(conn, records)
        if any(r.value == 13 for r in records):
            raise ValueError("13 is not accepted")

    app = make_app(bootstrap_servers, unique, refuse, error_policy="stop")
    runner = SinkRunner(app.sinks["land"], dsn=postgres_dsn)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(runner.started.wait(), 60)
    await _send_values(bootstrap_servers, f"sk-in-{unique}", [1, 2, 3])
    await wait_until(lambda: count_at_least(postgres_dsn, 3), timeout=60)
    await _send_values(bootstrap_servers, f"sk-in-{unique}", [13])
    with pytest.raises(WorkerStopped, match="error policy 'stop'"):
        await asyncio.wait_for(task, 60)
    rows = await landed(postgres_dsn)
    assert sorted(v for _, v, _, _ in rows) == [1, 2, 3]
    assert await stored_offsets(postgres_dsn, f"sk-{unique}-sink-land") == past_last(rows)


async def test_dlq_policy_and_poison_records_go_to_the_dead_letter_topic(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    async def strict(conn: Any, records: list[SinkRecord]) -> None:
        if any(r.value < 0 for r in records):
            raise ValueError("negative values are refused")
        await insert(conn, records)

    app = make_app(bootstrap_servers, unique, strict, error_policy="dlq")
    topic = f"sk-in-{unique}"
    async with running(SinkRunner(app.sinks["land"], dsn=postgres_dsn)) as runner:
        await _send_values(bootstrap_servers, topic, [1, -5, 2, 3, -7, 4])
        await _send_raw(bootstrap_servers, topic, [b"not json at all"])  # undecodable
        await _send_values(bootstrap_servers, topic, [5])
        await wait_until(lambda: count_at_least(postgres_dsn, 5), timeout=60)
        assert runner.dead_lettered == 3
    rows = await landed(postgres_dsn)
    assert sorted(v for _, v, _, _ in rows) == [1, 2, 3, 4, 5]
    dead = (await read_topics(bootstrap_servers, [f"{topic}.dlq"]))[f"{topic}.dlq"]
    assert sorted(r.value for r in dead) == sorted([b"-5", b"-7", b"not json at all"])
    assert {r.header(H_ERROR_TYPE) for r in dead} == {b"ValueError", b"DecodeError"}
    assert all(r.header(H_SOURCE_OFFSET) is not None for r in dead)
    # The dead letters' offsets are covered too: nothing is fetched again after a restart.
    assert await stored_offsets(postgres_dsn, f"sk-{unique}-sink-land") == {
        p: o
        for p, o in past_last([(None, None, r.partition, r.offset) for r in dead] + rows).items()
    }


async def test_connection_lost_three_times_nothing_lost_nothing_twice(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    app = make_app(bootstrap_servers, unique, insert, max_batch=200)
    topic = f"sk-in-{unique}"
    async with running(SinkRunner(app.sinks["land"], dsn=postgres_dsn)) as runner:
        producing = asyncio.create_task(_produce_slowly(bootstrap_servers, topic, 6000))
        for n in (1000, 2500, 4000):
            await wait_until(lambda n=n: count_at_least(postgres_dsn, n), timeout=60)  # type: ignore[misc]
            # What a database restart does to its clients: every session of the sink dies.
            await query(
                postgres_dsn,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND application_name = ''",
            )
        await producing
        await wait_until(lambda: count_at_least(postgres_dsn, 6000), timeout=60)
        assert runner.reconnects >= 3
    rows = await landed(postgres_dsn)
    assert len(rows) == 6000 and len({(p, o) for _, _, p, o in rows}) == 6000
    assert await stored_offsets(postgres_dsn, f"sk-{unique}-sink-land") == past_last(rows)


async def test_database_down_is_named_without_the_password(
    bootstrap_servers: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    from streams_app.broker.cluster import free_port

    port = free_port()  # nothing listens there
    dsn = f"postgresql://app:s3cr3t-pw@127.0.0.1:{port}/shop"
    app = make_app(bootstrap_servers, unique, insert)
    runner = SinkRunner(app.sinks["land"], dsn=dsn)
    caplog.set_level(logging.WARNING)
    task = asyncio.create_task(runner.run())
    await wait_until(lambda: f"127.0.0.1:{port}/shop" in caplog.text, timeout=30)
    await wait_until(lambda: caplog.text.count("unavailable") >= 2, timeout=30)  # retried
    runner.request_stop()
    with pytest.raises(Exception, match=f"127.0.0.1:{port}/shop"):
        await asyncio.wait_for(task, 30)
    assert "s3cr3t" not in caplog.text
    assert "s3cr3t" not in repr(app.sinks["land"]) and "s3cr3t" not in str(app.conf.describe())


async def _send_values(bootstrap: str, topic: str, values: list[int]) -> None:
    await _send_raw(bootstrap, topic, [json.dumps(v).encode() for v in values])


async def _send_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, key=b"k", value=value)
    finally:
        await producer.stop()


async def _produce_slowly(bootstrap: str, topic: str, count: int) -> None:
    for start in range(0, count, 500):
        await produce_keyed(bootstrap, topic, 500, seed=start, start=start)
        await asyncio.sleep(0.1)  # pacing: the connection drops land while records flow
