"""Test topology: echo each input, except a value of ``hang``, on which the agent awaits
forever (a call without a timeout). Topic names come from TEST_SUFFIX; settings from the
STREAMS_APP_* variables, as in production."""

from __future__ import annotations

import asyncio
import logging
import os

from streams_app import App

log = logging.getLogger(__name__)

suffix = os.environ.get("TEST_SUFFIX", "dev")
app = App(f"hang-{suffix}", topic_partitions=2)

source = app.topic(f"hang-in-{suffix}", key_type=str, value_type=str)
echo = app.topic(f"hang-echo-{suffix}", key_type=str, value_type=str)


@app.agent(source)
async def process(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        if value == "hang":
            log.warning("the test agent hangs on key %s", key)
            await asyncio.Event().wait()
        await echo.send(key=key, value=value)
