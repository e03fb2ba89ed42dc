"""The database edge's rows of ``make bench``: the PostgreSQL sink and the outbox relay.

    python -m benchmarks.database [--records 200000] [--events 100000] [--repeat 3]
    make bench            # benchmarks.run calls bench_database() after its own rows

``sink``: ``--records`` keyed records of ``--value-bytes`` bytes pre-loaded into an 8-partition
topic; then, per repeat, a fresh sink *process* (``streams-app -A benchmarks.db_sink_app sink``,
exactly once, COPY in the handler) with a fresh group lands them. Timed from its "assigned"
log line (partitions claimed, start-up excluded) until its offsets in PostgreSQL reach the
topic's end offsets.

``relay``: ``--events`` events of ``--value-bytes`` bytes pre-loaded into a fresh outbox, 100
per database transaction (as services write them); then a relay process (``streams-app
outbox relay``, exactly once) publishes them. Timed from its "started" line until the outbox
is empty (every event published in a committed Kafka transaction and its row deleted).
``relay-alo``: the seed's at-least-once relay (``--guarantee at_least_once``: one
``send().get()`` and one UPDATE per event) on ``--alo-events`` events, for contrast.

Every run records the CPU seconds of its process, of PostgreSQL (postmaster and backends) and of
the broker, and the load average: the machine is shared, so compare medians. PostgreSQL runs
with fsync on (``--pg-fast``: off, as in the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SINK_TOPIC = "bench-sink-in"
RELAY_TOPIC = "bench-relay-out"
PARTITIONS = 8


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def cpu_of(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / _ticks()
    return out


def postgres_pids(postmaster: int) -> list[int]:
    """The postmaster and its children (backends, writers)."""
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if ppid == postmaster:
            pids.append(int(entry.name))
    return pids


class CpuWindow:
    """CPU seconds of some processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, postmaster: int | None, broker: int | None) -> None:
        self.postmaster = postmaster
        self.broker = broker

    def snapshot(self, process: int | None) -> dict[str, dict[int, float]]:
        return {
            "process": cpu_of([process] if process else []),
            "postgres": cpu_of(postgres_pids(self.postmaster)) if self.postmaster else {},
            "broker": cpu_of([self.broker] if self.broker else []),
        }

    @staticmethod
    def delta(a: dict[str, dict[int, float]], b: dict[str, dict[int, float]]) -> dict[str, float]:
        out = {}
        for key in b:
            out[key] = round(sum(v - a[key].get(pid, 0.0) for pid, v in b[key].items()), 2)
        return out


# -- set-up ------------------------------------------------------------------------------------


async def create_topics(bootstrap: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(name, PARTITIONS, 1)
            for name in (SINK_TOPIC, RELAY_TOPIC)
            if name not in existing
        ]
        if wanted:
            await admin.create_topics(wanted)
    finally:
        await admin.close()


async def preload_topic(bootstrap: str, records: int, value_bytes: int) -> None:
    from aiokafka import AIOKafkaProducer

    rng = random.Random(1)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20
    )
    await producer.start()
    try:
        futures = []
        for i in range(records):
            futures.append(
                await producer.send(
                    SINK_TOPIC, key=b"key-%06d" % (i % 10_000), value=rng.randbytes(value_bytes)
                )
            )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def preload_outbox(dsn: str, table: str, events: int, value_bytes: int) -> None:
    import psycopg

    from streams_app.postgres.outbox import OutboxEvent, add_many
    from streams_app.postgres.schema import init_outbox

    rng = random.Random(2)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await init_outbox(conn, table)
        for start in range(0, events, 100):
            async with conn.transaction():
                await add_many(
                    conn,
                    (
                        OutboxEvent(
                            RELAY_TOPIC, b"key-%06d" % (i % 10_000), rng.randbytes(value_bytes)
                        )
                        for i in range(start, min(events, start + 100))
                    ),
                    table=table,
                )


async def scalar(dsn: str, sql: str, params: Any = None) -> Any:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    return row[0] if row else None


# -- one run -----------------------------------------------------------------------------------


