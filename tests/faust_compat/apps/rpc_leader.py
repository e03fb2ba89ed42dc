"""Test topology: agent RPC (ask, join, map) between two agents, and an on_leader timer keeping a
sequence number in a leader table. Topic names come from TEST_SUFFIX."""

from __future__ import annotations

import os

from streams_app import App

suffix = os.environ.get("TEST_SUFFIX", "dev")
app = App(f"rl-{suffix}", topic_partitions=4)

requests = app.topic(f"rl-in-{suffix}", key_type=str, value_type=int)
answers = app.topic(f"rl-out-{suffix}", key_type=str)
ticks = app.topic(f"rl-ticks-{suffix}", value_type=int)
sequence = app.Table("sequence", default=int, partitions=1)


@app.agent()
async def square(stream):  # type: ignore[no-untyped-def]
    async for value in stream:
        yield value * value


@app.agent(requests)
async def client(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        asked = await square.ask(value, key=key)
        joined = await square.join([value, value + 1], key=key)
        mapped = [x async for x in square.map([value + 2], key=key)]
        await answers.send(key=key, value=[value, asked, joined, mapped])


@app.timer(0.2, on_leader=True)
async def tick() -> None:
    number = sequence["n"] + 1
    sequence["n"] = number
    await ticks.send(value=number)
