"""Recovery after a crash: ``make bench BENCH_ARGS=--recovery`` (not a test).

A table of ``--recovery-keys`` keys (1,000,000: one input record per key, counted by
``benchmarks/recovery_app.py``), then a steady input load, then the worker that owns half of
the tasks is SIGKILLed. Measured until each of its tasks' first new output is committed and
visible to a ``read_committed`` reader, in five scenarios per round:

``standby``
    two workers, ``table_standby_replicas=1``: the survivor holds a warm standby of every task
    of the killed worker, and restores only the tail.
``no-standby``
    two workers, no standby: the survivor restores the killed worker's tables from their
    changelogs (half the table).
``restart``
    one worker, restarted at once on its intact state directory: a tail-only restore.
``full-restore``
    the same worker killed again and restarted on an empty state directory: the whole table
    restored from its changelog.
``static-restart`` (job ``static``)
    one worker with a ``group_instance_id`` (static membership, KIP-345), restarted at once on
    its intact state directory: it rejoins inside its dead incarnation's session, and the
    broker gives its tasks back without a rebalance. It runs with its own session timeout
    (``--recovery-static-session-timeout``, default 10 s): the restart must land inside it.

Each figure is split where its parts can be seen: ``kill -> assigned`` (the group noticing the
crash: the session timeout for a killed member, then the rebalance), ``assigned -> output``
(what the standby or the intact state dir buys: fencing the dead worker's transactional id,
committed offsets, the restore, the first transaction), and ``kill -> output`` end to end.
Times come from the workers' log lines (their clock is the bench's: one machine) and from the
bench's own ``read_committed`` reader of the output. CPU seconds of the workers over the
window are recorded with each run; medians over ``--repeat`` rounds are reported.

After every scenario the output is checked as every benchmark run's is (``benchmarks/check``):
per-key counts 1, 2, 3, ... with no duplicate and no gap, every input counted, written in
transactions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import statistics
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.check import check_output, end_offsets, summarise_input
from streams_app.lineage import parse_lineage

REPO = Path(__file__).resolve().parent.parent
APP = "benchmarks.recovery_app"
SCENARIOS = ("standby", "no-standby", "restart", "full-restore", "static-restart")

_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_ASSIGNED = re.compile(r"Setting newly assigned partitions (.*) for group")
_TP = re.compile(r"partition=(\d+)")
_RESTORED = re.compile(r"restored \S+\[(\d+)\]: (\d+) record\(s\), offsets \[(\d+), (\d+)\)")
_FENCED = re.compile(r"fenced (\d+) departed worker\(s\)' transactional id\(s\) in ([\d.]+)s")


@dataclass
class LogLine:
    at: float
    text: str


def read_log(path: Path, since: float = 0.0) -> list[LogLine]:
    """The worker's log lines at or after ``since`` (unix time), with their times."""
    out: list[LogLine] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        found = _LOG_TIME.match(line)
        if not found:
            continue
        at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if at >= since:
            out.append(LogLine(at, line))
    return out


def assigned_partitions(lines: list[LogLine]) -> tuple[float, set[int]] | None:
    """The last assignment in ``lines``: when, and which input partitions."""
    for line in reversed(lines):
        found = _ASSIGNED.search(line.text)
        if found:
            return line.at, {int(p) for p in _TP.findall(found.group(1))}
    return None


def cpu_seconds(pid: int | None) -> float | None:
    from benchmarks.steady import cpu_seconds as cpu

    return cpu(pid)


@dataclass
class Scenario:
    """One measured failover."""

    kind: str
    repeat: int
    moved: list[int] = field(default_factory=list)
    kill_to_assigned: float | None = None
    assigned_to_output: float | None = None
    kill_to_output: float | None = None
    restart_to_output: float | None = None
    restore_records: int = 0
    restore_seconds: float | None = None
    fence_seconds: float | None = None
    survivor_cpu_s: float | None = None
    steady_cpu_s_per_s: float | None = None
    state_bytes: int | None = None
    #: The machine's 1-minute load average at the kill (the machine is shared: read with it).
    load_at_kill: float | None = None
    correct: bool | None = None
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


