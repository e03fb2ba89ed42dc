"""``make soak`` / ``python -m streams_app.chaos.soak``: one worker, for an hour, under load.

What a production week does to a worker in an hour: steady input at about half of what the worker
can do (measured first, on the same broker), a poison record every few seconds, and the broker
restarted every ten minutes. The EOS test topology (``topologies.eos_test``) runs as one worker
process with the product's defaults (error policy ``dlq``: three retries with backoff, then the
dead-letter topic). Sampled over time: the worker's resident memory and the group's lag. At the
end the chaos verifier (:mod:`streams_app.chaos.verifier`) reads everything back and checks the
invariants, including that each poison record went to the dead-letter topic exactly once.

It passes when:

- the worker's RSS after the warm-up stays within ``rss_tolerance`` (10 %) of its median;
- the lag stays bounded: never more than ``lag_bound`` seconds of input behind, and the
  worker drains everything at the end;
- the verifier counts zero violations, and the worker never exits on its own.

Poison records alternate between two kinds: bytes that are not JSON (a decode error, dead-lettered
at once) and a JSON string where the topology expects an integer (the agents raise ``TypeError``:
retried, then dead-lettered).

    python -m streams_app.chaos.soak                       # 1 hour, writes soak-results.json
    python -m streams_app.chaos.soak --duration 300        # 5 minutes, one broker restart
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams_app.aio import within
from streams_app.broker import EmbeddedKafka
from streams_app.chaos.generator import Generator
from streams_app.chaos.progress import ProgressMonitor
from streams_app.chaos.run import READY, wait_topics
from streams_app.chaos.systems import STREAMS_APP, StreamsAppSystem, WorkerSettings
from streams_app.chaos.verifier import Verifier
from streams_app.testing.workers import WorkerProcess

log = logging.getLogger("streams_app.chaos.soak")

#: The two kinds of poison record (see the module doc), sent in turn.
POISON_VALUES = (b"\xff\xfe not json", b'"poison"')


@dataclass
class SoakConfig:
    duration: float = 3600.0
    #: Input records per second; None: half the capacity measured at the start.
    rate: float | None = None
    #: Records the capacity measurement feeds the worker (as fast as the producer can).
    capacity_records: int = 30_000
    poison_every: float = 5.0
    restart_every: float = 600.0
    sample_every: float = 10.0
    #: Seconds before memory and lag are judged; None: min(300, duration / 4).
    warmup: float | None = None
    rss_tolerance: float = 0.10
    #: The worker's RocksDB block cache and memtable budget, each (see SoakSystem).
    rocksdb_mb: int = 8
    #: The lag may never exceed this many seconds of input.
    lag_bound: float = 120.0
    drain_timeout: float = 300.0
    partitions: int = 5
    keys: int = 20_000
    values: int = 10_000
    seed: int = field(default_factory=lambda: random.randrange(1_000_000))
    workdir: Path = Path(".soak")
    output: Path = Path("soak-results.json")

    @property
    def warmup_seconds(self) -> float:
        return self.warmup if self.warmup is not None else min(300.0, self.duration / 4)


class SoakSystem(StreamsAppSystem):
    """The EOS test topology with the soak's RocksDB budget.

    A worker's RocksDB memory is bounded by ``rocksdb_block_cache_bytes`` and
    ``rocksdb_memtable_bytes`` (by default 64 MiB and 256 MiB, shared by all its table
    partitions), but at soak rates the default memtables take hours to fill and flush: an
    hour-long run's resident memory would keep climbing towards that bound, growth a ±10 %
    flatness check cannot tell from a leak. With ``rocksdb_mb`` for each, the memtables fill and
    flush within the warm-up, and what the check sees after it is the worker's steady state.
    """

    def __init__(
        self, bootstrap: str, suffix: str, workdir: Path, settings: WorkerSettings, rocksdb_mb: int
    ) -> None:
        super().__init__(bootstrap, suffix, workdir, settings)
        self.rocksdb_mb = rocksdb_mb

    def worker(self, index: int) -> WorkerProcess:
        process = super().worker(index)
        budget = str(self.rocksdb_mb * 1024 * 1024)
        process.env["STREAMS_APP_ROCKSDB_BLOCK_CACHE_BYTES"] = budget
        process.env["STREAMS_APP_ROCKSDB_MEMTABLE_BYTES"] = budget
        return process


@dataclass
class Sample:
    t: float
    rss_mb: float | None
    lag: int
    committed: int
    worker_alive: bool


@dataclass
class Restart:
    at: float
    down_seconds: float
    resumed_after: float | None


def rss_mb(pid: int | None) -> float | None:
    """Resident memory of a process, from /proc (Linux)."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="soak-setup")
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


