"""A record just under the broker's size limit that fails to decode (issue 35, item 4): its
dead-letter copy, with the dlq.* headers, would not fit, so it is dead-lettered truncated and
the worker goes on. Before, the worker stopped with DeadLetterRefused, and again ~9 s after
every restart: one bad record blocked every partition for good."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from aiokafka import AIOKafkaProducer

from streams_app import App
from streams_app.kafka.admin import KafkaAdmin
from streams_app.readback import read_topics, wait_committed
from streams_app.runtime.dead_letter_size import H_ORIGINAL_SIZE, H_TRUNCATED
from streams_app.runtime.errors_policy import H_ERROR_TYPE, H_SOURCE_OFFSET
from streams_app.runtime.web.views import health
from tests.runtime.helpers import running_worker


def copy_app(unique: str, bootstrap: str) -> App:
    app = App(f"big-{unique}", broker=bootstrap, topic_partitions=2)
    source = app.topic(f"in-{unique}", key_type=str, value_type=int)
    echo = app.topic(f"echo-{unique}", key_type=str, value_type=int)

    @app.agent(source)
    async def copy(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            await echo.send(key=key, value=value)

    return app


async def message_max_bytes(bootstrap: str) -> int:
    admin = KafkaAdmin(bootstrap)
    await admin.start()
    try:
        limits = await admin.broker_limits()
    finally:
        await admin.close()
    assert limits and limits[0].message_max_bytes is not None
    return limits[0].message_max_bytes


async def test_a_record_just_under_the_broker_limit_is_dead_lettered_truncated(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    limit = await message_max_bytes(bootstrap_servers)
    poison = b"\x00" + b"p" * (limit - 200 - 1)  # not JSON: it cannot decode into an int
    topic = f"in-{unique}"
    app = copy_app(unique, bootstrap_servers)
    async with running_worker(app, tmp_path / "s") as worker:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers, acks="all", max_request_size=2 * limit
        )
        await producer.start()
        try:
            for i in range(10):
                await producer.send(topic, key=b"k", value=b"%d" % i, partition=0)
            # The broker takes it: its batch is under message.max.bytes.
            await (await producer.send(topic, key=b"k", value=poison, partition=0))
            for i in range(10, 20):
                await producer.send(topic, key=b"k", value=b"%d" % i, partition=i % 2)
            await producer.flush()
        finally:
            await producer.stop()
        await wait_committed(bootstrap_servers, app.conf.id, [topic], outputs=[f"echo-{unique}"])
        alive, _ = health(worker)
        assert alive and worker.error is None
        assert worker.dead_lettered == 1
    data = await read_topics(bootstrap_servers, [f"echo-{unique}", f"{topic}.dlq"])
    assert Counter(json.loads(r.value) for r in data[f"echo-{unique}"]) == Counter(range(20))
    (dead,) = data[f"{topic}.dlq"]
    assert dead.header(H_ERROR_TYPE) == b"DecodeError"
    assert dead.header(H_SOURCE_OFFSET) == b"10"
    assert dead.header(H_TRUNCATED) == b"value"
    assert dead.header(H_ORIGINAL_SIZE) == str(len(poison)).encode()
    assert dead.value is not None and 0 < len(dead.value) < len(poison)
    assert poison.startswith(dead.value)  # the first bytes
    assert len(dead.value) > len(poison) - 2000  # as much as fits, not a token prefix