async def run_process(
    key: str,
    argv: list[str],
    env: dict[str, str],
    ready_line: str,
    done: Any,
    records: int,
    cpu: CpuWindow,
    log_path: Path,
    timeout: float,
) -> dict[str, Any]:
    """Start ``argv``, time from ``ready_line`` in its log until ``done()``, then SIGTERM it."""
    load_before = round(os.getloadavg()[0], 2)
    spawned = time.time()
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=log, stderr=log, cwd=REPO, env={**os.environ, **env}
        )
    ready_at: float | None = None
    before: dict[str, dict[int, float]] = {}
    deadline = time.monotonic() + timeout
    finished_at: float | None = None
    after: dict[str, dict[int, float]] = {}
    try:
        while time.monotonic() < deadline and proc.returncode is None:
            if ready_at is None:
                if ready_line in log_path.read_text(errors="replace"):
                    ready_at = time.time()
                    before = cpu.snapshot(proc.pid)
            elif await done():
                finished_at = time.time()
                after = cpu.snapshot(proc.pid)
                break
            await asyncio.sleep(0.05)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    if ready_at is None or finished_at is None:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{key} did not finish (exit {proc.returncode}):\n{tail}")
    seconds = finished_at - ready_at
    used = CpuWindow.delta(before, after)
    return {
        "system": key,
        "records": records,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "total_seconds": round(finished_at - spawned, 3),
        "process_cpu_s": used["process"],
        "postgres_cpu_s": used["postgres"],
        "broker_cpu_s": used["broker"],
        "load_before": load_before,
        "load_after": round(os.getloadavg()[0], 2),
    }


async def sink_run(
    index: int, bootstrap: str, dsn: str, records: int, cpu: CpuWindow, workdir: Path
) -> dict[str, Any]:
    app_id = f"bench-sink-{index}-{uuid.uuid4().hex[:6]}"
    group = f"{app_id}-sink-bench"
    await _drop_table(dsn, "bench_landed")

    async def done() -> bool:
        landed = await scalar(
            dsn,
            "SELECT coalesce(sum(next_offset), 0) FROM streams_app_offsets WHERE group_id = %s",
            (group,),
        )
        return bool(landed is not None and landed >= records)

    return await run_process(
        "sink",
        [sys.executable, "-m", "streams_app", "-A", "benchmarks.db_sink_app", "sink", "-l", "info"],
        {
            "STREAMS_APP_ID": app_id,
            "STREAMS_APP_BROKER": bootstrap,
            "STREAMS_APP_POSTGRES_DSN": dsn,
            "BENCH_SINK_TOPIC": SINK_TOPIC,
        },
        "assigned ",
        done,
        records,
        cpu,
        workdir / f"{app_id}.log",
        timeout=600,
    )


async def relay_run(
    key: str,
    index: int,
    bootstrap: str,
    dsn: str,
    events: int,
    value_bytes: int,
    cpu: CpuWindow,
    workdir: Path,
) -> dict[str, Any]:
    table = f"bench_outbox_{key.replace('-', '_')}_{index}"
    await preload_outbox(dsn, table, events, value_bytes)
    argv = [
        sys.executable,
        "-m",
        "streams_app",
        "outbox",
        "relay",
        "--dsn",
        dsn,
        "--broker",
        bootstrap,
        "--table",
        table,
        "-l",
        "info",
    ]
    if key == "relay-alo":
        argv += ["--guarantee", "at_least_once"]

    async def done() -> bool:
        left = await scalar(dsn, f"SELECT count(*) FROM {table}")
        return bool(left == 0)

    try:
        return await run_process(
            key, argv, {}, "started; inputs", done, events, cpu, workdir / f"{table}.log", 900
        )
    finally:
        for suffix in ("", "_commits"):
            await _drop_table(dsn, table + suffix)


