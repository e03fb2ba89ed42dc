"""The outbox relay in-process on the real broker and a real PostgreSQL: the basics."""

from __future__ import annotations

import json

import psycopg
import pytest

from streams_app.postgres import outbox
from streams_app.postgres.relay import H_OUTBOX_COMMIT, H_OUTBOX_ID
from streams_app.postgres.schema import init_outbox_sync
from streams_app.readback import read_topics
from tests.postgres.helpers import query, relay, running
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


async def _empty(dsn: str) -> bool:
    rows = await query(
        dsn, "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM outbox_commits)"
    )
    return bool(rows[0][0] == 0)
