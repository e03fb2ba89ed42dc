"""The orders pipeline lands exactly the committed records, through aborts, open transactions and a
SIGKILL in the middle of a batch. Real broker, local Spark with the Kafka connector, real
PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from streams_app.spark.pipeline import OrdersPipeline
from streams_app.spark.sinks import BATCHES_TABLE, Trigger
from tests.spark.support import (
    Reservation,
    create_topic,
    end_offsets,
    hourly_totals,
    reservations,
    run_async,
    send_transaction,
    transactional_producer,
    wait_until_settled,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]


def stored_totals(dsn: str) -> dict[tuple[str, dt.datetime], tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT item, hour, reserved_qty, orders FROM reserved_per_item_hour"
        ).fetchall()
    return {(item, hour): (qty, orders) for item, hour, qty, orders in rows}


def file_order_ids(spark: SparkSession, pipeline_home: str) -> list[str]:
    frame = spark.read.parquet(f"{pipeline_home}/reservations")
    return sorted(row.order_id for row in frame.select("order_id").collect())


def ids(records: Iterable[Reservation]) -> list[str]:
    return sorted(r.order_id for r in records)


def test_sinks_hold_exactly_the_committed_records(
    spark: SparkSession, bootstrap_servers: str, postgres_dsn: str, unique: str, tmp_path: Path
) -> None:
    topic = f"inventory-{unique}"
    committed_a = reservations("a", 8)
    aborted = reservations("x", 6, qty=1000)
    left_open = reservations("o", 4, qty=5000)
    committed_c = reservations("c", 6, qty=100)

    async def produce() -> None:
        await create_topic(bootstrap_servers, topic, partitions=2)
        producer = transactional_producer(bootstrap_servers, f"tx-{unique}")
        # Aborted by the broker 5 s after it began: the timed-out transaction sweep runs every 1 s.
        stalled = transactional_producer(
            bootstrap_servers, f"stalled-{unique}", transaction_timeout_ms=5000
        )
        await producer.start()
        await stalled.start()
        try:
            await send_transaction(producer, topic, committed_a[:4])
            await send_transaction(producer, topic, aborted, commit=False)
            await send_transaction(producer, topic, committed_a[4:])
            await send_transaction(stalled, topic, left_open, commit=None)
            # Committed, but behind the open transaction in both partitions.
            await send_transaction(producer, topic, committed_c)
        finally:
            await producer.stop()
            await stalled.stop()  # leaves its transaction open: no commit, no abort

    run_async(produce())
    stable = run_async(end_offsets(bootstrap_servers, topic, 2, "read_committed"))
    high = run_async(end_offsets(bootstrap_servers, topic, 2, "read_uncommitted"))
    assert all(s < h for s, h in zip(stable, high, strict=True)), "the transaction must be open"

    home = str(tmp_path / "pipeline")
    # While the transaction is open, read_committed stops at it: C is committed but not visible.
    first = OrdersPipeline(
        spark, bootstrap_servers, home, postgres_dsn, topic, Trigger(available_now=True)
    )
    first.run()
    assert file_order_ids(spark, home) == ids(committed_a)
    assert stored_totals(postgres_dsn) == hourly_totals(committed_a)

    run_async(wait_until_settled(bootstrap_servers, topic, 2, timeout=30))
    second = OrdersPipeline(
        spark, bootstrap_servers, home, postgres_dsn, topic, Trigger(available_now=True)
    )
    second.run()
    assert file_order_ids(spark, home) == ids(committed_a + committed_c)
    assert stored_totals(postgres_dsn) == hourly_totals(committed_a + committed_c)

    # Once more on the same checkpoints: nothing new, nothing written twice.
    OrdersPipeline(
        spark, bootstrap_servers, home, postgres_dsn, topic, Trigger(available_now=True)
    ).run()
    assert file_order_ids(spark, home) == ids(committed_a + committed_c)
    assert stored_totals(postgres_dsn) == hourly_totals(committed_a + committed_c)


def _child(config: dict[str, object], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.pipeline_child", json.dumps(config)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own process group: the Python driver, the Spark JVM and the Python UDF
            # workers die together, as in a machine or container crash.
            start_new_session=True,
        )


def last_batch(log_dir: Path) -> int:
    """The highest batch id in a checkpoint log directory (offsets, commits, _spark_metadata)."""
    return max((int(p.name) for p in log_dir.iterdir() if p.name.isdigit()), default=-1)


def unlisted_files(path: Path) -> set[str]:
    """Part files under a file sink's ``path`` that its ``_spark_metadata`` log does not list."""
    listed = set(
        re.findall(
            r"part-[^\"/]+",
            "".join(
                p.read_text() for p in (path / "_spark_metadata").iterdir() if p.name.isdigit()
            ),
        )
    )
    return {p.name for p in path.glob("part-*")} - listed


