"""The outbox relay in-process on the real broker and a real PostgreSQL: the basics."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from streams_app.postgres import outbox
from streams_app.postgres.relay import H_OUTBOX_COMMIT, H_OUTBOX_ID
from streams_app.postgres.schema import init_outbox, init_outbox_sync
from streams_app.readback import read_topics
from tests.postgres.helpers import (
    ASK_HOLD,
    HOLD_LOCK,
    close_after_hold,
    commit_is_held,
    hold_commits_that_ask,
    query,
    relay,
    running,
)
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


async def create_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def test_relay_publishes_committed_events_once_and_cleans_up(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    topic = f"ob-{unique}"
    await create_topic(bootstrap_servers, topic)
    with psycopg.connect(postgres_dsn) as conn:
        init_outbox_sync(conn)
        for t in range(10):
            with conn.transaction():
                for i in range(5):
                    outbox.add(
                        conn,
                        topic=topic,
                        key=f"k{i}",
                        value={"t": t, "i": i},
                        headers={"source": "test"},
                    )
        with conn.transaction():  # rolled back: never published
            outbox.add(conn, topic=topic, key="k0", value={"t": -1, "i": -1})
            raise_rollback = psycopg.Rollback()
            raise raise_rollback
    async with running(relay(postgres_dsn, bootstrap_servers, batch_size=7)) as r:
        await wait_until(lambda: _empty(postgres_dsn), timeout=60)
        assert r.published == 50
    records = (await read_topics(bootstrap_servers, [topic]))[topic]
    values = [json.loads(rec.value) for rec in records]
    assert sorted((v["t"], v["i"]) for v in values) == [(t, i) for t in range(10) for i in range(5)]
    for rec in records:
        assert rec.header("source") == b"test"
        assert rec.header(H_OUTBOX_ID) is not None and rec.header(H_OUTBOX_COMMIT) is not None
    by_key: dict[bytes, list[int]] = {}
    for rec in records:
        by_key.setdefault(rec.key or b"", []).append(json.loads(rec.value)["t"])
    assert all(ts == sorted(ts) for ts in by_key.values())


async def test_relay_never_skips_a_commit_still_in_flight(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    """B takes its xid first, A a newer one. A reaches COMMIT, takes commit number 1 and is
    held before it becomes visible; B then commits with number 2. The relay must wait for A
    and publish both. (Taking the snapshot's xmax as its bound, the relay called 2 final at
    once, since no xid after A's had completed: it published B, skipped A, and its clean-up
    deleted A's event. A CI run saw that as two events missing.)"""
    topic = f"ob-{unique}"
    await create_topic(bootstrap_servers, topic)
    setup = await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True)
    b = await psycopg.AsyncConnection.connect(postgres_dsn)
    a = await psycopg.AsyncConnection.connect(postgres_dsn)
    committing: asyncio.Task[None] | None = None
    try:
        await init_outbox(setup)
        await hold_commits_that_ask(setup)
        await setup.execute("SELECT pg_advisory_lock(%s)", (HOLD_LOCK,))
        await outbox.add(b, topic=topic, key="b", value={"event": "B"})  # the older xid
        await outbox.add(a, topic=topic, key="a", value={"event": "A"})  # the newest xid
        await a.execute(ASK_HOLD)
        committing = asyncio.create_task(a.commit())
        await wait_until(lambda: commit_is_held(setup, a), timeout=30)
        await b.commit()
        async with running(relay(postgres_dsn, bootstrap_servers)) as r:
            await wait_until(lambda: r.horizon.latest >= 2, timeout=30)  # it read both
            assert r.horizon.final == 0, "called a number final while its commit was in flight"
            await setup.execute("SELECT pg_advisory_unlock(%s)", (HOLD_LOCK,))
            await committing
            await wait_until(lambda: _empty(postgres_dsn), timeout=60)
            assert r.published == 2
    finally:
        await close_after_hold(setup, committing, a, b)
    records = (await read_topics(bootstrap_servers, [topic]))[topic]
    published = sorted(
        (int(rec.header(H_OUTBOX_COMMIT) or b"0"), json.loads(rec.value or b"{}")["event"])
        for rec in records
    )
    assert published == [(1, "A"), (2, "B")]


async def test_relay_passes_commits_left_without_events(
    bootstrap_servers: str, postgres_dsn: str, unique: str
) -> None:
    """Writers that took their event back before committing leave commit numbers with no
    events: more of them in a row than the relay reads per fetch must not stall it."""
    topic = f"ob-{unique}"
    await create_topic(bootstrap_servers, topic)
    with psycopg.connect(postgres_dsn) as conn:
        init_outbox_sync(conn)
        for _ in range(300):
            with conn.transaction():
                outbox.add(conn, topic=topic, key="k", value={"event": "taken back"})
                conn.execute("DELETE FROM outbox")
        with conn.transaction():
            outbox.add(conn, topic=topic, key="k", value={"event": "kept"})
        empty = conn.execute(
            "SELECT count(*) FROM outbox_commits c "
            "WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.txid = c.txid)"
        ).fetchone()
    assert empty is not None and empty[0] == 300
    async with running(relay(postgres_dsn, bootstrap_servers)) as r:
        await wait_until(lambda: _empty(postgres_dsn), timeout=30)
        assert r.published == 1
    records = (await read_topics(bootstrap_servers, [topic]))[topic]
    assert [json.loads(rec.value or b"{}")["event"] for rec in records] == ["kept"]


async def _empty(dsn: str) -> bool:
    rows = await query(
        dsn, "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM outbox_commits)"
    )
    return bool(rows[0][0] == 0)
