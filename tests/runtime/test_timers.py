"""Timers run inside the worker and their sends commit with the worker's transactions."""

from __future__ import annotations

from pathlib import Path

from streams_app import App
from streams_app.readback import read_topics
from tests.runtime.helpers import running_worker, wait_until


async def test_timer_sends_are_committed(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = App(f"timer-{unique}", broker=bootstrap_servers, topic_partitions=1)
    source = app.topic(f"in-{unique}", value_type=int)
    ticks = app.topic(f"ticks-{unique}", value_type=int)
    fired: list[int] = []

    @app.agent(source)
    async def idle(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.timer(0.05)
    async def tick() -> None:
        fired.append(len(fired))
        await ticks.send(value=len(fired))

    async with running_worker(app, tmp_path / "s"):
        await wait_until(lambda: len(fired) >= 5)

        async def committed() -> bool:
            out = await read_topics(bootstrap_servers, [f"ticks-{unique}"])
            return len(out[f"ticks-{unique}"]) >= 5

        await wait_until(committed)
    out = await read_topics(bootstrap_servers, [f"ticks-{unique}"])
    values = [int(r.value) for r in out[f"ticks-{unique}"]]
    assert values == list(range(1, len(values) + 1))
    assert len(values) == len(fired)  # the last ticks committed on the graceful stop
