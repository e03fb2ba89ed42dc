"""topologies.enrichment's join under test names: ``TEST_SUFFIX`` gives each test its topics
(the broker and settings come from STREAMS_APP_* variables, as in production)."""

from __future__ import annotations

import os
from typing import Any

from streams_app import App

suffix = os.environ.get("TEST_SUFFIX", "dev")
app = App(f"enrich-{suffix}", topic_partitions=2)

customer_updates = app.topic(
    f"customers-{suffix}", key_type=str, value_type=dict, config={"cleanup.policy": "compact"}
)
orders = app.topic(f"orders-{suffix}", key_type=str, value_type=dict)
enriched = app.topic(f"enriched-{suffix}", key_type=str, value_type=dict)
customers = app.Table("customers", source=customer_updates)


def enrich(order: dict[str, Any], customer: dict[str, Any] | None) -> dict[str, Any]:
    return {**order, "customer": customer}


orders.left_join(customers, joiner=enrich).to(enriched)