def _log_tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def test_killed_mid_batch_and_restarted_on_the_same_checkpoint(
    spark: SparkSession, bootstrap_servers: str, postgres_dsn: str, unique: str, tmp_path: Path
) -> None:
    topic = f"inventory-{unique}"
    committed = reservations("k", 40)
    aborted = reservations("z", 4, qty=1000)

    async def produce() -> None:
        await create_topic(bootstrap_servers, topic, partitions=2)
        producer = transactional_producer(bootstrap_servers, f"tx-{unique}")
        await producer.start()
        try:
            for start in range(0, len(committed), 4):
                await send_transaction(producer, topic, committed[start : start + 4])
                if start in (8, 24):
                    await send_transaction(producer, topic, aborted, commit=False)
        finally:
            await producer.stop()

    run_async(produce())
    home = tmp_path / "pipeline"
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "child.log"
    config: dict[str, object] = {
        "bootstrap": bootstrap_servers,
        "topic": topic,
        "home": str(home),
        "dsn": postgres_dsn,
        "max_offsets": 8,
        "crash": str(markers),
        "crash_order": committed[29].order_id,
    }

    child = _child(config, log)
    try:
        deadline = time.monotonic() + 120

        def at_crash_points() -> bool:
            # Both queries blocked, and a Parquet file of the files query's batch opened. The
            # blocked task opens its file before its rows come only as Spark's partition 0 (any
            # other first asks its rows, which the blocking UDF holds); then partition 0's task,
            # which opens one whatever it holds, may still be waiting for a core under load.
            if not ((markers / "files").exists() and (markers / "postgres").exists()):
                return False
            return (home / "reservations" / "_spark_metadata").is_dir() and bool(
                unlisted_files(home / "reservations")
            )

        while not at_crash_points():
            if child.poll() is not None:
                pytest.fail(
                    f"the pipeline exited ({child.returncode}) before the crash point:\n"
                    f"{_log_tail(log)}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"the pipeline never reached the crash points:\n{_log_tail(log)}")
            time.sleep(0.1)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()

    # Both queries died inside a batch: planned in the offset log, not in the commit log.
    pg_checkpoint = home / "checkpoints" / "postgres"
    files_checkpoint = home / "checkpoints" / "files"
    pg_batch = int((markers / "postgres").read_text())
    assert last_batch(pg_checkpoint / "offsets") == pg_batch
    assert last_batch(pg_checkpoint / "commits") == pg_batch - 1
    files_batch = last_batch(files_checkpoint / "offsets")
    assert files_batch >= 1
    assert last_batch(files_checkpoint / "commits") == files_batch - 1
    assert last_batch(home / "reservations" / "_spark_metadata") == files_batch - 1
    # The crashed batch left Parquet files behind that no metadata entry lists: readers going
    # through Spark never see them, and the replay writes the batch's rows once more.
    assert unlisted_files(home / "reservations"), "the files query died before writing any file"
    # ... while PostgreSQL already holds the postgres query's batch: writing it again on replay
    # would count its rows twice.
    with psycopg.connect(postgres_dsn) as conn:
        recorded = [b for (b,) in conn.execute(f"SELECT batch_id FROM {BATCHES_TABLE} ORDER BY 1")]
    assert recorded == list(range(pg_batch + 1))

    resumed = _child({**config, "crash": None}, log)
    assert resumed.wait(timeout=180) == 0, _log_tail(log)

    assert file_order_ids(spark, str(home)) == ids(committed)
    assert stored_totals(postgres_dsn) == hourly_totals(committed)
    # One line per micro-batch and sink over both runs (a batch that died is logged by the run
    # that finished it): the replayed PostgreSQL batch says it was skipped, the files batch that
    # died before its _spark_metadata entry is written again.
    both_runs = log.read_text()
    skipped = rf"{topic}-postgres: batch {pg_batch}: \d+ records: already committed, skipped"
    assert re.search(skipped, both_runs), _log_tail(log)
    rewritten = rf"{topic}-files: batch {files_batch}: \d+ records in [\d.]+s\n"
    assert re.search(rewritten, both_runs), _log_tail(log)
    for query in ("files", "postgres"):
        batches = re.findall(rf"{topic}-{query}: batch (\d+):", both_runs)
        assert len(batches) == len(set(batches)), batches  # once each
