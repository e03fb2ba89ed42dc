"""Test topology with a Record-typed input (for ``streams-app send``); topic names from
TEST_SUFFIX, the broker from STREAMS_APP_BROKER."""

from __future__ import annotations

import os

import faust

from streams_app import App


class Order(faust.Record, serializer="json"):
    order_id: str
    item: str
    qty: int


suffix = os.environ.get("TEST_SUFFIX", "dev")
app = App(f"typed-{suffix}", topic_partitions=2)
orders = app.topic(f"typed-orders-{suffix}", key_type=str, value_type=Order)
stock = app.Table("stock", default=int, key_type=str, value_type=int)


@app.agent(orders)
async def reserve(stream):  # type: ignore[no-untyped-def]
    async for order in stream:
        stock[order.item] -= order.qty
