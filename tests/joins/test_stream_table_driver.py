"""Tables built from topics and stream-table joins, run by the real worker on the in-memory
Kafka model (broker-free; the real-broker case is test_enrichment_kafka.py)."""

from __future__ import annotations

import pytest

import streams_app
from streams_app.errors import TopologyError
from streams_app.ops.app_report import lookup_json, versioned_contents_json
from streams_app.ops.changelog import ChangelogRepairRefused, repair
from streams_app.ops.table_lookup import from_answer, from_changelog
from streams_app.readback import ReadRecord, decode_changelog, key_read
from streams_app.runtime.web.queries import query_table
from streams_app.state.versioned import key_versions
from streams_app.testing import DriverFactory
from streams_app.topology.plan import plan_topology

pytestmark = pytest.mark.streams_backends("memory")


def enrichment_app(how: str = "left") -> streams_app.App:
    app = streams_app.App(f"st-{how}", broker="kafka://127.0.0.1:1")
    customers_topic = app.topic(
        "customers", key_type=str, value_type=str, config={"cleanup.policy": "compact"}
    )
    orders = app.topic("orders", key_type=str, value_type=str)
    out = app.topic("enriched", key_type=str, value_type=list)
    customers = app.Table("customers", source=customers_topic)
    joined = orders.left_join(customers) if how == "left" else orders.join(customers)
    joined.to(out)
    return app


async def test_a_table_from_a_topic_holds_the_latest_value_per_key(
    topology_driver: DriverFactory,
) -> None:
    app = enrichment_app()
    async with topology_driver(app) as driver:
        for key, value, ts in [("c1", "ann", 1), ("c2", "bob", 2), ("c1", "anna", 3)]:
            await driver.pipe("customers", value, key=key, timestamp=ts, partition=0)
        await driver.pipe("customers", None, key="c2", timestamp=4, partition=0)
        await driver.run_until_idle()
        assert await driver.table("customers", source="store") == {"c1": "anna"}
        # Its changelog is its source topic (compacted): no other topic was created.
        assert await driver.backend.partition_count("st-left-customers-changelog") is None


@pytest.mark.parametrize("how", ["inner", "left"])
async def test_only_the_stream_triggers_and_results_keep_its_key_and_time(
    topology_driver: DriverFactory, how: str
) -> None:
    app = enrichment_app(how)
    async with topology_driver(app) as driver:
        # One partition each: the task processes both in timestamp order.
        inputs = [
            ("orders", "c1", "o1", 1),  # before c1 exists
            ("customers", "c1", "ann", 2),
            ("orders", "c1", "o2", 3),
            ("customers", "c1", "anna", 4),  # a table update emits nothing
            ("orders", "c1", "o3", 5),
            ("orders", None, "o4", 6),  # null key: inner drops, left joins None (KIP-962)
            ("orders", "c1", None, 7),  # null value: dropped
            ("customers", "c1", None, 8),  # tombstone
            ("orders", "c1", "o5", 9),
        ]
        for topic, key, value, ts in inputs:
            await driver.pipe(topic, value, key=key, timestamp=ts, partition=0)
        await driver.run_until_idle()
        records = await driver.read("enriched")
        out = sorted(((r.key, tuple(r.value), r.timestamp) for r in records), key=lambda r: r[2])
        expected = [
            ("c1", ("o1", None), 1),
            ("c1", ("o2", "ann"), 3),
            ("c1", ("o3", "anna"), 5),
            (None, ("o4", None), 6),
            ("c1", ("o5", None), 9),
        ]
        if how == "inner":
            expected = [e for e in expected if e[1][1] is not None]
        assert out == expected


async def test_a_table_from_a_topic_answers_interactive_queries(
    topology_driver: DriverFactory,
) -> None:
    """/tables/customers/KEY reads it as any table (its store, in the task owning the key)."""
    app = enrichment_app()
    async with topology_driver(app) as driver:
        await driver.pipe("customers", "ann", key="c1", timestamp=1)
        await driver.pipe("customers", "bob", key="c2", timestamp=2)
        await driver.pipe("customers", None, key="c2", timestamp=3)
        await driver.run_until_idle()
        worker = driver.worker(0)
        found = query_table(worker, "customers", "c1", forwarded=False)
        assert (found.status, found.body["value"]) == (200, "ann")
        deleted = query_table(worker, "customers", "c2", forwarded=False)
        assert deleted.status == 404, deleted.body


