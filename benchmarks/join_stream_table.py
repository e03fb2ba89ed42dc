"""``make bench``'s stream-table join row (``benchmarks/join_bench.py``)."""

from __future__ import annotations

from benchmarks.join_bench import build

app = build("stream-table", "join-st-output")
