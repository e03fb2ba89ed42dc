"""Faust's surface on the runtime, broker-free (the in-memory Kafka model of the test harness):
stream operators, agent-owned topics, channels, set and global tables, leader timers, RPC."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import faust
import pytest

import streams_app
from streams_app import App
from streams_app.runtime.errors_policy import H_ATTEMPTS
from streams_app.testing import DriverFactory
from tests.runtime.helpers import wait_until

pytestmark = pytest.mark.streams_backends("memory")
#: On the real broker as well (a test's own mark overrides the module's): every capability of
#: the surface keeps a real-broker case in ``make test``.
BOTH = pytest.mark.streams_backends("memory", "kafka")


class Click(faust.Record):
    user: str
    page: str


def _values(records: list[Any]) -> list[Any]:
    return [r.value for r in records]


async def test_filter_take_enumerate_echo(topology_driver: DriverFactory) -> None:
    app = App("ops", topic_partitions=1)
    numbers = app.topic("numbers", value_type=int)
    sums = app.topic("sums", value_type=int)
    echoed = app.topic("echoed", value_type=int)
    indexed = app.topic("indexed")

    @app.agent(numbers)
    async def batches(stream):  # type: ignore[no-untyped-def]
        async for batch in stream.filter(lambda v: v % 2 == 0).echo(echoed).take(3, within=60):
            await sums.send(value=sum(batch))

    @app.agent(numbers, name="enumerate")
    async def enumerate_(stream):  # type: ignore[no-untyped-def]
        async for index, value in stream.enumerate(start=1):
            await indexed.send(value=[index, value])

    async with topology_driver(app) as driver:
        await driver.pipe_many("numbers", [(None, i) for i in range(14)])
        await driver.run_until_idle()
        # 7 even numbers: two full batches, and the rest flushed before the commit.
        assert _values(await driver.read("sums")) == [0 + 2 + 4, 6 + 8 + 10, 12]
        assert _values(await driver.read("echoed")) == list(range(0, 14, 2))
        assert _values(await driver.read("indexed")) == [[i + 1, i] for i in range(14)]


async def test_group_by_model_field_and_through(topology_driver: DriverFactory) -> None:
    app = App("gb", topic_partitions=2)
    clicks = app.topic("clicks", key_type=str, value_type=Click)
    relay = app.topic("relay", key_type=str, value_type=Click)
    views = app.Table("views", default=int, help="page views")

    @app.agent(clicks)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for click in stream.group_by(Click.page):
            views[click.page] += 1

    @app.agent(clicks, name="relayed")
    async def relayed(stream):  # type: ignore[no-untyped-def]
        async for _ in stream.through(relay):
            pass

    pages = ["a", "b", "a", "c", "a"]
    async with topology_driver(app) as driver:
        for i, page in enumerate(pages):
            await driver.pipe("clicks", Click(user=f"u{i}", page=page), key=f"u{i}")
        await driver.run_until_idle()
        assert await driver.table("views") == dict(Counter(pages))
        # Faust's name for the repartition topic; keys in the source's key codec (the page).
        repartition = "tests.faust_compat.test_surface.count-clicks-Click.page-repartition"
        assert sorted(r.key for r in await driver.read(repartition)) == sorted(pages)
        assert len(await driver.read("relay")) == len(pages)
        assert views.help == "page views"


@BOTH
async def test_agent_owned_topic_channel_and_message(topology_driver: DriverFactory) -> None:
    app = App("own", topic_partitions=2)
    out = app.topic("out")
    doubled = app.channel(value_type=int)
    positions: list[tuple[str, int, int]] = []

    @app.agent(value_type=int)
    async def source(stream):  # type: ignore[no-untyped-def]
        async for value in stream:
            message = streams_app.current_event().message  # type: ignore[union-attr]
            positions.append((message.tp.topic, message.tp.partition, message.offset))
            await doubled.send(value=value * 2)

    async def forward(prefix: str, stream):  # type: ignore[no-untyped-def]
        async for value in stream:
            await out.send(value=f"{prefix}{value}")

    app.agent(doubled, name="forwarder")(functools.partial(forward, "x"))

    @app.timer(1.0)
    async def feed(the_app: App) -> None:
        assert the_app is app
        if not positions:
            for value in (1, 2, 3):
                await source.send(value=value)

    async with topology_driver(app) as driver:
        await driver.advance_time(1.0)
        await driver.run_until_idle()
        assert sorted(_values(await driver.read("out"))) == ["x2", "x4", "x6"]
        owned = "own-tests.faust_compat.test_surface.source"  # Faust's name: <app id>-<agent>
        assert {topic for topic, _, _ in positions} == {owned}


@BOTH
async def test_set_table_and_global_table(topology_driver: DriverFactory) -> None:
    app = App("tables", topic_partitions=2)
    joins = app.topic("joins", key_type=str, value_type=str)
    lookups = app.topic("lookups", key_type=str, value_type=str)
    answers = app.topic("answers", key_type=str)
    members = app.SetTable("members", value_type=str)
    everyone = app.GlobalTable("everyone", default=int)

    @app.agent(joins)
    async def join(stream):  # type: ignore[no-untyped-def]
        async for room, name in stream.items():
            if name.startswith("-"):
                members[room].discard(name[1:])
            else:
                members[room].add(name)
                everyone[name] += 1

    @app.agent(lookups)
    async def lookup(stream):  # type: ignore[no-untyped-def]
        async for key, name in stream.items():
            await answers.send(key=key, value=everyone.get(name, 0))

    async with topology_driver(app) as driver:
        for room, name in [("r1", "ann"), ("r1", "bob"), ("r2", "cy"), ("r1", "-ann")]:
            await driver.pipe("joins", name, key=room)
        await driver.run_until_idle()
        assert await driver.table("members") == {"r1": {"bob"}, "r2": {"cy"}}
        # A global table read from a partition other than the writer's sees every key.
        for key in ("k1", "k2", "k3", "k4"):
            await driver.pipe("lookups", "cy", key=key)
        await driver.run_until_idle()
        assert {r.value for r in await driver.read("answers")} == {1}


@BOTH
async def test_every_worker_holds_the_whole_global_table(topology_driver: DriverFactory) -> None:
    """Two workers: a worker that joins restores every partition of a GlobalTable at start
    (those its tasks will not own too), each worker's tasks read prices written by the
    other's, and prices committed later reach the other worker's copy."""
    app = App("globals", topic_partitions=4)
    prices = app.topic("prices", key_type=str, value_type=int)
    lookups = app.topic("lookups", key_type=str, value_type=str)
    answers = app.topic("answers", key_type=str)
    price = app.GlobalTable("price", key_type=str, value_type=int)

    @app.agent(prices)
    async def set_price(stream):  # type: ignore[no-untyped-def]
        async for item, value in stream.items():
            price[item] = value

    @app.agent(lookups)
    async def lookup(stream):  # type: ignore[no-untyped-def]
        async for key, item in stream.items():
            await answers.send(key=key, value=[item, price.get(item)])

    async def answered(driver: Any, expected: dict[str, int], round_: int) -> None:
        for partition in range(4):
            for item in expected:
                key = f"{round_}-{partition}-{item}"
                await driver.pipe("lookups", item, key=key, partition=partition)
        await driver.run_until_idle()
        got = [r.value for r in await driver.read("answers") if r.key.startswith(f"{round_}-")]
        assert sorted(map(tuple, got)) == sorted(list(expected.items()) * 4)

    def held(driver: Any) -> list[dict[str, int]]:
        return [dict(h.require_worker().table_items(price)) for h in driver.live_workers]

    items = {f"item{i}": i for i in range(8)}
    async with topology_driver(app) as driver:
        await driver.pipe_many("prices", list(items.items()))
        await driver.run_until_idle()  # one worker: every task, every price
        await driver.add_worker()
        assert held(driver) == [items, items]
        owned = [
            {tp[1] for tp in h.require_worker().tasks.by_tp if tp[0] == "lookups"}
            for h in driver.live_workers
        ]
        assert all(owned) and set.union(*owned) == {0, 1, 2, 3}, owned
        await answered(driver, items, 1)

        updated = {item: value + 100 for item, value in items.items()}
        await driver.pipe_many("prices", list(updated.items()))
        await driver.run_until_idle()
        # The other worker applies them from the changelog after the commit: a small delay.
        await wait_until(lambda: held(driver) == [updated, updated], timeout=30)
        await answered(driver, updated, 2)


def _next_odd_utc_minute(now: float) -> float:
    """The first instant after ``now`` (epoch seconds) that starts an odd UTC minute: an even
    minute in Asia/Kathmandu (UTC+05:45)."""
    return ((now - 60) // 120 + 1) * 120 + 60


@BOTH
async def test_a_crontab_runs_at_each_matching_time_in_its_timezone(
    topology_driver: DriverFactory,
) -> None:
    app = App("cron", topic_partitions=1)
    inputs = app.topic("cron-in")
    runs = app.topic("cron-runs", value_type=int)
    fired: list[int] = []

    @app.agent(inputs)
    async def idle(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.crontab("*/2 * * * *", timezone="Asia/Kathmandu")
    async def every_other_minute() -> None:
        fired.append(len(fired) + 1)
        await runs.send(value=len(fired))

    async with topology_driver(app) as driver:
        now = driver.clock.time()
        if _next_odd_utc_minute(now) - now < 2:
            # Too close to a matching minute for "a second early" to be ahead of the clock
            # (the clock starts at the real time): let that minute's run happen first, so
            # that the runs counted below are the ones the test places (before this, a start
            # in the 2 s before an odd minute skipped it, and its run came "a second early").
            await driver.advance_time(3)
            await driver.run_until_idle()
        earlier = _values(await driver.read("cron-runs"))
        assert earlier == list(range(1, len(earlier) + 1))  # nothing, or that minute's one run
        first = _next_odd_utc_minute(driver.clock.time())
        await driver.advance_time(first - driver.clock.time() - 1)
        # Not past the crontab's time while the worker settles (on a slow real broker the
        # harness moved the clock to the next timer: the crontab's, and it ran early).
        await driver.run_until_idle(max_time=0.5)
        n = len(earlier)
        assert _values(await driver.read("cron-runs")) == earlier  # a second early
        await driver.advance_time(2)
        await driver.run_until_idle()
        assert _values(await driver.read("cron-runs")) == [*earlier, n + 1]  # a second late
        await driver.advance_time(4 * 60)
        await driver.run_until_idle()
        assert _values(await driver.read("cron-runs")) == [*earlier, n + 1, n + 2, n + 3]


async def test_on_leader_timer_keeps_a_leader_table(topology_driver: DriverFactory) -> None:
    app = App("leader", topic_partitions=2)
    ticks = app.topic("ticks", value_type=int)
    sequence = app.Table("sequence", default=int, partitions=1)
    inputs = app.topic("inputs")

    @app.agent(inputs)
    async def idle(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.timer(1.0, on_leader=True)
    async def tick() -> None:
        number = sequence["n"] + 1
        sequence["n"] = number
        await ticks.send(value=number)

    async with topology_driver(app, workers=2) as driver:
        for _ in range(4):
            await driver.advance_time(1.0)
        await driver.run_until_idle()
        assert sorted(_values(await driver.read("ticks"))) == [1, 2, 3, 4]  # one leader, no gap
        assert await driver.table("sequence") == {"n": 4}


async def test_rpc_ask_join_map(topology_driver: DriverFactory) -> None:
    app = App("rpc", topic_partitions=2)
    results = app.topic("results")

    @app.agent()
    async def square(stream):  # type: ignore[no-untyped-def]
        async for value in stream:
            yield value * value

    @app.agent(value_type=int)
    async def caller(stream):  # type: ignore[no-untyped-def]
        async for value in stream:
            asked = await square.ask(value)
            joined = await square.join([value, value + 1])
            mapped = sorted([x async for x in square.map([value, 2])])
            await results.send(value=[asked, joined, mapped])

    async with topology_driver(app) as driver:
        for value in (3, 5):
            await driver.pipe(caller.topic.name, value)
        await driver.run_until_idle()
        assert sorted(_values(await driver.read("results"))) == [
            [9, [9, 16], [4, 9]],
            [25, [25, 36], [4, 25]],
        ]


async def test_a_failing_record_of_an_agent_parked_on_rpc_is_retried_then_dead_lettered(
    topology_driver: DriverFactory,
) -> None:
    """The per-record error policy with an agent that parks on ``ask``: the failing record (on
    partition 0) is retried in a transaction of its own only once the agent is done with what
    another partition handed it (committing while it waits for its reply would cover records
    it has not finished, and the retry's abort would then lose them), its partition backing
    off in between, then dead-lettered; every good record is committed once."""
    app = App("rpc-errors", topic_partitions=2, retry_backoff=0.2)
    results = app.topic("results", value_type=int)
    attempts: Counter[int] = Counter()

    @app.agent()
    async def square(stream):  # type: ignore[no-untyped-def]
        async for value in stream:
            yield value * value

    @app.agent(value_type=int)
    async def caller(stream):  # type: ignore[no-untyped-def]
        async for value in stream:
            asked = await square.ask(value)
            attempts[value] += 1
            if value == 13:
                raise RuntimeError("refusing 13")
            await results.send(value=asked)

    good = list(range(20, 60))
    async with topology_driver(app) as driver:
        await driver.pipe(caller.topic.name, 13, partition=0)
        # Partition 1 keeps receiving while 13 backs off, so its retries meet busy agents.
        for start in range(0, len(good), 4):
            for value in good[start : start + 4]:
                await driver.pipe(caller.topic.name, value, partition=1)
            await driver.advance_time(0.1)
        await driver.run_until_idle(max_time=60)
        assert sorted(_values(await driver.read("results"))) == sorted(v * v for v in good)
        (dead,) = await driver.read(f"{caller.topic.name}.dlq")
        assert dead.header(H_ATTEMPTS) == b"4"  # the first try and 3 retries
        assert attempts[13] == 4
