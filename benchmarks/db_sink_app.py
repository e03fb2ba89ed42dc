"""The sink the database benchmark runs: raw records landed with COPY (``benchmarks.database``).

Raw key and value codecs, so the figure is the sink's (fetch, one database transaction per
batch with COPY, the offsets update, COMMIT), not JSON decoding.
"""

from __future__ import annotations

import os

from streams_app import App

app = App("bench-sink", topic_partitions=8)
topic = app.topic(
    os.environ.get("BENCH_SINK_TOPIC", "bench-sink-in"), key_type=bytes, value_type=bytes
)


@app.postgres_sink(
    topic,
    name="bench",
    max_batch=int(os.environ.get("BENCH_MAX_BATCH", "5000")),
    schema=(
        "CREATE TABLE IF NOT EXISTS bench_landed "
        "(partition integer, kafka_offset bigint, key bytea, value bytea)"
    ),
)
async def land(conn, records):  # type: ignore[no-untyped-def]
    async with (
        conn.cursor() as cur,
        cur.copy("COPY bench_landed (partition, kafka_offset, key, value) FROM STDIN") as copy,
    ):
        for r in records:
            await copy.write_row((r.partition, r.offset, r.key, r.value))
