"""The orders topology: an order reserves stock and tells inventory and the user, atomically.

    streams-app -A topologies.orders worker -l info

Orders are keyed by item, so every order for an item reaches the same task and the same
partition of the ``stock`` table. Restocks (also keyed by item) arrive on a co-partitioned topic
and update the same table. Under exactly-once, each order's stock change, its ``inventory``
record and its ``notifications`` record commit together with the order's offset, or not at all.
"""

from __future__ import annotations

from streams_app import App
from topologies.orders.models import Order, Placed, Reserved

app = App("orders", broker="kafka://localhost:9092", topic_partitions=4)

orders = app.topic("orders", key_type=str, value_type=Order)
restocks = app.topic("restocks", key_type=str, value_type=int)
inventory = app.topic("inventory", key_type=str, value_type=Reserved)
notifications = app.topic("notifications", key_type=str, value_type=Placed)

#: Units in stock per item (negative: back-ordered).
stock = app.Table("stock", default=int, key_type=str, value_type=int)


@app.agent(orders)
async def reserve(stream):  # type: ignore[no-untyped-def]
    async for order in stream:
        stock[order.item] -= order.qty
        await inventory.send(
            key=order.item,
            value=Reserved(
                order_id=order.order_id,
                item=order.item,
                qty=order.qty,
                stock_after=stock[order.item],
            ),
        )
        await notifications.send(
            key=order.user,
            value=Placed(order_id=order.order_id, user=order.user, item=order.item, qty=order.qty),
        )


@app.agent(restocks)
async def restock(stream):  # type: ignore[no-untyped-def]
    async for item, qty in stream.items():
        stock[item] += qty


@app.page("/stock/{item}")
async def stock_page(web, request, item):  # type: ignore[no-untyped-def]
    """This worker's committed stock of ``item`` (``/tables/stock/ITEM`` asks the owner)."""
    local = dict(stock.local_items())
    if item not in local:
        return web.notfound("no committed stock on this worker", item=item)
    return web.json({"item": item, "stock": local[item]})
