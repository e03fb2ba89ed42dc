"""The orders topology, tested only with the harness. Every test runs twice: on the in-memory
Kafka model and on the real embedded broker (``[memory]`` / ``[kafka]``)."""

from __future__ import annotations

import pytest

from streams_app.testing import (
    DriverFactory,
    assert_no_duplicates,
    assert_output,
    assert_table,
)
from topologies import orders
from topologies.orders.models import Order, Placed, Reserved


def order(n: int, user: str, item: str, qty: int) -> Order:
    return Order(order_id=f"o{n}", user=user, item=item, qty=qty)


def reserved(n: int, item: str, qty: int, after: int) -> Reserved:
    return Reserved(order_id=f"o{n}", item=item, qty=qty, stock_after=after)


def placed(n: int, user: str, item: str, qty: int) -> Placed:
    return Placed(order_id=f"o{n}", user=user, item=item, qty=qty)


ORDERS = [
    order(1, "ann", "apple", 3),
    order(2, "bob", "pear", 1),
    order(3, "ann", "apple", 4),
    order(4, "cy", "fig", 2),
    order(5, "bob", "apple", 5),
]


def expected_outputs(stock: dict[str, int]) -> tuple[list, list, dict[str, int]]:  # type: ignore[type-arg]
    """What ORDERS must produce from ``stock``: inventory, notifications, final stock."""
    stock = dict(stock)
    inventory, notifications = [], []
    for o in ORDERS:
        n = int(o.order_id[1:])
        stock[o.item] = stock.get(o.item, 0) - o.qty
        inventory.append((o.item, reserved(n, o.item, o.qty, stock[o.item])))
        notifications.append((o.user, placed(n, o.user, o.item, o.qty)))
    return inventory, notifications, stock


async def pipe_orders(driver, items=ORDERS) -> None:  # type: ignore[no-untyped-def]
    await driver.pipe_many("orders", [(o.item, o) for o in items])


