"""Test topology: land a topic in PostgreSQL with the exactly-once sink.

Topic and app names come from TEST_SUFFIX; the database from STREAMS_APP_POSTGRES_DSN and the
broker from STREAMS_APP_BROKER, as in production. ``landed`` has no unique key on purpose: a
duplicate would be an extra row, visible to the test, not an error hidden by an upsert.

TEST_HOLD_LOCK=<n>: the handler takes advisory lock n (inside the sink's transaction, after its
inserts) when a batch holds a record valued "HOLD": the zombie test parks a sink there.
"""

from __future__ import annotations

import os

from streams_app import App

suffix = os.environ.get("TEST_SUFFIX", "dev")
app = App(f"pgs-{suffix}", topic_partitions=4)
# The test writes plain UTF-8 text, not the JSON string Faust (and our default) would write.
source = app.topic(f"pgs-in-{suffix}", key_type=str, value_type=str, value_serializer="str")
HOLD_LOCK = os.environ.get("TEST_HOLD_LOCK")


@app.postgres_sink(
    source,
    name="landed",
    max_batch=int(os.environ.get("TEST_MAX_BATCH", "500")),
    schema=(
        "CREATE TABLE IF NOT EXISTS landed "
        "(topic text, partition int, kafka_offset bigint, k text, v text)"
    ),
)
async def land(conn, records):  # type: ignore[no-untyped-def]
    async with conn.cursor() as cur:
        async with cur.copy(
            "COPY landed (topic, partition, kafka_offset, k, v) FROM STDIN"
        ) as copy:
            for r in records:
                await copy.write_row((r.topic, r.partition, r.offset, r.key, r.value))
        if HOLD_LOCK and any(r.value == "HOLD" for r in records):
            await cur.execute("SELECT pg_advisory_xact_lock(%s)", (int(HOLD_LOCK),))