class Poisoner:
    """Sends a poison record every ``every`` seconds; remembers what the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str, every: float, seed: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.every = every
        self.rng = random.Random(seed)
        self.acked: list[tuple[int, int]] = []
        self.failed = 0
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        producer: Any = None
        sent = 0
        try:
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await within(self._stop.wait(), self.every)
                    break
                try:
                    if producer is None:
                        producer = AIOKafkaProducer(
                            bootstrap_servers=self.bootstrap,
                            enable_idempotence=True,
                            acks="all",
                            client_id="soak-poisoner",
                        )
                        await producer.start()
                    key = b"%d" % self.rng.randrange(20_000)
                    value = POISON_VALUES[sent % len(POISON_VALUES)]
                    metadata = await (await producer.send(self.topic, key=key, value=value))
                    self.acked.append((metadata.partition, metadata.offset))
                    sent += 1
                except Exception as exc:  # the broker is restarting: try again next time
                    log.info("poisoner: send failed (%s); replacing the producer", exc)
                    self.failed += 1
                    if producer is not None:
                        with contextlib.suppress(Exception):
                            await producer.stop()
                    producer = None
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await producer.stop()


async def _restarts(
    kafka: EmbeddedKafka,
    monitor: ProgressMonitor,
    every: float,
    until: float,
    restarts: list[Restart],
    started: float,
) -> None:
    while time.monotonic() + every < until:
        await asyncio.sleep(every)
        at = time.monotonic()
        log.info("soak: restarting the broker (%.0fs in)", at - started)
        await asyncio.to_thread(kafka.restart_node, 1, hard=False, timeout=180.0)
        down = time.monotonic() - at
        resumed = await monitor.wait_resumed(at, timeout=180.0)
        log.info("soak: broker back after %.1fs; processing resumed after %s", down, resumed)
        restarts.append(Restart(round(at - started, 1), round(down, 1), resumed))


async def _sample(
    worker: WorkerProcess,
    monitor: ProgressMonitor,
    every: float,
    samples: list[Sample],
    started: float,
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        committed, _ = monitor.snapshot()
        samples.append(
            Sample(
                t=round(time.monotonic() - started, 1),
                rss_mb=rss_mb(worker.pid),
                lag=monitor.lag(),
                committed=sum(committed.values()),
                worker_alive=worker.running,
            )
        )
        if not worker.running:
            log.error("soak: the worker exited (code %s)", worker.returncode)
            return
        with contextlib.suppress(TimeoutError):
            await within(stop.wait(), every)


async def measure_capacity(
    bootstrap: str, topic: str, monitor: ProgressMonitor, config: SoakConfig
) -> float:
    """Records per second the worker processes (and commits) when fed as fast as possible."""
    generator = Generator(
        bootstrap,
        topic,
        records=config.capacity_records,
        duration=0,
        seed=config.seed + 1,
        keys=config.keys,
        values=config.values,
    )
    started = time.monotonic()
    await generator.run()
    if not await monitor.wait_caught_up(timeout=900.0):
        raise RuntimeError("the worker did not process the capacity run within 15 minutes")
    return config.capacity_records / (monitor.updated_at - started)


async def run_soak(kafka: EmbeddedKafka, config: SoakConfig) -> dict[str, Any]:
    bootstrap = kafka.bootstrap_servers
    suffix = f"soak{config.seed}-{uuid.uuid4().hex[:6]}"
    settings = WorkerSettings(
        session_timeout=10.0,
        heartbeat_interval=3.0,
        transaction_timeout=10.0,
        commit_interval=None,
        replication_factor=1,
    )
    system = SoakSystem(
        bootstrap, suffix, config.workdir.resolve() / suffix, settings, config.rocksdb_mb
    )
    system.workdir.mkdir(parents=True, exist_ok=True)
    topics = system.topics
    dead_letter_topic = f"{topics.data}.dlq"
    await create_topics(bootstrap, topics.external, config.partitions)
    worker = system.worker(0)
    worker.start()
    monitor = ProgressMonitor(bootstrap, system.group_id, topics.inputs, interval=0.5)
    samples: list[Sample] = []
    restarts: list[Restart] = []
    result: dict[str, Any] = {"config": _jsonable(asdict(config)), "suffix": suffix}
    try:
        await asyncio.to_thread(worker.wait_for_log, READY[STREAMS_APP], 180.0)
        await wait_topics(bootstrap, topics.outputs, 120.0)
        await monitor.start()

        capacity = await measure_capacity(bootstrap, topics.data, monitor, config)
        rate = config.rate or capacity / 2
        records = max(1, int(rate * config.duration))
        result.update(capacity_per_second=round(capacity), rate_per_second=round(rate))
        log.info(
            "soak: capacity %.0f records/s; feeding %.0f/s for %.0fs, a poison record every "
            "%gs, a broker restart every %gs",
            capacity,
            rate,
            config.duration,
            config.poison_every,
            config.restart_every,
        )

        started = time.monotonic()
        generator = Generator(
            bootstrap,
            topics.data,
            records=records,
            duration=config.duration,
            seed=config.seed,
            keys=config.keys,
            values=config.values,
        )
        poisoner = Poisoner(bootstrap, topics.data, config.poison_every, config.seed + 2)
        stop_sampling = asyncio.Event()
        tasks = [
            asyncio.create_task(poisoner.run(), name="soak-poison"),
            asyncio.create_task(
                _restarts(
                    kafka,
                    monitor,
                    config.restart_every,
                    started + config.duration,
                    restarts,
                    started,
                ),
                name="soak-restarts",
            ),
            asyncio.create_task(
                _sample(worker, monitor, config.sample_every, samples, started, stop_sampling),
                name="soak-sample",
            ),
        ]
        gen_result = await generator.run()
        poisoner.stop()
        await tasks[0]
        await tasks[1]  # a restart in progress finishes
        drained = await monitor.wait_caught_up(config.drain_timeout)
        stop_sampling.set()
        await tasks[2]
        result.update(
            seconds=round(time.monotonic() - started, 1),
            drained=drained,
            generator={
                "sent": gen_result.sent,
                "acked": len(gen_result.acked),
                "indeterminate": gen_result.indeterminate,
            },
            poison={"acked": len(poisoner.acked), "failed_sends": poisoner.failed},
        )
    finally:
        await monitor.stop()
        alive = worker.running
        code = await asyncio.to_thread(worker.terminate, 60.0) if alive else worker.returncode
        result["worker"] = {
            "alive_at_end": alive,
            "exit_code": code,
            "log": str(worker.log_path),
            "log_lines": _count_lines(worker.log_path),
        }
        await asyncio.to_thread(kafka.ensure_all_running)

    verification = await Verifier(
        bootstrap,
        system,
        stores=list(system.stores(0)),
        acked=generator.result.acked,
        quiescence_timeout=40.0,
        dead_letter_topic=dead_letter_topic,
    ).run()
    result["samples"] = [asdict(s) for s in samples]
    result["restarts"] = [asdict(r) for r in restarts]
    result["violations"] = verification.violations
    result["examples"] = dict(verification.examples)
    result["verifier_stats"] = {
        k: v for k, v in verification.stats.items() if k != "committed_offsets"
    }
    result["summary"] = summarise(result, config, samples, rate, verification.total)
    return result


def summarise(
    result: dict[str, Any],
    config: SoakConfig,
    samples: list[Sample],
    rate: float,
    violations: int,
) -> dict[str, Any]:
    warm = [s for s in samples if s.t >= config.warmup_seconds]
    rss = [s.rss_mb for s in warm if s.rss_mb is not None]
    lags = [s.lag for s in warm]
    summary: dict[str, Any] = {"warmup_seconds": config.warmup_seconds, "samples": len(samples)}
    if rss:
        median = statistics.median(rss)
        deviation = max(abs(r - median) for r in rss) / median
        summary.update(
            rss_mb_median=round(median, 1),
            rss_mb_min=round(min(rss), 1),
            rss_mb_max=round(max(rss), 1),
            rss_max_deviation=round(deviation, 4),
            rss_flat=deviation <= config.rss_tolerance,
        )
    else:
        summary["rss_flat"] = False
    if lags:
        summary.update(
            lag_max=max(lags),
            lag_max_seconds_of_input=round(max(lags) / rate, 1),
            lag_median=statistics.median(lags),
            lag_bounded=max(lags) <= rate * config.lag_bound,
        )
    else:
        summary["lag_bounded"] = False
    summary["violations"] = violations
    summary["worker_stayed_up"] = all(s.worker_alive for s in samples) and bool(
        result.get("worker", {}).get("alive_at_end")
    )
    summary["passed"] = bool(
        summary["rss_flat"]
        and summary["lag_bounded"]
        and result.get("drained")
        and violations == 0
        and summary["worker_stayed_up"]
    )
    return summary


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def build_parser() -> argparse.ArgumentParser:
    d = SoakConfig()
    p = argparse.ArgumentParser(
        prog="python -m streams_app.chaos.soak",
        description="One worker under steady load, poison records and broker restarts: memory "
        "flat, lag bounded, exactly-once verified.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--duration", type=float, default=d.duration, help="seconds of load")
    p.add_argument("--rate", type=float, default=None, help="records/s (default: capacity / 2)")
    p.add_argument("--capacity-records", type=int, default=d.capacity_records)
    p.add_argument("--poison-every", type=float, default=d.poison_every, help="seconds")
    p.add_argument("--restart-every", type=float, default=d.restart_every, help="seconds")
    p.add_argument("--sample-every", type=float, default=d.sample_every, help="seconds")
    p.add_argument("--warmup", type=float, default=None, help="default: min(300, duration/4)")
    p.add_argument("--rss-tolerance", type=float, default=d.rss_tolerance)
    p.add_argument("--lag-bound", type=float, default=d.lag_bound, help="seconds of input")
    p.add_argument("--partitions", type=int, default=d.partitions)
    p.add_argument(
        "--rocksdb-mb", type=int, default=d.rocksdb_mb, help="worker's RocksDB cache/memtables"
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--output", type=Path, default=d.output)
    p.add_argument("--workdir", type=Path, default=d.workdir)
    p.add_argument("--keep", action="store_true", help="keep the workdir (worker log, state)")
    p.add_argument("-l", "--loglevel", default="info")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.loglevel).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    config = SoakConfig(
        duration=args.duration,
        rate=args.rate,
        capacity_records=args.capacity_records,
        poison_every=args.poison_every,
        restart_every=args.restart_every,
        sample_every=args.sample_every,
        warmup=args.warmup,
        rss_tolerance=args.rss_tolerance,
        lag_bound=args.lag_bound,
        partitions=args.partitions,
        rocksdb_mb=args.rocksdb_mb,
        workdir=args.workdir,
        output=args.output,
    )
    if args.seed is not None:
        config.seed = args.seed
    print(f"soak: seed {config.seed}; {config.duration:g}s; results in {config.output}", flush=True)
    kafka = EmbeddedKafka(1).start()
    try:
        result = asyncio.run(run_soak(kafka, config))
    finally:
        kafka.stop()
        if not args.keep:
            shutil.rmtree(config.workdir, ignore_errors=True)
    config.output.write_text(json.dumps(result, indent=1))
    summary = result["summary"]
    print(json.dumps(summary, indent=1))
    print(
        f"soak: {'PASSED' if summary['passed'] else 'FAILED'}; violations "
        f"{ {k: v for k, v in result['violations'].items() if v} or 'none' }",
        flush=True,
    )
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
