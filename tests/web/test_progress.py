"""Restore and catch-up progress lines, read from a real worker process's log (``-l info``).

The worker starts on a table whose changelog holds 60,000 records and on an input with a
backlog of 20,000 records: it must say how far the restore is, how fast and when it ends, then
the same for catching up, then that it caught up. ``progress_interval`` is 0.05 s so that a
restore of that size (well over a second of work here) shows several lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streams_app.testing.workers import WorkerProcess
from tests.runtime.helpers import wait_until
from tests.web.test_web_server import create_topics

pytestmark = pytest.mark.kafka

TABLE_RECORDS = 60_000
BACKLOG = 20_000

RESTORING = re.compile(
    r"restoring 4 changelog partition\(s\): ([\d,]+) of ([\d,]+) records \(\d+%\), "
    r"([\d,]+) records/s, ETA (\S+)"
)
RESTORED = re.compile(r"restored ([\d,]+) records of 4 changelog partition\(s\) in \S+ \(")
CATCHING_UP = re.compile(r"catching up: ([\d,]+) records behind on 4 partition\(s\)")
CAUGHT_UP = re.compile(r"caught up: ([\d,]+) records processed in \S+ \(([\d,]+) records/s\)")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


async def test_restore_and_catch_up_log_progress_with_rate_and_eta(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    source, changelog = f"ks-in-{unique}", f"ks-{unique}-sums-changelog"
    await create_topics(
        bootstrap_servers,
        [(source, 4, {}), (changelog, 4, {"cleanup.policy": "compact"})],
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=20)
    await producer.start()
    try:
        for i in range(TABLE_RECORDS):
            await producer.send(changelog, key=b"t%d" % i, value=b"%d" % i)
        for i in range(BACKLOG):
            await producer.send(source, key=b"k%d" % (i % 500), value=b"1")
        await producer.flush()
    finally:
        await producer.stop()

    worker = WorkerProcess(
        "tests.runtime.apps.keyed_sum",
        state_dir=tmp_path / "state",
        log_path=tmp_path / "worker.log",
        env={
            "TEST_SUFFIX": unique,
            "STREAMS_APP_BROKER": bootstrap_servers,
            "STREAMS_APP_PROGRESS_INTERVAL": "0.05",
        },
    ).start()
    try:
        await wait_until(lambda: worker.log_count("caught up: ") >= 1 or not worker.running, 120)
        log = worker.log_since_start()
        assert worker.running, worker.tail()
    finally:
        worker.terminate()

    progress = [m.groups() for m in RESTORING.finditer(log)]
    assert progress, log[-3000:]
    for done, total, rate, eta in progress:
        assert _int(total) == TABLE_RECORDS and 0 <= _int(done) <= TABLE_RECORDS
        assert _int(rate) >= 0 and (eta == "?" or eta[0].isdigit())
    assert [_int(done) for done, *_ in progress] == sorted(_int(done) for done, *_ in progress)
    restored = RESTORED.search(log)
    assert restored is not None and _int(restored.group(1)) == TABLE_RECORDS
    behind = CATCHING_UP.search(log)
    assert behind is not None and 2000 < _int(behind.group(1)) <= BACKLOG
    caught = CAUGHT_UP.search(log)
    assert caught is not None and _int(caught.group(1)) > 0
    # In that order: the restore's lines, its summary, then catching up, then caught up.
    assert RESTORING.search(log).start() < restored.start() < behind.start() < caught.start()  # type: ignore[union-attr]
