"""Unit tests of the database edge's own logic (no broker, no database)."""

from __future__ import annotations

import pytest

from streams_app import App, ConfigError
from streams_app.postgres.connection import describe
from streams_app.postgres.horizon import Horizon
from streams_app.postgres.outbox import encode
from streams_app.postgres.progress import Position, Progress
from streams_app.postgres.schema import OutboxNames, qualified, sql_name
from topologies.orders.models import Order


def test_horizon_is_final_only_once_every_older_xid_is_gone() -> None:
    h = Horizon("outbox")
    # number 5 read, then the next xid is 110 and a snapshot has xid 100 still running
    assert h.observe(5, xmin=100, next_xid=110) == 0
    assert h.held_back
    # later: number 9, xid 105 running (100 finished), next xid 120: 5 is not final yet
    # (105 < 110)
    assert h.observe(9, xmin=105, next_xid=120) == 0
    # everything below 110 finished: 5 is final; 9 needs xmin >= 120
    assert h.observe(9, xmin=115, next_xid=125) == 5
    assert h.observe(9, xmin=125, next_xid=125) == 9
    assert not h.held_back


def test_horizon_nothing_in_flight_is_final_at_once_and_never_goes_back() -> None:
    h = Horizon("outbox")
    assert h.observe(3, xmin=50, next_xid=50) == 3
    assert h.observe(3, xmin=40, next_xid=60) == 3  # (never happens, but must not go back)


def test_horizon_bounded_while_held_back_and_still_conservative() -> None:
    h = Horizon("outbox")
    for i in range(10_000):
        h.observe(i + 1, xmin=1, next_xid=1000 + i)
    assert len(h._pending) <= 4097
    # The oldest transaction ends; xmin passes some bounds but not all.
    final = h.observe(10_000, xmin=1000 + 5000, next_xid=20_000)
    assert 0 < final <= 5001  # numbers whose bound <= xmin only
    assert h.observe(10_000, xmin=20_000, next_xid=20_000) == 10_000


def test_describe_never_shows_user_or_password() -> None:
    assert describe("postgresql://u:pw@db.example:6432/shop?sslmode=require") == (
        "db.example:6432/shop"
    )
    assert describe("host=a,b port=1,2 dbname=x password=pw user=u") == "a:1,b:2/x"
    assert describe("dbname=x") == "localhost:5432/x"
    assert "pw" not in describe("postgresql://u:pw@h/d")


def test_sql_names_are_quoted_and_qualified() -> None:
    assert sql_name("outbox") == '"outbox"'
    assert sql_name("app.outbox", "_commits") == '"app"."outbox_commits"'
    assert OutboxNames('we"ird').table == '"we""ird"'
    with pytest.raises(ConfigError):
        qualified("a.b.c")


def test_outbox_encoding() -> None:
    app = App("u", broker="kafka://localhost:9092")
    orders = app.topic("orders", key_type=str, value_type=Order)
    order = Order(order_id="o1", user="u", item="apple", qty=2)
    name, key, value, hkeys, hvalues = encode(orders, "apple", order, {"a": "b"})
    assert (name, key, hkeys, hvalues) == ("orders", b"apple", ["a"], [b"b"])
    assert value is not None and b'"order_id":"o1"' in value
    assert encode("t", "k", {"x": 1}, None)[1:3] == (b"k", b'{"x":1}')
    assert encode("t", b"k", b"raw", [("h", b"v")])[1:] == (b"k", b"raw", ["h"], [b"v"])
    with pytest.raises(TypeError, match="key must be bytes or str"):
        encode("t", 5, None, None)
    with pytest.raises(ValueError, match="topic is empty"):
        encode("", None, None, None)


def test_progress_round_trip_and_order() -> None:
    p = Progress(Position(7, 42), 1000)
    assert Progress.decode(p.encode("outbox")) == p
    assert Position(7, 42) < Position(8, 1) and Position(7, 42) < Position(7, 43)


def test_sink_declaration_checks_and_defaults() -> None:
    app = App("shop", broker="kafka://localhost:9092", max_poll_records=123)
    topic = app.topic("reservations")

    @app.postgres_sink(topic)
    async def land(conn, records):  # type: ignore[no-untyped-def]
        return None

    sink = app.sinks["land"]
    assert sink.group_id == "shop-sink-land"
    assert sink.max_batch == 123
    with pytest.raises(ConfigError, match="postgres_dsn"):
        _ = sink.dsn
    with pytest.raises(ValueError, match="two sinks"):
        app.postgres_sink(topic, name="land", handler=land.handler)
    with pytest.raises(ConfigError, match="error_policy"):
        app.postgres_sink(topic, name="other", handler=land.handler, error_policy="ignore")
    secret = App("s", broker="kafka://localhost:9092", postgres_dsn="postgresql://u:pw@h/d")
    assert secret.conf.describe()["postgres_dsn"] == "*****"
