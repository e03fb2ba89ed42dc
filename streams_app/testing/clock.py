"""A clock whose time moves only when the test says so, and knows who is waiting on it.

:class:`ManualClock` implements the runtime's :class:`~streams_app.runtime.clock.Clock` seam.
Commit intervals, retry backoffs and ``app.timer`` functions of a worker given this clock run
when a test advances time, never after a real sleep, so runs are deterministic. The in-memory
Kafka model (:mod:`streams_app.testing.memory`) uses the same clock for record timestamps,
transaction timeouts and consumer-group session timeouts.

It also keeps the books the test driver needs to know when a worker has *nothing left to do*:
every wait on the clock or on the Kafka model is a :class:`Parked` entry under an *owner* (the
worker it belongs to). A worker all of whose progress waits on parked entries is blocked until
the test pipes data or advances time; the driver waits for that state instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time as _time
from collections import Counter
from collections.abc import Callable, Sequence

_US = 1_000_000


def _to_us(seconds: float) -> int:
    return round(seconds * _US)


class TimerHandle:
    """A callback scheduled on the manual clock; :meth:`cancel` before it fires to drop it."""

    __slots__ = ("callback", "cancelled", "when_us")

    def __init__(self, when_us: int, callback: Callable[[], None]) -> None:
        self.when_us = when_us
        self.callback = callback
        self.cancelled = False

    @property
    def when(self) -> float:
        return self.when_us / _US

    def cancel(self) -> None:
        self.cancelled = True


class Parked:
    """One wait of one owner: ends when woken (by whoever it waits on) or at its deadline."""

    __slots__ = ("_clock", "_timer", "future", "owner", "parked", "reason")

    def __init__(self, clock: ManualClock, owner: str | None, reason: str) -> None:
        self._clock = clock
        self.owner = owner
        self.reason = reason
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._timer: TimerHandle | None = None
        self.parked = True

    def wake(self) -> None:
        """End the wait (idempotent; also after the waiter was cancelled). Unparks at once,
        before the waiter has resumed, so the driver never mistakes a woken waiter for a
        blocked one."""
        if not self.parked:
            return
        self.parked = False
        if not self.future.done():
            self.future.set_result(None)
        self._clock._unpark(self)
        if self._timer is not None:
            self._timer.cancel()


class ManualClock:
    """Monotonic and wall-clock time that only :meth:`advance` / :meth:`advance_to` move."""

    def __init__(self, *, start_time: float | None = None) -> None:
        """``start_time``: the wall-clock time (epoch seconds) to start at; by default the real
        time now, to the millisecond. Not a fixed date: a real broker deletes records whose
        timestamps are older than its retention (7 days by default), so piped records must
        carry recent timestamps. Pass a fixed ``start_time`` for reproducible timestamps."""
        self._now_us = 0
        if start_time is None:
            start_time = int(_time.time() * 1000) / 1000
        self._epoch_us = _to_us(start_time)
        self._timers: list[tuple[int, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._parked: Counter[str | None] = Counter()
        self._reasons: dict[str | None, list[Parked]] = {}
        self._changed: asyncio.Event | None = None

    # -- the Clock protocol ----------------------------------------------------------------

    def monotonic(self) -> float:
        return self._now_us / _US

    def time(self) -> float:
        return (self._epoch_us + self._now_us) / _US

    def busy_time(self) -> float:
        """The harness's worker takes no time: it is never busy, so never saturated (it does
        not process while a commit is in flight: ``runtime.worker.busy``)."""
        return 0.0

    async def sleep(self, seconds: float) -> None:
        await self.park(None, timeout=seconds, reason="sleep")

    def owned(self, owner: str) -> OwnedClock:
        """This clock as seen by one worker: its sleeps are parked under ``owner``."""
        return OwnedClock(self, owner)

    # -- timers ------------------------------------------------------------------------------

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(max(_to_us(when), self._now_us), callback)
        heapq.heappush(self._timers, (handle.when_us, next(self._seq), handle))
        return handle

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return self.call_at(self.monotonic() + max(0.0, delay), callback)

    def next_deadline(self) -> float | None:
        """When the earliest pending timer (a sleep, a poll timeout, a Kafka timeout) fires."""
        timers = self._timers
        while timers and timers[0][2].cancelled:
            heapq.heappop(timers)
        return timers[0][0] / _US if timers else None

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time never goes back")
        self.advance_to(self.monotonic() + seconds)

    def advance_to(self, when: float) -> None:
        """Move time to ``when``, firing every timer due by then in time order.

        Callbacks run synchronously; waiters they wake resume once the caller yields to the
        event loop. To let the system react between timers, step with :meth:`next_deadline`
        (the test driver does).
        """
        target = _to_us(when)
        if target < self._now_us:
            raise ValueError(f"time never goes back ({when} < {self.monotonic()})")
        timers = self._timers
        while timers and timers[0][0] <= target:
            when_us, _, handle = heapq.heappop(timers)
            if handle.cancelled:
                continue
            self._now_us = max(self._now_us, when_us)
            handle.cancelled = True
            handle.callback()
        self._now_us = target
        self._notify()

    # -- parking -----------------------------------------------------------------------------

    async def park(
        self,
        owner: str | None,
        *,
        timeout: float | None,
        reason: str,
        wakers: Sequence[set[Parked]] = (),
    ) -> None:
        """Wait until woken through one of ``wakers`` (sets a notifier wakes and clears) or
        until ``timeout`` seconds of manual time have passed (``None``: no deadline)."""
        entry = Parked(self, owner, reason)
        self._parked[owner] += 1
        self._reasons.setdefault(owner, []).append(entry)
        if timeout is not None:
            entry._timer = self.call_later(timeout, entry.wake)
        for waker in wakers:
            waker.add(entry)
        self._notify()
        try:
            await entry.future
        finally:
            entry.wake()
            for waker in wakers:
                waker.discard(entry)

    def _unpark(self, entry: Parked) -> None:
        self._parked[entry.owner] -= 1
        entries = self._reasons.get(entry.owner)
        if entries is not None and entry in entries:
            entries.remove(entry)
        self._notify()

    def parked(self, owner: str | None) -> int:
        """How many waits ``owner`` has parked right now."""
        return self._parked[owner]

    def parked_reasons(self, owner: str | None) -> list[str]:
        return [entry.reason for entry in self._reasons.get(owner, ())]

    @property
    def changed(self) -> asyncio.Event:
        """Set whenever something parks, unparks or time moves (cleared by whoever waits)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def __repr__(self) -> str:
        return f"ManualClock(t={self.monotonic():.6f}s)"


class OwnedClock:
    """A :class:`ManualClock` view whose sleeps count as parked waits of one worker."""

    def __init__(self, clock: ManualClock, owner: str) -> None:
        self.clock = clock
        self.owner = owner

    def monotonic(self) -> float:
        return self.clock.monotonic()

    def time(self) -> float:
        return self.clock.time()

    def busy_time(self) -> float:
        return self.clock.busy_time()

    async def sleep(self, seconds: float) -> None:
        await self.clock.park(self.owner, timeout=seconds, reason="sleep")

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return self.clock.call_later(delay, callback)


def wake_all(wakers: set[Parked]) -> None:
    """Wake every waiter in ``wakers`` (they re-check what they wait for and may park again)."""
    if wakers:
        for entry in list(wakers):
            entry.wake()
        wakers.clear()
