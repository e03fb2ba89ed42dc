"""A join takes a run of records at once (``forward_run``: the dispatcher hands a run of one
partition to a join that is its topic's only feeder, and the join sends the run's results
together; a stream-table or stream-stream join goes through the run in one loop, others
through ``JoinProcessor.run``). What must not change: each result once, in the order the
records came, with its record's lineage; a record that needs an await mid-run (no key: a left
join emits it at once) keeps its place; a joiner failing mid-run is that record's failure, and
only that record goes to the dead-letter topic. Run by the real worker on the in-memory Kafka
model; the real broker's cases are test_enrichment_kafka.py, test_stream_stream_kafka.py and
the differential test against Kafka Streams (test_vs_kafka_streams.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import streams_app
from streams_app.app.topic import Topic
from streams_app.runtime.errors_policy import H_SOURCE_OFFSET
from streams_app.runtime.joins.base import JoinProcessor
from streams_app.runtime.joins.stream_stream import StreamStreamProcessor
from streams_app.runtime.joins.stream_table import StreamTableJoin
from streams_app.testing import DriverFactory, Input
from streams_app.topology.contract import Event

pytestmark = pytest.mark.streams_backends("memory")

CUSTOMERS = {"c0": "ann", "c1": "bob", "c2": "cy"}


def orders() -> list[Input]:
    """40 orders on one partition: most keyed to a customer, some to none (a left join's
    None), one without a key (KIP-962: emitted at once, through an await) and one without a
    value (dropped), in the middle of the run."""
    out = []
    for n in range(40):
        key: str | None = f"c{n % 4}"  # c3 has no customer
        value: str | None = f"o{n}"
        if n == 17:
            key = None
        if n == 23:
            value = None
        out.append(Input(key, value, timestamp=100 + n, partition=0))
    return out


def enrichment(failing: set[str], **settings: Any) -> tuple[streams_app.App, dict[str, int]]:
    """Orders left-joined with customers to ``enriched``, and read by an agent that copies
    each result to ``seen``; the joiner fails on the orders in ``failing`` (each once: a
    retry succeeds)."""
    attempts: dict[str, int] = {}
    app = streams_app.App("join-runs", broker="kafka://127.0.0.1:1", topic_partitions=1, **settings)
    customers_topic = app.topic(
        "customers", key_type=str, value_type=str, config={"cleanup.policy": "compact"}
    )
    orders_topic = app.topic("orders", key_type=str, value_type=str)
    enriched = app.topic("enriched", key_type=str, value_type=str)
    seen = app.topic("seen", key_type=str, value_type=str)
    customers = app.Table("customers", source=customers_topic)

    def joiner(order: str, customer: str | None) -> str:
        if order in failing:
            attempts[order] = attempts.get(order, 0) + 1
            if settings.get("error_policy") == "dlq" or attempts[order] == 1:
                raise RuntimeError(f"refusing {order}")
        return f"{order}:{customer}"

    joined = orders_topic.left_join(customers, joiner=joiner)
    joined.to(enriched)

    @app.agent(joined)
    async def copy(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            await seen.send(key=key, value=value)

    return app, attempts


def expected(skip: set[str] = frozenset()) -> list[tuple[str | None, str]]:  # type: ignore[assignment]
    out = []
    for record in orders():
        if record.value is None or record.value in skip:
            continue
        out.append((record.key, f"{record.value}:{CUSTOMERS.get(record.key or '')}"))
    return out


async def _runs(driver: Any, app: streams_app.App, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pipe the customers, then the orders in one go; the lengths of the runs the join took."""
    runs: list[int] = []
    real = StreamTableJoin.forward_run

    def counting(self: StreamTableJoin, events: list[Any]) -> Any:
        runs.append(len(events))
        return real(self, events)

    monkeypatch.setattr(StreamTableJoin, "forward_run", counting)
    for key, name in CUSTOMERS.items():
        await driver.pipe("customers", name, key=key, timestamp=1, partition=0)
    await driver.run_until_idle()
    return runs


