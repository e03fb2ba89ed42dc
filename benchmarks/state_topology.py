"""The state-scale benchmark's topology: two tables of 1 KB values, read and written per record.

For every input record (key, 1 KB value): read the key's entry in both tables, then write
``previous[key]`` (the value ``latest`` held, or this one for a new key) and ``latest[key]``.
Two reads and two 1 KB writes per record, no output topic: what is measured is the state
(read cache, uncommitted writes, RocksDB, changelogs), not the producer. Configured, like
``topologies/count.py`` in the throughput benchmark, through ``STREAMS_APP_*`` variables.
"""

from __future__ import annotations

from streams_app import App

INPUT_TOPIC = "state-input"
PARTITIONS = 16

app = App("state-scale", topic_partitions=PARTITIONS)

events = app.topic(INPUT_TOPIC, key_type=str, value_serializer="raw")
latest = app.Table("latest", key_type=str, value_type="raw")
previous = app.Table("previous", key_type=str, value_type="raw")


@app.agent(events)
async def track(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        before = latest.get(key)
        previous.get(key)
        previous[key] = value if before is None else before
        latest[key] = value
