"""Test topology for ``tables``: a plain table, a tumbling and a sliding windowed table, all
keyed like the input; windows are kept for a day (so none leaves the store during a test). And a
versioned table built from a topic of prices, with a day of history (so no version expires).

Topic names come from TEST_SUFFIX; the broker and timing settings from STREAMS_APP_* variables.
"""

from __future__ import annotations

import os
from datetime import timedelta

from streams_app import App

suffix = os.environ.get("TEST_SUFFIX", "dev")
app = App(f"wt-{suffix}", topic_partitions=4)

source = app.topic(f"wt-in-{suffix}", key_type=str, value_type=int)
sums = app.Table("sums", default=int, key_type=str, value_type=int)
per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(
    60, expires=timedelta(days=1)
)
recent = app.Table("recent", default=int, key_type=str, value_type=int).sliding(
    10, expires=timedelta(days=1)
)
prices_in = app.topic(f"wt-prices-{suffix}", key_type=str, value_type=int)
prices = app.Table("prices", source=prices_in, versioned=timedelta(days=1))


@app.agent(source)
async def count(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        sums[key] += value
        per_minute[key] += value
        recent[key] += value
