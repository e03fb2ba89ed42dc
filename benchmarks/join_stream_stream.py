"""``make bench``'s stream-stream windowed join row (``benchmarks/join_bench.py``)."""

from __future__ import annotations

from benchmarks.join_bench import build

app = build("stream-stream", "join-ss-output")
