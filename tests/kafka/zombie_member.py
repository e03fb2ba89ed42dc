"""A consumer group member for the SIGSTOP test: prints what it sees as JSON lines.

Run as ``python zombie_member.py BOOTSTRAP TOPIC GROUP``. Events: ``meta`` (group_metadata
changed), ``records`` (a non-empty getmany: how many, from which partitions), ``revoked`` /
``assigned`` (listener callbacks).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from aiokafka.abc import ConsumerRebalanceListener

from streams_app.kafka import StableConsumer


def emit(event: str, consumer: StableConsumer, **fields: Any) -> None:
    meta = consumer.group_metadata()
    line = {
        "t": time.time(),
        "event": event,
        "generation": meta.generation_id,
        "member": meta.member_id,
        **fields,
    }
    print(json.dumps(line), flush=True)


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: StableConsumer) -> None:
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        emit("revoked", self.consumer, partitions=sorted(tp.partition for tp in revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        emit("assigned", self.consumer, partitions=sorted(tp.partition for tp in assigned))


async def main(bootstrap: str, topic: str, group: str) -> None:
    consumer = StableConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        # A fetch waits at the broker for records this long: the one in flight when the member
        # is stopped is answered with the records sent meanwhile, and that answer is waiting
        # in the socket when it resumes, ahead of its first heartbeat's round trip.
        fetch_max_wait_ms=10_000,
    )
    await consumer.start()
    consumer.subscribe([topic], listener=Listener(consumer))
    last = None
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            count = sum(len(records) for records in batch.values())
            if count:
                emit("records", consumer, n=count, partitions=sorted(tp.partition for tp in batch))
            meta = consumer.group_metadata()
            if meta != last:
                emit("meta", consumer)
                last = meta
    finally:
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
