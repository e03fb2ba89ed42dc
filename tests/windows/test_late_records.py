"""Late records of windowed tables, as a user sees them: the dead letter of a late record quotes
the stream time at which it was judged late (not where the batch ended), and ``/metrics``
counts both late records and every window update dropped (Kafka Streams'
``dropped-records-total``), on the in-memory model and on the real broker."""

from __future__ import annotations

from streams_app import App
from streams_app.runtime.errors_policy import H_ERROR_MESSAGE, H_ERROR_TYPE
from streams_app.runtime.web.exposition import render, worker_registry
from streams_app.testing import DriverFactory, Input
from streams_app.testing.driver import TopologyDriver
from tests.web.test_web_server import metric_samples

T = 1_700_000_000_000  # a multiple of 5 s, in ms
SECOND = 1_000


def late_app() -> App:
    app = App("late-records", topic_partitions=1)
    views = app.topic("views", key_type=str, value_type=int)
    hopping = app.Table("hopping", default=int, key_type=str).hopping(20, 5, late_records="dlq")
    sliding = app.Table("sliding", default=int, key_type=str).sliding(10)

    @app.agent(views)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for key, n in stream.items():
            hopping[key] += n
            sliding[key] += n

    return app


async def run_late_records(driver: TopologyDriver) -> None:
    # Stopped while the records go in, so that the worker takes them in one batch: stream time
    # moves on after the late record, before the batch ends.
    await driver.stop_worker(0, run=False)
    await driver.pipe_many(
        "views",
        [
            Input("a", 1, timestamp=T + 60 * SECOND),  # stream time 60 s
            # Hopping windows [25, 45) .. [40, 60) have all closed: late (4 windows dropped);
            # sliding: its newest window [42, 52] closed at 52 s: late (1 dropped).
            Input("a", 1, timestamp=T + 42 * SECOND),
            # Hopping [35, 55) and [40, 60) closed, [45, 65) and [50, 70) open (2 dropped);
            # sliding: [50, 60] updated, its own left window [40, 50] closed (1 dropped).
            Input("a", 1, timestamp=T + 50 * SECOND),
            Input("a", 1, timestamp=T + 90 * SECOND),  # same batch: stream time 90 s
        ],
    )
    await driver.restart(0)
    await driver.run_until_idle()


async def test_a_late_dead_letter_quotes_the_stream_time_it_was_judged_at(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(late_app()) as driver:
        await run_late_records(driver)
        (dead,) = await driver.read("views.dlq")
        assert dead.header(H_ERROR_TYPE) == b"LateRecord"
        message = (dead.header(H_ERROR_MESSAGE) or b"").decode()
        assert f"timestamp {T + 42 * SECOND} ms" in message, message
        assert f"observed stream time {T + 60 * SECOND} ms" in message, message


async def test_metrics_count_late_records_and_dropped_window_updates(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(late_app()) as driver:
        await run_late_records(driver)
        worker = driver.worker(0)
        samples = metric_samples(render(worker_registry(worker)).decode())

        def metric(name: str, table: str) -> float:
            return samples[(f"streams_app_{name}_total", (("table", table),))]

        assert metric("late_records", "hopping") == 1
        assert metric("late_records", "sliding") == 1
        assert metric("dropped_window_updates", "hopping") == 6
        assert metric("dropped_window_updates", "sliding") == 2
        assert worker.punctuator.dropped_by_table == {"hopping": 6, "sliding": 2}
