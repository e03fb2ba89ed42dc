"""The opt-in idle close of windowed tables (docs/joins.md, "Opt-in: final results when input
goes quiet"): a key whose input stops gets its final window once the task's inputs have been
quiet for ``idle_close`` seconds of wall clock, inside a transaction; without the option nothing
is emitted however long the input stays quiet (Kafka Streams' answer). On the in-memory model
and on the real broker; wall-clock time is the driver's manual clock."""

from __future__ import annotations

from typing import Any

import pytest

from streams_app import App
from streams_app.app.windows import idle_close_seconds
from streams_app.testing import DriverFactory, Input

IDLE = 5.0
SIZE = 10  # seconds
GRACE = 2  # seconds


def idle_app(idle_close: float | None, name: str) -> App:
    app = App(name, topic_partitions=2)
    views = app.topic("views", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str).tumbling(
        SIZE, grace=GRACE, emit_final="counts-final", idle_close=idle_close
    )

    @app.agent(views)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for page, n in stream.items():
            counts[page] += n

    return app


def window_of(ms: int) -> int:
    return ms - ms % (SIZE * 1000)


def first_open_window(stream_time: int) -> int:
    """The start of the oldest window that a stream time of ``stream_time`` has not closed:
    its close (end + grace) is later, by at most ``SIZE``."""
    return window_of(stream_time - (SIZE + GRACE) * 1000) + SIZE * 1000


async def finals(driver: Any) -> list[tuple[str, int, int]]:
    return sorted(
        (k["key"], k["start"], v) for k, v in await driver.read_key_values("counts-final")
    )


async def test_a_quiet_key_gets_its_final_window_within_the_idle_time(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(idle_app(IDLE, "idle-close-on")) as driver:
        now = int(driver.clock.time() * 1000)
        # Event times a little behind the wall clock, as from a producer: by the wall clock
        # the windows of "home" and "news" have closed; by stream time (20 s ago) they have not.
        t = window_of(now - 30_000) + 1_000
        piped = driver.clock.monotonic()
        await driver.pipe_many(
            "views",
            [
                Input("home", 1, timestamp=t),
                Input("news", 2, timestamp=t + 500),
                Input("home", 1, timestamp=t + 8_000),
            ],
        )
        await driver.run_until_idle()
        processed_by = driver.clock.monotonic()

        def quiet_at_most() -> float:
            # On the real broker run_until_idle may let manual time pass (a backoff, a
            # linger): the records were processed between ``piped`` and ``processed_by``.
            return driver.clock.monotonic() - piped

        if quiet_at_most() < IDLE:  # always in memory
            assert await finals(driver) == []  # stream time is t + 8 s: nothing has closed
        if quiet_at_most() < IDLE - 1.5:
            await driver.advance_time(IDLE - 1.5 - quiet_at_most())
            await driver.run_until_idle()
            if quiet_at_most() < IDLE:
                assert await finals(driver) == []  # not quiet for long enough yet
        # Quiet for IDLE + 1 s at least (the check runs every 0.5 s).
        await driver.advance_time(max(0.0, processed_by + IDLE + 1 - driver.clock.monotonic()))
        await driver.run_until_idle()
        start = window_of(t)
        assert await finals(driver) == [("home", start, 2), ("news", start, 2)]
        # The close moved stream time up to the wall clock of its check: no later than now. (In
        # memory the check ran once quiet for IDLE; on the real broker the manual clock jumps
        # to the end of advance_time before the loop looks, so it ran as late as now.)
        stream_time_at_most = int(driver.clock.time() * 1000)
        # Stream time followed the wall clock: a record for the closed window is late now.
        await driver.pipe("views", 5, key="home", timestamp=t + 8_500)
        await driver.run_until_idle()
        late = driver.worker().punctuator.late_records
        assert late >= 1
        await driver.advance_time(2 * IDLE)
        await driver.run_until_idle()
        # Nothing was due: stream time stayed where the close put it.
        assert await finals(driver) == [("home", start, 2), ("news", start, 2)]
        # A new window of a new record, one that stream time has not closed but the wall clock
        # (2 * IDLE >= SIZE later) has: closed again by the wall clock once quiet.
        fresh = first_open_window(stream_time_at_most) + 1_000
        await driver.pipe("views", 7, key="home", timestamp=fresh)
        await driver.run_until_idle()
        assert driver.worker().punctuator.late_records == late  # the fresh record is not late
        await driver.advance_time(IDLE + 1)
        await driver.run_until_idle()
        assert ("home", window_of(fresh), 7) in await finals(driver)


@pytest.mark.streams_backends("memory")  # nothing broker-specific: the loop simply never moves time
async def test_without_idle_close_a_quiet_key_gets_nothing(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(idle_app(None, "idle-close-off")) as driver:
        now = int(driver.clock.time() * 1000)
        t = window_of(now - 30_000) + 1_000
        await driver.pipe_many(
            "views", [Input("home", 1, timestamp=t), Input("news", 2, timestamp=t)]
        )
        await driver.run_until_idle()
        await driver.advance_time(60)
        await driver.run_until_idle()
        assert await finals(driver) == []  # Kafka Streams' answer: stream time never moved
        # Only a record moves stream time, and closes the windows.
        await driver.pipe("views", 1, key="home", timestamp=t + 2 * SIZE * 1000)
        await driver.run_until_idle()
        assert ("home", window_of(t), 1) in await finals(driver)


def test_idle_close_must_be_positive() -> None:
    assert idle_close_seconds(2.5) == 2.5
    with pytest.raises(ValueError, match="idle_close must be a positive duration"):
        App("x").Table("t", default=int).tumbling(10, idle_close=0)
