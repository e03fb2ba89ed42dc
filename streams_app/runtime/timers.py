"""Running timers and crontabs inside processing, and ``on_leader`` ones on the leader only.

A due timer runs between batches, under the worker's processing lock, as a task of its own: its
sends join the open transaction and its table writes (``on_leader`` timers: the leader task's
tables) commit with it. The worker waits until every running timer has finished or is *parked*
on an RPC reply; a parked timer lets the worker go on fetching and processing (its reply may
come from this very worker) but no commit happens until it has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streams_app.aio import cancel_and_wait
from streams_app.app import background
from streams_app.runtime.clock import Clock
from streams_app.runtime.scope import current_parkable, in_processing
from streams_app.topology.contract import TaskScope, current_task

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.background import Crontab, Timer


class TimerRun:
    """One invocation of a timer function (a task), parkable like an agent's stream."""

    def __init__(self, timer: Timer | Crontab) -> None:
        self.timer = timer
        self.task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self._parked = 0
        self.settled = asyncio.Event()

    def park(self) -> None:
        self._parked += 1
        self.settled.set()

    def unpark(self) -> None:
        self._parked -= 1
        if not self._parked and not self.done:
            self.settled.clear()

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    @property
    def parked(self) -> bool:
        return bool(self._parked) and not self.done


class TimerScheduler:
    def __init__(
        self,
        app: App,
        clock: Clock,
        *,
        is_leader: Callable[[], bool],
        leader_scope: Callable[[], TaskScope | None],
    ) -> None:
        self.app = app
        self.clock = clock
        #: Wall-clock timers and crontabs (stream-time timers run in runtime.punctuator).
        self.timers = [t for t in app.timers if t.on == background.WALL_CLOCK]
        self._is_leader = is_leader
        self._leader_scope = leader_scope
        #: Timer name -> when it is next due (the clock's monotonic seconds).
        self.due: dict[str, float] = {}
        self.running: dict[str, TimerRun] = {}
        self.fired: dict[str, int] = {}

    def start(self) -> None:
        now = self.clock.monotonic()
        wall = self.clock.time()
        self.due = {t.name: now + t.next_delay(wall) for t in self.timers}

    def any_due(self) -> bool:
        if not self.due:
            return False
        now = self.clock.monotonic()
        return any(now >= due for due in self.due.values())

    async def run_due(self) -> list[TimerRun]:
        """Start every due timer; wait until each has finished or parked. Returns the runs
        that failed."""
        now = self.clock.monotonic()
        wall = self.clock.time()
        for timer in self.timers:
            due = self.due.get(timer.name)
            if due is None or now < due or timer.name in self.running:
                continue
            self.due[timer.name] = now + timer.next_delay(wall)
            if timer.on_leader:
                if not self._is_leader():
                    continue
                scope = self._leader_scope()
            else:
                scope = None
            self._start(timer, scope)
        return await self.wait_settled()

    def _start(self, timer: Timer | Crontab, scope: TaskScope | None) -> None:
        run = TimerRun(timer)

        async def invoke() -> None:
            in_processing.set(True)
            current_parkable.set(run)
            current_task.set(scope)
            if scope is not None:
                scope.touched = True  # type: ignore[attr-defined]
            try:
                await background.call(timer.fun, self.app)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                run.error = exc
            finally:
                run.settled.set()

        run.task = asyncio.ensure_future(invoke())
        self.running[timer.name] = run
        self.fired[timer.name] = self.fired.get(timer.name, 0) + 1

    async def wait_settled(self) -> list[TimerRun]:
        runs = list(self.running.values())
        if runs:
            await asyncio.gather(*(r.settled.wait() for r in runs))
        failed = []
        for name, run in list(self.running.items()):
            if run.done:
                del self.running[name]
                if run.error is not None:
                    failed.append(run)
        return failed

    @property
    def busy(self) -> bool:
        """A timer is running (parked or not): no commit until it finished."""
        return any(not run.done for run in self.running.values())

    @property
    def parked(self) -> bool:
        return any(run.parked for run in self.running.values())

    async def cancel(self) -> None:
        """Abort: the runs' work is being undone, and they must not go on sending."""
        runs, self.running = list(self.running.values()), {}
        await cancel_and_wait(
            {f"timer {run.timer.name}": run.task for run in runs if run.task is not None}
        )

    def next_due_in(self) -> float | None:
        if not self.due:
            return None
        return max(0.0, min(self.due.values()) - self.clock.monotonic())


def describe(run: TimerRun) -> tuple[str, Any]:
    return f"timer:{run.timer.name}", run.error