async def test_a_versioned_table_answers_with_its_versions(topology_driver: DriverFactory) -> None:
    app = streams_app.App("versioned-query", broker="kafka://127.0.0.1:1")
    prices = app.topic("prices", key_type=str, value_type=int)
    app.Table("prices", source=prices, versioned=60)
    orders = app.topic("orders", key_type=str, value_type=int)
    orders.join(app.tables["prices"]).to(app.topic("priced", key_type=str, value_type=list))
    async with topology_driver(app) as driver:
        for value, ts in ((10, 1_000), (12, 5_000), (11, 3_000)):  # one out of order
            await driver.pipe("prices", value, key="apple", timestamp=ts)
        for ts in (500, 1_500, 3_500, 6_000):
            await driver.pipe("orders", ts, key="apple", timestamp=ts)
        await driver.run_until_idle()
        answer = query_table(driver.worker(0), "prices", "apple", forwarded=False)
        assert answer.status == 200, answer.body
        assert answer.body["value"] == 12
        assert [(v["valid_from"], v["value"]) for v in answer.body["versions"]] == [
            (1_000, 10),
            (3_000, 11),
            (5_000, 12),
        ]
        # Each order met the price as of its time, as far as the table had it: the price of
        # 3 000 ms comes after the one of 5 000 ms in its partition, so the order at 3 500 ms
        # (processed before either, in time order) met 10 (without grace= nothing waits for
        # it). The one at 500 ms met none: an inner join drops it.
        priced = sorted((r.timestamp, tuple(r.value)) for r in await driver.read("priced"))
        assert priced == [(1_500, (1_500, 10)), (3_500, (3_500, 10)), (6_000, (6_000, 12))]


async def test_a_versioned_tables_changelog_answers_as_its_owner(
    topology_driver: DriverFactory,
) -> None:
    """``streams-app tables NAME KEY`` with no worker reads the key's changelog partition: its
    answer (latest value, versions, a deleted key not found) is the owner's ``/tables`` answer,
    expired versions (changelog tombstones) and the stream time entry included."""
    app = streams_app.App("versioned-changelog", broker="kafka://127.0.0.1:1")
    prices = app.topic("prices", key_type=str, value_type=int)
    table = app.Table("prices", source=prices, versioned=60)
    app.topic("orders", key_type=str, value_type=int).join(table).to(
        app.topic("priced", key_type=str, value_type=list)
    )
    writes = [
        ("apple", 10, 1_000),
        ("apple", 12, 5_000),
        ("apple", 11, 3_000),
        ("pear", 5, 1_000),
        ("pear", None, 2_000),
        ("fig", 1, 0),
        ("fig", 2, 1_000),
        ("fig", 3, 100_000),  # 60 s of history: fig's version of 0 ms expires
    ]
    async with topology_driver(app) as driver:
        for key, value, ts in writes:
            await driver.pipe("prices", value, key=key, timestamp=ts)
        await driver.run_until_idle()
        raw = await driver.backend.read(table.changelog_topic_name, committed=True)
        assert any(r.value is None for r in raw), "no version expired: the test checks nothing"
        changelog = [
            ReadRecord(table.changelog_topic_name, r.partition, r.offset, 0, r.key, r.value, ())
            for r in raw
        ]
        answers = {}
        for key in ("apple", "pear", "fig", "kiwi"):
            web = query_table(driver.worker(0), "prices", key, forwarded=False)
            owner = from_answer(table, key, "http://w", web.status, web.body)
            assert owner is not None, web.body
            records = [r for r in changelog if r.partition == owner.partition]
            read = from_changelog(table, key, key_read(table, key, owner.partition, records))
            from_changelog_json = lookup_json(table, read)
            assert from_changelog_json == {
                **lookup_json(table, owner),
                "source": from_changelog_json["source"],
            }, key
            answers[key] = from_changelog_json
    assert (answers["apple"]["found"], answers["apple"]["value"]) == (True, 12)
    assert answers["apple"]["versions"][-1] == {"valid_from": 5_000, "value": 12}
    assert (answers["fig"]["found"], answers["fig"]["value"]) == (True, 3)
    assert answers["fig"]["versions"] == [
        {"valid_from": 1_000, "value": 2},
        {"valid_from": 100_000, "value": 3},
    ]
    assert (answers["pear"]["found"], answers["pear"]["value"]) == (False, None)
    assert (answers["kiwi"]["found"], answers["kiwi"]["versions"]) == (False, [])
    # `tables prices` (read_table_versions: the whole changelog, each partition's stream time
    # entry among it): the keys that have a value, each as its owner answers it.
    listed = versioned_contents_json(key_versions(decode_changelog(table, changelog).items()))
    assert [(row["key"], row["value"], row["versions"]) for row in listed] == [
        (key, answers[key]["value"], answers[key]["versions"]) for key in ("apple", "fig")
    ]


