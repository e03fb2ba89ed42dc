"""The count topology end to end on the real broker, in-process: the smallest stateful check."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from streams_app import App
from streams_app.readback import read_topics
from tests.runtime.helpers import running_worker, wait_until


def count_app(unique: str, bootstrap: str, **settings: object) -> App:
    app = App(f"count-{unique}", broker=bootstrap, topic_partitions=3, **settings)
    events = app.topic(f"in-{unique}", key_type=str, value_serializer="raw")
    totals = app.topic(f"out-{unique}", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(events)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for key, _ in stream.items():
            counts[key] += 1
            await totals.send(key=key, value=counts[key])

    return app


async def test_counts_each_record_once(bootstrap_servers: str, unique: str, tmp_path: Path) -> None:
    app = count_app(unique, bootstrap_servers)
    keys = [f"k{i % 17}" for i in range(600)]
    async with running_worker(app, tmp_path / "state") as worker:
        async with app.producer() as producer:
            for key in keys:
                await producer.send(f"in-{unique}", key=key, value=b"x")

        async def all_out() -> bool:
            out = await read_topics(bootstrap_servers, [f"out-{unique}"])
            return len(out[f"out-{unique}"]) >= len(keys)

        await wait_until(all_out)
        assert worker.producer.transactions_committed > 0

    source = f"in-{unique}"
    read = await read_topics(bootstrap_servers, [f"out-{unique}", source])
    out, inputs = read[f"out-{unique}"], read[source]
    assert len(out) == len(keys)
    expected = Counter(keys)
    per_key: dict[str, list[int]] = {}
    # Each output names the input record it came from (src_* headers): one of the same key,
    # the n-th of its key for the count n, each input once.
    nth: dict[tuple[int, int], tuple[str, int]] = {}
    seen: Counter[str] = Counter()
    for record in inputs:
        key = record.key.decode()
        seen[key] += 1
        nth[(record.partition, record.offset)] = (key, seen[key])
    sources = []
    for record in out:
        key, value = record.key.decode(), json.loads(record.value)
        per_key.setdefault(key, []).append(value)
        lineage = record.lineage
        assert lineage is not None and lineage[0] == source, record
        origin = lineage[1:]
        assert nth.get(origin) == (key, value), f"{key}={value} names input {origin}"
        sources.append(origin)
    assert sorted(sources) == sorted(nth), "each input record is the source of one output"
    for key, values in per_key.items():
        assert values == list(range(1, expected[key] + 1)), key
    changelog = await read_topics(bootstrap_servers, [f"count-{unique}-counts-changelog"])
    # Table keys are JSON in the changelog, as Faust writes them.
    final = {
        json.loads(r.key): json.loads(r.value)
        for r in changelog[f"count-{unique}-counts-changelog"]
    }
    assert final == {k: v for k, v in expected.items()}
