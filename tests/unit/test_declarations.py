"""Declarations say what they take: a misspelt keyword argument is refused naming the closest
valid one (Faust's own arguments still accepted), a topic declared again differently is
refused, Faust's ``schema`` gives types, and a windowed table's ``emit_final`` takes a topic
declared for its retention only (docs/windows.md's example)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import faust
import pytest

from streams_app import App
from streams_app.app.options import UnknownArgument
from streams_app.errors import TopologyError


async def _agent(stream: Any) -> None:  # pragma: no cover - never run
    async for _ in stream:
        pass


def _job() -> None:  # pragma: no cover - never run
    pass


MISSPELT: list[tuple[str, Callable[[App], Any], str, str]] = [
    ("topic", lambda app: app.topic("orders", vlaue_type=int), "vlaue_type", "value_type"),
    ("topic", lambda app: app.topic("orders", partitons=3), "partitons", "partitions"),
    ("Table", lambda app: app.Table("counts", defualt=int), "defualt", "default"),
    ("SetTable", lambda app: app.SetTable("seen", key_tpye=str), "key_tpye", "key_type"),
    ("GlobalTable", lambda app: app.GlobalTable("g", partiotions=2), "partiotions", "partitions"),
    ("agent", lambda app: app.agent("orders", concurency=2)(_agent), "concurency", "concurrency"),
    ("channel", lambda app: app.channel(maxsise=5), "maxsise", "maxsize"),
    ("timer", lambda app: app.timer(1.0, on_leadr=True)(_job), "on_leadr", "on_leader"),
    ("crontab", lambda app: app.crontab("* * * * *", timezon="UTC")(_job), "timezon", "timezone"),
    ("task", lambda app: app.task(on_leder=True)(_job), "on_leder", "on_leader"),
]


@pytest.mark.parametrize(
    ("what", "declare", "wrong", "right"),
    MISSPELT,
    ids=[f"{what}-{wrong}" for what, _, wrong, _ in MISSPELT],
)
def test_a_misspelt_keyword_is_refused_naming_the_closest(
    what: str, declare: Callable[[App], Any], wrong: str, right: str
) -> None:
    app = App("declarations")
    with pytest.raises(UnknownArgument) as raised:
        declare(app)
    message = str(raised.value)
    assert f"unknown keyword argument {wrong!r}" in message and f"did you mean {right!r}" in message
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, TopologyError)
    assert not app.topics.get("orders") or app.topics["orders"].value_type is None


def test_fausts_own_arguments_are_still_accepted() -> None:
    app = App("declarations")
    orders = app.topic("orders", value_type=int, acks=True, maxsize=10, allow_empty=True)
    app.agent(orders, supervisor_strategy=None)(_agent)
    app.Table("counts", default=int, recovery_buffer_size=10, standby_buffer_size=5, store=None)
    app.GlobalTable("g", default=int, synchronize_all_active_partitions=True)
    app.SetTable("s", start_manager=True)
    app.timer(1.0, traced=False, max_drift_correction=0.1)(_job)
    app.channel(schema=None)
    assert orders.value_type is int and set(app.tables) == {"counts", "g", "s"}


def test_a_topic_declared_again_must_agree() -> None:
    app = App("declarations")
    orders = app.topic("orders", key_type=str, value_type=int, partitions=3, retention=60)
    # The same again, or less: the same Topic.
    assert app.topic("orders") is orders
    assert app.topic("orders", value_type=int, partitions=3, retention=60) is orders
    for says in (
        {"value_type": str},
        {"key_serializer": "json"},
        {"partitions": 6},
        {"replicas": 3},
        {"retention": 120},
        {"config": {"cleanup.policy": "compact"}},
    ):
        with pytest.raises(TopologyError, match="'orders' is declared again with"):
            app.topic("orders", **says)
    untyped = app.topic("events")
    with pytest.raises(TopologyError, match="declared without it"):
        app.topic("events", value_type=int)  # would stay untyped, silently
    assert untyped.value_type is None


def test_fausts_schema_gives_the_types() -> None:
    app = App("declarations")
    schema = faust.Schema(key_type=str, value_type=int)
    assert app.topic("scores", schema=schema).value_type is int
    table = app.Table("totals", default=int, schema=schema)
    assert table.key_type is str and table.value_type is int
    with pytest.raises(TopologyError, match="tumbling"):
        app.Table("windowed", default=int, window=object())  # Faust's internal form


def test_emit_final_takes_a_topic_declared_only_for_its_retention() -> None:
    app = App("declarations")
    views = app.Table("views", default=int, key_type=str)
    # docs/windows.md: a final-results topic that keeps a year of reprocessed results.
    final = app.topic("views-final", retention=timedelta(days=400))
    views.tumbling(60, emit_final=final)
    assert views.emit_final_topic is final and final.config["retention.ms"] == str(400 * 86_400_000)
    window = {"key": "home", "start": 0, "end": 60_000}
    assert final.key_codec.loads(final.key_codec.dumps(window)) == window
    assert final.value_codec.loads(final.value_codec.dumps(3)) == 3
    # What the error advises works too, and so does a name declared before.
    app.Table("a", default=int).tumbling(60, emit_final=app.topic("a-final", key_serializer="json"))
    app.topic("b-final", partitions=1)
    b = app.Table("b", default=int)
    b.tumbling(60, emit_final="b-final")
    assert b.emit_final_topic is app.topics["b-final"]
    with pytest.raises(TopologyError, match="key_serializer='json' and no key_type"):
        app.Table("c", default=int).tumbling(60, emit_final=app.topic("c-final", key_type=str))