async def _drop_table(dsn: str, table: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP TABLE IF EXISTS "{table}"')


# -- the rows ----------------------------------------------------------------------------------


async def bench_database(
    bootstrap: str,
    broker_pid: int | None,
    workdir: Path,
    *,
    records: int = 200_000,
    events: int = 100_000,
    alo_events: int = 5_000,
    value_bytes: int = 100,
    repeat: int = 3,
    durable: bool = True,
    systems: tuple[str, ...] = ("sink", "relay", "relay-alo"),
) -> dict[str, Any]:
    """Run the rows on the broker at ``bootstrap`` with an embedded PostgreSQL of our own."""
    from streams_app.postgres.server import PostgresServer

    root = Path(tempfile.mkdtemp(prefix="streams-bench-pg-"))
    server = PostgresServer(root, durable=durable).start()
    try:
        dsn = server.dsn
        assert server.process is not None
        cpu = CpuWindow(server.process.pid, broker_pid)
        await create_topics(bootstrap)
        if "sink" in systems:
            t0 = time.monotonic()
            await preload_topic(bootstrap, records, value_bytes)
            print(f"pre-loaded {SINK_TOPIC}: {records:,} records in {time.monotonic() - t0:.1f}s")
        runs: list[dict[str, Any]] = []
        for index in range(1, repeat + 1):
            for key in systems:
                if key == "sink":
                    run = await sink_run(index, bootstrap, dsn, records, cpu, workdir)
                elif key == "relay-alo" and index > 1:
                    continue  # one event per broker round trip: slow, once is enough
                else:
                    count = alo_events if key == "relay-alo" else events
                    run = await relay_run(
                        key, index, bootstrap, dsn, count, value_bytes, cpu, workdir
                    )
                run["repeat"] = index
                runs.append(run)
                print(
                    f"  {key:<10} #{index}: {run['records_per_s']:>8,} records/s "
                    f"({run['seconds']:.2f}s, process cpu {run['process_cpu_s']}s, postgres cpu "
                    f"{run['postgres_cpu_s']}s, load {run['load_before']}/{run['load_after']})",
                    flush=True,
                )
        medians = {
            key: round(statistics.median(r["records_per_s"] for r in runs if r["system"] == key))
            for key in dict.fromkeys(r["system"] for r in runs)
        }
        return {
            "runs": runs,
            "median_records_per_s": medians,
            "settings": {
                "records": records,
                "events": events,
                "alo_events": alo_events,
                "value_bytes": value_bytes,
                "partitions": PARTITIONS,
                "postgres_fsync": durable,
            },
        }
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def table(result: dict[str, Any]) -> str:
    header = (
        f"{'system':<10} {'#':>2} {'records':>8} {'seconds':>8} {'records/s':>10} "
        f"{'process cpu':>11} {'postgres cpu':>12} {'broker cpu':>10} {'load':>11}"
    )
    lines = [header, "-" * len(header)]
    for r in result["runs"]:
        lines.append(
            f"{r['system']:<10} {r['repeat']:>2} {r['records']:>8} {r['seconds']:>8.2f} "
            f"{r['records_per_s']:>10,} {r['process_cpu_s']:>11.2f} {r['postgres_cpu_s']:>12.2f} "
            f"{r['broker_cpu_s']:>10.2f} {r['load_before']:>5.2f}/{r['load_after']:<5.2f}"
        )
    for key, value in result["median_records_per_s"].items():
        lines.append(f"median {key:<10} {value:>10,} records/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="sink input records")
    parser.add_argument("--events", type=int, default=100_000, help="outbox events")
    parser.add_argument("--alo-events", type=int, default=5_000, help="at-least-once relay")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--systems", default="sink,relay,relay-alo")
    parser.add_argument("--pg-fast", action="store_true", help="PostgreSQL with fsync off")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--out", default="bench-database.json")
    args = parser.parse_args(argv)

    async def run() -> dict[str, Any]:
        from streams_app.broker.cluster import EmbeddedKafka

        workdir = Path(tempfile.mkdtemp(prefix="streams-bench-db-"))
        kafka = None
        try:
            if args.bootstrap:
                bootstrap, broker_pid = args.bootstrap, None
            else:
                from benchmarks.run import FULL_JIT_OPTS

                kafka = EmbeddedKafka(1, jvm_opts=FULL_JIT_OPTS, heap="1g").start()
                bootstrap, broker_pid = kafka.bootstrap_servers, kafka.node(1).pid
            return await bench_database(
                bootstrap,
                broker_pid,
                workdir,
                records=args.records,
                events=args.events,
                alo_events=args.alo_events,
                value_bytes=args.value_bytes,
                repeat=args.repeat,
                durable=not args.pg_fast,
                systems=tuple(s for s in args.systems.split(",") if s),
            )
        finally:
            if kafka is not None:
                kafka.stop()
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"load average before: {os.getloadavg()}")
    result = asyncio.run(run())
    print()
    print(table(result))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
