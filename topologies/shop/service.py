"""The shop's order service: an order row and its ``orders`` event, in one database transaction.

::

    python -m topologies.shop.service init              # tables + the outbox
    python -m topologies.shop.service place --orders 1000 [--rate 200]

The database comes from ``--dsn``, else ``STREAMS_APP_POSTGRES_DSN``, else the app's
``postgres_dsn``. Nothing here talks to Kafka: the outbox relay publishes the events.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
import uuid
from typing import Any

import psycopg

from streams_app import Topic
from streams_app.postgres import outbox
from streams_app.postgres.schema import init_outbox
from topologies.orders.models import Order
from topologies.shop import app, orders

ORDERS_DDL = [
    """CREATE TABLE IF NOT EXISTS shop_items (
        item text PRIMARY KEY,
        orders_placed integer NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS shop_orders (
        order_id text PRIMARY KEY,
        user_id text NOT NULL,
        item text NOT NULL,
        qty integer NOT NULL,
        item_order_no integer NOT NULL,   -- the n-th order of this item (commit order)
        placed_at timestamptz NOT NULL DEFAULT now()
    )""",
]


async def init(conn: psycopg.AsyncConnection[Any]) -> None:
    """Create the service's tables and the outbox (idempotent)."""
    async with conn.transaction():
        for ddl in ORDERS_DDL:
            await conn.execute(ddl)
    await init_outbox(conn)


async def place_order(
    conn: psycopg.AsyncConnection[Any], order: Order, *, topic: Topic = orders
) -> int:
    """Record the order and its event atomically; returns the order's number for its item.

    Counting orders per item takes the item's row lock, so two orders of one item commit one
    after the other, and the relay publishes them in that order.
    """
    async with conn.transaction():
        cur = await conn.execute(
            "INSERT INTO shop_items (item, orders_placed) VALUES (%s, 1) "
            "ON CONFLICT (item) DO UPDATE SET orders_placed = shop_items.orders_placed + 1 "
            "RETURNING orders_placed",
            (order.item,),
        )
        row = await cur.fetchone()
        number = int(row[0]) if row else 0
        await conn.execute(
            "INSERT INTO shop_orders (order_id, user_id, item, qty, item_order_no) "
            "VALUES (%s, %s, %s, %s, %s)",
            (order.order_id, order.user, order.item, order.qty, number),
        )
        await outbox.add(conn, topic=topic, key=order.item, value=order)
    return number


def random_order(rng: random.Random, items: int = 20) -> Order:
    return Order(
        order_id=uuid.UUID(int=rng.getrandbits(128)).hex,
        user=f"user-{rng.randrange(1000)}",
        item=f"item-{rng.randrange(items):02d}",
        qty=rng.randrange(1, 6),
    )


async def place_many(dsn: str, count: int, *, rate: float | None, seed: int | None) -> None:
    rng = random.Random(seed)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        started = time.monotonic()
        for i in range(count):
            await place_order(conn, random_order(rng))
            if rate:
                ahead = (i + 1) / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m topologies.shop.service")
    parser.add_argument("--dsn", help="default $STREAMS_APP_POSTGRES_DSN, else the app's")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create the tables and the outbox")
    place = sub.add_parser("place", help="place random orders")
    place.add_argument("--orders", type=int, default=100)
    place.add_argument("--rate", type=float, help="orders per second (default: as fast as it can)")
    place.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    dsn = args.dsn or os.environ.get("STREAMS_APP_POSTGRES_DSN") or app.conf.postgres_dsn
    assert dsn

    async def run() -> None:
        if args.command == "init":
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                await init(conn)
            print("shop tables and outbox ready")
        else:
            await place_many(dsn, args.orders, rate=args.rate, seed=args.seed)
            print(f"placed {args.orders} orders")

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
