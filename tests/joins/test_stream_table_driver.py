"""Tables built from topics and stream-table joins, run by the real worker on the in-memory
Kafka model (broker-free; the real-broker case is test_enrichment_kafka.py)."""

from __future__ import annotations

import pytest

import streams_app
from streams_app.testing import DriverFactory

pytestmark = pytest.mark.streams_backends("memory")


def enrichment_app(how: str = "left") -> streams_app.App:
    app = streams_app.App(f"st-{how}", broker="kafka://127.0.0.1:1")
    customers_topic = app.topic(
        "customers", key_type=str, value_type=str, config={"cleanup.policy": "compact"}
    )
    orders = app.topic("orders", key_type=str, value_type=str)
    out = app.topic("enriched", key_type=str, value_type=list)
    customers = app.Table("customers", source=customers_topic)
    joined = orders.left_join(customers) if how == "left" else orders.join(customers)
    joined.to(out)
    return app


async def test_a_table_from_a_topic_holds_the_latest_value_per_key(
    topology_driver: DriverFactory,
) -> None:
    app = enrichment_app()
    async with topology_driver(app) as driver:
        for key, value, ts in [("c1", "ann", 1), ("c2", "bob", 2), ("c1", "anna", 3)]:
            await driver.pipe("customers", value, key=key, timestamp=ts, partition=0)
        await driver.pipe("customers", None, key="c2", timestamp=4, partition=0)
        await driver.run_until_idle()
        assert await driver.table("customers", source="store") == {"c1": "anna"}
        # Its changelog is its source topic (compacted): no other topic was created.
        assert await driver.backend.partition_count("st-left-customers-changelog") is None


@pytest.mark.parametrize("how", ["inner", "left"])
async def test_only_the_stream_triggers_and_results_keep_its_key_and_time(
    topology_driver: DriverFactory, how: str
) -> None:
    app = enrichment_app(how)
    async with topology_driver(app) as driver:
        # One partition each: the task processes both in timestamp order.
        inputs = [
            ("orders", "c1", "o1", 1),  # before c1 exists
            ("customers", "c1", "ann", 2),
            ("orders", "c1", "o2", 3),
            ("customers", "c1", "anna", 4),  # a table update emits nothing
            ("orders", "c1", "o3", 5),
            ("orders", None, "o4", 6),  # null key: inner drops, left joins None (KIP-962)
            ("orders", "c1", None, 7),  # null value: dropped
            ("customers", "c1", None, 8),  # tombstone
            ("orders", "c1", "o5", 9),
        ]
        for topic, key, value, ts in inputs:
            await driver.pipe(topic, value, key=key, timestamp=ts, partition=0)
        await driver.run_until_idle()
        records = await driver.read("enriched")
        out = sorted(((r.key, tuple(r.value), r.timestamp) for r in records), key=lambda r: r[2])
        expected = [
            ("c1", ("o1", None), 1),
            ("c1", ("o2", "ann"), 3),
            ("c1", ("o3", "anna"), 5),
            (None, ("o4", None), 6),
            ("c1", ("o5", None), 9),
        ]
        if how == "inner":
            expected = [e for e in expected if e[1][1] is not None]
        assert out == expected
