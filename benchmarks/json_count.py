"""The benchmark's streams_app topology: ``topologies/count.py`` with the values parsed as JSON.

Every system of ``make bench`` parses each input value as JSON (a 100-byte object), as a real
topology reading JSON events does: here the topic's ``json`` serializer decodes it before the
agent sees it; Kafka Streams through Jackson, quixstreams through its ``json`` deserializer,
the bare aiokafka loop with ``json.loads``. The count itself is ``topologies/count.py``'s.
"""

from __future__ import annotations

from streams_app import App

app = App("count", topic_partitions=4)

events = app.topic("count-input", key_type=str, value_serializer="json")
totals = app.topic("count-output", key_type=str, value_type=int)

counts = app.Table("counts", default=int, key_type=str, value_type=int)


@app.agent(events)
async def count(stream):  # type: ignore[no-untyped-def]
    async for key, _event in stream.items():
        counts[key] += 1
        await totals.send(key=key, value=counts[key])