async def test_a_run_gives_each_result_once_in_order_with_its_records_lineage(
    topology_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _ = enrichment(set())
    async with topology_driver(app) as driver:
        runs = await _runs(driver, app, monkeypatch)
        piped = await driver.pipe_many("orders", orders())
        await driver.run_until_idle()
        assert max(runs) > 10  # the join took the orders a run at a time
        out = await driver.read("enriched")
        assert [(r.key, r.value) for r in out] == expected()
        # Each result's lineage is its own order's offset (the null value's has none).
        offsets = [p.offset for p, i in zip(piped, orders(), strict=True) if i.value is not None]
        assert [r.lineage[2] if r.lineage else -1 for r in out] == offsets
        assert [r.timestamp for r in out] == [i.timestamp for i in orders() if i.value is not None]
        # The agent reading the join got the same results, in the same order.
        assert [(r.key, r.value) for r in await driver.read("seen")] == expected()


async def test_a_joiner_failing_mid_run_dead_letters_that_record_only(
    topology_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, attempts = enrichment({"o9", "o30"}, error_policy="dlq", max_retries=0)
    async with topology_driver(app) as driver:
        runs = await _runs(driver, app, monkeypatch)
        piped = await driver.pipe_many("orders", orders())
        await driver.run_until_idle()
        assert max(runs) > 10
        assert attempts == {"o9": 1, "o30": 1}
        out = await driver.read("enriched")
        assert [(r.key, r.value) for r in out] == expected({"o9", "o30"})
        assert [(r.key, r.value) for r in await driver.read("seen")] == expected({"o9", "o30"})
        dead = await driver.read("orders.dlq")
        assert [d.header(H_SOURCE_OFFSET) for d in dead] == [
            str(piped[9].offset).encode(),
            str(piped[30].offset).encode(),
        ]


async def test_a_joiner_failing_once_mid_run_is_retried_and_every_result_lands_once(
    topology_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, attempts = enrichment({"o12"}, error_policy="retry", retry_backoff=0.05)
    async with topology_driver(app) as driver:
        await _runs(driver, app, monkeypatch)
        await driver.pipe_many("orders", orders())
        await driver.run_until_idle()
        assert attempts == {"o12": 2}
        # The aborted attempt's results (o0..o11, sent before the failure) are not read.
        assert [(r.key, r.value) for r in await driver.read("enriched")] == expected()
        assert [(r.key, r.value) for r in await driver.read("seen")] == expected()


@pytest.mark.streams_backends("kafka")  # the real producer's batch path
async def test_after_the_send_that_begins_the_transaction_the_run_takes_the_batch_path(
    topology_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first result of a transaction is sent with an await (it begins the transaction);
    the rest of its run goes the batch path, not one await each."""
    app, _ = enrichment(set())
    awaited: list[str] = []
    real = Topic.send

    async def counting(self: Topic, *args: Any, **kwargs: Any) -> Any:
        if self.name == "enriched":  # the join's (the agent's sends go to "seen")
            awaited.append(kwargs["value"])
        return await real(self, *args, **kwargs)

    async with topology_driver(app) as driver:
        runs = await _runs(driver, app, monkeypatch)
        monkeypatch.setattr(Topic, "send", counting)
        await driver.pipe_many("orders", orders())
        await driver.run_until_idle()
        assert [(r.key, r.value) for r in await driver.read("enriched")] == expected()
        assert runs == [40]  # one run, with two records in it that need an await
        # At most one awaited send for each stretch between them (the one that began the
        # transaction): of 38 results.
        assert 1 <= len(awaited) <= 3


async def test_a_long_run_of_a_join_with_grace_where_every_record_awaits(
    topology_driver: DriverFactory,
) -> None:
    """With ``grace=`` every record is buffered through an await: a run of 3,000 of them is
    gone through one after another (not an await nested per record), each result once."""
    app = streams_app.App(
        "join-runs-grace",
        broker="kafka://127.0.0.1:1",
        topic_partitions=1,
        error_policy="stop",  # a failure (a RecursionError) is not retried away
    )
    prices = app.Table(
        "prices",
        source=app.topic("prices", key_type=str, value_type=int),
        versioned=timedelta(hours=1),
    )
    orders_topic = app.topic("orders", key_type=str, value_type=str)
    out = app.topic("priced", key_type=str, value_type=list)
    orders_topic.join(prices, grace=1).to(out)
    async with topology_driver(app) as driver:
        await driver.pipe("prices", 7, key="apple", timestamp=1, partition=0)
        await driver.run_until_idle()
        n = 3_000
        await driver.pipe_many(
            "orders", [Input("apple", f"o{i}", timestamp=10 + i, partition=0) for i in range(n)]
        )
        await driver.run_until_idle()
        got = [(r.value[0], r.timestamp) for r in await driver.read("priced")]
        # Released as stream time passes each order's time plus grace (1 s): all but the
        # last second's.
        assert got == [(f"o{i}", 10 + i) for i in range(n - 1_000)]


async def test_a_run_where_every_record_awaits_is_gone_through_in_a_loop() -> None:
    """Unit test of ``JoinProcessor.run`` alone: 5,000 records that each need an await (as
    every record of a join with ``grace=`` does) are awaited one after another, in order,
    not nested an await deeper per record (which ran out of Python's recursion limit)."""
    processor = JoinProcessor.__new__(JoinProcessor)  # run() uses none of a join's parts
    processor._collecting = None
    done: list[int] = []

    async def buffered(n: int) -> None:
        done.append(n)

    events = [
        Event("orders", 0, n, n, "k", "v", (), b"k", b"v", None)  # type: ignore[arg-type]
        for n in range(5_000)
    ]
    rest = processor.run(lambda event: buffered(event.offset), events)
    assert rest is not None
    await rest
    assert done == list(range(5_000))


def payments_app(name: str, joiner: Any) -> streams_app.App:
    """Orders joined with payments within an hour (inner), failures dead-lettered."""
    app = streams_app.App(
        name,
        broker="kafka://127.0.0.1:1",
        topic_partitions=1,
        error_policy="dlq",
        max_retries=0,
    )
    orders_topic = app.topic("orders", key_type=str, value_type=str)
    payments = app.topic("payments", key_type=str, value_type=str)
    matched = app.topic("matched", key_type=str, value_type=str)
    orders_topic.join(payments, streams_app.JoinWindows(3600), joiner=joiner).to(matched)
    return app


async def pipe_payments_then_orders(driver: Any) -> tuple[list[Input], list[Any]]:
    """Four customers' payments, then 40 orders of them in one run: ``(inputs, piped)``."""
    for c in range(4):
        await driver.pipe("payments", f"p{c}", key=f"c{c}", timestamp=50, partition=0)
    await driver.run_until_idle()
    inputs = [Input(f"c{n % 4}", f"o{n}", timestamp=100 + n, partition=0) for n in range(40)]
    piped = await driver.pipe_many("orders", inputs)
    await driver.run_until_idle()
    return inputs, piped


async def test_a_stream_stream_joiner_failing_mid_run_dead_letters_that_record_only(
    topology_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream-stream join's run loop (``StreamStreamProcessor.join_run``): 40 orders in
    one run, each paired with its customer's payment buffered before; the joiner fails on two
    of them under ``dlq``: exactly those two are dead-lettered (the run's other results land
    once, in order, with their own orders' lineage)."""
    failing = {"o9", "o30"}

    def joiner(order: str, payment: str) -> str:
        if order in failing:
            raise RuntimeError(f"refusing {order}")
        return f"{order}:{payment}"

    app = payments_app("join-runs-ss", joiner)
    runs: list[int] = []
    real = StreamStreamProcessor.join_run

    def counting(self: StreamStreamProcessor, side: int, events: list[Any]) -> Any:
        runs.append(len(events))
        return real(self, side, events)

    monkeypatch.setattr(StreamStreamProcessor, "join_run", counting)
    async with topology_driver(app) as driver:
        inputs, piped = await pipe_payments_then_orders(driver)
        assert max(runs) > 10  # the orders came a run at a time
        kept = [(i, p) for i, p in zip(inputs, piped, strict=True) if i.value not in failing]
        out = await driver.read("matched")
        assert [(r.key, r.value) for r in out] == [
            (i.key, f"{i.value}:p{int(str(i.key)[1:])}") for i, _ in kept
        ]
        assert [r.lineage[2] if r.lineage else -1 for r in out] == [p.offset for _, p in kept]
        assert [r.timestamp for r in out] == [i.timestamp for i, _ in kept]
        dead = await driver.read("orders.dlq")
        assert [d.header(H_SOURCE_OFFSET) for d in dead] == [
            str(piped[9].offset).encode(),
            str(piped[30].offset).encode(),
        ]


async def test_a_put_failing_mid_run_dead_letters_that_record_only(
    topology_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inner stream-stream join's run buffers its records at the end of the run
    (``JoinWindowTransaction.put_all``); one that cannot be buffered (here: a store that
    refuses it) is still that record's failure: only it is dead-lettered, and every other
    order of the run is paired once."""
    from streams_app.state.join_windows import JoinWindowTransaction

    app = payments_app("join-runs-put", lambda o, p: f"{o}:{p}")
    put, put_all = JoinWindowTransaction.put, JoinWindowTransaction.put_all
    batched: list[int] = []

    def refusing_put(
        self: JoinWindowTransaction, key: Any, t: int, seq: int, value: Any, *a: Any
    ) -> bool:
        if value == "o17":
            raise RuntimeError("refusing o17")
        return put(self, key, t, seq, value, *a)

    def refusing_put_all(self: JoinWindowTransaction, rows: list[Any]) -> int:
        batched.append(len(rows))
        if any(row[3] == "o17" for row in rows):
            raise RuntimeError("refusing o17")
        return put_all(self, rows)

    monkeypatch.setattr(JoinWindowTransaction, "put", refusing_put)
    monkeypatch.setattr(JoinWindowTransaction, "put_all", refusing_put_all)
    async with topology_driver(app) as driver:
        inputs, piped = await pipe_payments_then_orders(driver)
        assert max(batched) > 10  # the orders' puts went together
        kept = [i for i in inputs if i.value != "o17"]
        out = await driver.read("matched")
        assert [(r.key, r.value) for r in out] == [
            (i.key, f"{i.value}:p{int(str(i.key)[1:])}") for i in kept
        ]
        dead = await driver.read("orders.dlq")
        assert [d.header(H_SOURCE_OFFSET) for d in dead] == [str(piped[17].offset).encode()]


async def test_a_stream_table_run_is_encoded_and_headed_in_one_pass(
    topology_driver: DriverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream-table join's run goes out through ``send_results_nowait``: each result
    encoded and given its record's lineage header in one pass, its key the record's own bytes
    where both key codecs are plain text; a sink whose keys are JSON gets them encoded as
    JSON (the record's bytes would not decode there). The rest of a run the batch path
    refused at first (no transaction begun yet) goes the same way."""
    app, _ = enrichment(set())
    keyed_json = app.topic("enriched-json", key_serializer="json", value_type=str)
    join = next(iter(app.joins.values()))
    join.to(keyed_json)
    passes: list[tuple[str, bool]] = []
    unsourced: list[str] = []
    real, real_results = Topic.encode_sourced_run, Topic.encode_results

    def counting(self: Topic, results: Any, header: str, fmt: bytes, raw: bool) -> Any:
        passes.append((self.name, raw))
        return real(self, results, header, fmt, raw)

    def encoding(self: Topic, results: Any) -> Any:
        unsourced.append(self.name)
        return real_results(self, results)

    monkeypatch.setattr(Topic, "encode_sourced_run", counting)
    monkeypatch.setattr(Topic, "encode_results", encoding)
    async with topology_driver(app) as driver:
        await _runs(driver, app, monkeypatch)
        piped = await driver.pipe_many("orders", orders())
        await driver.run_until_idle()
        assert ("enriched", True) in passes and ("enriched-json", False) in passes
        assert not any(raw for name, raw in passes if name == "enriched-json")
        # The run's rest after the send that began the transaction (and after each record
        # that awaited) went the one-pass way too: nothing encoded a second time.
        assert unsourced == []
        offsets = [p.offset for p, i in zip(piped, orders(), strict=True) if i.value is not None]
        for name in ("enriched", "enriched-json"):
            out = await driver.read(name)
            assert [(r.key, r.value) for r in out] == expected()
            assert [r.lineage[2] if r.lineage else -1 for r in out] == offsets
