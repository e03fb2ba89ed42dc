"""topologies/enrichment, run by the real worker on the in-memory Kafka model: every join of
the example gives what its docstring says."""

from __future__ import annotations

import pytest

from streams_app.testing import DriverFactory
from topologies import enrichment

pytestmark = pytest.mark.streams_backends("memory")


async def test_the_enrichment_example(topology_driver: DriverFactory) -> None:
    async with topology_driver(enrichment.app) as driver:
        await driver.pipe(
            "enrichment-customers", {"name": "Ann", "tier": "gold"}, key="c1", timestamp=1
        )
        await driver.pipe("enrichment-accounts", {"iban": "X1"}, key="c1", timestamp=2)
        await driver.pipe(
            "enrichment-order-states", {"customer": "c1", "status": "paid"}, key="o1", timestamp=3
        )
        await driver.pipe(
            "enrichment-order-states", {"customer": "c9", "status": "new"}, key="o2", timestamp=4
        )
        await driver.pipe("enrichment-orders", {"id": 1, "amount": 30}, key="c1", timestamp=5)
        await driver.pipe("enrichment-orders", {"id": 2, "amount": 5}, key="c2", timestamp=6)
        await driver.run_until_idle()
        # A customer's update reaches the table-table and the foreign-key views.
        await driver.pipe(
            "enrichment-customers", {"name": "Ann", "tier": "platinum"}, key="c1", timestamp=7
        )
        await driver.run_until_idle()

        ann = {"name": "Ann", "tier": "gold"}
        enriched = sorted(
            (r.key, r.value["id"], r.value["customer"])
            for r in await driver.read("enrichment-orders-enriched")
        )
        assert enriched == [("c1", 1, ann), ("c2", 2, None)]
        assert await driver.table("revenue-per-tier", source="store") == {"gold": 30, "unknown": 5}
        accounts = [r.value for r in await driver.read("enrichment-customer-accounts")]
        assert accounts == [
            {**ann, "account": {"iban": "X1"}},
            {"name": "Ann", "tier": "platinum", "account": {"iban": "X1"}},
        ]
        view: dict[str, object] = {}
        for r in await driver.read("enrichment-order-view"):  # the latest per order
            view[r.key] = r.value
        assert view == {
            "o1": {"customer": {"name": "Ann", "tier": "platinum"}, "status": "paid"},
            "o2": {"customer": None, "status": "new"},
        }
