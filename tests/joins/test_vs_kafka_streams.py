"""Same answers as Kafka Streams for every join kind, over the same two input topics, on the real
broker.

``java/JoinApps.java`` (compiled by the test with javac against kafka-streams from Maven
Central, at the broker's version, cached) runs one Kafka Streams application per family of
joins: stream-table (inner, left), versioned stream-table with join grace, stream-GlobalTable,
stream-stream (inner, left, outer; asymmetric window, grace), table-table (inner, left, outer)
and foreign-key (inner, left). The input (:mod:`tests.joins.data`) is written before it starts,
so each task sees both topics' records from its first poll and processes them in timestamp
order.

:func:`test_kafka_streams_joins_match_the_definitions` checks what Kafka Streams 4.3 wrote
against the independent oracle and models (:mod:`tests.joins.compare`): identical except the
differences docs/joins.md enumerates, which are counted and must occur (the input is built to
provoke them). It also records the run (input, outputs, counts) as JSON, for the comparison
with streams_app and for the record: ``$JOINS_RECORD`` names the file (default: the test's
temporary directory).

:func:`test_streams_app_joins_equal_kafka_streams` is the streams_app side: the same checks
with no difference allowed, over the same generated input, for the joins built so far
(``tests/joins/apps.py``: stream-stream, stream-table, versioned, GlobalTable, table-table;
foreign-key joins are wired separately). Both are checked against the same definitions, so
where both pass they give the same answers up to the tie orders compare.py allows.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from streams_app.broker.jars import kafka_version, streams_libs
from streams_app.jvm import compile_java, java_executable
from streams_app.readback import group_lag, read_topics
from streams_app.testing import TopologyDriver
from streams_app.testing.workers import WorkerProcess
from tests.joins.apps import BUILT
from tests.joins.compare import KINDS, Outcome, check, check_differences
from tests.joins.data import LEFT, RIGHT, Dataset, Rec, generate
from tests.joins.models import Row, parse
from tests.joins.record import write_record
from tests.joins.test_differential_driver import run_joins
from tests.runtime.helpers import wait_until
from tests.windows.test_vs_kafka_streams import create_topics

pytestmark = pytest.mark.kafka

JAVA_SOURCE = Path(__file__).parent / "java" / "JoinApps.java"
FAMILIES = ("stream-table", "versioned", "global", "stream-stream", "tables")
SEED = 37
SOURCE = f"Kafka Streams {kafka_version()}"


def kafka_streams_command(
    bootstrap: str, app_id: str, state_dir: Path, inputs: str, outputs: str, data: Dataset
) -> list[str]:
    """JoinApps reading ``<inputs>left`` and ``<inputs>right``, writing ``<outputs><kind>``."""
    libs = streams_libs()
    classes = compile_java("join-apps", [JAVA_SOURCE], f"{libs}/*")
    p = data.params
    return [
        java_executable(),
        "-Xmx768m",
        f"-Dorg.slf4j.simpleLogger.defaultLogLevel={os.environ.get('KS_LOG_LEVEL', 'error')}",
        "-cp",
        f"{classes}:{libs}/*",
        "JoinApps",
        bootstrap,
        app_id,
        str(state_dir),
        f"{inputs}{LEFT}",
        f"{inputs}{RIGHT}",
        outputs,
        *(str(v) for v in (p.before, p.after, p.grace, p.history, p.table_grace)),
    ]


async def write_input(bootstrap: str, unique: str) -> tuple[Dataset, str]:
    """The generated input, written to two new topics under the prefix returned."""
    data = generate(SEED)
    prefix = f"in-{unique}-"
    await create_topics(bootstrap, [prefix + LEFT, prefix + RIGHT], data.partitions)
    await produce(bootstrap, prefix, data.records)
    return data, prefix


async def produce(
    bootstrap: str,
    prefix: str,
    records: list[Rec],
    *,
    key: Callable[[str], bytes] = str.encode,
    value: Callable[[str], bytes] = str.encode,
) -> None:
    """``records`` to their topics (under ``prefix``) and partitions, keys and values encoded
    with ``key``/``value`` (UTF-8 by default, as Kafka Streams' String serdes read them)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        futures = [
            await producer.send(
                prefix + r.topic,
                key=None if r.key is None else key(r.key),
                value=None if r.value is None else value(r.value),
                partition=r.partition,
                timestamp_ms=r.ts,
            )
            for r in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def internal_topics(bootstrap: str, app_prefix: str) -> list[str]:
    """Kafka Streams' repartition, subscription and response topics of an application."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = await admin.list_topics()
    finally:
        await admin.close()
    return [n for n in names if n.startswith(app_prefix) and n.endswith(("-topic", "-repartition"))]


async def run_kafka_streams(
    bootstrap: str, unique: str, tmp_path: Path, data: Dataset, prefix: str
) -> tuple[dict[str, list[Row]], dict[str, list[int]], dict[str, int]]:
    """Run JoinApps over the topics under ``prefix`` until every family has processed and
    committed everything (internal topics included); return each join's rows and Kafka
    Streams' dropped-records counts per family."""
    out = f"ks-{unique}-"
    app_id = f"ks-{unique}"
    await create_topics(bootstrap, [out + kind for kind in KINDS], data.partitions)
    java = WorkerProcess(
        "kafka-streams",
        state_dir=tmp_path / "ks",
        log_path=tmp_path / "ks.log",
        name="kafka-streams",
        argv=kafka_streams_command(bootstrap, app_id, tmp_path / "ks", prefix, out, data),
    )
    java.start()
    try:
        inputs = [prefix + LEFT, prefix + RIGHT]
        lagging: list[str] = []

        async def all_committed() -> bool:
            if java.returncode is not None:
                raise AssertionError(f"Kafka Streams exited:\n{java.tail()}")
            lagging.clear()
            for family in FAMILIES:
                group = f"{app_id}-{family}"
                topics = inputs + await internal_topics(bootstrap, group + "-")
                if family == "global":
                    topics = [prefix + LEFT]  # the global table is read outside the group
                if await group_lag(bootstrap, group, topics):
                    lagging.append(family)
            return not lagging

        try:
            # Twice in a row: a foreign-key join's response can reach its topic after the
            # subscription it answers was committed.
            await wait_until(all_committed, timeout=300, interval=0.5)
            await wait_until(all_committed, timeout=60, interval=0.5)
        except TimeoutError:
            raise AssertionError(f"not committed in time: {lagging}\n{java.tail()}") from None
        java.terminate()
        dropped_line = re.search(r"DROPPED (\{.*\})", java.log_since_start())
        assert dropped_line is not None, java.tail()
        dropped = json.loads(dropped_line.group(1))
    finally:
        if java.running:
            java.kill()
    read = await read_topics(bootstrap, [out + kind for kind in KINDS])
    outputs = {
        kind: [parse(r.key, r.value, r.timestamp) for r in read[out + kind]] for kind in KINDS
    }
    partitions = {kind: [r.partition for r in read[out + kind]] for kind in KINDS}
    return outputs, partitions, dropped


# make test-long: a fresh Kafka Streams run checked against the definitions. make test checks
# the committed recording of one (test_recorded.py) without a broker; streams_app's own joins
# are compared on the broker by test_streams_app_joins_equal_kafka_streams.
@pytest.mark.long
async def test_kafka_streams_joins_match_the_definitions(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    data, prefix = await write_input(bootstrap_servers, unique)
    outputs, partitions, dropped = await run_kafka_streams(
        bootstrap_servers, unique, tmp_path, data, prefix
    )
    record = Path(os.environ.get("JOINS_RECORD", tmp_path / "kafka-streams-joins.json"))
    # The committed record (tests/joins/recorded) was written by this test with JOINS_RECORD.
    write_record(
        record, data, outputs, partitions, {"dropped": dropped}, seed=SEED, source=SOURCE
    )  # first
    outcomes: dict[str, Outcome] = {}
    failures = []
    for kind in KINDS:
        try:
            outcomes[kind] = check(
                kind, outputs[kind], data, reference=True, partitions=partitions[kind]
            )
        except AssertionError as exc:
            failures.append(str(exc))
    report = {
        "dropped": dropped,
        "kinds": {
            k: {
                "rows": o.rows,
                "expected": o.expected,
                "differences": dict(o.differences),
                "examples": o.examples,
            }
            for k, o in outcomes.items()
        },
        "failures": failures,
    }
    write_record(record, data, outputs, partitions, report, seed=SEED, source=SOURCE)
    print(
        "\n".join(o.line() for o in outcomes.values()),
        dropped,
        f"record: {record}",
        file=sys.stderr,
    )
    assert not failures, "\n".join(failures)
    for kind in KINDS:
        assert outcomes[kind].rows > 0, f"Kafka Streams wrote nothing for {kind}"
        check_differences(outcomes[kind])


async def test_streams_app_joins_equal_kafka_streams(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """The streams_app side on the real broker: the joins built so far (tests/joins/apps.py),
    over the same generated input, checked with no difference allowed (stream-stream joins
    also in order per output partition). The foreign-key joins are not wired yet
    (compare.KINDS minus apps.BUILT)."""
    data = generate(SEED)
    partitions: dict[str, list[int]] = {}
    ours = await run_joins(
        lambda app: TopologyDriver.kafka(app, bootstrap_servers, workers=0, state_dir=tmp_path),
        partitions=partitions,
    )
    lines = []
    for kind in BUILT:
        outcome = check(kind, ours[kind], data, reference=False, partitions=partitions[kind])
        assert outcome.rows > 0, kind
        lines.append(outcome.line())
    print("\n".join(lines), file=sys.stderr)
