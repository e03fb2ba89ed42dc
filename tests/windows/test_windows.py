"""Windowed tables on the real broker, against results computed independently in the test.

Tumbling, hopping, sliding and session windows over a few thousand records, some out of order
within grace and some late (``data.generate``): every window's final count is emitted once and
equals the oracle's (``data.expected``, which uses no streams_app code), late records are
counted (and, for the tumbling table, dead-lettered with the reason), and expired windows are
gone from RocksDB, from the changelog's compacted view, and from a fresh worker's restored
store.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streams_app.errors import LateRecord
from streams_app.readback import group_lag, read_topics, wait_committed
from streams_app.runtime.errors_policy import H_ERROR_TYPE
from streams_app.state.windowed import SlidingValue, WindowKey
from tests.runtime.helpers import running_worker, wait_until
from tests.windows.apps import KINDS, windowed_counts_app
from tests.windows.data import Dataset, closed_by_end, expected, generate
from tests.windows.test_vs_kafka_streams import create_topics, produce

pytestmark = pytest.mark.kafka


def live_windows(data: Dataset, finals: dict[str, Counter[tuple[str, int, int]]]) -> dict[str, Any]:
    """The windows retention still keeps once each partition's stream time is at its end
    (retention: Kafka Streams' defaults, size + grace, 2 * size + grace, gap + grace; sliding
    windows' counted from the newest window start, as Kafka Streams' window store counts it)."""
    s = data.sizes
    end = {p: max(r.ts for r in records) for p, records in data.by_partition().items()}
    partition = {r.key: r.partition for r in data.records}
    newest: dict[int, int] = {}
    for w in finals["sliding"]:
        newest[partition[w[0]]] = max(newest.get(partition[w[0]], w[1]), w[1])
    kept = {
        "tumbling": lambda w, p: w[1] + s.tumbling + s.grace >= end[p],
        "hopping": lambda w, p: w[1] + s.hopping + s.grace >= end[p],
        "sliding": lambda w, p: w[1] + 2 * s.sliding + s.grace > newest[p],
        "session": lambda w, p: w[2] + s.session_gap + s.grace >= end[p],
    }
    return {
        kind: {w: n for w, n in finals[kind].items() if kept[kind](w, partition[w[0]])}
        for kind in KINDS
    }


def stored(items: Any) -> dict[tuple[str, int, int], int]:
    out = {}
    for window, value in items:
        assert isinstance(window, WindowKey)
        out[(window.key, window.start, window.end)] = (
            value.value if isinstance(value, SlidingValue) else value
        )
    return out


async def test_windows_equal_independent_results_and_expire(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    data = generate(seed=7, per_partition=1_500, partial=False)
    want = expected(data)
    topic, prefix = f"views-{unique}", f"final-{unique}-"
    await create_topics(bootstrap_servers, [topic], data.partitions)
    await produce(bootstrap_servers, topic, data.records)
    app_id = f"windows-{unique}"

    def make_app() -> Any:
        return windowed_counts_app(
            app_id,
            input_topic=topic,
            out_prefix=prefix,
            sizes=data.sizes,
            partitions=data.partitions,
            late_records="dlq",
            broker=bootstrap_servers,
            max_poll_records=500,
            session_timeout=30.0,
        )

    app = make_app()
    async with running_worker(app, tmp_path / "first") as worker:

        async def done() -> bool:
            return not await group_lag(bootstrap_servers, app_id, [topic])

        await wait_until(done, timeout=240, interval=0.5)
        late = dict(worker.punctuator.late_by_table)
        in_store = {kind: stored(worker.table_items(app.tables[kind])) for kind in KINDS}

    # The last transaction's markers reach __consumer_offsets and the outputs separately:
    # read the outputs once none of them holds an open transaction.
    await wait_committed(
        bootstrap_servers, app_id, [topic], outputs=[prefix + kind for kind in KINDS]
    )
    outputs = await read_topics(bootstrap_servers, [prefix + kind for kind in KINDS])
    final = closed_by_end(data, want.finals)
    for kind in KINDS:
        assert len(final[kind]) < len(want.finals[kind]), "the flush keys' last windows stay open"
        emitted: Counter[tuple[str, int, int]] = Counter()
        for record in outputs[prefix + kind]:
            key = json.loads(record.key)
            emitted[(key["key"], key["start"], key["end"])] += json.loads(record.value)
            assert (
                json.loads(record.value)
                == want.finals[kind][(key["key"], key["start"], key["end"])]
            )
        assert len(outputs[prefix + kind]) == len(emitted), f"{kind}: a window emitted twice"
        assert emitted == final[kind], kind
    assert late == dict(want.late), "late records counted"
    assert all(want.late[kind] > 0 for kind in KINDS)
    assert data.made["within grace"] > 100

    # Late records of the tumbling table (late_records="dlq") are in the dead-letter topic, once.
    dlq = (await read_topics(bootstrap_servers, [f"{topic}.dlq"]))[f"{topic}.dlq"]
    assert len(dlq) == want.late["tumbling"]
    assert {r.header(H_ERROR_TYPE) for r in dlq} == {LateRecord.__name__.encode()}

    # Expiry: the store holds exactly the windows retention keeps; the changelog's compacted view
    # (the last record per key, tombstones removing) holds the same, so expired windows are gone.
    live = live_windows(data, want.finals)
    expired = {k: len(want.finals[k]) - len(live[k]) for k in KINDS}
    assert all(n > 100 for n in expired.values()), expired
    for kind in KINDS:
        assert in_store[kind] == live[kind], kind
    changelogs = await read_topics(
        bootstrap_servers, [f"{app_id}-{kind}-changelog" for kind in KINDS]
    )
    for kind in KINDS:
        table = app.tables[kind]
        folded: dict[Any, Any] = {}
        for record in changelogs[f"{app_id}-{kind}-changelog"]:
            window = table.key_codec.loads(record.key)
            if record.value is None:
                folded.pop(window, None)
            else:
                folded[window] = table.value_codec.loads(record.value)
        assert stored(folded.items()) == live[kind], kind

    # A fresh worker restores the same (expired windows do not come back) and emits nothing.
    app = make_app()
    async with running_worker(app, tmp_path / "second") as worker:

        async def restored() -> bool:
            tasks = worker.tasks.tasks.values()
            return len(tasks) == data.partitions and all(t.state == "running" for t in tasks)

        await wait_until(restored, timeout=120)
        for kind in KINDS:
            assert stored(worker.table_items(app.tables[kind])) == live[kind], kind
    again = await read_topics(bootstrap_servers, [prefix + kind for kind in KINDS])
    assert {k: len(v) for k, v in again.items()} == {k: len(v) for k, v in outputs.items()}
