"""The worker's read cache through a whole topology: a value changed in place by an attempt that
aborts is never served to the retry (both backends)."""

from __future__ import annotations

from streams_app import App
from streams_app.testing import DriverFactory, assert_output


def appending_app() -> tuple[App, dict[int, int]]:
    """Keeps a list per key and appends every value to it *in place* (the cached object itself),
    then writes it back; the value 13 fails its first attempt after the append."""
    attempts: dict[int, int] = {}
    app = App("appender", topic_partitions=1, retry_backoff=0.5)
    source = app.topic("appender-in", key_type=str, value_type=int)
    out = app.topic("appender-out", key_type=str, value_type=list)
    lists = app.Table("lists", default=list, key_type=str, value_type=list)

    @app.agent(source)
    async def append(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            values = lists[event.key]
            values.append(event.value)  # mutates the object the read cache holds
            lists[event.key] = values
            if event.value == 13:
                attempts[event.offset] = attempts.get(event.offset, 0) + 1
                if attempts[event.offset] == 1:
                    raise RuntimeError("refusing 13 once")
            await out.send(key=event.key, value=list(values))

    return app, attempts


async def test_a_value_changed_by_an_aborted_attempt_is_not_served_again(
    topology_driver: DriverFactory,
) -> None:
    app, attempts = appending_app()
    async with topology_driver(app) as driver:
        await driver.pipe_many("appender-in", [("a", 1), ("a", 2)])
        await driver.run_until_idle()  # committed: [1, 2] is now in the read cache
        cache = driver.worker().memory.cache
        assert cache.entries >= 1
        hits = cache.hits

        await driver.pipe_many("appender-in", [("a", 13), ("a", 4)])
        await driver.run_until_idle()  # 13 fails once: abort, retry

        assert attempts == {2: 2}
        assert cache.hits > hits  # the first attempt did read the cached list
        assert_output(
            await driver.read("appender-out"),
            [("a", [1]), ("a", [1, 2]), ("a", [1, 2, 13]), ("a", [1, 2, 13, 4])],
        )
        assert await driver.table("lists") == {"a": [1, 2, 13, 4]}
