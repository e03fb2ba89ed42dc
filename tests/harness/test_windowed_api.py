"""The Faust surface of windowed tables, broker-free: ``table[key]`` then ``.current()``,
``.value()``, ``.delta(d)``, ``.now()``, ``relative_to_field``, ``relative_to_now``, iteration
over a key's windows, ``key in table``, ``on_window_close``, and sessions merging."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import faust
import pytest

from streams_app import App, WindowRange
from streams_app.testing import DriverFactory, Input

pytestmark = pytest.mark.streams_backends("memory")

T0 = 1_700_000_040_000  # a whole minute, in ms


class Click(faust.Record, serializer="json"):
    user: str
    at: float  # seconds since the epoch


def api_app(closed: list[Any]) -> App:
    app = App("window-api", topic_partitions=1)
    clicks = app.topic("clicks", key_type=str, value_type=Click)
    reads = app.topic("reads", key_type=str, value_type=dict)
    per_minute = app.Table(
        "per-minute", default=int, key_type=str, on_window_close=lambda k, v: closed.append((k, v))
    ).tumbling(60, expires=timedelta(minutes=10))
    by_field = per_minute.relative_to_field(Click.at)
    by_wall_clock = per_minute.relative_to_now()
    sessions = app.Table("sessions", default=list, key_type=str).session(
        30, expires=timedelta(minutes=10)
    )

    @app.agent(clicks)
    async def track(stream):  # type: ignore[no-untyped-def]
        async for click in stream:
            per_minute[click.user] += 1
            sessions[click.user] += [round(click.at)]
            windows = per_minute[click.user]
            await reads.send(
                key=click.user,
                value={
                    "current": windows.current(),
                    "value": windows.value(),
                    "delta": windows.delta(60),
                    "now": windows.now(),
                    "by_field": by_field[click.user].value(),
                    "by_wall_clock": by_wall_clock[click.user].value(),
                    "windows": [[w.start, w.end, n] for w, n in windows.items()],
                    "in": click.user in per_minute,
                    "sessions": [[w.start, w.end, v] for w, v in sessions[click.user].items()],
                },
            )

    return app


def click(user: str, kafka_seconds: int, at_seconds: int) -> Input:
    """Kafka timestamp and the ``at`` field apart, to tell time relativities apart."""
    return Input(
        user,
        Click(user=user, at=(T0 + at_seconds * 1000) / 1000),
        timestamp=T0 + kafka_seconds * 1000,
    )


async def test_the_faust_windowed_surface(topology_driver: DriverFactory) -> None:
    closed: list[Any] = []
    async with topology_driver(api_app(closed)) as driver:
        await driver.pipe_many(
            "clicks",
            [
                click("ann", 5, 125),  # minute 0 by Kafka time, minute 2 by the field
                click("ann", 50, 10),
                click("ann", 70, 12),  # minute 1: minute 0 closes (grace 0)
                click("ann", 100, 100),  # the session [50, 70] takes it: [50, 100]
            ],
        )
        await driver.run_until_idle()
        reads = [r.value for r in await driver.read("reads")]
        m0, m1 = T0 / 1000, T0 / 1000 + 60
        assert [r["current"] for r in reads] == [1, 2, 1, 2]
        assert [r["value"] for r in reads] == [1, 2, 1, 2]  # relative to the stream by default
        assert [r["delta"] for r in reads] == [0, 0, 2, 2]  # the minute before
        assert [r["by_field"] for r in reads] == [0, 2, 2, 2]  # minutes of `at`: 2, 0, 0, 1
        assert all(r["in"] for r in reads)
        assert reads[-1]["windows"] == [[m0, m0 + 60, 2], [m1, m1 + 60, 2]]
        # The wall clock (the harness's, now) is years after T0: no window there.
        assert [r["now"] for r in reads] == [0] * 4
        assert [r["by_wall_clock"] for r in reads] == [0] * 4
        # Sessions of 30 s: 5, then 50 (a new one), 70 (joins 50), 100 (joins 70).
        s = T0 // 1000
        assert reads[-1]["sessions"] == [
            [m0 + 5, m0 + 5, [s + 125]],
            [m0 + 50, m0 + 100, [s + 10, s + 12, s + 100]],
        ]
        assert closed == [(("ann", WindowRange(m0, m0 + 60)), 2)]

        # A click at the wall clock's time: now() finds its window, and minute 1 closes.
        wall_ms = round(driver.clock.time() * 1000)
        await driver.pipe("clicks", Click(user="cy", at=0), key="cy", timestamp=wall_ms)
        await driver.run_until_idle()
        last = (await driver.read("reads"))[-1].value
        assert (last["now"], last["by_wall_clock"], last["current"]) == (1, 1, 1)
        assert closed == [
            (("ann", WindowRange(m0, m0 + 60)), 2),
            (("ann", WindowRange(m1, m1 + 60)), 2),
        ]


async def test_a_stream_time_timer_counts_in_wall_clock_windows(
    topology_driver: DriverFactory,
) -> None:
    # No record is being processed in a timer: the update takes its task from current_task,
    # its time from the wall clock, and its key is checked against no record's key.
    app = App("window-timer", topic_partitions=1)
    source = app.topic("timer-in", key_type=str, value_type=int)
    ticks = app.Table("ticks", default=int, key_type=str).tumbling(60).relative_to_now()

    @app.agent(source)
    async def consume(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.timer(10, on="stream_time")
    async def tick() -> None:
        ticks["tick"] += 1

    async with topology_driver(app) as driver:
        await driver.pipe("timer-in", 1, key="k", timestamp=T0 + 1_000)
        await driver.run_until_idle()
        await driver.pipe("timer-in", 1, key="k", timestamp=T0 + 12_000)
        await driver.run_until_idle()
        wall_ms = round(driver.clock.time() * 1000)
        minute = wall_ms - wall_ms % 60_000
        assert await driver.table("ticks") == {("tick", minute, minute + 60_000): 2}
