"""A failing record on a task with co-partitioned inputs (processed in timestamp order through
a PartitionGroup): retried in a transaction of its own, like any other record, so its
failures do not take the good records of its task with them, then dead-lettered."""

from __future__ import annotations

from collections import Counter

import pytest

from streams_app import App
from streams_app.runtime.errors_policy import H_SOURCE_OFFSET
from streams_app.testing import DriverFactory, Input

pytestmark = pytest.mark.streams_backends("memory")

T0 = 1_700_000_000_000


def merging_app(processed: Counter[tuple[str, int]]) -> App:
    """Clicks and views merged into one output; the click 13 always fails."""
    app = App("merge-errors", topic_partitions=1, retry_backoff=0.5)
    clicks = app.topic("clicks", key_type=str, value_type=int)
    views = app.topic("views", key_type=str, value_type=int)
    merged = app.topic("merged", key_type=str, value_type=int)

    @app.agent(clicks)
    async def on_click(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            processed["clicks", event.value] += 1
            await merged.send(key="c", value=event.value)
            if event.value == 13:
                raise RuntimeError("refusing 13")

    @app.agent(views)
    async def on_view(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            processed["views", event.value] += 1
            await merged.send(key="v", value=event.value)

    return app


async def test_a_failing_record_of_a_grouped_task_is_retried_alone(
    topology_driver: DriverFactory,
) -> None:
    processed: Counter[tuple[str, int]] = Counter()
    async with topology_driver(merging_app(processed)) as driver:
        piped = await driver.pipe_many(
            "clicks", [Input("c", n, timestamp=T0 + 10 * n) for n in (1, 13, 3)]
        )
        await driver.pipe_many("views", [Input("v", n, timestamp=T0 + 10 * n) for n in (2, 4)])
        await driver.run_until_idle(max_time=60)

        merged = await driver.read_values("merged")
        assert sorted(merged) == [1, 2, 3, 4]  # each good record committed once
        (dead,) = await driver.read("clicks.dlq")
        assert dead.header(H_SOURCE_OFFSET) == str(piped[1].offset).encode()
        assert processed["clicks", 13] == 4  # the first try and max_retries (3) retries
        # The first failure aborts what was processed with it; the retries run alone, after
        # a commit of what came before, so no good record is processed more than twice.
        assert max(n for (_, v), n in processed.items() if v != 13) <= 2, processed