class Load:
    """A steady input load at ``rate`` records/s over the table's keys, until stopped."""

    def __init__(self, bootstrap: str, topic: str, keys: int, rate: int) -> None:
        self.bootstrap, self.topic, self.keys, self.rate = bootstrap, topic, keys, rate
        self.sent = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        from aiokafka import AIOKafkaProducer

        rng = random.Random(7)
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True, linger_ms=5
        )
        await producer.start()
        try:
            tick = 0.05
            per_tick = max(1, int(self.rate * tick))
            next_at = time.monotonic()
            futures = []
            while not self._stop.is_set():
                for _ in range(per_tick):
                    key = f"k{rng.randrange(self.keys):07d}".encode()
                    futures.append(await producer.send(self.topic, key=key, value=b"x"))
                self.sent += per_tick
                next_at += tick
                delay = next_at - time.monotonic()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), delay)
            await producer.flush()
            await asyncio.gather(*futures)
        finally:
            await producer.stop()


async def preload(bootstrap: str, topic: str, keys: int) -> None:
    """One record per key ``k0000000``..., in batches per partition (murmur2 partitioning)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.partitioner import DefaultPartitioner

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20
    )
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        partitioner = DefaultPartitioner()
        batches = {p: producer.create_batch() for p in partitions}
        futures = []
        for i in range(keys):
            key = f"k{i:07d}".encode()
            partition = partitioner(key, partitions, partitions)
            batch = batches[partition]
            if batch.append(key=key, value=b"x", timestamp=None) is None:
                batch.close()
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key, value=b"x", timestamp=None)
        for partition, batch in batches.items():
            if batch.record_count():
                batch.close()
                futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


class OutputWatch:
    """Tails the output read_committed from its current end; notes the first output of each
    watched partition whose source offset is at or past a bound (a new owner's output)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.first: dict[int, float] = {}
        self.bounds: dict[int, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        await self._ready.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def watch(self, bounds: dict[int, int]) -> None:
        """Watch these partitions afresh (a scenario's earlier firsts no longer count)."""
        self.first = {}
        self.bounds = dict(bounds)

    async def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while set(self.bounds) - set(self.first):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no new output for partitions {sorted(set(self.bounds) - set(self.first))}"
                )
            await asyncio.sleep(0.02)

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
        )
        await consumer.start()
        try:
            parts = consumer.partitions_for_topic(self.topic)
            if not parts:
                await consumer._client.force_metadata_update()
                parts = consumer.partitions_for_topic(self.topic) or set()
            tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:
                await consumer.position(tp)
            self._ready.set()
            while True:
                batch = await consumer.getmany(timeout_ms=50, max_records=20_000)
                now = time.time()
                for tp, records in batch.items():
                    bound = self.bounds.get(tp.partition)
                    if bound is None or tp.partition in self.first:
                        continue
                    for record in records:
                        src = parse_lineage(record.headers)
                        if src is not None and src[2] >= bound:
                            self.first[tp.partition] = now
                            break
        finally:
            await consumer.stop()


class Group:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic

    async def committed(self) -> dict[int, int]:
        from aiokafka import TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient

        ends = await end_offsets(self.bootstrap, self.topic)
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in ends]
            found = await admin.list_consumer_group_offsets(self.group, partitions=tps)
            return {tp.partition: max(0, found[tp].offset) for tp in tps if tp in found}
        finally:
            await admin.close()

    async def wait_caught_up(self, timeout: float) -> float:
        started = time.monotonic()
        while True:
            ends = await end_offsets(self.bootstrap, self.topic)
            committed = await self.committed()
            if all(committed.get(p, -1) >= e for p, e in ends.items()):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"group {self.group} did not catch up in {timeout:.0f}s")
            await asyncio.sleep(0.25)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


