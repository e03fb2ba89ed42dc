"""Stream-stream joins as an app declares them (``topic.join(other_topic, JoinWindows(...))``,
the keywords, ``stream.join`` inside an agent), run by the real worker on the in-memory Kafka
model; and the opt-in idle close of a left join's nulls. The semantics on random and generated
inputs are test_stream_stream.py (the processor against the oracle) and
test_differential_driver.py (the whole topology); the real broker, test_stream_stream_kafka.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import streams_app
from streams_app import JoinWindows
from streams_app.errors import TopologyError
from streams_app.testing import DriverFactory, Input

pytestmark = pytest.mark.streams_backends("memory")


def two_topics(app: streams_app.App) -> tuple[Any, Any]:
    return (
        app.topic("orders", key_type=str, value_type=str),
        app.topic("payments", key_type=str, value_type=str),
    )


def test_join_windows_take_durations_and_name_what_is_wrong() -> None:
    assert JoinWindows(600, grace=60).ms == (600_000, 600_000, 60_000)
    assert JoinWindows(before=timedelta(seconds=3), after=5).ms == (3_000, 5_000, 0)
    assert JoinWindows(before=10, after=-5).ms == (10_000, -5_000, 0)  # as Kafka Streams
    with pytest.raises(TopologyError, match="before \\+ after must not be negative"):
        JoinWindows(before=-10, after=5)
    with pytest.raises(TopologyError, match="within= is before= and after= at once"):
        JoinWindows(5, before=1)
    with pytest.raises(TopologyError, match="needs a window"):
        JoinWindows()
    app = streams_app.App("ssd-api")
    orders, payments = two_topics(app)
    # The positional JoinWindows and the keywords declare the same join.
    assert (
        orders.join(payments, JoinWindows(5, grace=1)).join
        is orders.join(payments, within=5, grace=1).join
    )
    with pytest.raises(TopologyError, match="the window is given twice"):
        orders.left_join(payments, JoinWindows(5), grace=1)
    table = app.Table("customers", source=app.topic("customers", key_type=str, value_type=str))
    with pytest.raises(TopologyError, match="JoinWindows are for stream-stream joins"):
        orders.join(table, JoinWindows(5))
    with pytest.raises(TypeError, match="only positional argument"):
        orders.join(payments, "amount")
    # idle_close= where nothing waits for a close is refused, naming the fix.
    with pytest.raises(TopologyError, match="an inner join has none"):
        orders.join(payments, JoinWindows(5), idle_close=10)
    with pytest.raises(TopologyError, match="without grace= nothing waits"):
        orders.left_join(table, idle_close=10)


def matching_app(name: str, *, idle_close: float | None = None) -> streams_app.App:
    """Payments matched to orders within 10 s (grace 2 s), a left join: an unpaid order gets
    ``(order, None)`` once its window closes. An agent reads the results."""
    app = streams_app.App(name, topic_partitions=1)
    orders, payments = two_topics(app)
    out = app.topic("matched", key_type=str, value_type=list)
    matched = orders.left_join(payments, JoinWindows(10, grace=2), idle_close=idle_close)
    matched.to(out)
    seen = app.topic("seen", key_type=str, value_type=list)

    @app.agent(matched)
    async def read(stream):  # type: ignore[no-untyped-def]
        async for order, payment in stream:
            await seen.send(key=order, value=[order, payment])

    return app


async def results(driver: Any, topic: str = "matched") -> list[tuple[Any, ...]]:
    return [(r.key, tuple(r.value), r.timestamp) for r in await driver.read(topic)]


async def test_pairs_once_and_the_null_only_at_the_close(topology_driver: DriverFactory) -> None:
    async with topology_driver(matching_app("ssd-left")) as driver:
        t = 1_000_000
        await driver.pipe_many(
            "orders", [Input("a", "o1", timestamp=t), Input("b", "o2", timestamp=t + 1_000)]
        )
        await driver.pipe("payments", "p1", key="a", timestamp=t + 4_000)
        await driver.run_until_idle()
        # o1 paired by the second arrival, at the larger time; o2 waits (no spurious null).
        assert await results(driver) == [("a", ("o1", "p1"), t + 4_000)]
        # Stream time past o2's close (t + 1 s + 10 s + 2 s): its null, before the new pair.
        await driver.pipe("orders", "o3", key="a", timestamp=t + 13_001)
        await driver.run_until_idle()
        assert await results(driver) == [
            ("a", ("o1", "p1"), t + 4_000),
            ("b", ("o2", None), t + 1_000),
            ("a", ("o3", "p1"), t + 13_001),
        ]
        # The agent reading the joined stream got the same results (Joined tuples).
        assert [v for _, v, _ in await results(driver, "seen")] == [
            ("o1", "p1"),
            ("o2", None),
            ("o3", "p1"),
        ]


async def test_an_agent_can_declare_the_join_on_its_stream(
    topology_driver: DriverFactory,
) -> None:
    app = streams_app.App("ssd-agent", topic_partitions=1)
    orders, payments = two_topics(app)
    out = app.topic("pairs", key_type=str, value_type=list)

    @app.agent(orders)
    async def pair(stream):  # type: ignore[no-untyped-def]
        async for value in stream.join(payments, JoinWindows(5)):
            await out.send(key=value.left, value=list(value))

    async with topology_driver(app) as driver:
        await driver.pipe("payments", "p1", key="k", timestamp=10_000)
        await driver.pipe("orders", "o1", key="k", timestamp=12_000)
        await driver.pipe("orders", "o2", key="k", timestamp=16_000)  # 6 s apart: no pair
        await driver.run_until_idle()
        assert [tuple(r.value) for r in await driver.read("pairs")] == [("o1", "p1")]


def idle_closes(driver: Any) -> dict[str, float]:
    """``streams_app_idle_closes_total`` per target, as /metrics exposes it."""
    from streams_app.runtime.web.exposition import WorkerCollector

    return {
        sample.labels["target"]: sample.value
        for family in WorkerCollector(driver.worker()).collect()
        if family.name == "streams_app_idle_closes"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def test_idle_close_gives_a_quiet_key_its_null_within_the_idle_time(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(matching_app("ssd-idle", idle_close=5)) as driver:
        now = int(driver.clock.time() * 1000)
        t = now - 60_000  # event times behind the wall clock, as from a producer
        await driver.pipe("orders", "o1", key="a", timestamp=t)
        await driver.pipe("payments", "p9", key="z", timestamp=t + 100)
        await driver.run_until_idle()
        assert await results(driver) == []  # stream time t + 100: o1's window is open
        await driver.advance_time(3)
        await driver.run_until_idle()
        assert await results(driver) == []  # quiet for 3 s of the 5
        await driver.advance_time(3)
        await driver.run_until_idle()
        # Quiet for 6 s: the join's stream time followed the wall clock, o1's window closed.
        assert await results(driver) == [("a", ("o1", None), t)]
        assert [v for _, v, _ in await results(driver, "seen")] == [("o1", None)]
        assert idle_closes(driver) == {"orders-left-join-payments": 1}  # /metrics
        # A payment for o1 now is past its close: it pairs with nothing (the null was final).
        await driver.pipe("payments", "p1", key="a", timestamp=t + 1_000)
        await driver.run_until_idle()
        await driver.advance_time(10)
        await driver.run_until_idle()
        assert await results(driver) == [("a", ("o1", None), t)]


async def test_without_idle_close_a_quiet_key_waits_for_stream_time(
    topology_driver: DriverFactory,
) -> None:
    async with topology_driver(matching_app("ssd-no-idle")) as driver:
        t = int(driver.clock.time() * 1000) - 60_000
        await driver.pipe("orders", "o1", key="a", timestamp=t)
        await driver.run_until_idle()
        await driver.advance_time(120)
        await driver.run_until_idle()
        assert await results(driver) == []  # Kafka Streams' answer: nothing moved stream time
        await driver.pipe("payments", "p9", key="z", timestamp=t + 12_001)
        await driver.run_until_idle()
        assert await results(driver) == [("a", ("o1", None), t)]


async def test_the_payments_topology(topology_driver: DriverFactory) -> None:
    """topologies/payments: paid, unpaid (by the idle close), a payment without an order."""
    from topologies.payments import app

    minute = 60_000
    async with topology_driver(app) as driver:
        t = int(driver.clock.time() * 1000) - 30 * minute
        await driver.pipe_many(
            "payments-orders",
            [
                Input("o1", {"amount": 5}, timestamp=t),
                Input("o2", {"amount": 7}, timestamp=t + minute),
            ],
        )
        await driver.pipe_many(
            "payments-payments",
            [
                Input("o1", {"amount": 5}, timestamp=t + 9 * minute),  # within 10 minutes
                Input("o9", {"amount": 1}, timestamp=t + 2 * minute),  # no such order
            ],
        )
        await driver.run_until_idle()
        assert await driver.table("payment-outcomes", source="store") == {"paid": 1}
        await driver.advance_time(121)  # quiet for the idle close's two minutes
        await driver.run_until_idle()
        assert await driver.table("payment-outcomes", source="store") == {
            "paid": 1,
            "unpaid": 1,
            "payment-without-order": 1,
        }
        unpaid = await driver.read("payments-unpaid")
        assert [(r.key, r.value) for r in unpaid] == [("o2", {"amount": 7})]


async def test_idle_close_releases_a_versioned_join_s_grace_buffer(
    topology_driver: DriverFactory,
) -> None:
    """The idle close drives the other join that waits: a versioned stream-table join with
    grace holds each order until stream time passes its time plus grace (KIP-923)."""
    app = streams_app.App("ssd-idle-versioned", topic_partitions=1)
    prices = app.Table(
        "prices",
        source=app.topic("prices", key_type=str, value_type=int),
        versioned=timedelta(hours=1),
    )
    orders = app.topic("orders", key_type=str, value_type=str)
    out = app.topic("priced", key_type=str, value_type=list)
    orders.join(prices, grace=30, idle_close=5).to(out)
    async with topology_driver(app) as driver:
        t = int(driver.clock.time() * 1000) - 120_000
        await driver.pipe("prices", 7, key="apple", timestamp=t - 1_000)
        await driver.pipe("orders", "o1", key="apple", timestamp=t)
        await driver.run_until_idle()
        assert await driver.read("priced") == []  # waits for grace (30 s of stream time)
        await driver.advance_time(6)
        await driver.run_until_idle()
        assert [(r.key, tuple(r.value), r.timestamp) for r in await driver.read("priced")] == [
            ("apple", ("o1", 7), t)
        ]


async def test_the_buffers_bypass_the_read_cache(topology_driver: DriverFactory) -> None:
    """Each side's buffer is read by range scans only, which the read cache never serves:
    its transactions do not fill the cache at commit (Kafka Streams does not cache these
    stores either); the unmatched store, read by key, goes through the worker's cache."""
    app = matching_app("ssd-uncached")
    async with topology_driver(app) as driver:
        await driver.pipe("orders", "o1", key="a", timestamp=1_000)
        await driver.pipe("payments", "p1", key="a", timestamp=2_000)
        await driver.run_until_idle()
        assert await results(driver) == [("a", ("o1", "p1"), 2_000)]
        tasks = driver.worker().tasks
        opened = {name: tx for task in tasks.running() for name, tx in task.tables.items()}
        buffers = [n for n in opened if n.endswith(("-left", "-right"))]
        unmatched = [n for n in opened if n.endswith("-unmatched")]
        assert len(buffers) == 2 and len(unmatched) == 1, sorted(opened)
        for name in buffers:
            assert opened[name]._cache is not tasks.cache, name
            assert not opened[name]._cache.enabled, name
        assert opened[unmatched[0]]._cache is tasks.cache


