"""Which topics ``reset`` deletes as internal: changelogs and repartition topics, under both
names a repartition topic can have (after the agent, as Faust names it, or after the app)."""

from __future__ import annotations

from streams_app import App
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
