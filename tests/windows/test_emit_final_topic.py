"""docs/windows.md's own example: final results into a topic declared for its retention only
(``emit_final=app.topic("views-final", retention=...)``) run and come out with JSON window keys,
on the in-memory model and on the real broker."""

from __future__ import annotations

from datetime import timedelta

from streams_app import App
from streams_app.testing import DriverFactory, Input

T = 1_700_000_040_000  # a whole minute, in ms


def views_app() -> App:
    app = App("emit-final-topic", topic_partitions=1)
    views = app.topic("views", key_type=str, value_type=int)
    per_minute = app.Table("per-minute", default=int, key_type=str).tumbling(
        60, emit_final=app.topic("views-final", retention=timedelta(days=400))
    )

    @app.agent(views)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for page, n in stream.items():
            per_minute[page] += n

    return app


async def test_final_results_reach_a_topic_declared_for_its_retention(
    topology_driver: DriverFactory,
) -> None:
    app = views_app()
    assert app.topics["views-final"].config == {"retention.ms": str(400 * 86_400_000)}
    async with topology_driver(app) as driver:
        await driver.pipe_many(
            "views",
            [
                Input("home", 1, timestamp=T),
                Input("home", 2, timestamp=T + 30_000),
                Input("news", 1, timestamp=T + 59_999),
                Input("home", 1, timestamp=T + 60_000),  # closes the first minute
            ],
        )
        await driver.run_until_idle()
        finals = await driver.read_key_values("views-final")
    assert sorted(finals, key=lambda kv: kv[0]["key"]) == [
        ({"key": "home", "start": T, "end": T + 60_000}, 3),
        ({"key": "news", "start": T, "end": T + 60_000}, 1),
    ]
