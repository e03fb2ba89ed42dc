"""Proof that the harness can fail: a topology that does something outside the transaction.

The wrong topology charges a card (here: appends a line to a ledger file) while processing an
order. Under exactly-once, Kafka outputs, table writes and offsets are one transaction, but the
ledger is not in it: when a worker crashes after charging and before committing, the restarted
worker processes the order again and charges it again. A plain run never shows this; the
harness's crash simulation does. The right topology sends the charge as a record instead, which
commits with the order's offset or not at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_app import App
from streams_app.testing import DriverFactory, TopologyDriver, assert_exactly_once

ORDER_IDS = [f"o{i}" for i in range(6)]


def payments_app(ledger: Path, *, charge_outside_the_transaction: bool) -> App:
    app = App("payments", topic_partitions=2)
    orders = app.topic("pay-orders", key_type=str, value_type=int)
    charges = app.topic("pay-charges", key_type=str, value_type=int)

    @app.agent(orders)
    async def charge(stream):  # type: ignore[no-untyped-def]
        async for order_id, amount in stream.items():
            if charge_outside_the_transaction:
                with ledger.open("a") as f:  # the payment provider is called right now
                    f.write(f"{order_id} {amount}\n")
            else:
                await charges.send(key=order_id, value=amount)  # charged when it commits

    return app


async def charged_orders(driver: TopologyDriver, ledger: Path) -> list[str]:
    """What the payment provider saw: ledger lines, or committed charge records."""
    if ledger.exists():
        return [line.split()[0] for line in ledger.read_text().splitlines()]
    return [key for key, _ in await driver.read_key_values("pay-charges")]


async def each_order_is_charged_once_through_a_crash(driver: TopologyDriver, ledger: Path) -> None:
    """The app team's test: every order charged exactly once, even if a worker dies."""
    await driver.pipe_many("pay-orders", [(order_id, 10) for order_id in ORDER_IDS])
    await driver.process()  # the orders are processed, the transaction is not committed
    await driver.crash()
    await driver.restart()  # the new incarnation starts from the committed offsets
    assert_exactly_once(await charged_orders(driver, ledger), ORDER_IDS, what="card charges")


async def test_the_right_topology_passes(topology_driver: DriverFactory, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    app = payments_app(ledger, charge_outside_the_transaction=False)
    async with topology_driver(app) as driver:
        await each_order_is_charged_once_through_a_crash(driver, ledger)


async def test_the_crash_simulation_catches_a_side_effect_outside_the_transaction(
    topology_driver: DriverFactory, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    app = payments_app(ledger, charge_outside_the_transaction=True)
    async with topology_driver(app) as driver:
        with pytest.raises(AssertionError) as failure:
            await each_order_is_charged_once_through_a_crash(driver, ledger)
    message = str(failure.value)
    assert message.startswith("card charges: not exactly once")
    for order_id in ORDER_IDS:  # each order was charged by both incarnations
        assert f"'{order_id}': expected 1 time(s), seen 2 times" in message
    assert sorted(ledger_lines(ledger)) == sorted(ORDER_IDS * 2)


async def test_without_a_crash_the_wrong_topology_looks_fine(
    topology_driver: DriverFactory, tmp_path: Path
) -> None:
    """Why the crash simulation matters: a plain run cannot tell the two topologies apart."""
    ledger = tmp_path / "ledger.txt"
    app = payments_app(ledger, charge_outside_the_transaction=True)
    async with topology_driver(app) as driver:
        await driver.pipe_many("pay-orders", [(order_id, 10) for order_id in ORDER_IDS])
        await driver.run_until_idle()
        assert_exactly_once(await charged_orders(driver, ledger), ORDER_IDS, what="card charges")


def ledger_lines(ledger: Path) -> list[str]:
    return [line.split()[0] for line in ledger.read_text().splitlines()]
