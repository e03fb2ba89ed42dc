"""An app with timers, a task and a channel but no agent reading a topic (Faust runs such apps):
the worker starts without joining a consumer group, its timers fire, its task runs, the channel
carries the timer's values, and what the timer sends commits (exactly-once: transactions with
no offsets in them), against the real broker."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from streams_app import App
from streams_app.readback import read_topics
from tests.runtime.helpers import running_worker, wait_until

pytestmark = pytest.mark.kafka


async def _groups(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {group[0] for group in await admin.list_consumer_groups()}
    finally:
        await admin.close()


async def test_timers_tasks_and_channels_without_an_input_topic(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = App(f"timers-{unique}", broker=bootstrap_servers, topic_partitions=2)
    out = app.topic(f"timers-out-{unique}", value_type=int)
    ticks = app.channel(value_type=int)
    fired: list[int] = []
    heard: list[int] = []
    ran: list[str] = []

    @app.timer(0.05)
    async def tick() -> None:
        fired.append(len(fired) + 1)
        await out.send(key=b"k", value=fired[-1])
        await ticks.send(value=fired[-1])

    @app.agent(ticks)
    async def listen(stream):  # type: ignore[no-untyped-def]
        async for value in stream:
            heard.append(value)

    @app.task
    async def once() -> None:
        ran.append("task")

    async with running_worker(app, tmp_path / "s") as worker:
        await wait_until(lambda: len(fired) >= 10 and len(heard) >= 10 and ran == ["task"])
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.get(f"{worker.web_url}/ready") as response,
        ):
            ready = (response.status, json.loads(await response.text()))

        async def committed() -> bool:
            return len((await read_topics(bootstrap_servers, [out.name]))[out.name]) >= 10

        await wait_until(committed, timeout=30)
        # No agent reads a topic: no consumer group was needed, so none was joined.
        assert app.conf.id not in await _groups(bootstrap_servers)
    assert worker.error is None
    assert ready[0] == 200 and ready[1]["ready"] is True, ready
    assert heard == fired[: len(heard)]
    values = [
        json.loads(r.value) for r in (await read_topics(bootstrap_servers, [out.name]))[out.name]
    ]
    # Every tick the timer sent, once, in order; the last ones commit at the final commit.
    assert values == fired
