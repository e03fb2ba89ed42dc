"""The relay's progress: the last published (commit number, id), kept in Kafka.

Each relay transaction writes, next to the events it publishes, one progress record to the
outbox's progress topic (compacted, one partition, key = the outbox's relay id). Both commit
together or not at all, so after any crash the last *committed* progress record says exactly
which events are in Kafka. On start the relay first takes over its transactional id (which
aborts whatever its previous incarnation left open), then reads the progress topic back
``read_committed`` to its end.

The topic is one per outbox (``streams-app-outbox-progress-<relay id>`` by default): reading
``read_committed`` to the end stops at the oldest open transaction on the partition, and no
other outbox's relay may have one there.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from streams_app.transport.base import (
    AdminClient,
    ConsumerConfig,
    TopicPartition,
    TopicSpec,
    Transport,
)
from streams_app.transport.errors import TransportError


@dataclass(frozen=True, order=True)
class Position:
    """The last published event: its transaction's commit number, then its id."""

    commit: int = 0
    id: int = 0


@dataclass(frozen=True)
class Progress:
    position: Position
    published: int

    def encode(self, outbox: str) -> bytes:
        return json.dumps(
            {
                "commit": self.position.commit,
                "id": self.position.id,
                "published": self.published,
                "outbox": outbox,
                "at_ms": int(time.time() * 1000),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Progress:
        doc: dict[str, Any] = json.loads(data)
        return cls(Position(int(doc["commit"]), int(doc["id"])), int(doc.get("published", 0)))


def default_topic(relay_id: str) -> str:
    return f"streams-app-outbox-progress-{relay_id}"


async def ensure_topic(admin: AdminClient, topic: str, replication_factor: int) -> None:
    if topic not in await admin.partition_counts([topic]):
        await admin.create_topics(
            [
                TopicSpec(
                    topic,
                    1,
                    replication_factor,
                    {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"},
                )
            ]
        )


async def read_progress(
    transport: Transport,
    admin: AdminClient,
    topic: str,
    key: str,
    *,
    timeout: float = 60.0,
) -> Progress | None:
    """The last committed progress record of ``key``, or None if there is none."""
    tp = TopicPartition(topic, 0)
    end = (await admin.end_offsets([tp]))[tp]
    begin = (await admin.beginning_offsets([tp]))[tp]
    if end <= begin:
        return None
    consumer = transport.consumer(
        ConsumerConfig(
            group_id=None,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_poll_records=10_000,
            fetch_max_wait_ms=50,
            client_id=f"outbox-relay-{key}-progress",
        )
    )
    await consumer.start()
    wanted = key.encode()
    last: bytes | None = None
    try:
        consumer.assign([tp])
        consumer.seek(tp, begin)
        async with asyncio.timeout(timeout):
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                for record in batch.get(tp, ()):
                    if record.key == wanted and record.value is not None:
                        last = record.value
                if await consumer.position(tp) >= end:
                    break
    except TimeoutError:
        raise TransportError(
            f"reading the relay progress from {topic!r} did not reach offset {end} within "
            f"{timeout:.0f}s (an open transaction on it?)"
        ) from None
    finally:
        await consumer.stop()
    return None if last is None else Progress.decode(last)
