"""The count topology in one-minute tumbling windows: a running count per key per minute.

    streams-app -A topologies.windowed_count worker

Like ``topologies.count`` (same input, one output record per input record: the key's count in
the current minute), plus each minute's final count per key, emitted once when the minute
closes (``windowed-count-final``). ``make bench`` runs it next to the plain count.
"""

from __future__ import annotations

from streams_app import App

app = App("windowed-count", topic_partitions=4)

events = app.topic("count-input", key_type=str, value_serializer="raw")
totals = app.topic("windowed-count-output", key_type=str, value_type=int)

counts = app.Table("minute-counts", default=int, key_type=str, value_type=int).tumbling(
    60, emit_final="windowed-count-final"
)


@app.agent(events)
async def count(stream):  # type: ignore[no-untyped-def]
    async for key, _value in stream.items():
        counts[key] += 1
        await totals.send(key=key, value=counts[key].current())
