"""``streams-app pipeline`` as an operator runs it: a line per micro-batch and sink, where its
PostgreSQL lives and how to query it, a second pipeline on the same HOME refused at once, and a
Spark driver killed under it ending in one line that says how to resume (not Py4J tracebacks).
One pipeline process (one SparkSession) for all of it: Spark starts slowly."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.spark.support import (
    FAST_JVM,
    create_topic,
    hourly_totals,
    reservations,
    run_async,
    send_transaction,
    transactional_producer,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]


def streams_app(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams_app", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == pid:
            found.append((int(entry.name), name))
    return found


def test_pipeline_command_reports_batches_locks_home_and_survives_a_dead_driver(
    bootstrap_servers: str, unique: str
) -> None:
    topic = f"inventory-{unique}"
    committed = reservations("p", 6)

    async def produce() -> None:
        await create_topic(bootstrap_servers, topic, partitions=2)
        producer = transactional_producer(bootstrap_servers, f"tx-{unique}")
        await producer.start()
        try:
            await send_transaction(producer, topic, committed)
        finally:
            await producer.stop()

    run_async(produce())
    # Not below pytest's tmp_path (0700, root's): the embedded PostgreSQL runs as 'postgres'.
    home = Path(tempfile.mkdtemp(prefix="streams-app-pipeline-"))
    home.chmod(0o755)
    out_path, err_path = home.parent / f"{home.name}.out", home.parent / f"{home.name}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        pipeline = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streams_app",
                "pipeline",
                "--bootstrap",
                bootstrap_servers,
                "--home",
                str(home),
                "--topic",
                topic,
                "--interval",
                "1 second",
            ],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            start_new_session=True,
            # The fast-starting JVM flags of the other Spark tests (spark-class passes them on).
            env={**os.environ, "SPARK_SUBMIT_OPTS": FAST_JVM},
        )
    try:
        deadline = time.monotonic() + 240
        expected_lines = (
            f"{topic}-files: batch 0: 6 records in",
            f"{topic}-postgres: batch 0: 6 records in",
        )
        while not all(line in err_path.read_text() for line in expected_lines):
            assert pipeline.poll() is None, out_path.read_text() + err_path.read_text()
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.2)
        log = err_path.read_text()
        totals = hourly_totals(committed)
        assert "rows merged into reserved_per_item_hour" in log
        assert log.count(f"{topic}-postgres: batch 0:") == 1  # one line per batch and sink
        printed = out_path.read_text()
        assert "PostgreSQL (embedded) at postgresql://postgres@127.0.0.1:" in printed
        assert f"data in {home / 'postgres' / 'data'}" in printed

        # A second pipeline on the same HOME stops before starting anything.
        second = streams_app(
            "pipeline",
            "--bootstrap",
            bootstrap_servers,
            "--home",
            str(home),
            "--topic",
            topic,
            "--once",
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"another pipeline is using {home} (pid {pipeline.pid})" in second.stderr
        assert "postgres" not in second.stdout and "LOG:" not in second.stderr

        # The running pipeline's PostgreSQL can be queried while it runs.
        while_running = streams_app("pipeline", "query", "--home", str(home))
        assert while_running.returncode == 0, while_running.stderr
        assert f"({len(totals)} rows)" in while_running.stdout

        # Kill the Spark driver (the JVM PySpark launched), as the OOM killer would.
        jvms = [pid for pid, name in children(pipeline.pid) if name == "java"]
        assert len(jvms) == 1, children(pipeline.pid)
        os.kill(jvms[0], signal.SIGKILL)
        assert pipeline.wait(timeout=120) == 1
        errors = err_path.read_text()
        assert "Traceback" not in errors and "py4j" not in errors.lower(), errors
        last = errors.strip().splitlines()[-1]
        assert last.startswith("streams-app: the Spark driver died"), errors
        assert last.endswith(f"in {home} are intact: rerun with the same --home to resume")

        # After the run: the command the pipeline printed starts the embedded PostgreSQL on
        # HOME's data and queries it.
        after = streams_app("pipeline", "query", "--home", str(home))
        assert after.returncode == 0, after.stderr
        assert f"({len(totals)} rows)" in after.stdout
        for (item, _hour), (qty, orders) in totals.items():
            assert any(
                line.split()[0] == item and line.split()[-2:] == [str(qty), str(orders)]
                for line in after.stdout.splitlines()[1:-1]
            ), after.stdout
    finally:
        if pipeline.poll() is None:
            os.killpg(pipeline.pid, signal.SIGKILL)
            pipeline.wait()
        shutil.rmtree(home, ignore_errors=True)
        out_path.unlink(missing_ok=True)
        err_path.unlink(missing_ok=True)
