"""State at scale: one exactly-once worker, two tables of 1 KB values, millions of distinct keys.

    make bench BENCH_ARGS="--state-scale"                      # until 2,000,000 distinct keys
    make bench BENCH_ARGS="--state-scale --duration 3600 --keys 0 --rate 1500"   # one hour
    python -m benchmarks.state_scale --report bench-state-scale.json   # BENCHMARKS.md's table

One embedded broker, an input topic of 16 partitions, and one worker process running
``benchmarks/state_topology.py`` (two reads and two 1 KB writes per record) with default
settings unless ``--set NAME=VALUE``. A generator in this process writes keyed records of
``--value-bytes`` random (incompressible) bytes: with probability ``--hot-fraction`` a key from a
hot set of ``--hot-keys``, otherwise a key never used before (uniform over an unbounded key
space), so the distinct key count grows for the whole run. It keeps at most ``--max-lag``
records ahead of the worker's committed offsets, so the worker runs flat out (or at ``--rate``
records/s) and the input never piles up on disk.

Every ``--sample-every`` seconds it records the worker's RSS, open descriptors and CPU, the
records committed, the distinct keys, and the worker's own figures (``MEM`` lines from the
child: read-cache bytes, hits, misses, evictions; RocksDB memtables and block cache). The
summary gives records/s, the cache hit rate, and RSS after warm-up (min, median, max, spread)
against the memory formula of docs/memory.md for the same settings
(:func:`streams_app.state.budget.worker_memory_estimate`). Writes ``--out`` (JSON).

Disk: the changelogs are created with ``cleanup.policy=delete`` and a short retention (unless
``--compact-changelogs``), as is the input: a compacted changelog of millions of unique 1 KB keys
would keep gigabytes on the shared disk and is not what this measures (restore is not run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.run import FULL_JIT_OPTS, load_average, machine
from benchmarks.state_topology import INPUT_TOPIC, PARTITIONS
from benchmarks.steady import cpu_seconds

REPO = Path(__file__).resolve().parent.parent
TABLES = ("latest", "previous")
MiB = 1024 * 1024


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, PermissionError):
        return None


async def create_topics(bootstrap: str, group: str, args: argparse.Namespace) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    retention = {
        "cleanup.policy": "delete",
        "retention.ms": str(args.retention_s * 1000),
        "segment.bytes": str(32 * MiB),
    }
    changelog = (
        {"cleanup.policy": "compact", "segment.bytes": str(64 * MiB)}
        if args.compact_changelogs
        else retention
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(INPUT_TOPIC, PARTITIONS, 1, topic_configs=retention),
                *(
                    NewTopic(f"{group}-{table}-changelog", PARTITIONS, 1, topic_configs=changelog)
                    for table in TABLES
                ),
            ]
        )
    finally:
        await admin.close()


class Generator:
    """Writes hot and new keys with random values, keeping at most ``max_lag`` records ahead of
    what the group has committed."""

    def __init__(self, bootstrap: str, args: argparse.Namespace) -> None:
        self.bootstrap = bootstrap
        self.args = args
        self.rng = random.Random(args.seed)
        self.produced = 0
        self.new_keys = 0
        self.hot_seen: set[int] = set()
        self.committed = 0
        self.stop = asyncio.Event()

    @property
    def distinct(self) -> int:
        return self.new_keys + len(self.hot_seen)

    def done_producing(self) -> bool:
        keys = self.args.keys
        return bool(keys) and self.distinct >= keys

    async def run(self) -> None:
        from aiokafka import AIOKafkaProducer

        args, rng = self.args, self.rng
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=20,
            max_batch_size=512 * 1024,
        )
        await producer.start()
        try:
            started = time.monotonic()
            while not self.stop.is_set() and not self.done_producing():
                room = args.max_lag - (self.produced - self.committed)
                if args.rate:
                    room = min(room, int(args.rate * (time.monotonic() - started)) - self.produced)
                if room < min(1000, args.rate or 1000):
                    await asyncio.sleep(0.05)
                    continue
                futures = []
                for _ in range(min(room, 2000)):
                    if rng.random() < args.hot_fraction:
                        index = rng.randrange(args.hot_keys)
                        self.hot_seen.add(index)
                        key = b"hot-%06d" % index
                    else:
                        key = b"key-%012d" % self.new_keys
                        self.new_keys += 1
                    value = rng.randbytes(args.value_bytes)
                    futures.append(await producer.send(INPUT_TOPIC, key=key, value=value))
                    self.produced += 1
                    if self.done_producing():
                        break
                await asyncio.gather(*futures)
        finally:
            await producer.stop()


async def committed_total(admin: Any, group: str, tps: list[Any]) -> int:
    committed = await admin.list_consumer_group_offsets(group, partitions=tps)
    return sum(max(0, committed[tp].offset) for tp in tps if tp in committed)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    from streams_app.broker.cluster import EmbeddedKafka
    from streams_app.settings import Settings
    from streams_app.state.budget import worker_memory_estimate

    workdir = Path(tempfile.mkdtemp(prefix="streams-state-scale-"))
    group = f"state-scale-{uuid.uuid4().hex[:6]}"
    overrides = dict(item.partition("=")[::2] for item in args.set)
    env_settings = {f"STREAMS_APP_{k.upper()}": v for k, v in overrides.items()}
    settings = Settings.build(group, {}, environ=env_settings)
    estimate = worker_memory_estimate(
        settings, table_partitions=PARTITIONS * len(TABLES), input_partitions=PARTITIONS
    )
    kafka = None
    proc = None
    samples: list[dict[str, Any]] = []
    try:
        if args.bootstrap:
            bootstrap, broker_pid = args.bootstrap, None
        else:
            print("starting the embedded broker (full JIT options, heap 1g)...", flush=True)
            kafka = EmbeddedKafka(
                1,
                jvm_opts=FULL_JIT_OPTS,
                heap="1g",
                settings={"log.retention.check.interval.ms": "30000"},
            ).start()
            bootstrap, broker_pid = kafka.bootstrap_servers, kafka.node(1).pid
        await create_topics(bootstrap, group, args)

        cmd = [
            sys.executable,
            "-m",
            "benchmarks.child",
            "streams_app",
            "--topology",
            "benchmarks.state_topology",
            "--report-every",
            str(min(args.sample_every, 10.0)),
            "--bootstrap",
            bootstrap,
            "--group",
            group,
            "--state-dir",
            str(workdir / "state"),
            "--guarantee",
            "exactly_once_v2",
        ]
        for item in args.set:
            cmd += ["--set", item]
        log_path = workdir / "worker.log"
        with open(log_path, "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdout=asyncio.subprocess.PIPE, stderr=log, cwd=args.checkout or REPO
            )
        child: dict[str, Any] = {}
        first = asyncio.Event()

        async def read_child() -> None:
            assert proc is not None and proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode(errors="replace").strip()
                if line.startswith("FIRST "):
                    first.set()
                elif line.startswith("MEM "):
                    child.update(json.loads(line[4:]))

        reader = asyncio.create_task(read_child())
        generator = Generator(bootstrap, args)
        producing = asyncio.create_task(generator.run())
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        tps = [TopicPartition(INPUT_TOPIC, p) for p in range(PARTITIONS)]
        try:
            await asyncio.wait_for(first.wait(), 120)
            started = time.monotonic()
            cpu0 = cpu_seconds(proc.pid) or 0.0
            next_sample = started
            print(
                f"{'t s':>6} {'committed':>10} {'keys':>10} {'rec/s':>7} {'RSS MiB':>8} "
                f"{'fds':>5} {'cache MiB':>9} {'hit %':>6} {'memtab MiB':>10} {'evictions':>10}",
                flush=True,
            )
            last_committed, last_t, last_hits, last_misses = 0, started, 0, 0
            while True:
                if proc.returncode is not None:
                    raise RuntimeError(f"the worker exited ({proc.returncode}); see {log_path}")
                generator.committed = await committed_total(admin, group, tps)
                now = time.monotonic()
                finished = generator.done_producing() and generator.committed >= generator.produced
                timed_out = args.duration and now - started >= args.duration
                if now >= next_sample or finished or timed_out:
                    next_sample += args.sample_every
                    committed = generator.committed
                    share = committed / generator.produced if generator.produced else 0.0
                    hits, misses = child.get("cache_hits", 0), child.get("cache_misses", 0)
                    d_hits, d_misses = hits - last_hits, misses - last_misses
                    sample = {
                        "t": round(now - started, 1),
                        "committed": committed,
                        "distinct_keys": int(generator.distinct * share),
                        "new_keys": int(generator.new_keys * share),
                        "records_per_s": round((committed - last_committed) / (now - last_t))
                        if now > last_t
                        else 0,
                        "rss_bytes": rss_bytes(proc.pid),
                        "open_fds": open_fds(proc.pid),
                        "worker_cpu_s": round((cpu_seconds(proc.pid) or cpu0) - cpu0, 1),
                        "broker_cpu_s": cpu_seconds(broker_pid),
                        "load": load_average(),
                        "interval_hit_rate": round(d_hits / (d_hits + d_misses), 4)
                        if d_hits + d_misses
                        else None,
                        **child,
                    }
                    samples.append(sample)
                    if args.samples_log:  # a long run's figures survive an interruption
                        with open(args.samples_log, "a") as out:
                            out.write(json.dumps(sample) + "\n")
                    last_committed, last_t, last_hits, last_misses = committed, now, hits, misses
                    rate = sample["interval_hit_rate"]
                    print(
                        f"{sample['t']:>6.0f} {committed:>10,} {sample['distinct_keys']:>10,} "
                        f"{sample['records_per_s']:>7,} {(sample['rss_bytes'] or 0) / MiB:>8.0f} "
                        f"{sample['open_fds'] or 0:>5} {child.get('cache_bytes', 0) / MiB:>9.1f} "
                        f"{'-' if rate is None else f'{rate * 100:.1f}':>6} "
                        f"{child.get('rocksdb_memtable_bytes', 0) / MiB:>10.0f} "
                        f"{child.get('cache_evictions', 0):>10,}",
                        flush=True,
                    )
                if finished or timed_out:
                    break
                await asyncio.sleep(0.5)
        finally:
            generator.stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producing, 30)
            await admin.close()
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 120)
                except TimeoutError:
                    proc.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader, 5)
        return {
            "samples": samples,
            "summary": summarise(samples, args, estimate),
            "estimate": estimate,
            "settings": {
                "partitions": PARTITIONS,
                "tables": len(TABLES),
                "value_bytes": args.value_bytes,
                "hot_keys": args.hot_keys,
                "hot_fraction": args.hot_fraction,
                "rate": args.rate,
                "overrides": overrides,
                "compact_changelogs": args.compact_changelogs,
                "checkout": args.checkout,
            },
            "machine": machine(),
        }
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
        if kafka is not None:
            kafka.stop()
        if args.keep:
            print(f"kept the worker's log and state in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def summarise(
    samples: list[dict[str, Any]], args: argparse.Namespace, estimate: dict[str, int]
) -> dict[str, Any]:
    if not samples:
        return {}
    last = samples[-1]
    warm = [s for s in samples if s["t"] >= args.warmup and s.get("rss_bytes")]
    rss = [s["rss_bytes"] for s in warm] or [samples[-1]["rss_bytes"] or 0]
    rates = [s["records_per_s"] for s in samples[1:]]
    hits, misses = last.get("cache_hits", 0), last.get("cache_misses", 0)
    # Every read of a never-seen key misses, by construction (one per table): without them,
    # the hit rate of reads of keys seen before (the hot set, mostly).
    seen_misses = max(0, misses - len(TABLES) * last.get("new_keys", 0))
    median_rss = statistics.median(rss)
    return {
        "seconds": last["t"],
        "records": last["committed"],
        "distinct_keys": last["distinct_keys"],
        "records_per_s_overall": round(last["committed"] / last["t"]) if last["t"] else None,
        "records_per_s_median_interval": round(statistics.median(rates)) if rates else None,
        "worker_cpu_s": last["worker_cpu_s"],
        "worker_cpu_us_per_record": round(last["worker_cpu_s"] / last["committed"] * 1e6, 1)
        if last["committed"]
        else None,
        "cache_hit_rate": round(hits / (hits + misses), 4) if hits + misses else None,
        "cache_hit_rate_seen_keys": round(hits / (hits + seen_misses), 4)
        if hits + seen_misses
        else None,
        "warmup_s": args.warmup,
        "rss_after_warmup_min": min(rss),
        "rss_after_warmup_median": median_rss,
        "rss_after_warmup_max": max(rss),
        "rss_spread_vs_median": round(
            max(abs(max(rss) - median_rss), abs(median_rss - min(rss))) / median_rss, 4
        )
        if median_rss
        else None,
        "rss_formula_bytes": estimate["total"],
        "open_fds_max": max((s["open_fds"] or 0) for s in samples),
        "commits": last.get("commits"),
        "early_commits": last.get("early_commits"),
    }


def print_summary(result: dict[str, Any]) -> None:
    s = result["summary"]
    est = result["estimate"]
    print()
    print(
        f"{s['records']:,} records, {s['distinct_keys']:,} distinct keys in {s['seconds']:.0f} s: "
        f"{s['records_per_s_overall']:,} records/s overall, "
        f"{s['records_per_s_median_interval']:,} median per interval; worker CPU "
        f"{s['worker_cpu_s']} s ({s['worker_cpu_us_per_record']} us/record)"
    )
    print(
        f"read cache hit rate {s['cache_hit_rate']} (reads of keys seen before: "
        f"{s['cache_hit_rate_seen_keys']}; reads of a key the open transaction already wrote "
        f"are served by the transaction and not counted); commits {s['commits']}"
    )
    print(
        f"RSS after {s['warmup_s']:.0f} s warm-up: min {s['rss_after_warmup_min'] / MiB:.0f}, "
        f"median {s['rss_after_warmup_median'] / MiB:.0f}, max "
        f"{s['rss_after_warmup_max'] / MiB:.0f} MiB "
        f"(spread {s['rss_spread_vs_median'] * 100:.1f}% of the median); open files max "
        f"{s['open_fds_max']}"
    )
    parts = ", ".join(f"{k} {v / MiB:.0f}" for k, v in est.items() if k != "total")
    print(f"docs/memory.md formula: {est['total'] / MiB:.0f} MiB ({parts})")


def markdown(samples: list[dict[str, Any]], every: float = 300.0) -> str:
    """BENCHMARKS.md's table of a run: one row per ``every`` seconds (and the last sample), so
    the figures in the docs come from the JSON, not from typing."""
    rows = [
        "| minute | records committed | distinct keys | records/s | RSS MiB | open fds "
        "| read cache MiB | hit rate (interval) | memtables MiB | block cache MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    next_t = 0.0
    for i, s in enumerate(samples):
        if s["t"] < next_t and i != len(samples) - 1:
            continue
        next_t = (s["t"] // every + 1) * every
        rate = s.get("interval_hit_rate")
        rows.append(
            f"| {s['t'] / 60:.1f} | {s['committed']:,} | {s['distinct_keys']:,} "
            f"| {s['records_per_s']:,} | {(s['rss_bytes'] or 0) / MiB:.0f} | {s['open_fds']} "
            f"| {s.get('cache_bytes', 0) / MiB:.1f} "
            f"| {'-' if rate is None else f'{rate:.3f}'} "
            f"| {s.get('rocksdb_memtable_bytes', 0) / MiB:.0f} "
            f"| {(s.get('rocksdb_block_cache_bytes') or 0) / MiB:.0f} |"
        )
    return "\n".join(rows)


def report(path: str, warmup: float) -> int:
    """``--report PATH``: the markdown table and summary of a finished run's JSON, or of a
    ``--samples-log`` (JSON lines) of a run that is still going or was interrupted."""
    text = Path(path).read_text()
    if path.endswith(".jsonl"):
        samples = [json.loads(line) for line in text.splitlines() if line.strip()]
        args = argparse.Namespace(warmup=warmup)
        from streams_app.settings import Settings
        from streams_app.state.budget import worker_memory_estimate

        estimate = worker_memory_estimate(
            Settings.build("report", {}, {}),
            table_partitions=PARTITIONS * len(TABLES),
            input_partitions=PARTITIONS,
        )
        result = {"samples": samples, "summary": summarise(samples, args, estimate)}
        result["estimate"] = estimate
    else:
        result = json.loads(text)
    print(markdown(result["samples"]))
    print_summary(result)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--report",
        metavar="PATH",
        help="print the markdown table and summary of a run's --out JSON or --samples-log",
    )
    parser.add_argument("--keys", type=int, default=2_000_000, help="stop at N distinct keys")
    parser.add_argument("--duration", type=float, default=0.0, help="stop after N seconds")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--hot-keys", type=int, default=5_000)
    parser.add_argument("--hot-fraction", type=float, default=0.5)
    parser.add_argument("--max-lag", type=int, default=40_000)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="records/s at most (default: as fast as it goes)"
    )
    parser.add_argument("--sample-every", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=300.0, help="seconds before RSS counts")
    parser.add_argument("--retention-s", type=int, default=300)
    parser.add_argument("--compact-changelogs", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="streams_app NAME=VALUE")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument(
        "--checkout",
        help="run the worker from this checkout (its benchmarks/child.py and "
        "state_topology.py must be these): a before/after comparison",
    )
    parser.add_argument("--out", default="bench-state-scale.json")
    parser.add_argument("--samples-log", help="also append every sample to this file (JSON lines)")
    parser.add_argument("--keep", action="store_true", help="keep the worker's log and state")
    args = parser.parse_args(argv)
    if args.report:
        return report(args.report, args.warmup)
    if not args.keys and not args.duration:
        parser.error("give --keys or --duration (or both)")
    # The generator's producer retries while the new topic's leaders are elected: not news.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    print(f"load average before: {os.getloadavg()}", flush=True)
    result = asyncio.run(run(args))
    print_summary(result)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
