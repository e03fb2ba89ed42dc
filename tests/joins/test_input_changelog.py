"""A stream-stream join's buffers restored from their input topics (``changelog="input"``,
docs/joins.md "The input topic as the buffer's changelog"): what the declaration accepts and
refuses, what restore stores of an input record (the entry processing buffered), the observed
time read back from the entries, and the whole join through a crash that loses the state, run
by the real worker on the in-memory Kafka model. The real broker: test_stream_stream_kafka.py
(its inner join with ``changelog="input"``, through SIGKILLs and a lost state directory)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace
from typing import Any

import pytest

import streams_app
from streams_app import JoinWindows
from streams_app.app.joins import INPUT, OWN
from streams_app.errors import TopologyError
from streams_app.runtime.joins.stream_stream import buffer_restore_filter
from streams_app.state.base import PartitionTransaction
from streams_app.state.composite import NO_TIME, write_stream_time
from streams_app.state.join_windows import JoinWindowTransaction, join_window_codecs
from streams_app.state.memory import MemoryStorePartition
from streams_app.testing import DriverFactory, Input
from streams_app.topology import names
from streams_app.topology.plan import plan_topology


def Record(  # a record as the consumer hands it over
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, ts: int
) -> Any:
    return SimpleNamespace(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        timestamp=ts,
        headers=(),
    )


def orders_payments(app: streams_app.App, **config: Any) -> tuple[Any, Any]:
    return (
        app.topic("orders", key_type=str, value_serializer="json", config=config or None),
        app.topic("payments", key_type=str, value_serializer="json"),
    )


# -- the declaration ----------------------------------------------------------------------------


def test_which_buffers_their_inputs_restore() -> None:
    """Inner: both buffers, changelogged by their inputs (no changelog topic to create);
    left: the right buffer only (the left one's records get nulls and leave it); the default
    keeps Kafka Streams' changelog topics."""
    app = streams_app.App("ic-decl", topic_partitions=2)
    orders, payments = orders_payments(app)
    inner = orders.join(payments, JoinWindows(60), changelog="input", name="inner").join
    assert inner.changelog == INPUT
    assert inner.stores["left"].changelog_topic_name == "orders"
    assert inner.stores["right"].changelog_topic_name == "payments"
    other = streams_app.App("ic-decl-left", topic_partitions=2)
    orders2, payments2 = orders_payments(other)
    left = orders2.left_join(payments2, JoinWindows(60), changelog="input").join
    assert not left.stores["left"].changelog_is_source
    assert left.stores["left"].changelog_topic_name.endswith("-left-changelog")
    assert left.stores["right"].changelog_topic_name == "payments"
    default = orders2.join(payments2, JoinWindows(60), name="plain").join
    assert default.changelog == OWN
    assert not any(s.changelog_is_source for s in default.stores.values())
    # The plan asks for no changelog topic for a buffer its input restores.
    plan = plan_topology(app.describe(), {"orders": 2, "payments": 2}, app.conf)
    assert plan.changelog_topics["inner-left"] == "orders"
    assert plan.changelog_topics["inner-right"] == "payments"
    assert not [s.name for s in plan.to_create if "changelog" in s.name], plan.to_create


def test_an_input_that_cannot_restore_its_buffer_leaves_it_a_changelog() -> None:
    """Each side on its own: an input declared compacted, keeping records less long than the
    buffer (retention.ms), or bounded in size (retention.bytes) leaves its buffer a changelog
    of its own; where no side's input can restore its buffer, the declaration is refused,
    naming why for each side. (The window keeps a record 121 s: 60 s either side, 1 s of
    grace.)"""

    def sources(app: streams_app.App, how: Any = "inner", **config: Any) -> tuple[bool, bool]:
        orders, payments = orders_payments(app, **config)
        join = (orders.join if how == "inner" else orders.left_join)(
            payments, JoinWindows(60, grace=1), changelog="input"
        ).join
        return join.stores["left"].changelog_is_source, join.stores["right"].changelog_is_source

    assert sources(streams_app.App("ic-ok")) == (True, True)
    assert sources(streams_app.App("ic-compacted"), **{"cleanup.policy": "compact"}) == (
        False,
        True,
    )
    assert sources(streams_app.App("ic-short"), **{"retention.ms": 120_999}) == (False, True)
    assert sources(streams_app.App("ic-long"), **{"retention.ms": 121_000}) == (True, True)
    assert sources(streams_app.App("ic-forever"), **{"retention.ms": -1}) == (True, True)
    assert sources(streams_app.App("ic-sized"), **{"retention.bytes": 10**9}) == (False, True)
    partition_time = streams_app.App("ic-partition-time")
    orders, payments = orders_payments(partition_time)
    clicks = partition_time.topic("clicks", key_type=str, on_invalid_timestamp="partition_time")
    join = orders.join(clicks, JoinWindows(60), changelog="input").join
    assert (join.stores["left"].changelog_is_source, join.stores["right"].changelog_is_source) == (
        True,
        False,
    )
    # A left join's left records get nulls: its input never restores that buffer.
    assert sources(streams_app.App("ic-left"), "left") == (False, True)

    app = streams_app.App("ic-refused")
    orders, payments = orders_payments(app)
    with pytest.raises(TopologyError, match=r"restores no buffer of this join.*get nulls"):
        orders.outer_join(payments, JoinWindows(60), changelog="input")
    with pytest.raises(TopologyError, match="joined with itself"):
        orders.join(orders, JoinWindows(60), changelog="input")
    with pytest.raises(TopologyError, match="one of \\('own', 'input'\\)"):
        orders.join(payments, JoinWindows(60), changelog="topic")
    table = app.Table("customers", source=app.topic("customers", key_type=str))
    with pytest.raises(TopologyError, match="is a table"):
        orders.join(table, changelog="input")
    compacted = streams_app.App("ic-left-compacted")
    orders, _ = orders_payments(compacted)
    refunds = compacted.topic("refunds", key_type=str, config={"cleanup.policy": "compact"})
    with pytest.raises(TopologyError, match="right: topic 'refunds' is declared compacted"):
        orders.left_join(refunds, JoinWindows(60), changelog="input")
    # One topic restores one store: two such joins of one input are refused by the plan.
    twice = streams_app.App("ic-twice", topic_partitions=2)
    orders, payments = orders_payments(twice)
    refunds = twice.topic("refunds", key_type=str, value_serializer="json")
    orders.join(payments, JoinWindows(60), changelog="input", name="paid")
    orders.join(refunds, JoinWindows(60), changelog="input", name="refunded")
    with pytest.raises(TopologyError, match="would be the changelog of both"):
        plan_topology(twice.describe(), {"orders": 2, "payments": 2, "refunds": 2}, twice.conf)


# -- restore: an input record as the entry processing buffered ----------------------------------


def buffer_view(
    key_codec: Any, value_codec: Any, partition: MemoryStorePartition | None = None
) -> JoinWindowTransaction:
    keys, values = join_window_codecs(key_codec, value_codec, 60_000)
    tx = PartitionTransaction(partition or MemoryStorePartition(), keys, values)
    return JoinWindowTransaction(tx, keys, 120_000, from_input=True)


def test_restore_stores_what_processing_buffers() -> None:
    """For each record the join buffers, restore's filter gives the bytes the buffer's put
    leaves pending (key, time, offset: the entry; the record's bytes, tagged: the value);
    for each it does not (no key, no value, undecodable, no valid time), nothing."""
    app = streams_app.App("ic-filter")
    orders, payments = orders_payments(app)
    join = orders.join(payments, JoinWindows(60), changelog="input").join
    store = join.stores["left"]
    accept = buffer_restore_filter(orders, store.key_codec)
    view = buffer_view(orders.key_codec, orders.value_codec)
    rows = [("a", b'{"n": 1}', 1_000, 7), ("b", b'{"n":2}', 5_000, 8), ("a", b"[3]", 9, 9)]
    for key, raw, timestamp, offset in rows:
        value = orders.value_codec.loads(raw)
        view.put(key, timestamp, offset, value, raw)
        got = accept(Record("orders", 0, offset, key.encode(), raw, timestamp))
        assert got is not None
        entry, stored = got
        assert view.tx.pending(entry, None) == stored, (key, raw)
    assert len(view.tx.prepare()) == len(rows) + 1  # and the stream time entry
    refused = [
        Record("orders", 0, 1, None, b"{}", 1_000),  # no key
        Record("orders", 0, 2, b"a", None, 1_000),  # no value
        Record("orders", 0, 3, b"a", b"{not json", 1_000),  # undecodable
        Record("orders", 0, 4, b"a", b"{}", -1),  # no valid time
    ]
    assert [accept(r) for r in refused] == [None] * 4


def test_a_restored_buffer_reads_its_observed_time_from_its_entries() -> None:
    """Restore writes the entries but not the stream time entry: the view finds the observed
    time as the largest entry's time (or the entry's, if larger), and commits it."""
    app = streams_app.App("ic-observed")
    orders, _ = orders_payments(app)
    keys, values = join_window_codecs(orders.key_codec, orders.value_codec, 60_000)
    partition = MemoryStorePartition()
    accept = buffer_restore_filter(orders, keys)
    restored = {}
    for offset, timestamp in enumerate((500_000, 900_000, 850_000)):
        got = accept(Record("orders", 0, offset, b"k", b"1", timestamp))
        assert got is not None
        restored[got[0]] = got[1]
    partition.write(restored, 3)
    view = buffer_view(orders.key_codec, orders.value_codec, partition)
    assert view.observed == 900_000
    # What processing would find: 500,000 is older than retention (120 s) for good.
    assert [r.timestamp for r in view.fetch("k", 0, 1_000_000)] == [850_000, 900_000]
    # Committed with the next transaction, it is what the next view reads first.
    view.put("k", 901_000, 4, 2, b"2")
    batch = view.tx.prepare()
    view.tx.commit(5)
    assert batch
    again = buffer_view(orders.key_codec, orders.value_codec, partition)
    assert again.observed == 901_000
    # A stream time entry larger than any entry stands (records processed but not stored).
    later = MemoryStorePartition()
    tx = PartitionTransaction(later, keys, values)
    write_stream_time(tx, 2_000_000)
    tx.commit(1)
    assert buffer_view(orders.key_codec, orders.value_codec, later).observed == 2_000_000
    assert buffer_view(orders.key_codec, orders.value_codec).observed == NO_TIME


# -- the join, through a crash that loses the state ---------------------------------------------


def restored_app(how: str) -> streams_app.App:
    app = streams_app.App(f"ic-{how}", topic_partitions=1)
    orders = app.topic("orders", key_type=str, value_type=str)
    payments = app.topic("payments", key_type=str, value_type=str)
    out = app.topic("matched", key_type=str, value_type=list)
    join = orders.join if how == "inner" else orders.left_join
    join(payments, JoinWindows(10, grace=2), changelog="input").to(out)
    return app


@pytest.mark.streams_backends("memory")
@pytest.mark.parametrize("how", ["inner", "left"])
async def test_a_buffer_comes_back_from_its_input_after_its_state_is_lost(
    topology_driver: DriverFactory, how: str
) -> None:
    """Records buffered and committed, then the worker killed and its state directory
    deleted: restarted, it restores the buffers from the input topics (no changelog topic of
    theirs exists; a left join's left buffer keeps its own), and records after the restart
    pair with those of either side from before it, each pair once; a left join's null still
    comes only at its window's close."""
    async with topology_driver(restored_app(how)) as driver:
        t = 1_000_000
        await driver.pipe_many(
            "orders", [Input("a", "o1", timestamp=t), Input("b", "o2", timestamp=t + 1_000)]
        )
        await driver.pipe("payments", "p1", key="a", timestamp=t + 2_000)
        await driver.pipe("payments", "p0", key="e", timestamp=t + 500)  # no order yet
        await driver.run_until_idle()
        before = [(r.key, tuple(r.value), r.timestamp) for r in await driver.read("matched")]
        assert before == [("a", ("o1", "p1"), t + 2_000)]
        app_id = f"ic-{how}"
        join_name = next(iter(driver.app.joins))
        for role in ("left", "right"):
            changelog = names.changelog_topic(app_id, f"{join_name}-{role}")
            exists = await driver.backend.partition_count(changelog) is not None
            assert exists == (how == "left" and role == "left"), changelog
        await driver.crash()
        shutil.rmtree(driver.workers[0].state_dir, ignore_errors=True)
        await driver.restart()
        # After the restart: a payment for b (buffered before the crash) and one for a.
        await driver.pipe("payments", "p2", key="b", timestamp=t + 3_000)
        await driver.pipe("payments", "p3", key="a", timestamp=t + 4_000)
        await driver.pipe("orders", "o5", key="e", timestamp=t + 5_000)  # p0 from before
        await driver.pipe("orders", "o3", key="c", timestamp=t + 20_000)  # closes o1, o2, o5
        await driver.run_until_idle()
        got = [(r.key, tuple(r.value), r.timestamp) for r in await driver.read("matched")]
        expected = [
            ("a", ("o1", "p1"), t + 2_000),
            ("b", ("o2", "p2"), t + 3_000),
            ("a", ("o1", "p3"), t + 4_000),
            ("e", ("o5", "p0"), t + 5_000),
        ]
        assert got == expected
        if how == "left":  # o3 waits for its own close: no null for anyone yet
            await driver.pipe("orders", "o4", key="d", timestamp=t + 40_000)
            await driver.run_until_idle()
            got = [(r.key, tuple(r.value), r.timestamp) for r in await driver.read("matched")]
            assert got == [*expected, ("c", ("o3", None), t + 20_000)]


def odd_inputs_app() -> streams_app.App:
    app = streams_app.App("ic-odd", topic_partitions=1)
    orders, payments = orders_payments(app)
    out = app.topic("matched", key_type=str, value_type=list)
    orders.join(payments, JoinWindows(60), changelog="input").to(out)
    return app


def odd_orders(t: int) -> list[Input]:
    """Orders the dispatcher decides differently about: a plain one, an undecodable one (dead-
    lettered), a Faust request envelope (its inner value joins), a tombstone (nothing buffered),
    and one with Faust's reply headers (its value joins as it decodes)."""
    envelope = {
        "__faust": {"ns": "@ReqRepRequest"},
        "reply_to": "replies",
        "correlation_id": "c-1",
        "value": {"n": 3},
    }
    reply = [("Faust-Ag-ReplyTo", b"replies"), ("Faust-Ag-CorrelationId", b"c-2")]
    return [
        Input(b"a", b'{"n": 1}', timestamp=t),
        Input(b"b", b"{not json", timestamp=t + 1),
        Input(b"c", json.dumps(envelope).encode(), timestamp=t + 2),
        Input(b"d", None, timestamp=t + 3),
        Input(b"e", b'{"n":5}', reply, timestamp=t + 4),
    ]


@pytest.mark.streams_backends("memory")
@pytest.mark.parametrize("lose_state", [False, True], ids=["kept", "restored-from-input"])
async def test_restore_from_the_input_decides_each_record_as_the_dispatcher_did(
    topology_driver: DriverFactory, lose_state: bool
) -> None:
    """The orders' buffer gets the same entries from processing and from restore, record by
    record, for each kind of record the dispatcher treats apart: after the state is lost, the
    payments pair with exactly the orders they pair with when it is kept, and the undecodable
    order is dead-lettered once (restore skips it, it does not dead-letter it again)."""
    async with topology_driver(odd_inputs_app()) as driver:
        t = 1_000_000
        await driver.pipe_many("orders", odd_orders(t), raw=True)
        await driver.run_until_idle()
        assert await driver.read("matched") == []
        if lose_state:
            await driver.crash()
            shutil.rmtree(driver.workers[0].state_dir, ignore_errors=True)
            await driver.restart()
        await driver.pipe_many("payments", [Input(k, {"p": k}, timestamp=t + 10) for k in "abcde"])
        await driver.run_until_idle()
        got = [(r.key, tuple(r.value), r.timestamp) for r in await driver.read("matched")]
        assert got == [
            ("a", ({"n": 1}, {"p": "a"}), t + 10),
            ("c", ({"n": 3}, {"p": "c"}), t + 10),
            ("e", ({"n": 5}, {"p": "e"}), t + 10),
        ]
        dead = await driver.read("orders.dlq")
        assert [r.value for r in dead] == [b"{not json"], dead