async def test_a_partner_fetched_again_comes_from_the_read_cache(
    topology_driver: DriverFactory,
) -> None:
    """One order, several payments (one-to-many): once the order has committed, the first
    payment's fetch keeps it in the worker's read cache (the buffers' fetch cache,
    state/join_windows.py) and the next payments find it there; the results are the same as
    without the cache, each pair once."""
    app = matching_app("ssd-fetch-cache")
    async with topology_driver(app) as driver:
        await driver.pipe("orders", "o1", key="a", timestamp=1_000)
        await driver.run_until_idle()  # committed: the order is in the store, not pending
        for n, t in ((1, 2_000), (2, 3_000), (3, 4_000)):
            await driver.pipe("payments", f"p{n}", key="a", timestamp=t)
        await driver.run_until_idle()
        assert await results(driver) == [
            ("a", ("o1", "p1"), 2_000),
            ("a", ("o1", "p2"), 3_000),
            ("a", ("o1", "p3"), 4_000),
        ]
        tasks = driver.worker().tasks
        opened = {name: tx for task in tasks.running() for name, tx in task.tables.items()}
        [left] = [tx for name, tx in opened.items() if name.endswith("-left")]
        assert left.scans is not None and left.scans.cache is tasks.cache
        assert len(left.scans) == 1  # the order's segment
        assert left.scans.hits >= 2  # the second and third payments
