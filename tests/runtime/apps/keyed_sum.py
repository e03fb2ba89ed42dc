"""Test topology: echo each input and keep a running sum per key (a changelog-backed table).

Topic names come from TEST_SUFFIX so that every test has its own; the broker, the guarantee and
the timing settings come from STREAMS_APP_* variables, as in production.
"""

from __future__ import annotations

import os

from streams_app import App

suffix = os.environ.get("TEST_SUFFIX", "dev")
app = App(f"ks-{suffix}", topic_partitions=4)

source = app.topic(f"ks-in-{suffix}", key_type=str, value_type=int)
echo = app.topic(f"ks-echo-{suffix}", key_type=str, value_type=int)
sums = app.topic(f"ks-sum-{suffix}", key_type=str, value_type=int)
totals = app.Table("sums", default=int, key_type=str, value_type=int)

FAIL_ON = {int(v) for v in os.environ.get("TEST_FAIL_ON_VALUES", "").split(",") if v}


@app.agent(source)
async def process(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        await echo.send(key=key, value=value)
        totals[key] += value
        if value in FAIL_ON:
            raise ValueError("this value is refused by the test topology")
        await sums.send(key=key, value=totals[key])