async def test_agents_read_a_join_declared_at_module_level_or_inside_them(
    topology_driver: DriverFactory,
) -> None:
    """``@app.agent(orders.left_join(customers))`` and ``stream.left_join(customers)`` before
    the first ``async for`` are the same join: both agents get every result, keyed like the
    order; a joined table reads by key."""
    app = streams_app.App("agents-read-joins", broker="kafka://127.0.0.1:1")
    customers_topic = app.topic("customers", key_type=str, value_type=str)
    accounts_topic = app.topic("accounts", key_type=str, value_type=str)
    orders = app.topic("orders", key_type=str, value_type=str)
    seen = app.topic("seen", key_type=str, value_type=list)
    customers = app.Table("customers", source=customers_topic)
    accounts = app.Table("accounts", source=accounts_topic)
    joined_table = customers.left_join(accounts)
    lookups = app.topic("lookups", key_type=str, value_type=list)

    @app.agent(orders.left_join(customers))
    async def declared(stream):  # type: ignore[no-untyped-def]
        async for key, (order, customer) in stream.items():
            await seen.send(key=key, value=["declared", order, customer])

    @app.agent(orders)
    async def inside(stream):  # type: ignore[no-untyped-def]
        async for key, joined in stream.left_join(customers).items():
            await seen.send(key=key, value=["inside", joined.left, joined.right])
            await lookups.send(key=key, value=list(joined_table.get(key, ("none", "none"))))

    assert len(app.joins) == 2  # the join inside the agent is the module-level one
    async with topology_driver(app) as driver:
        await driver.pipe("customers", "ann", key="c1", timestamp=1, partition=0)
        await driver.pipe("accounts", "acc-1", key="c1", timestamp=2, partition=0)
        await driver.pipe("orders", "o1", key="c1", timestamp=3, partition=0)
        await driver.pipe("orders", "o2", key="c2", timestamp=4, partition=0)
        await driver.run_until_idle()
        got = sorted((r.key, tuple(r.value)) for r in await driver.read("seen"))
        assert got == [
            ("c1", ("declared", "o1", "ann")),
            ("c1", ("inside", "o1", "ann")),
            ("c2", ("declared", "o2", None)),
            ("c2", ("inside", "o2", None)),
        ]
        looked_up = sorted((r.key, tuple(r.value)) for r in await driver.read("lookups"))
        assert looked_up == [("c1", ("ann", "acc-1")), ("c2", ("none", "none"))]


async def test_reseed_refuses_a_table_whose_changelog_is_its_source() -> None:
    """``changelog reseed`` would write the store into the app's input topic: refused, before
    asking the broker anything."""
    app = enrichment_app()
    with pytest.raises(ChangelogRepairRefused, match="changelog wipe"):
        await repair(app, "customers", "reseed")


def _customer_of(order: dict[str, str]) -> str:
    return order["customer"]


async def test_a_stream_regrouped_inside_an_agent_joins_a_table_of_another_partition_count(
    topology_driver: DriverFactory,
) -> None:
    """What the co-partitioning error advises: ``group_by(key, partitions=N)`` re-keys the
    stream through a repartition topic with the table's count, and the regrouped stream joins."""
    app = streams_app.App("regrouped-join", broker="kafka://127.0.0.1:1")
    customers_topic = app.topic("customers", key_type=str, value_type=str, partitions=2)
    orders = app.topic("orders", key_type=str, value_type=dict, partitions=3)
    out = app.topic("out", key_type=str, value_type=list)
    customers = app.Table("customers", source=customers_topic)

    @app.agent(orders)
    async def enrich(stream):  # type: ignore[no-untyped-def]
        regrouped = stream.group_by(_customer_of, name="by-customer", partitions=2)
        async for key, (order, customer) in regrouped.left_join(customers).items():
            await out.send(key=key, value=[order["id"], customer])

    async with topology_driver(app) as driver:
        await driver.pipe("customers", "ann", key="c1", timestamp=1)
        await driver.run_until_idle()
        await driver.pipe("orders", {"customer": "c1", "id": "o1"}, key="o1", timestamp=2)
        await driver.pipe("orders", {"customer": "c2", "id": "o2"}, key="o2", timestamp=3)
        await driver.run_until_idle()
        got = sorted((r.key, tuple(r.value)) for r in await driver.read("out"))
        assert got == [("c1", ("o1", "ann")), ("c2", ("o2", None))]


def test_inputs_not_co_partitioned_are_refused_naming_both_topics() -> None:
    app = streams_app.App("not-copartitioned", broker="kafka://127.0.0.1:1")
    customers = app.Table(
        "customers", source=app.topic("customers", key_type=str, value_type=str, partitions=2)
    )
    app.topic("orders", key_type=str, value_type=str, partitions=3).join(customers)
    with pytest.raises(TopologyError, match=r"'orders' with 3 partitions and 'customers' with 2"):
        plan_topology(app.describe(), {}, app.conf)


def test_a_join_declared_again_with_a_lambda_made_anew_is_the_same_join() -> None:
    """An agent restarted after an abort traces its ``stream.join(..., joiner=lambda ...)``
    again: a new lambda object, the same declaration (a different one is refused)."""
    app = enrichment_app()
    orders, customers = app.topics["orders"], app.tables["customers"]

    def declare(suffix: str) -> object:
        return orders.join(customers, joiner=lambda o, c: (o, c, suffix), name="again")

    first, second = declare("x"), declare("x")
    assert first.join is second.join  # type: ignore[attr-defined]
    with pytest.raises(TopologyError, match="declared twice, differently"):
        declare("y")
