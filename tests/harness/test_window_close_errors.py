"""A window-close callback that raises: retried with backoff, then the worker stops.

The callback runs when stream time passes a window's end; the abort that follows its failure
replays the records that moved stream time, which run it again at once. Skipping it as a
wall-clock timer is skipped livelocked the worker (thousands of aborts a second)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streams_app import App, WorkerStopped
from streams_app.testing import DriverFactory, Input, WorkerFailed

pytestmark = pytest.mark.streams_backends("memory")

T0 = 1_700_000_040_000  # a whole minute, in ms
calls: list[Any] = []  # every call of the callback


def closing_app(failures: int, closed: list[Any], **settings: Any) -> App:
    left = {"n": failures}

    def on_close(key: Any, value: Any) -> None:
        calls.append(key)
        if left["n"]:
            left["n"] -= 1
            raise RuntimeError("the callback refuses")
        closed.append((key, value))

    app = App("close-errors", topic_partitions=1, **settings)
    clicks = app.topic("clicks", key_type=str, value_type=int)
    per_minute = app.Table(
        "per-minute", default=int, key_type=str, on_window_close=on_close
    ).tumbling(60, expires=timedelta(minutes=10))

    @app.agent(clicks)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for n in stream:
            per_minute["ann"] += n

    return app


INPUT = [Input("ann", 1, timestamp=T0), Input("ann", 2, timestamp=T0 + 70_000)]


async def test_a_failing_close_is_retried_and_its_result_kept(
    topology_driver: DriverFactory,
) -> None:
    closed: list[Any] = []
    calls.clear()
    async with topology_driver(closing_app(2, closed)) as driver:
        await driver.pipe_many("clicks", INPUT)
        await driver.run_until_idle(max_time=60)
        assert [(key, value) for (key, _), value in closed] == [("ann", 1)]  # once, when through
        assert len(calls) == 3  # two failures, each retried after a backoff


async def test_a_close_that_always_fails_stops_the_worker(
    topology_driver: DriverFactory,
) -> None:
    closed: list[Any] = []
    calls.clear()
    async with topology_driver(closing_app(99, closed, max_retries=2)) as driver:
        await driver.pipe_many("clicks", INPUT)
        with pytest.raises(WorkerFailed) as failed:
            await driver.run_until_idle(max_time=60)
        error = failed.value.error
        assert isinstance(error, WorkerStopped)
        assert "on_window_close of per-minute" in str(error)
        assert "3 times in a row" in str(error)
        assert closed == [] and len(calls) == 3  # the first try and max_retries retries
