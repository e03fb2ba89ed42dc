"""Throughput of exactly-once vs at-least-once vs a bare aiokafka loop, on one embedded broker.

    python -m benchmarks.run [--records 200000] [--partitions 8] [--repeat 3] [--systems ...]
    make bench BENCH_ARGS="--repeat 3"

One broker (full-JIT JVM options unless ``--jvm fast``), one input topic pre-loaded with
``--records`` keyed records of ``--value-bytes`` bytes, then for every system and repeat a fresh
worker *process* with a fresh consumer group reads it from the beginning. A run is timed from
the moment that process fetched its first input record (so JVM, worker start-up and the group
join are excluded) until the group's committed offsets reach the input's end offsets, polled
every 50 ms; ``total_seconds`` also counts the start-up. The worker's and the broker's CPU
seconds over the timed window and the load average are recorded with every run: other work on
the machine disturbs the figures, so repeat runs and compare medians.

Prints a table and writes ``bench-results.json``: ``{"runs": [{"system", "guarantee",
"records", "seconds", "records_per_s", ...}, ...], "summary": {...}}``. Not a test.

``--state-scale`` runs the state-scale benchmark instead (``benchmarks/state_scale.py``: RSS,
records/s and read-cache hit rate with millions of distinct keys; its own options).

``--systems eos,alos,ceiling,faust`` adds faust-streaming's exactly-once on the same topology
(first repeat only): it is slow enough that a run stops at ``--timeout`` and reports the rate of
what it had committed by then (``"finished": false``). ``--profile eos`` samples the worker with
py-spy (``pip install py-spy``) and writes a per-function summary; ``--compare LABEL=PATH``
interleaves runs of another checkout (A/B).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.child import CEILING_OUTPUT_TOPIC, INPUT_TOPIC, OUTPUT_TOPIC
from benchmarks.faust_count import FAUST_OUTPUT_TOPIC

REPO = Path(__file__).resolve().parent.parent

#: Kafka's own kafka-server-start.sh settings: G1, full tiered JIT (the embedded broker's default
#: is C1-only and serial GC, for fast test starts).
FULL_JIT_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
    "-Dlog4j2.formatMsgNoLookups=true",
)


@dataclass(frozen=True)
class System:
    key: str
    label: str
    child: str
    guarantee: str
    #: The checkout the child runs from (``--compare`` adds runs from another one).
    repo: Path = REPO


SYSTEMS = {
    "eos": System("eos", "streams_app", "streams_app", "exactly_once_v2"),
    "alos": System("alos", "streams_app", "streams_app", "at_least_once"),
    "ceiling": System("ceiling", "aiokafka loop", "aiokafka", "exactly_once (txn)"),
    "faust": System("faust", "faust-streaming", "faust", "exactly_once"),
}
DEFAULT_SYSTEMS = ("eos", "alos", "ceiling")
FAUST_DEFAULT_COMMIT_INTERVAL = 2.8


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a process so far (None if it is gone)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _clock_ticks()


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


# -- the broker and the input ------------------------------------------------------------


async def create_topics(bootstrap: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(name, partitions, 1)
            for name in (INPUT_TOPIC, OUTPUT_TOPIC, CEILING_OUTPUT_TOPIC, FAUST_OUTPUT_TOPIC)
            if name not in existing
        ]
        if wanted:
            await admin.create_topics(wanted)
    finally:
        await admin.close()


async def preload(bootstrap: str, records: int, keys: int, value_bytes: int, seed: int) -> None:
    """Write ``records`` keyed records, partitioned like Kafka's default partitioner (murmur2),
    in batches."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.partitioner import DefaultPartitioner

    rng = random.Random(seed)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20
    )
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(INPUT_TOPIC))
        partitioner = DefaultPartitioner()
        key_bytes = [f"key-{k:06d}".encode() for k in range(keys)]
        key_partition = [partitioner(k, partitions, partitions) for k in key_bytes]
        batches = {p: producer.create_batch() for p in partitions}
        futures = []
        for _ in range(records):
            k = rng.randrange(keys)
            partition = key_partition[k]
            value = rng.randbytes(value_bytes)
            batch = batches[partition]
            if batch.append(key=key_bytes[k], value=value, timestamp=None) is None:
                batch.close()
                futures.append(await producer.send_batch(batch, INPUT_TOPIC, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key_bytes[k], value=value, timestamp=None)
        for partition, batch in batches.items():
            if batch.record_count():
                batch.close()
                futures.append(await producer.send_batch(batch, INPUT_TOPIC, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


# -- one run ---------------------------------------------------------------------------------


class OffsetWatcher:
    """Polls a group's committed offsets against the input's end offsets."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    async def __aenter__(self) -> OffsetWatcher:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient

        self.admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await self.admin.start()
        # Kept open until exit: aiokafka 0.14 raises CancelledError from a group-less
        # consumer stopped right after its start.
        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await self.consumer.start()
        parts = self.consumer.partitions_for_topic(INPUT_TOPIC)
        if not parts:
            await self.consumer._client.force_metadata_update()
            parts = self.consumer.partitions_for_topic(INPUT_TOPIC) or set()
        self.tps = [TopicPartition(INPUT_TOPIC, p) for p in sorted(parts)]
        self.ends = await self.consumer.end_offsets(self.tps)
        return self

    @property
    def total(self) -> int:
        return sum(self.ends.values())

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()
        await self.admin.close()

    async def done(self, group: str) -> bool:
        committed = await self.admin.list_consumer_group_offsets(group, partitions=self.tps)
        return all(tp in committed and committed[tp].offset >= self.ends[tp] for tp in self.tps)

    async def committed_total(self, group: str) -> int:
        committed = await self.admin.list_consumer_group_offsets(group, partitions=self.tps)
        return sum(max(0, committed[tp].offset) for tp in self.tps if tp in committed)


async def run_once(
    system: System,
    index: int,
    args: argparse.Namespace,
    bootstrap: str,
    broker_pid: int | None,
    watcher: OffsetWatcher,
    records: int,
    workdir: Path,
) -> dict[str, Any]:
    group = f"bench-{system.key.replace('@', '.')}-{index}-{uuid.uuid4().hex[:6]}"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.child",
        system.child,
        "--bootstrap",
        bootstrap,
        "--group",
        group,
        "--state-dir",
        str(workdir / group),
        "--max-poll-records",
        str(args.max_poll_records),
    ]
    if system.child == "streams_app":
        cmd += ["--guarantee", system.guarantee]
        for item in args.set:
            cmd += ["--set", item]
    commit_interval = args.commit_interval
    if commit_interval is None and system.child == "faust":
        commit_interval = FAUST_DEFAULT_COMMIT_INTERVAL  # its broker_commit_interval default
    elif commit_interval is None:
        commit_interval = 1.0 if system.guarantee == "at_least_once" else 0.1
    cmd += ["--commit-interval", str(commit_interval)]
    profile_path = None
    if system.key in args.profile:
        profile_path = Path(args.profile_dir) / f"profile-{system.key}-{index}"
        profile_path.parent.mkdir(parents=True, exist_ok=True)
        if args.profiler == "pyinstrument":
            cmd += ["--profile", str(profile_path)]

    log_path = workdir / f"{group}.log"
    load_before = load_average()
    spawned = time.time()
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=log, cwd=system.repo
        )
    first: float | None = None
    first_seen = asyncio.Event()
    stats: dict[str, Any] = {}
    cpu_at_first: tuple[float | None, float | None] = (None, None)

    async def read_stdout() -> None:
        nonlocal first, cpu_at_first
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if "FIRST " in line:  # faust may put terminal escapes before it
                first = float(line.split("FIRST ", 1)[1].split()[0])
                cpu_at_first = (cpu_seconds(proc.pid), cpu_seconds(broker_pid))
                first_seen.set()
            elif "STATS " in line:
                stats.update(json.loads(line.split("STATS ", 1)[1]))

    reader = asyncio.create_task(read_stdout())
    spy = None
    if profile_path is not None and args.profiler == "py-spy":
        # Sampling from outside: a few per cent of overhead instead of pyinstrument's 2-3x.
        spy = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--nonblocking",
            "--rate",
            "250",
            "--format",
            "raw",
            "--output",
            str(profile_path) + ".collapsed",
            "--pid",
            str(proc.pid),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
    deadline = time.monotonic() + args.timeout
    done_at: float | None = None
    cpu_at_done: tuple[float | None, float | None] = (None, None)
    finished = False
    done_records = records
    try:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                break
            if first_seen.is_set() and await watcher.done(group):
                done_at = time.time()
                cpu_at_done = (cpu_seconds(proc.pid), cpu_seconds(broker_pid))
                finished = True
                break
            await asyncio.sleep(0.05)
        if not finished and first_seen.is_set() and proc.returncode is None:
            # Too slow for --timeout: report the rate of what it committed so far.
            done_at = time.time()
            cpu_at_done = (cpu_seconds(proc.pid), cpu_seconds(broker_pid))
            done_records = await watcher.committed_total(group)
    finally:
        load_after = load_average()
        if spy is not None and spy.returncode is None:
            spy.send_signal(signal.SIGINT)
            await spy.wait()
            from benchmarks.profile_summary import summarise_collapsed

            assert profile_path is not None
            collapsed = Path(str(profile_path) + ".collapsed")
            if collapsed.exists():
                profile_path.with_suffix(".txt").write_text(summarise_collapsed(collapsed))
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, 5)
    if done_at is None or first is None:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(
            f"{system.key} run {index} did not finish (exit {proc.returncode}):\n{tail}"
        )
    seconds = done_at - first

    def delta(i: int) -> float | None:
        a, b = cpu_at_first[i], cpu_at_done[i]
        return None if a is None or b is None else round(b - a, 2)

    return {
        "system": system.label,
        "guarantee": system.guarantee,
        "key": system.key,
        "repeat": index,
        "records": done_records,
        "finished": finished,
        "seconds": round(seconds, 3),
        "records_per_s": round(done_records / seconds),
        "total_seconds": round(done_at - spawned, 3),
        "commit_interval_s": commit_interval,
        "worker_cpu_s": delta(0),
        "broker_cpu_s": delta(1),
        "load_before": load_before,
        "load_after": load_after,
        "profile": str(profile_path) + ".txt" if profile_path else None,
        **{f"child_{k}": v for k, v in stats.items()},
    }


# -- reporting ------------------------------------------------------------------------------


def table(runs: list[dict[str, Any]]) -> str:
    header = (
        f"{'system':<20} {'guarantee':<18} {'#':>2} {'records':>8} {'seconds':>8} "
        f"{'records/s':>10} {'total s':>8} {'worker cpu':>10} {'broker cpu':>10} {'load':>10}"
    )
    lines = [header, "-" * len(header)]
    for r in runs:
        load = f"{r['load_before']:.2f}/{r['load_after']:.2f}"
        lines.append(
            f"{r['system']:<20} {r['guarantee']:<18} {r['repeat']:>2} {r['records']:>8} "
            f"{r['seconds']:>8.2f} {r['records_per_s']:>10,} {r['total_seconds']:>8.2f} "
            f"{_fmt(r['worker_cpu_s']):>10} {_fmt(r['broker_cpu_s']):>10} {load:>10}"
        )
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians: dict[str, float] = {}
    for key in dict.fromkeys(r["key"] for r in runs):
        medians[key] = statistics.median(r["records_per_s"] for r in runs if r["key"] == key)
    summary: dict[str, Any] = {"median_records_per_s": {k: round(v) for k, v in medians.items()}}
    if "eos" in medians and "alos" in medians:
        summary["eos_over_alos"] = round(medians["eos"] / medians["alos"], 3)
    if "eos" in medians and "ceiling" in medians:
        summary["eos_over_ceiling"] = round(medians["eos"] / medians["ceiling"], 3)
    if "alos" in medians and "ceiling" in medians:
        summary["alos_over_ceiling"] = round(medians["alos"] / medians["ceiling"], 3)
    return summary


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# -- main -----------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from streams_app.broker.cluster import EmbeddedKafka
    from streams_app.broker.node import DEFAULT_JVM_OPTS

    systems = [SYSTEMS[s] for s in args.systems.split(",")]
    for item in args.compare:
        # A/B: the same systems from another checkout (e.g. a git worktree of the previous
        # commit), interleaved with ours so both see the same machine load.
        label, _, path = item.rpartition("=")
        label = label or Path(path).name
        systems += [
            dataclasses.replace(
                s, key=f"{s.key}@{label}", label=f"{s.label}@{label}", repo=Path(path).resolve()
            )
            for s in list(systems)
            if s.child == "streams_app"
        ]
    workdir = Path(tempfile.mkdtemp(prefix="streams-bench-"))
    kafka = None
    try:
        if args.bootstrap:
            bootstrap, broker_pid = args.bootstrap, None
        else:
            jvm_opts = FULL_JIT_OPTS if args.jvm == "full" else DEFAULT_JVM_OPTS
            print(f"starting the embedded broker ({args.jvm} JVM options, heap {args.heap})...")
            kafka = EmbeddedKafka(1, jvm_opts=jvm_opts, heap=args.heap).start()
            bootstrap, broker_pid = kafka.bootstrap_servers, kafka.node(1).pid
        await create_topics(bootstrap, args.partitions)
        t0 = time.monotonic()
        await preload(bootstrap, args.records, args.keys, args.value_bytes, args.seed)
        runs: list[dict[str, Any]] = []
        async with OffsetWatcher(bootstrap) as watcher:
            records = watcher.total
            print(
                f"pre-loaded {INPUT_TOPIC}: {records:,} records over {args.partitions} "
                f"partitions ({args.value_bytes}-byte values, {args.keys:,} keys) in "
                f"{time.monotonic() - t0:.1f}s"
            )
            for index in range(args.warmup):
                # Untimed: lets the broker's JIT compile its produce, fetch, transaction and
                # compacted-topic paths before the first timed run (the first EOS run after a
                # ceiling-only warm-up still saw 2-4x the broker CPU of the later ones).
                for warm_system in (SYSTEMS["ceiling"], SYSTEMS["eos"]):
                    warm = await run_once(
                        warm_system,
                        -index,
                        args,
                        bootstrap,
                        broker_pid,
                        watcher,
                        records,
                        workdir,
                    )
                    print(
                        f"  warm-up  {warm_system.key:<8} #{index + 1}: "
                        f"{warm['records_per_s']:>8,} records/s (not counted)"
                    )
            for index in range(1, args.repeat + 1):
                for system in systems:
                    if index > 1 and system.key in args.once:
                        continue
                    run = await run_once(
                        system, index, args, bootstrap, broker_pid, watcher, records, workdir
                    )
                    runs.append(run)
                    print(
                        f"  {system.key:<8} #{index}: {run['records_per_s']:>8,} records/s "
                        f"({run['seconds']:.2f}s, worker cpu {_fmt(run['worker_cpu_s'])}s, "
                        f"load {run['load_before']}/{run['load_after']})",
                        flush=True,
                    )
        return {
            "runs": runs,
            "summary": summarise(runs),
            "machine": machine(),
            "settings": {
                "records": records,
                "partitions": args.partitions,
                "value_bytes": args.value_bytes,
                "keys": args.keys,
                "jvm": args.jvm,
                "heap": args.heap,
                "max_poll_records": args.max_poll_records,
                "streams_app_overrides": args.set,
            },
        }
    finally:
        if kafka is not None:
            kafka.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept worker logs and state in {workdir}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--state-scale" in argv:
        # The state-scale benchmark has options of its own (benchmarks/state_scale.py).
        from benchmarks.state_scale import main as state_scale

        return state_scale([a for a in argv if a != "--state-scale"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed ceiling + EOS runs first (rounds)"
    )
    parser.add_argument(
        "--once",
        default="faust",
        help="systems run in the first repeat only (default: %(default)s, it is slow)",
    )
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help=f"comma-separated, of {', '.join(SYSTEMS)} (default: %(default)s)",
    )
    parser.add_argument(
        "--commit-interval",
        type=float,
        default=None,
        help="seconds, for every system (default: each guarantee's own: 0.1 EOS, 1.0 ALOS)",
    )
    parser.add_argument("--max-poll-records", type=int, default=2000, help="the ceiling's")
    parser.add_argument("--set", action="append", default=[], help="streams_app NAME=VALUE")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="[LABEL=]PATH",
        help="also run the streams_app systems from the checkout at PATH (A/B, interleaved)",
    )
    parser.add_argument("--jvm", choices=("full", "fast"), default="full")
    parser.add_argument("--heap", default="1g")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument(
        "--profile",
        default="",
        help="comma-separated systems to profile (see --profiler)",
    )
    parser.add_argument("--profile-dir", default="bench-profiles")
    parser.add_argument("--profiler", choices=("py-spy", "pyinstrument"), default="py-spy")
    parser.add_argument("--out", default="bench-results.json")
    parser.add_argument("--keep", action="store_true", help="keep worker logs and state")
    args = parser.parse_args(argv)
    args.profile = [p for p in args.profile.split(",") if p]
    if (
        args.profile
        and args.profiler == "py-spy"
        and not shutil.which("py-spy", path=str(Path(sys.executable).parent))
    ):
        parser.error("--profile needs py-spy in the virtualenv: pip install py-spy")
    args.once = [p for p in args.once.split(",") if p]

    print(f"load average before: {os.getloadavg()}")
    result = asyncio.run(main_async(args))
    print()
    print(table(result["runs"]))
    print()
    summary = result["summary"]
    for key, value in summary["median_records_per_s"].items():
        print(f"median {key:<8} {value:>10,} records/s")
    for name in ("eos_over_alos", "eos_over_ceiling", "alos_over_ceiling"):
        if name in summary:
            print(f"{name:<18} {summary[name]:.3f}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
