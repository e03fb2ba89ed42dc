"""Which topics ``reset`` deletes as internal: changelogs and repartition topics, under both
names a repartition topic can have (after the agent, as Faust names it, or after the app);
never an input that serves as a changelog (which ``send`` writes, too)."""

from __future__ import annotations

from streams_app import App, JoinWindows
from streams_app.cli.send import framework_topic
from streams_app.ops.reset import internal_topics


def test_internal_topics_include_agent_named_repartition_topics() -> None:
    app = App("shop")
    orders = app.topic("orders", key_type=str, value_type=int)
    app.Table("totals", default=int)

    @app.agent(orders)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    agent_repartition = f"{count.name}-orders-user-repartition"
    existing = [
        "orders",
        "shop-totals-changelog",
        agent_repartition,
        "shop-old-repartition",
        "other-agent-orders-user-repartition",  # another app's agent: not ours
        "shop-orders-out",  # an output under the app's prefix: kept
        "orders.dlq",
    ]
    assert internal_topics(app, existing) == sorted(
        ["shop-totals-changelog", agent_repartition, "shop-old-repartition"]
    )


def test_an_input_that_serves_as_a_changelog_is_not_internal() -> None:
    """A table built from a compacted topic, a GlobalTable and a stream-stream buffer with
    ``changelog="input"`` are restored from app inputs: reset deletes their own changelogs
    only, never those inputs."""
    app = App("shop")
    customers = app.topic("customers", key_type=str, config={"cleanup.policy": "compact"})
    prices = app.topic("prices", key_type=str)
    orders = app.topic("orders", key_type=str)
    payments = app.topic("payments", key_type=str)
    app.Table("customer", source=customers)  # its changelog: customers
    app.GlobalTable("price", source=prices)  # reads prices whole
    orders.join(payments, JoinWindows(60), changelog="input", name="paid")
    app.Table("totals", default=int)
    existing = ["customers", "prices", "orders", "payments", "shop-totals-changelog"]
    assert internal_topics(app, existing) == ["shop-totals-changelog"]
    # And ``streams-app send`` writes them (that is how such a table is fed); a changelog
    # of the app's own it refuses.
    assert [framework_topic(app, t) for t in ("customers", "prices", "payments")] == [None] * 3
    assert "changelog" in (framework_topic(app, "shop-totals-changelog") or "")
