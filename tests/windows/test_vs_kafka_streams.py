"""Same answers as Kafka Streams: tumbling, hopping, sliding and session windows with grace and
late records, over the same input topic, on the real broker.

``java/WindowedCounts.java`` (compiled by the test set-up with javac against kafka-streams from
Maven Central, at the broker's version, cached) counts per key in the four kinds of window with
``suppress(untilWindowCloses)``; ``apps.windowed_counts_app`` does the same with streams_app's
windowed tables and ``emit_final``. Both read one input topic holding records out of order within
grace, late for all their windows, and late for only some of them; the test waits until both
have committed the whole input and compares the final windowed results (key, window bounds,
count) and the late counts: Kafka Streams' ``dropped-records-total`` (one per window update
dropped) against ours, as ``/metrics`` exposes it.

The input includes probes (``tests.windows.data``) of two edges: stream time reaching a
session's end + gap + grace exactly (the session is closed: emitted, never merged with a later
record), and a sliding window past retention by stream time but not by Kafka Streams' window
store, found by a record more than one batch later (our batches are at most 200 records here,
the probe's fillers 250): the windows a record updates and skips must not depend on where a
batch ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams_app.broker.jars import streams_libs
from streams_app.jvm import compile_java, java_executable
from streams_app.readback import group_lag, read_topics, wait_committed
from streams_app.runtime.web.exposition import render, worker_registry
from streams_app.testing.workers import WorkerProcess
from tests.runtime.helpers import running_worker, wait_until
from tests.web.test_web_server import metric_samples
from tests.windows.apps import KINDS, windowed_counts_app
from tests.windows.data import Dataset, Rec, generate

pytestmark = pytest.mark.kafka

JAVA_SOURCE = Path(__file__).parent / "java" / "WindowedCounts.java"

Finals = Counter[tuple[str, int, int, int]]


def kafka_streams_command(
    bootstrap: str, app_id: str, state_dir: Path, topic: str, prefix: str, data: Dataset
) -> list[str]:
    libs = streams_libs()
    classes = compile_java("windowed-counts", [JAVA_SOURCE], f"{libs}/*")
    s = data.sizes
    return [
        java_executable(),
        "-Xmx512m",
        f"-Dorg.slf4j.simpleLogger.defaultLogLevel={os.environ.get('KS_LOG_LEVEL', 'warn')}",
        "-cp",
        f"{classes}:{libs}/*",
        "WindowedCounts",
        bootstrap,
        app_id,
        str(state_dir),
        topic,
        prefix,
        *(
            str(v)
            for v in (
                s.tumbling,
                s.hopping,
                s.hopping_step,
                s.sliding,
                s.session_gap,
                s.grace,
            )
        ),
    ]


async def create_topics(
    bootstrap: str,
    names: list[str],
    partitions: int,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """``names`` with ``partitions`` each, and the settings ``configs`` gives a topic by name
    (a topic the app declares compacted must be made so: the worker checks at start)."""
    configs = configs or {}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(n, partitions, 1, topic_configs=dict(configs.get(n, {}))) for n in names]
        )
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, records: list[Rec]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        await produce_with(producer, topic, records)
    finally:
        await producer.stop()


async def produce_with(producer: AIOKafkaProducer, topic: str, records: list[Rec]) -> None:
    """``records`` written and acknowledged, by a producer the caller started."""
    futures = [
        await producer.send(
            topic, key=r.key.encode(), value=b"x", partition=r.partition, timestamp_ms=r.ts
        )
        for r in records
    ]
    await asyncio.gather(*futures)


def parse_ours(records: list) -> Finals:  # type: ignore[type-arg]
    out: Finals = Counter()
    for r in records:
        key = json.loads(r.key)
        out[(key["key"], key["start"], key["end"], json.loads(r.value))] += 1
    return out


def parse_theirs(records: list) -> Finals:  # type: ignore[type-arg]
    out: Finals = Counter()
    for r in records:
        key, start, end = r.key.decode().rsplit("@", 2)
        out[(key, int(start), int(end), int(r.value))] += 1
    return out


async def test_final_windowed_results_equal_kafka_streams(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    data = generate(seed=12, per_partition=1_000, partial=True, probes=True, fillers=250)
    assert data.made["session close instant"] and data.made["sliding retention edge"]
    topic = f"views-{unique}"
    ours, theirs = f"ours-{unique}-", f"ks-{unique}-"
    await create_topics(
        bootstrap_servers, [topic] + [theirs + kind for kind in KINDS], data.partitions
    )
    await produce(bootstrap_servers, topic, data.records)

    java = WorkerProcess(
        "kafka-streams",
        state_dir=tmp_path / "ks",
        log_path=tmp_path / "ks.log",
        name="kafka-streams",
        argv=kafka_streams_command(
            bootstrap_servers, f"ks-{unique}", tmp_path / "ks", topic, theirs, data
        ),
    )
    app = windowed_counts_app(
        f"ours-{unique}",
        input_topic=topic,
        out_prefix=ours,
        sizes=data.sizes,
        partitions=data.partitions,
        broker=bootstrap_servers,
        # The machine runs a JVM with four Kafka Streams instances next to us: smaller batches
        # and a longer session keep a slow batch from costing our group membership. Fewer
        # records than the sliding probe's fillers: a batch ends between its two halves.
        max_poll_records=200,
        session_timeout=30.0,
    )
    java.start()
    try:
        async with running_worker(app, tmp_path / "ours") as worker:
            groups = [f"ks-{unique}-{kind}" for kind in KINDS] + [f"ours-{unique}"]

            lagging: list[str] = []

            async def all_committed() -> bool:
                if java.returncode is not None:
                    raise AssertionError(f"Kafka Streams exited:\n{java.tail()}")
                lagging[:] = [g for g in groups if await group_lag(bootstrap_servers, g, [topic])]
                return not lagging

            try:
                await wait_until(all_committed, timeout=300, interval=0.5)
            except TimeoutError:
                raise AssertionError(f"not committed in time: {lagging}\n{java.tail()}") from None
            late = dict(worker.punctuator.late_by_table)
            samples = metric_samples(render(worker_registry(worker)).decode())
            ours_dropped = {
                kind: samples[("streams_app_dropped_window_updates_total", (("table", kind),))]
                for kind in KINDS
            }
        java.terminate()
        dropped_line = re.search(r"DROPPED (\{.*\})", java.log_since_start())
        assert dropped_line is not None, java.tail()
        dropped = json.loads(dropped_line.group(1))
    finally:
        if java.running:
            java.kill()

    names = [p + kind for kind in KINDS for p in (ours, theirs)]
    # Both sides write in transactions whose markers reach __consumer_offsets and the outputs
    # separately: read the outputs once none of them holds an open transaction.
    await wait_committed(bootstrap_servers, f"ours-{unique}", [topic], outputs=names)
    outputs = await read_topics(bootstrap_servers, names)
    report = []
    for kind in KINDS:
        mine, reference = parse_ours(outputs[ours + kind]), parse_theirs(outputs[theirs + kind])
        report.append(f"{kind}: {sum(mine.values())} ours, {sum(reference.values())} Kafka Streams")
        assert reference, f"Kafka Streams emitted no {kind} windows"
        only_ours = sorted((mine - reference).elements())[:5]
        only_theirs = sorted((reference - mine).elements())[:5]
        assert mine == reference, f"{kind}: only ours {only_ours}, only Kafka Streams {only_theirs}"
        # Each window once, but for the probes' session replaced at its close point by one of
        # the same bounds and value (a record exactly there: each side emits both).
        twice = {w for w, n in mine.items() if n > 1}
        assert all(w[0] in data.replaced_sessions for w in twice), f"{kind}: emitted twice {twice}"
    # Kafka Streams' dropped-records count: per window update dropped (a record late for some
    # of its windows or all of them), once for a late sliding or session record.
    assert dropped == ours_dropped, (dropped, ours_dropped)
    assert late["tumbling"] > 0 and ours_dropped["hopping"] > late["hopping"] > 0
    assert ours_dropped["sliding"] > late["sliding"] > 0
    print("\n".join(report), dict(data.made), dropped, late, file=sys.stderr)
