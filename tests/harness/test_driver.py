"""The driver's features on both backends: timestamps and stream time, headers, timers and
wall-clock time, the error policies (abort and retry, stop, dead letters), poison records."""

from __future__ import annotations

import pytest

from streams_app import App, WorkerStopped
from streams_app.runtime.errors_policy import H_ERROR_TYPE, H_SOURCE_OFFSET
from streams_app.testing import DriverFactory, Input, WorkerFailed, assert_output


def echo_app() -> App:
    """Echoes each record's timestamp and ``trace`` header."""
    app = App("echo", topic_partitions=1)
    source = app.topic("echo-in", key_type=str, value_type=int)
    out = app.topic("echo-out", key_type=str, value_type=dict)

    @app.agent(source)
    async def echo(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            trace = event.header("trace")
            await out.send(
                key=event.key,
                value={
                    "value": event.value,
                    "timestamp": event.timestamp,
                    "trace": trace.decode() if trace else None,
                },
            )

    return app


async def test_records_carry_stream_time_and_headers(topology_driver: DriverFactory) -> None:
    async with topology_driver(echo_app()) as driver:
        start = driver.stream_time
        await driver.pipe("echo-in", 1, key="a", headers={"trace": b"t1"})
        driver.advance_stream_time(5_000)
        await driver.pipe("echo-in", 2, key="a")
        await driver.pipe_many("echo-in", [Input("a", 3, timestamp=start + 60_000)])
        await driver.run_until_idle()

        values = await driver.read_values("echo-out")
        assert values == [
            {"value": 1, "timestamp": start, "trace": "t1"},
            {"value": 2, "timestamp": start + 5_000, "trace": None},
            {"value": 3, "timestamp": start + 60_000, "trace": None},
        ]


def ticking_app(interval: float) -> App:
    app = App("ticker", topic_partitions=1)
    source = app.topic("tick-in", value_type=int)
    ticks = app.topic("ticks", value_type=int)
    fired: list[int] = []

    @app.agent(source)
    async def ignore(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.timer(interval)
    async def tick() -> None:
        fired.append(len(fired) + 1)
        await ticks.send(value=len(fired))

    return app


async def test_timers_fire_as_wall_clock_time_is_advanced(topology_driver: DriverFactory) -> None:
    async with topology_driver(ticking_app(1.0)) as driver:
        await driver.run_until_idle()
        assert await driver.read_values("ticks") == []  # no time has passed

        await driver.advance_time(3.0)
        await driver.run_until_idle()
        assert await driver.read_values("ticks") == [1, 2, 3]

        await driver.advance_time(0.5)
        await driver.run_until_idle()
        assert await driver.read_values("ticks") == [1, 2, 3]


def failing_app(fail_times: int, **settings: object) -> tuple[App, dict[int, int]]:
    """Echo and running sum per key; the value 13 fails its first ``fail_times`` attempts."""
    attempts: dict[int, int] = {}
    app = App("flaky", topic_partitions=1, retry_backoff=0.5, **settings)
    source = app.topic("flaky-in", key_type=str, value_type=int)
    echo = app.topic("flaky-echo", key_type=str, value_type=int)
    sums = app.topic("flaky-sum", key_type=str, value_type=int)
    table = app.Table("sums", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def process(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            await echo.send(key=event.key, value=event.value)
            table[event.key] += event.value  # written before the failure: must be undone
            if event.value == 13:
                attempts[event.offset] = attempts.get(event.offset, 0) + 1
                if attempts[event.offset] <= fail_times:
                    raise RuntimeError("refusing 13")
            await sums.send(key=event.key, value=table[event.key])

    return app, attempts


RECORDS = [("a", 1), ("a", 2), ("a", 13), ("a", 4), ("b", 5)]


async def test_an_agent_error_aborts_and_the_retry_succeeds(
    topology_driver: DriverFactory,
) -> None:
    app, attempts = failing_app(fail_times=2)
    async with topology_driver(app) as driver:
        await driver.pipe_many("flaky-in", RECORDS)
        await driver.run_until_idle()  # the backoffs pass on the manual clock

        assert attempts == {2: 3}
        assert driver.worker().producer.transactions_aborted == 2
        assert_output(await driver.read("flaky-echo"), RECORDS)
        assert_output(
            await driver.read("flaky-sum"), [("a", 1), ("a", 3), ("a", 16), ("a", 20), ("b", 5)]
        )
        assert await driver.table("sums") == {"a": 20, "b": 5}
        # Whatever of the aborted attempts reached the log is invisible to read_committed
        # readers (with batching, most of it never left the worker).
        assert len(await driver.read("flaky-echo", committed=False)) >= len(RECORDS)


async def test_the_stop_policy_stops_the_worker(topology_driver: DriverFactory) -> None:
    app, attempts = failing_app(fail_times=10, error_policy="stop", max_retries=2)
    async with topology_driver(app) as driver:
        await driver.pipe_many("flaky-in", RECORDS)
        with pytest.raises(WorkerFailed) as failed:
            await driver.run_until_idle()
        assert isinstance(failed.value.error, WorkerStopped)
        assert driver.workers[0].status == "failed"
        assert attempts == {2: 3}  # the first attempt and max_retries retries
        # Nothing of the failed attempt, or after it, was committed.
        assert [v for _, v in await driver.read_key_values("flaky-echo")] in ([], [1, 2])


async def test_the_dlq_policy_dead_letters_the_failing_record(
    topology_driver: DriverFactory,
) -> None:
    app, _ = failing_app(fail_times=10, error_policy="dlq")
    async with topology_driver(app) as driver:
        pipes = await driver.pipe_many("flaky-in", RECORDS)
        await driver.run_until_idle()

        assert_output(await driver.read("flaky-echo"), [r for r in RECORDS if r[1] != 13])
        (dead,) = await driver.read("flaky-in.dlq")  # not declared by the app: read raw
        assert dead.value == b"13"
        assert dead.header(H_ERROR_TYPE) == b"RuntimeError"
        assert dead.header(H_SOURCE_OFFSET) == str(pipes[2].offset).encode()


async def test_a_poison_record_goes_to_the_dead_letter_topic(
    topology_driver: DriverFactory,
) -> None:
    app, _ = failing_app(fail_times=0)
    async with topology_driver(app) as driver:
        await driver.pipe("flaky-in", 1, key="a")
        await driver.pipe("flaky-in", b"{not json", key=b"a", raw=True)
        await driver.pipe("flaky-in", 2, key="a")
        await driver.run_until_idle()

        assert_output(await driver.read("flaky-sum"), [("a", 1), ("a", 3)])
        (dead,) = await driver.read("flaky-in.dlq")
        assert dead.header(H_SOURCE_OFFSET) == b"1"


@pytest.mark.streams_backends("memory")  # the record and the stop reach the worker together
async def test_a_worker_failing_while_it_stops_fails_the_close(
    topology_driver: DriverFactory,
) -> None:
    """A stop is graceful (the batch fetched is finished and committed): a worker that fails
    meanwhile, here on a record under ``error_policy="stop"``, makes ``close()`` raise once
    everything is released, rather than the test passing over it."""
    app, attempts = failing_app(fail_times=10, error_policy="stop", max_retries=0)
    driver = topology_driver(app)
    await driver.start()
    await driver.pipe("flaky-in", 13, key="a")
    with pytest.raises(WorkerFailed, match="WorkerStopped") as failed:
        await driver.close()
    assert attempts == {0: 1} and failed.value.handle.status == "failed"


async def test_at_most_once_never_retries_a_failing_record(
    topology_driver: DriverFactory,
) -> None:
    """Retrying would repeat what the failed attempt sent (no transaction takes it back): the
    record is dead-lettered at once, and the records after it are processed. Nothing is undone
    either: its table write before the exception stays (16 + 4 = 20)."""
    app, attempts = failing_app(fail_times=10, processing_guarantee="at_most_once")
    async with topology_driver(app) as driver:
        await driver.pipe_many("flaky-in", RECORDS[:3])
        await driver.run_until_idle()
        await driver.pipe_many("flaky-in", RECORDS[3:])
        await driver.run_until_idle()

        assert attempts == {2: 1}
        (dead,) = await driver.read("flaky-in.dlq")
        assert dead.header(H_ERROR_TYPE) == b"RuntimeError"
        assert [v for _, v in await driver.read_key_values("flaky-sum")] == [1, 3, 20, 5]


async def test_at_most_once_loses_the_record_a_crash_interrupts_and_never_repeats_it(
    topology_driver: DriverFactory,
) -> None:
    """At-most-once commits a batch's offsets before processing it: a worker that dies while
    processing loses the record (its offset is committed), and its restart goes on after it
    instead of processing it again."""
    app, _ = failing_app(fail_times=0, processing_guarantee="at_most_once")
    async with topology_driver(app) as driver:
        await driver.pipe_many("flaky-in", [("a", 1), ("a", 2)])
        await driver.run_until_idle()
        driver.crash_on("send", topic="flaky-echo")  # the next record dies before its echo
        (lost,) = await driver.pipe_many("flaky-in", [("a", 4)])
        await driver.run_until_crash()
        # Committed before it was processed: the record is behind the group's position.
        assert await driver.committed_offsets("flaky-in") == {0: lost.offset + 1}

        await driver.restart()
        await driver.pipe_many("flaky-in", [("a", 8), ("b", 5)])
        await driver.run_until_idle()
        assert_output(await driver.read("flaky-echo"), [("a", 1), ("a", 2), ("a", 8), ("b", 5)])
        # Nor did its table write happen: 1 + 2 + 8.
        assert_output(await driver.read("flaky-sum"), [("a", 1), ("a", 3), ("a", 11), ("b", 5)])
        assert await driver.table("sums") == {"a": 11, "b": 5}
