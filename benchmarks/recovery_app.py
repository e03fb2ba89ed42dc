"""The recovery benchmark's topology: ``topologies/count.py`` with per-run topic names.

A running count per key in a changelog-backed table, one output per input. The topic names
carry ``RECOVERY_SUFFIX`` (their partition count is ``RECOVERY_PARTITIONS``), so that every
scenario of ``make bench BENCH_ARGS=--recovery`` has its own input, output, changelog and
group; everything else comes from ``STREAMS_APP_*``.
"""

from __future__ import annotations

import os

from streams_app import App

suffix = os.environ.get("RECOVERY_SUFFIX", "dev")
app = App(f"rec-{suffix}", topic_partitions=int(os.environ.get("RECOVERY_PARTITIONS", "4")))

events = app.topic(f"rec-in-{suffix}", key_type=str, value_serializer="raw")
totals = app.topic(f"rec-out-{suffix}", key_type=str, value_type=int)

counts = app.Table("counts", default=int, key_type=str, value_type=int)


@app.agent(events)
async def count(stream):  # type: ignore[no-untyped-def]
    async for key, _value in stream.items():
        counts[key] += 1
        await totals.send(key=key, value=counts[key])
