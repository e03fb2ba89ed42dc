"""The smallest stateful topology: a running count per key.

    streams-app -A topologies.count worker

Each input record increments its key's count in a changelog-backed table and emits the new count
to ``count-output``. Under exactly-once, every input is counted exactly once, in the table and
in the output, through crashes and rebalances.
"""

from __future__ import annotations

from streams_app import App

app = App("count", topic_partitions=4)

events = app.topic("count-input", key_type=str, value_serializer="raw")
totals = app.topic("count-output", key_type=str, value_type=int)

counts = app.Table("counts", default=int, key_type=str, value_type=int)


@app.agent(events)
async def count(stream):  # type: ignore[no-untyped-def]
    async for key, _value in stream.items():
        counts[key] += 1
        await totals.send(key=key, value=counts[key])
