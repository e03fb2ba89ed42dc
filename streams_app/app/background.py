"""What a worker runs beside its agents: timers, crontab schedules, tasks and services.

Declarations only; the runtime runs them. Where they stand with exactly-once:

- a **timer** (``@app.timer``) and a **crontab** function run between batches, like a record:
  what they send and write joins the worker's transaction and commits with it; an error aborts
  it and follows ``error_policy``. With ``on_leader=True`` they run only on the worker that
  holds partition 0 of ``<app id>-__assignor-__leader`` (Faust's leader), and the transactions
  they run in carry that partition's offset, so a deposed leader (a zombie) cannot commit
  anything once the group has moved on (KIP-447);
- a **task** (``@app.task``) runs once per worker start, concurrently; a **service**
  (``app.service``) is started with the worker and stopped after it. Their sends are outside
  any transaction (a plain idempotent producer, acks=all: at-least-once).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from streams_app.topology import names

#: When a timer runs: by the worker's clock, or each time a task's stream time crosses a
#: multiple of its interval (Kafka Streams' ``PunctuationType.WALL_CLOCK_TIME``/``STREAM_TIME``).
WALL_CLOCK = "wall_clock"
STREAM_TIME = "stream_time"


def takes_app(fun: Callable[..., Any]) -> bool:
    """Faust passes the app to timer and task functions that take one argument."""
    try:
        params = [
            p
            for p in inspect.signature(fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        return False
    return len(params) == 1


def call(fun: Callable[..., Any], app: Any) -> Awaitable[Any]:
    result = fun(app) if takes_app(fun) else fun()
    if not inspect.isawaitable(result):

        async def done() -> Any:
            return result

        return done()
    return result


@dataclass(frozen=True)
class Timer:
    """``@app.timer(interval)``: every ``interval`` seconds in each worker (or the leader)."""

    name: str
    interval: float
    fun: Callable[..., Any]
    on_leader: bool = False
    #: ``"wall_clock"`` or ``"stream_time"``.
    on: str = WALL_CLOCK

    @property
    def interval_ms(self) -> int:
        return max(1, round(self.interval * 1000))

    def next_delay(self, now: float) -> float:
        return self.interval


@dataclass(frozen=True)
class Crontab:
    """``@app.crontab("*/5 * * * *")``: at the times of a cron expression, in ``timezone``."""

    name: str
    cron_format: str
    fun: Callable[..., Any]
    timezone: Any = None
    on_leader: bool = False
    #: Crontabs follow the wall clock.
    on: str = WALL_CLOCK

    def next_delay(self, now: float) -> float:
        """Seconds from ``now`` (epoch seconds) to the next matching minute."""
        import datetime

        from croniter import croniter

        tz = self.timezone or datetime.UTC
        if isinstance(tz, str):
            from zoneinfo import ZoneInfo

            tz = ZoneInfo(tz)
        start = datetime.datetime.fromtimestamp(now, tz)
        following: datetime.datetime = croniter(self.cron_format, start).get_next(datetime.datetime)
        return max(0.0, following.timestamp() - now)


@dataclass(frozen=True)
class Task:
    """``@app.task``: a coroutine function started once with each worker."""

    name: str
    fun: Callable[..., Any]
    on_leader: bool = False


def timer_name(fun: Callable[..., Any], name: str | None) -> str:
    return name or names.canonical_name(fun)
