"""Micro-benchmark: what an agent's ``async for key, value in stream.items()`` costs a record.

    python -m benchmarks.stream_iteration [CHECKOUT ...]

Feeds 200,000 events into a stream (as the worker does, a batch at a time) and times the loop
that takes them; prints the median of 7 runs per checkout, in µs per record. Give several
checkouts (e.g. a git worktree of the previous commit) to compare them interleaved, each in a
fresh interpreter.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RECORDS = 200_000
RUNS = 7


async def _one_run() -> float:
    from streams_app.app.context import Event
    from streams_app.app.stream import Stream

    stream = Stream(None, "t")  # type: ignore[arg-type]
    for offset in range(RECORDS):
        key = f"k{offset % 1000}"
        task: Any = None  # no task: the loop reads no table
        stream.feed(Event("t", 0, offset, 0, key, b"v", (), b"k", b"v", task, None, None))
    taken = 0
    started = time.perf_counter()
    async for _key, _value in stream.items():
        taken += 1
        if taken == RECORDS:
            break
    return time.perf_counter() - started


def _measure() -> None:
    import streams_app

    print(Path(streams_app.__file__).parent.parent, file=sys.stderr)
    seconds = [asyncio.run(_one_run()) for _ in range(RUNS)]
    print(f"{statistics.median(seconds) / RECORDS * 1e6:.3f}")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _measure()
        return
    checkouts = [Path(p).resolve() for p in argv] or [Path.cwd()]
    for checkout in checkouts:
        # Run as a script (not -m from this checkout), so that streams_app comes from
        # PYTHONPATH: the checkout measured.
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child"],
            env={"PYTHONPATH": str(checkout), "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stderr.strip().endswith(str(checkout)), out.stderr
        print(f"{checkout}: {out.stdout.strip()} µs per record (median of {RUNS})")


if __name__ == "__main__":
    main(sys.argv[1:])
