"""The records of the orders topology (JSON on the wire: the fields below, nothing else)."""

from __future__ import annotations

import faust


class Order(faust.Record, serializer="json"):
    """An order placed by a user (topic ``orders``, key: the item)."""

    order_id: str
    user: str
    item: str
    qty: int


class Reserved(faust.Record, serializer="json"):
    """Stock reserved for an order (topic ``inventory``, key: the item).

    ``stock_after`` is the item's stock once this order's quantity is taken from it.
    """

    order_id: str
    item: str
    qty: int
    stock_after: int


class Placed(faust.Record, serializer="json"):
    """Tells the user the order went through (topic ``notifications``, key: the user)."""

    order_id: str
    user: str
    item: str
    qty: int
