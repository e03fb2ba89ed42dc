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

    def busy_time(self) -> float:
        """Seconds the calling thread (the event loop's) has been busy: on a CPU or waiting
        for one (how busy the worker is: ``runtime.worker.busy``)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        """Run ``callback`` after ``delay`` seconds (the producer's linger timer)."""
        ...


#: The calling thread's scheduler statistics (Linux): nanoseconds on a CPU, nanoseconds
#: runnable but waiting for one, time slices.
_SCHEDSTAT = "/proc/thread-self/schedstat"


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def busy_time(self) -> float:
        """The thread's time on a CPU plus its time waiting for one, from Linux's schedstat;
        its CPU time alone where that is not readable. CPU time alone reads a saturated
        worker on a host with more runnable threads than CPUs as partly idle: it never
        waits for input, but is on a CPU only for its share, which can be under the 70 %
        that ``Loop.meanwhile`` calls saturated. About 20 µs a call, twice per commit."""
        try:
            with open(_SCHEDSTAT, "rb") as stats:
                running, waiting, _ = stats.read().split()
            return (int(running) + int(waiting)) / 1e9
        except (OSError, ValueError):
            return time.thread_time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay, callback)
