"""The shop: database -> Kafka -> streams -> database, exactly once (docs/database.md).

::

    order service   one database transaction: a shop_orders row + an outbox event
        │           (topologies/shop/service.py)
        ▼
    streams-app outbox relay            outbox -> topic ``orders``, exactly once
        ▼
    streams-app -A topologies.shop worker       reserve: stock reserved per item (a table),
        ▼                                       one ``reservations`` record per order
    streams-app -A topologies.shop sink reservations
                    one database transaction per batch: ``reservations`` rows + the offsets

Orders are keyed by item. The relay keeps each item's orders in their database commit order,
the worker reserves them in that order, and the sink lands each reservation once, so every row
of ``reservations`` says how much of its item was left after that order: through crashes of any
of the three processes.

``SHOP_TOPIC_SUFFIX`` is appended to the topic names (tests run many shops on one broker).
"""

from __future__ import annotations

import os

from streams_app import App
from topologies.orders.models import Order, Reserved

SUFFIX = os.environ.get("SHOP_TOPIC_SUFFIX", "")
#: Units of every item in stock before the first order.
INITIAL_STOCK = 1_000

app = App(
    "shop",
    broker="kafka://localhost:9092",
    topic_partitions=4,
    postgres_dsn="postgresql://postgres@127.0.0.1:5432/postgres",
)

orders = app.topic(f"orders{SUFFIX}", key_type=str, value_type=Order)
reservations = app.topic(f"reservations{SUFFIX}", key_type=str, value_type=Reserved)

#: Units reserved so far, per item.
reserved = app.Table("reserved", default=int, key_type=str, value_type=int)


@app.agent(orders)
async def reserve(stream):  # type: ignore[no-untyped-def]
    async for order in stream:
        reserved[order.item] += order.qty
        await reservations.send(
            key=order.item,
            value=Reserved(
                order_id=order.order_id,
                item=order.item,
                qty=order.qty,
                stock_after=INITIAL_STOCK - reserved[order.item],
            ),
        )


RESERVATIONS_DDL = """
    CREATE TABLE IF NOT EXISTS reservations (
        order_id text PRIMARY KEY,
        item text NOT NULL,
        qty integer NOT NULL,
        stock_after integer NOT NULL,
        landed_at timestamptz NOT NULL DEFAULT now()
    )
"""


@app.postgres_sink(reservations, name="reservations", schema=RESERVATIONS_DDL)
async def land_reservations(conn, records):  # type: ignore[no-untyped-def]
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO reservations (order_id, item, qty, stock_after) VALUES (%s, %s, %s, %s)",
            [(r.value.order_id, r.value.item, r.value.qty, r.value.stock_after) for r in records],
        )
