"""Stream-stream and foreign-key joins on the real broker, exactly once through three SIGKILLs.

The differential test's input (out-of-order records, ties between the two topics, exact window
edges, late records, null keys and values, keys on one side only, a foreign key that changes,
is deleted or points nowhere; tests/joins/data.py) is written to both topics first; one worker
with the inner, left and outer stream-stream joins over the asymmetric window with grace and
the inner and left foreign-key joins of the tables built from the same topics
(tests/joins/ss_crash_app.py; the inner stream-stream join a second time with
``changelog="input"``, its buffers restored from the input topics) then works through it and is
SIGKILLed three times while it holds a transaction with join results in it. It restarts on the
same state directory after the first and third kills, and on an empty one after the second, so
that every store is restored from scratch once (its join buffers and unmatched records from
their changelogs or inputs, its join stream time with them; the foreign-key joins' tables and
subscription stores from theirs, their subscription and response topics read from the
committed offsets). Afterwards, read_committed:

- each stream-stream join's output is exactly the independent oracle's (tests/joins/oracle.py):
  every pair once, a null exactly for each record that never matched and none for one that
  did, per output partition in the order the definitions give (compare.check, no difference
  allowed);
- each foreign-key join's final state is the definition's (compare.check: only the final
  state is determined, its intermediate results depend on how subscriptions and responses
  interleave), and no result is stale: every row joins a left value with a value of the right
  row *its own* reference names (a response to an older value of the left row, for another
  foreign key, is dropped by its hash, even when the crash replays it).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import ReadRecord, group_lag, read_topics, wait_committed
from streams_app.testing.workers import WorkerProcess
from tests.joins.apps import join_app
from tests.joins.compare import FOREIGN_KEY, check
from tests.joins.data import LEFT, RIGHT, Dataset, Params, generate
from tests.joins.models import Row, parse
from tests.joins.ss_crash_app import KINDS
from tests.joins.test_vs_kafka_streams import produce
from tests.runtime.helpers import KafkaObserver, wait_until
from tests.windows.test_vs_kafka_streams import create_topics

pytestmark = pytest.mark.kafka

SEED = 41
KILLS = 3

#: The topology's codecs (str keys and values, as the app declares them).
CODECS = join_app("codecs", "in-", "out-", Params(), 2, KINDS).topics["in-left"]


def row(r: ReadRecord) -> Row:
    """An output record as the comparison reads it (the joiner's ``left+right`` text)."""
    key = None if r.key is None else CODECS.key_codec.loads(r.key).encode()
    value = None if r.value is None else CODECS.value_codec.loads(r.value).encode()
    return parse(key, value, r.timestamp)


def assert_no_stale_answer(kind: str, rows: list[Row], data: Dataset) -> None:
    """Every foreign-key result joins a left value with a value of the right row that this
    left value's own reference names (a left join: or with nothing); a tombstone has neither."""
    values = {(r.topic, r.name): r for r in data.records if r.name is not None}
    for out in rows:
        if out.tombstone:
            continue
        left = values[(LEFT, out.left)]
        assert out.key == left.key, (kind, out, left)
        if out.right is None:
            assert kind == "fk-left", (kind, out)
            continue
        right = values[(RIGHT, out.right)]
        assert left.ref is not None and right.key == left.ref, (kind, "stale", out, left, right)


async def test_stream_stream_and_foreign_key_joins_exactly_once_through_three_sigkills(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    data = generate(SEED, per_partition=500)
    app_id, inputs, outputs = f"ss-crash-{unique}", f"ssin-{unique}-", f"ssout-{unique}-"
    out_topics = [outputs + kind for kind in KINDS]
    in_topics = [inputs + LEFT, inputs + RIGHT]
    await create_topics(bootstrap_servers, in_topics, data.partitions)
    # Encoded as the app's topics declare.
    await produce(
        bootstrap_servers,
        inputs,
        data.records,
        key=CODECS.key_codec.dumps,
        value=CODECS.value_codec.dumps,
    )
    worker = WorkerProcess(
        "tests.joins.ss_crash_app",
        state_dir=tmp_path / "state",
        log_path=tmp_path / "worker.log",
        env={
            "STREAMS_APP_BROKER": bootstrap_servers,
            "STREAMS_APP_SESSION_TIMEOUT": "3",
            "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
            # Small batches and transactions open for a while, so that kills land in one.
            "STREAMS_APP_MAX_POLL_RECORDS": "20",
            "STREAMS_APP_COMMIT_INTERVAL": "1",
            "JOIN_TEST_APP": app_id,
            "JOIN_TEST_INPUTS": inputs,
            "JOIN_TEST_OUTPUTS": outputs,
            "JOIN_TEST_PARTITIONS": str(data.partitions),
        },
    )
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()

    async def mid_transaction() -> bool:  # join results in an open transaction
        return await observer.in_transaction(out_topics)

    try:
        worker.start()
        kills = 0
        while kills < KILLS:
            await asyncio.to_thread(worker.wait_assigned)
            await wait_until(mid_transaction, timeout=60, interval=0.005)
            worker.kill()
            kills += 1
            if kills == 2:  # every store restored from scratch on the next start
                shutil.rmtree(tmp_path / "state")
            worker.start()
        await asyncio.to_thread(worker.wait_assigned)

        # The foreign-key joins' subscription and response topics too (the worker writes them
        # as it goes): twice in a row, as a response can reach its topic after the
        # subscription it answers was committed.
        app = join_app(app_id, inputs, outputs, Params(), data.partitions, KINDS)
        internal = [name for name, topic in app.topics.items() if topic.internal]
        assert len(internal) == 4, internal

        async def done() -> bool:
            return not await group_lag(bootstrap_servers, app_id, in_topics + internal)

        await wait_until(done, timeout=180, interval=0.3)
        await wait_until(done, timeout=60, interval=0.3)
        assert worker.terminate() == 0, worker.tail()
    finally:
        await observer.__aexit__()
        if worker.running:
            worker.kill()
    assert worker.starts == KILLS + 1
    # The buffers of ss-inner-input have no changelog topic (their inputs restored them);
    # those of ss-inner have theirs.
    async with OpsAdmin(bootstrap_servers) as admin:
        topics = set(await admin.list_topics())
    for role in ("left", "right"):
        assert f"{app_id}-ss-inner-input-{role}-changelog" not in topics, sorted(topics)
        plain = app.joins[f"{inputs}{LEFT}-join-{inputs}{RIGHT}"]  # ss-inner
        assert plain.stores[role].changelog_topic_name in topics, sorted(topics)
    await wait_committed(bootstrap_servers, app_id, in_topics, outputs=out_topics)

    # The kills hit open transactions: records of aborted ones are visible read_uncommitted.
    everything = await read_topics(
        bootstrap_servers, out_topics, isolation_level="read_uncommitted"
    )
    committed = await read_topics(bootstrap_servers, out_topics)
    assert sum(len(everything[t]) - len(committed[t]) for t in out_topics) > 0, (
        "no kill landed inside a transaction"
    )
    lines = []
    for kind in KINDS:
        records = sorted(committed[outputs + kind], key=lambda r: (r.partition, r.offset))
        rows = [row(r) for r in records]
        definition = "ss-inner" if kind == "ss-inner-input" else kind  # the same join
        outcome = check(
            definition, rows, data, reference=False, partitions=[r.partition for r in records]
        )
        assert outcome.rows > 0, kind
        if kind in FOREIGN_KEY:
            assert_no_stale_answer(kind, rows, data)
        aborted = len(everything[outputs + kind]) - len(records)
        lines.append(f"{outcome.line()}; {aborted} in aborted transactions")
    print("\n".join(lines), file=sys.stderr)
