"""The pure planner: a topology description plus broker metadata -> the plan, with no broker.

Descriptions come from Apps (``App.describe()``, which traces the agents' ``group_by`` calls
without running a worker) or are written out as data; ``existing`` stands for what the broker
says exists. Nothing here opens a socket.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

import pytest

from streams_app import App
from streams_app.errors import TopologyError
from streams_app.topology.description import (
    AgentDecl,
    TableDecl,
    TopicDecl,
    TopologyDescription,
)
from streams_app.topology.plan import plan_topology, topics_to_look_up


def _app(**settings: object) -> App:
    return App("shop", broker="kafka://localhost:9092", topic_partitions=4, **settings)


def _by_name(plan_specs: list) -> dict:  # type: ignore[type-arg]
    return {spec.name: spec for spec in plan_specs}


def test_a_group_by_makes_a_repartition_topic_an_input_one_stage_on_with_its_dead_letters() -> None:
    app = _app()
    clicks = app.topic("clicks", key_type=str, value_type=str)
    counts = app.Table("counts", default=int)

    def page(value: str) -> str:
        return value

    @app.agent(clicks)
    async def per_page(stream):  # type: ignore[no-untyped-def]
        async for value in stream.group_by(page):
            counts[value] += 1

    description = app.describe()
    repartition = f"{__name__}.per_page-clicks-page-repartition"
    (hop,) = description.repartitions
    assert (hop.topic, hop.source, hop.kind, hop.key) == (repartition, "clicks", "group_by", "page")
    assert description.agents[0].reads == repartition
    assert description.agents[0].trace_note is None

    plan = plan_topology(description, {}, app.conf)

    assert plan.input_topics == ["clicks", repartition]
    assert plan.stages == {"clicks": 0, repartition: 1}
    assert plan.dead_letter_topics == {"clicks": "clicks.dlq", repartition: f"{repartition}.dlq"}
    specs = _by_name(plan.to_create)
    assert specs[repartition].partitions == 4  # the worker's topic_partitions
    assert specs[f"{repartition}.dlq"].partitions == 4
    assert specs["shop-counts-changelog"].configs == {"cleanup.policy": "compact"}
    assert plan.changelog_topics == {"counts": "shop-counts-changelog"}
    assert plan.groups == {4: 0}
    assert plan.tables_by_group == {0: ["counts"]}


def test_an_existing_topic_keeps_its_count_and_is_not_created() -> None:
    app = _app()
    app.topic("orders")
    app.Table("stock", default=int)

    @app.agent("orders")
    async def reserve(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    description = app.describe()
    looked_up = topics_to_look_up(description, app.conf)
    assert looked_up == ["orders", "orders.dlq", "shop-stock-changelog"]

    plan = plan_topology(description, {"orders": 6, "orders.dlq": 6}, app.conf)

    assert plan.partition_counts["orders"] == 6
    assert plan.table_partitions == {"stock": 6}  # the one count the inputs share
    assert [s.name for s in plan.to_create] == ["shop-stock-changelog"]
    assert plan.to_create[0].partitions == 6


def test_partitions_per_table_declared_derived_default_and_global() -> None:
    topics = (
        TopicDecl("a", "raw", "json", partitions=4),
        TopicDecl("b", "raw", "json", partitions=8),
    )
    agents = (AgentDecl("fa", "a", reads="a"), AgentDecl("fb", "b", reads="b"))
    tables = (
        TableDecl("declared", "table", "x-declared-changelog", "json", "json", partitions=8),
        TableDecl("defaulted", "table", "x-defaulted-changelog", "json", "json"),
        TableDecl("everywhere", "global", "x-everywhere-changelog", "json", "json"),
    )
    description = TopologyDescription("x", topics=topics, agents=agents, tables=tables)
    conf = App("x", broker="kafka://localhost:9092", topic_partitions=4).conf

    plan = plan_topology(description, {}, conf)

    assert plan.groups == {4: 0, 8: 1}
    assert plan.table_partitions == {"declared": 8, "defaulted": 4, "everywhere": 4}
    assert plan.tables_by_group == {1: ["declared"], 0: ["defaulted", "everywhere"]}
    assert plan.group_topics(0) == ["a"] and plan.group_topics(1) == ["b"]


def test_a_table_with_no_input_of_its_partition_count_is_refused_naming_the_fix() -> None:
    app = _app()
    app.topic("orders", partitions=4)
    app.Table("stock", default=int, partitions=3)

    @app.agent("orders")
    async def reserve(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    with pytest.raises(TopologyError) as refused:
        plan_topology(app.describe(), {}, app.conf)
    message = str(refused.value)
    assert "table 'stock' has 3 partitions but no input topic does" in message
    assert "co-partitioned with the topics that update them" in message


def test_a_table_without_a_count_among_inputs_of_several_counts_is_refused() -> None:
    app = App("shop", broker="kafka://localhost:9092", topic_partitions=2)
    app.topic("a", partitions=4)
    app.topic("b", partitions=8)
    app.Table("t", default=int)

    for name in ("a", "b"):

        @app.agent(name, name=f"on_{name}")
        async def agent(stream):  # type: ignore[no-untyped-def]
            async for _ in stream:
                pass

    with pytest.raises(TopologyError, match=r"input topics have several \(\[4, 8\]\): pass "):
        plan_topology(app.describe(), {}, app.conf)


def test_a_changelog_or_topic_of_another_count_on_the_broker_is_refused() -> None:
    app = _app()
    app.topic("orders", partitions=4)
    app.Table("stock", default=int)

    @app.agent("orders")
    async def reserve(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    description = app.describe()
    with pytest.raises(TopologyError, match="changelog topic 'shop-stock-changelog' has 2 "):
        plan_topology(description, {"shop-stock-changelog": 2}, app.conf)
    with pytest.raises(TopologyError, match="change partitions= to 6 or recreate the topic"):
        plan_topology(description, {"orders": 6}, app.conf)


def test_missing_topics_are_refused_when_declaring_is_off() -> None:
    app = _app(topic_allow_declare=False)

    @app.agent(app.topic("orders"))
    async def reserve(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    with pytest.raises(TopologyError, match=r"\['orders.dlq'\] do not exist"):
        plan_topology(app.describe(), {"orders": 4}, app.conf)


def test_an_on_leader_timer_adds_the_one_partition_leader_topic_as_an_input() -> None:
    app = _app()

    @app.agent(app.topic("orders"))
    async def reserve(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.timer(1.0, on_leader=True)
    async def tick() -> None:
        pass

    plan = plan_topology(app.describe(), {}, app.conf)
    leader = "shop-__assignor-__leader"
    assert plan.leader_topic == leader
    assert plan.input_topics == ["orders", leader]
    assert plan.partition_counts[leader] == 1
    assert plan.stages[leader] == -1
    assert leader not in plan.dead_letter_topics


def test_an_app_with_nothing_to_run_is_refused() -> None:
    with pytest.raises(TopologyError, match="has nothing to run: no agent, timer, task"):
        plan_topology(_app().describe(), {}, _app().conf)


def test_an_app_of_timers_alone_plans_no_inputs() -> None:
    """Faust runs apps of timers, tasks and channels alone: the worker joins no group."""
    app = _app()

    @app.timer(1.0)
    async def tick() -> None:
        pass

    plan = plan_topology(app.describe(), {}, app.conf)
    assert plan.input_topics == []
    assert plan.groups == {}


def test_the_description_is_immutable_plain_data_and_the_same_each_time() -> None:
    app = _app()

    @app.agent(app.topic("clicks"))
    async def per_user(stream):  # type: ignore[no-untyped-def]
        async for _ in stream.group_by(lambda v: v, name="user"):
            pass

    first = app.describe()
    topics_after = set(app.topics)
    second = app.describe()
    assert first == second
    assert set(app.topics) == topics_after  # describing again declares nothing new
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.app_id = "other"  # type: ignore[misc]
    text = json.dumps(first.to_dict(), sort_keys=True)
    assert json.loads(text) == first.to_dict()
    assert f"{__name__}.per_user-clicks-user-repartition" in text


def test_an_agent_that_awaits_before_its_first_read_is_described_with_a_note() -> None:
    app = _app()

    @app.agent(app.topic("clicks"))
    async def slow(stream):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        async for _ in stream.group_by(lambda v: v, name="user"):
            pass

    (agent,) = app.describe().agents
    assert agent.reads == "clicks"  # its group_by is found when a worker runs it
    assert agent.trace_note is not None and "awaits something" in agent.trace_note


def test_planning_loads_neither_the_app_layer_nor_the_runtime() -> None:
    """The planner and the description sit below both (run in a fresh interpreter)."""
    import subprocess

    code = (
        "import sys; import streams_app.topology.plan, streams_app.topology.render; "
        "loaded = [m for m in sys.modules if m.startswith(('streams_app.app', "
        "'streams_app.runtime', 'faust', 'mode'))]; print(loaded)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
