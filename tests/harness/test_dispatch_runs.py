"""The dispatcher hands a fetched run of records to the agents in one go and parses a JSON
value once: the agents still see every good record of the run once, in offset order, with
undecodable ones dead-lettered in between (what came before a dead letter handed over first)."""

from __future__ import annotations

import faust
import pytest

from streams_app import App
from streams_app.testing import DriverFactory


class Point(faust.Record, serializer="json"):
    x: int
    y: int


def seeing_app(seen: list[tuple[str, object]]) -> App:
    app = App("dispatch-runs", topic_partitions=1)
    numbers = app.topic("numbers", key_type=str, value_type=int)
    points = app.topic("points", key_type=str, value_type=Point)
    untyped = app.topic("untyped", key_type=str)

    @app.agent(numbers)
    async def add(stream):  # type: ignore[no-untyped-def]
        async for key, n in stream.items():
            seen.append((key, n))

    @app.agent(points)
    async def place(stream):  # type: ignore[no-untyped-def]
        async for key, p in stream.items():
            seen.append((key, p))

    @app.agent(untyped)
    async def echo(stream):  # type: ignore[no-untyped-def]
        async for key, v in stream.items():
            seen.append((key, v))

    return app


@pytest.mark.streams_backends("memory")
async def test_a_run_reaches_the_agents_in_order_around_its_dead_letters(
    topology_driver: DriverFactory,
) -> None:
    seen: list[tuple[str, object]] = []
    app = seeing_app(seen)
    async with topology_driver(app) as driver:
        await driver.stop_worker(0, run=False)  # every record below in one fetched run
        numbers = [b"1", b"2", b"not json", b"3", b'"4"', b"5", b"[6]", b"7"]
        await driver.pipe_many("numbers", [(b"n", v) for v in numbers], raw=True)
        points = [
            b'{"x":1,"y":1}',
            b'{"x":2,"y":2,"__faust":{"ns":"elsewhere.Point"}}',
            b'{"x":"three"}',
            b"[4]",
            b'{"x":5,"y":5}',
        ]
        await driver.pipe_many("points", [(b"p", v) for v in points], raw=True)
        untyped = [
            b'{"a":1}',
            b'{"x":7,"y":8,"__faust":{"ns":"tests.harness.test_dispatch_runs.Point"}}',
            b"{",
            b'"text"',
        ]
        await driver.pipe_many("untyped", [(b"u", v) for v in untyped], raw=True)
        await driver.restart(0)
        await driver.run_until_idle()
        dead = {
            topic: [r.value for r in await driver.read(f"{topic}.dlq")]
            for topic in ("numbers", "points", "untyped")
        }
    by_key: dict[str, list[object]] = {}
    for key, value in seen:
        by_key.setdefault(key, []).append(value)
    # value_type=int: JSON integers only.
    assert by_key["n"] == [1, 2, 3, 5, 7]
    assert dead["numbers"] == [b"not json", b'"4"', b"[6]"]
    assert by_key["p"] == [Point(x=1, y=1), Point(x=2, y=2), Point(x=5, y=5)]
    assert dead["points"] == [b'{"x":"three"}', b"[4]"]
    # No declared type: a JSON object naming a known model becomes that model (Faust's
    # autodetection); everything else stays as decoded.
    assert by_key["u"] == [{"a": 1}, Point(x=7, y=8), "text"]
    assert dead["untyped"] == [b"{"]


@pytest.mark.streams_backends("memory")
async def test_text_keys_decoded_inline_dead_letter_what_is_not_utf8(
    topology_driver: DriverFactory,
) -> None:
    """Text keys are decoded inline by the dispatcher (``codecs.reads_raw_text``); a key that
    is not UTF-8 is still dead-lettered with the key codec's own error, and the good records
    around it reach the agent in order with the same keys the codec would give."""
    seen: list[tuple[str, object]] = []
    app = seeing_app(seen)
    async with topology_driver(app) as driver:
        await driver.stop_worker(0, run=False)  # every record below in one fetched run
        keys = [b"a", "é東".encode(), b"\xff\xfe", b"", b"b\x80", b"c"]
        await driver.pipe_many("numbers", [(k, b"%d" % i) for i, k in enumerate(keys)], raw=True)
        await driver.restart(0)
        await driver.run_until_idle()
        dead = await driver.read("numbers.dlq")
    assert seen == [("a", 0), ("é東", 1), ("", 3), ("c", 5)]
    assert [r.value for r in dead] == [b"2", b"4"]
    for record in dead:
        errors = [v for k, v in record.headers if b"not UTF-8" in v]
        assert errors, record.headers