async def test_an_order_reserves_stock_and_notifies_the_user(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(orders.app) as driver:
        await driver.pipe("restocks", 10, key="apple")
        await driver.run_until_idle()
        await driver.pipe("orders", order(1, "ann", "apple", 3), key="apple")
        await driver.run_until_idle()

        assert_output(await driver.read("inventory"), [("apple", reserved(1, "apple", 3, 7))])
        assert_output(await driver.read("notifications"), [("ann", placed(1, "ann", "apple", 3))])
        assert_table(await driver.table("stock"), {"apple": 7}, table="stock")
        # The stores hold exactly what the changelog committed.
        assert await driver.table("stock", source="store") == {"apple": 7}


async def test_orders_for_one_item_see_each_other_in_order(topology_driver: DriverFactory) -> None:
    async with topology_driver(orders.app) as driver:
        await driver.pipe_many("restocks", [("apple", 10), ("pear", 1)])
        await driver.run_until_idle()
        await pipe_orders(driver)
        await driver.run_until_idle()

        inventory, notifications, stock = expected_outputs({"apple": 10, "pear": 1})
        assert_output(await driver.read("inventory"), inventory)
        assert_output(await driver.read("notifications"), notifications, ordered=False)
        assert_table(await driver.table("stock"), stock, table="stock")
        assert stock["apple"] == -2  # back-ordered: the table goes negative


async def test_nothing_is_visible_before_the_commit(topology_driver: DriverFactory) -> None:
    async with topology_driver(orders.app) as driver:
        await pipe_orders(driver)
        await driver.process()  # processed, transaction still open

        assert await driver.read("inventory") == []
        assert len(await driver.read("inventory", committed=False)) == len(ORDERS)
        assert await driver.table("stock") == {}

        await driver.run_until_idle()
        inventory, _notifications, stock = expected_outputs({})
        assert_output(await driver.read("inventory"), inventory)
        assert_table(await driver.table("stock"), stock, table="stock")


# On the real broker the store makes no difference to Kafka: rocksdb:// in make test.
@pytest.mark.parametrize(
    "store", [pytest.param("memory://", marks=pytest.mark.long_on("kafka")), "rocksdb://"]
)
async def test_a_crash_before_the_commit_loses_nothing_and_repeats_nothing(
    topology_driver: DriverFactory, store: str
) -> None:
    async with topology_driver(orders.app, store=store) as driver:
        await driver.pipe("restocks", 10, key="apple")
        await driver.run_until_idle()
        await pipe_orders(driver)
        await driver.process()
        await driver.crash()  # the open transaction holds all five orders' effects
        await driver.restart()

        inventory, notifications, stock = expected_outputs({"apple": 10})
        assert_output(await driver.read("inventory"), inventory)
        assert_output(await driver.read("notifications"), notifications, ordered=False)
        assert_no_duplicates(await driver.read("inventory"))
        assert_table(await driver.table("stock"), stock, table="stock")
        assert await driver.table("stock", source="store") == stock


# Every point on the model; on the real broker, the first and the last point of the commit
# in make test, the two between them in make test-long.
@pytest.mark.parametrize(
    "point",
    [
        "send",
        pytest.param("send_batch", marks=pytest.mark.long_on("kafka")),
        pytest.param("send_offsets_to_transaction", marks=pytest.mark.long_on("kafka")),
        "commit_transaction",
    ],
)
async def test_a_crash_inside_the_commit_is_all_or_nothing(
    topology_driver: DriverFactory, point: str
) -> None:
    async with topology_driver(orders.app) as driver:
        # Dies at the third notification, or while committing the transaction.
        if point == "send":
            driver.crash_on("send", nth=3, topic="notifications")
        else:
            driver.crash_on(point)
        await pipe_orders(driver)
        await driver.run_until_crash()
        if point == "send":
            # Nothing of the dead transaction, which holds the third notification. On the real
            # broker a transaction may commit before it (the first fetch can bring only some
            # partitions' orders): what is committed is whole orders, each with both outputs
            # and its input offset, and fewer than three.
            reserved_ids = {r.value.order_id for r in await driver.read("inventory")}
            notified_ids = {r.value.order_id for r in await driver.read("notifications")}
            consumed = sum(o or 0 for o in (await driver.committed_offsets("orders")).values())
            assert reserved_ids == notified_ids and len(reserved_ids) == consumed < 3
        else:
            # The first commit dies: nothing of it, on either backend.
            assert await driver.read("inventory") == []
        await driver.restart()

        inventory, notifications, stock = expected_outputs({})
        assert_output(await driver.read("inventory"), inventory)
        assert_output(await driver.read("notifications"), notifications, ordered=False)
        assert_table(await driver.table("stock"), stock, table="stock")


async def test_a_crash_after_the_commit_restores_the_store_from_the_changelog(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(orders.app, store="rocksdb://") as driver:
        driver.crash_on("after_commit_transaction")
        await pipe_orders(driver)
        await driver.run_until_crash()
        # The broker answered EndTxn before writing the markers; the driver waits for them.
        assert await driver.backend.open_transactions(["inventory", "notifications"]) == []
        # Committed in Kafka, not yet applied to RocksDB: the changelog has it. On the real
        # broker the first transaction may hold only the orders of the partitions fetched
        # first: each item's reservations so far are the first of what it must get, and the
        # stock table is what they leave.
        inventory, _notifications, stock = expected_outputs({})
        committed = [r.key_value for r in await driver.read("inventory")]
        assert committed, "the crash came after a commit without a reservation"
        for item in {key for key, _ in committed}:
            seen = [r for r in committed if r[0] == item]
            assert seen == [r for r in inventory if r[0] == item][: len(seen)], item
        then = {item: reservation.stock_after for item, reservation in committed}
        assert_table(await driver.table("stock"), then, table="stock")

        await driver.restart()  # restores the changelog tail into the surviving store
        await driver.run_until_idle()  # the rest counts on the restored stock
        assert await driver.table("stock", source="store") == stock
        assert_output(await driver.read("inventory"), inventory)  # and nothing twice


async def test_a_second_worker_takes_half_the_partitions_and_nothing_repeats(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(orders.app) as driver:
        await pipe_orders(driver, ORDERS[:2])
        await driver.run_until_idle()
        await driver.add_worker()  # rebalance: 2 members, 2 partitions each
        assert all(len(driver.worker(i).tasks.tasks) == 2 for i in range(2))
        await pipe_orders(driver, ORDERS[2:])
        await driver.run_until_idle()
        await driver.stop_worker(1)  # leaves: worker 0 gets everything back

        inventory, notifications, stock = expected_outputs({})
        assert_output(await driver.read("inventory"), inventory)
        assert_output(await driver.read("notifications"), notifications, ordered=False)
        assert_table(await driver.table("stock"), stock, table="stock")
        assert len(driver.worker(0).tasks.tasks) == 4
