"""The Faust-style API on the real broker: group_by, sinks, concurrency, Records, items/events."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import faust

from streams_app import App, Event
from streams_app.readback import read_topics
from tests.runtime.helpers import running_worker, wait_until


class Click(faust.Record, serializer="json"):
    user: str
    page: str


async def wait_for_records(bootstrap: str, topic: str, count: int) -> list:  # type: ignore[type-arg]
    async def enough() -> bool:
        return len((await read_topics(bootstrap, [topic]))[topic]) >= count

    await wait_until(enough)
    return (await read_topics(bootstrap, [topic]))[topic]


async def test_group_by_repartitions_inside_the_transaction(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = App(f"gb-{unique}", broker=bootstrap_servers, topic_partitions=3)
    clicks = app.topic(f"clicks-{unique}", key_type=str, value_type=Click)
    per_page = app.topic(f"per-page-{unique}", key_type=str, value_type=int)
    views = app.Table("views", default=int, key_type=str, value_type=int)

    @app.agent(clicks)
    async def count_pages(stream):  # type: ignore[no-untyped-def]
        async for click in stream.group_by(lambda c: c.page, name="page"):
            views[click.page] += 1
            await per_page.send(key=click.page, value=views[click.page])

    pages = [f"p{i % 7}" for i in range(210)]
    async with running_worker(app, tmp_path / "s"):
        async with app.producer() as producer:
            for i, page in enumerate(pages):  # keyed by user: pages are spread over partitions
                await producer.send(
                    clicks, key=f"u{i % 13}", value=Click(user=f"u{i % 13}", page=page)
                )
        out = await wait_for_records(bootstrap_servers, f"per-page-{unique}", len(pages))
    # Faust's name: <agent>-<source topic>-<name>-repartition.
    repartition = f"tests.runtime.test_api.count_pages-clicks-{unique}-page-repartition"
    data = await read_topics(bootstrap_servers, [repartition], isolation_level="read_committed")
    assert len(data[repartition]) == len(pages)
    # Every repartitioned record carries the lineage of the click that produced it.
    assert all(
        r.lineage is not None and r.lineage[0] == f"clicks-{unique}" for r in data[repartition]
    )
    final: dict[str, int] = {}
    for r in out:
        page = r.key.decode()
        value = json.loads(r.value)
        assert value == final.get(page, 0) + 1  # running count, no gap, no repeat
        final[page] = value
    assert final == dict(Counter(pages))


async def test_yield_sink_concurrency_items_and_events(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = App(f"api-{unique}", broker=bootstrap_servers, topic_partitions=4)
    numbers = app.topic(f"numbers-{unique}", key_type=str, value_type=int)
    doubled = app.topic(f"doubled-{unique}", key_type=str, value_type=int)
    seen_events: list[Event] = []

    @app.agent(numbers, sink=[doubled], concurrency=2)
    async def double(stream):  # type: ignore[no-untyped-def]
        async for _key, value in stream.items():
            yield value * 2

    @app.agent(numbers, name="observer")
    async def observe(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            seen_events.append(event)

    async with running_worker(app, tmp_path / "s") as worker:
        async with app.producer() as producer:
            for i in range(100):
                await producer.send(numbers, key=f"k{i}", value=i)
        out = await wait_for_records(bootstrap_servers, f"doubled-{unique}", 100)
        assert len(worker.runner.actors) == 3  # two instances of `double`, one observer
    assert sorted(json.loads(r.value) for r in out) == [2 * i for i in range(100)]
    # The sink keeps the key of the record being processed (so the output stays co-partitioned).
    assert all(json.loads(r.value) == 2 * int(r.key.decode()[1:]) for r in out)
    assert sorted(e.value for e in seen_events) == list(range(100))
    assert {e.topic for e in seen_events} == {f"numbers-{unique}"}
    offsets_per_partition: dict[int, list[int]] = {}
    for e in seen_events:
        offsets_per_partition.setdefault(e.partition, []).append(e.offset)
    assert all(o == sorted(o) for o in offsets_per_partition.values())  # in order per partition
