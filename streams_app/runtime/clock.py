"""Time, as a seam: the worker never calls ``time`` or ``asyncio.sleep`` directly.

Workers use :class:`SystemClock`. The test harness gives the worker a manual clock, so commit
intervals, retry backoffs and timers run when a test advances time, not after real sleeps, and
runs are deterministic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (commit intervals, backoffs, timers)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (record timestamps)."""
        ...

    def cpu_time(self) -> float:
        """CPU seconds the event loop's thread has run (how busy the worker is:
        ``runtime.worker.busy``)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        """Run ``callback`` after ``delay`` seconds (the producer's linger timer)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def cpu_time(self) -> float:
        return time.thread_time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay, callback)