class Setup:
    """One table built by ``workers`` worker processes, with its own topics and group."""

    def __init__(
        self,
        args: argparse.Namespace,
        bootstrap: str,
        workdir: Path,
        workers: int,
        standbys: int,
        label: str,
        env: dict[str, str] | None = None,
    ) -> None:
        from streams_app.testing.workers import WorkerProcess

        self.args, self.bootstrap = args, bootstrap
        self.suffix = f"{label}-{uuid.uuid4().hex[:6]}"
        self.input, self.output = f"rec-in-{self.suffix}", f"rec-out-{self.suffix}"
        self.group = Group(bootstrap, f"rec-{self.suffix}", self.input)
        self.dir = workdir / self.suffix
        env = {
            "STREAMS_APP_BROKER": bootstrap,
            "STREAMS_APP_SESSION_TIMEOUT": str(args.recovery_session_timeout),
            "STREAMS_APP_HEARTBEAT_INTERVAL": str(args.recovery_heartbeat),
            "STREAMS_APP_TABLE_STANDBY_REPLICAS": str(standbys),
            "RECOVERY_SUFFIX": self.suffix,
            "RECOVERY_PARTITIONS": str(args.partitions),
            **(env or {}),
        }
        self.workers = [
            WorkerProcess(
                APP,
                state_dir=self.dir / f"w{i}",
                log_path=self.dir / f"w{i}.log",
                env=env,
                name=f"w{i}",
                cwd=REPO,
            )
            for i in range(workers)
        ]
        self.load: Load | None = None
        self.watch = OutputWatch(bootstrap, self.output)

    async def __aenter__(self) -> Setup:
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Whatever happened, no worker process outlives its scenario."""
        for worker in self.workers:
            if worker.running:
                worker.kill()

    async def build(self, name: str, index: int) -> None:
        """Topics, the preloaded table input, the workers, until they have counted it all."""
        await _create_topics(self.bootstrap, [self.input, self.output], self.args.partitions)
        await preload(self.bootstrap, self.input, self.args.recovery_keys)
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            await asyncio.to_thread(worker.wait_assigned, 120)
        built = await self.group.wait_caught_up(timeout=900)
        print(
            f"    {name} #{index}: table of {self.args.recovery_keys:,} keys built in {built:.1f}s",
            flush=True,
        )

    async def start_load(self) -> None:
        self.load = Load(self.bootstrap, self.input, self.args.recovery_keys, self.args.rate)
        self.load.start()
        await self.watch.start()

    async def finish(self, scenario: list[Scenario]) -> None:
        """Stop the load, let the group drain, stop the workers, check the whole output."""
        if self.load is not None:
            await self.load.stop()
        await self.watch.stop()
        try:
            await self.group.wait_caught_up(timeout=300)
        finally:
            for worker in self.workers:
                if worker.running:
                    await asyncio.to_thread(worker.terminate, 60)
        expected = await summarise_input(self.bootstrap, self.input)
        verdict = await check_output(
            self.bootstrap,
            self.output,
            {},
            expected,
            kind="count",
            transactional=True,
            timeout=600,
        )
        for s in scenario:
            s.correct = verdict.correct
            s.problems = verdict.problems


def _log_facts(s: Scenario, lines: list[LogLine], t_kill: float, moved: set[int]) -> None:
    assigned = [ln for ln in lines if _ASSIGNED.search(ln.text)]
    for line in assigned:
        found = _ASSIGNED.search(line.text)
        assert found is not None
        if moved & {int(p) for p in _TP.findall(found.group(1))}:
            s.kill_to_assigned = line.at - t_kill
            break
    restored = [ln for ln in lines if _RESTORED.search(ln.text)]
    s.restore_records = 0
    for line in restored:
        found = _RESTORED.search(line.text)
        assert found is not None
        s.restore_records += int(found.group(2))
    begun = next(
        (ln.at for ln in lines if "restoring " in ln.text and "changelog" in ln.text), None
    )
    if begun is not None and restored:
        s.restore_seconds = max(ln.at for ln in restored) - begun
    for line in lines:
        found = _FENCED.search(line.text)
        if found:
            s.fence_seconds = float(found.group(2))


async def _kill_and_measure(
    setup: Setup,
    s: Scenario,
    victim: int,
    survivor: int,
    *,
    restart: str | None = None,
    timeout: float = 300.0,
) -> None:
    """SIGKILL worker ``victim``; optionally restart it (``"intact"`` or ``"empty"`` state);
    measure until every task it had gives a new visible output."""
    v = setup.workers[victim]
    last = assigned_partitions(read_log(v.log_path))
    assert last is not None, "the victim never logged an assignment"
    moved = last[1]
    s.moved = sorted(moved)
    survivors = [w for i, w in enumerate(setup.workers) if i != victim]
    cpu_before = {w.name: cpu_seconds(w.pid) for w in survivors}
    # Steady state first: CPU of every worker over a second of load (the standby's cost).
    t0, cpu0 = time.monotonic(), sum(cpu_seconds(w.pid) or 0 for w in setup.workers)
    await asyncio.sleep(2.0)  # a measurement window, not a synchronisation
    cpu1 = sum(cpu_seconds(w.pid) or 0 for w in setup.workers)
    s.steady_cpu_s_per_s = round((cpu1 - cpu0) / (time.monotonic() - t0), 3)
    s.state_bytes = _dir_bytes(setup.dir)
    cpu_before = {w.name: cpu_seconds(w.pid) for w in survivors}
    s.load_at_kill = round(os.getloadavg()[0], 2)
    t_kill = time.time()
    v.kill()
    bounds = await setup.group.committed()
    setup.watch.watch({p: bounds.get(p, 0) for p in moved})
    t_restart = None
    if restart is not None:
        if restart == "empty":
            shutil.rmtree(v.state_dir, ignore_errors=True)
        t_restart = time.time()
        v.start()
    await setup.watch.wait(timeout)
    t_output = max(setup.watch.first.values())
    s.kill_to_output = t_output - t_kill
    if t_restart is not None:
        s.restart_to_output = t_output - t_restart
    new_owner = v if restart is not None else setup.workers[survivor]
    _log_facts(s, read_log(new_owner.log_path, since=t_kill), t_kill, moved)
    if s.kill_to_assigned is not None:
        s.assigned_to_output = s.kill_to_output - s.kill_to_assigned
    if restart is None:
        w = setup.workers[survivor]
        before, after = cpu_before.get(w.name), cpu_seconds(w.pid)
        if before is not None and after is not None:
            s.survivor_cpu_s = round(after - before, 2)
    else:
        s.survivor_cpu_s = cpu_seconds(v.pid)


async def _standby_pair(
    args: argparse.Namespace, bootstrap: str, workdir: Path, index: int, standbys: int
) -> Scenario:
    kind = "standby" if standbys else "no-standby"
    s = Scenario(kind, index)
    async with Setup(args, bootstrap, workdir, 2, standbys, kind) as setup:
        await setup.build(kind, index)
        if standbys:
            # The survivor's standbys of the victim's tasks must have caught up first.
            last = assigned_partitions(read_log(setup.workers[0].log_path))
            assert last is not None
            for p in sorted(last[1]):
                await asyncio.to_thread(
                    setup.workers[1].wait_for_log, f"standby 0_{p} caught up", 600
                )
        await setup.start_load()
        await _kill_and_measure(setup, s, victim=0, survivor=1)
        await setup.finish([s])
    return s


async def _restarts(
    args: argparse.Namespace, bootstrap: str, workdir: Path, index: int
) -> list[Scenario]:
    restart, full = Scenario("restart", index), Scenario("full-restore", index)
    async with Setup(args, bootstrap, workdir, 1, 0, "restart") as setup:
        await setup.build("restart", index)
        await setup.start_load()
        await _kill_and_measure(setup, restart, victim=0, survivor=0, restart="intact")
        await asyncio.to_thread(setup.workers[0].wait_assigned, 120)
        await _kill_and_measure(setup, full, victim=0, survivor=0, restart="empty")
        await setup.finish([restart, full])
    return [restart, full]


async def _static_restart(
    args: argparse.Namespace, bootstrap: str, workdir: Path, index: int
) -> Scenario:
    s = Scenario("static-restart", index)
    session = args.recovery_static_session_timeout
    env = {
        "STREAMS_APP_GROUP_INSTANCE_ID": "w0",
        "STREAMS_APP_SESSION_TIMEOUT": str(session),
        "STREAMS_APP_HEARTBEAT_INTERVAL": str(round(session / 3, 3)),
    }
    async with Setup(args, bootstrap, workdir, 1, 0, "static", env=env) as setup:
        await setup.build("static", index)
        await setup.start_load()
        await _kill_and_measure(setup, s, victim=0, survivor=0, restart="intact")
        await setup.finish([s])
    return s


def _median(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return round(statistics.median(found), 3) if found else None


def summarise(runs: list[Scenario]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in SCENARIOS:
        mine = [r for r in runs if r.kind == kind and r.correct]
        if not mine:
            continue
        out[kind] = {
            name: _median([getattr(r, name) for r in mine])
            for name in (
                "kill_to_assigned",
                "assigned_to_output",
                "kill_to_output",
                "restart_to_output",
                "restore_records",
                "restore_seconds",
                "fence_seconds",
                "survivor_cpu_s",
                "steady_cpu_s_per_s",
                "state_bytes",
            )
        }
        out[kind]["runs"] = len(mine)
    return out


async def bench_recovery(args: argparse.Namespace, bootstrap: str, workdir: Path) -> dict[str, Any]:
    jobs = args.recovery_scenarios.split(",")
    unknown = set(jobs) - {"standby", "no-standby", "restarts", "static"}
    if unknown:
        raise SystemExit(f"--recovery-scenarios: unknown {sorted(unknown)}")
    runs: list[Scenario] = []
    for index in range(1, args.repeat + 1):
        for job in jobs:
            try:
                if job == "restarts":
                    found = await _restarts(args, bootstrap, workdir, index)
                elif job == "static":
                    found = [await _static_restart(args, bootstrap, workdir, index)]
                else:
                    found = [
                        await _standby_pair(
                            args, bootstrap, workdir, index, 1 if job == "standby" else 0
                        )
                    ]
            except Exception as exc:  # one failed scenario must not lose the others
                print(f"  recovery {job} #{index}: FAILED: {exc!r}", flush=True)
                runs.append(Scenario(job, index, correct=False, problems=[repr(exc)[:2000]]))
                continue
            for s in found:
                runs.append(s)
                print(
                    f"  recovery {s.kind:<12} #{index}: kill->assigned {_fmt(s.kill_to_assigned)}s"
                    f", assigned->output {_fmt(s.assigned_to_output)}s, kill->output "
                    f"{_fmt(s.kill_to_output)}s"
                    + (
                        f" (restart->output {_fmt(s.restart_to_output)}s)"
                        if s.restart_to_output is not None
                        else ""
                    )
                    + f", restored {s.restore_records:,} records in "
                    f"{_fmt(s.restore_seconds)}s, cpu {_fmt(s.survivor_cpu_s)}s, "
                    f"load {_fmt(s.load_at_kill)}, "
                    + ("correct" if s.correct else f"WRONG: {s.problems}"),
                    flush=True,
                )
    return {
        "settings": {
            "keys": args.recovery_keys,
            "partitions": args.partitions,
            "rate": args.rate,
            "session_timeout": args.recovery_session_timeout,
            "heartbeat_interval": args.recovery_heartbeat,
            "static_session_timeout": args.recovery_static_session_timeout,
            "static_heartbeat_interval": round(args.recovery_static_session_timeout / 3, 3),
            "repeat": args.repeat,
        },
        "runs": [r.as_json() for r in runs],
        "summary": summarise(runs),
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
