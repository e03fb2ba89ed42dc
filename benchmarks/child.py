"""One benchmark run in its own process: ``python -m benchmarks.child SYSTEM [options]``.

The parent (:mod:`benchmarks.run`) starts this process, reads ``FIRST <unix time>`` from its
stdout when the first input record has been fetched, and polls the group's committed offsets
until they reach the input's end offsets. Then it sends SIGTERM; the child stops cleanly and
prints one ``STATS <json>`` line.

Systems:

``streams_app``
    ``benchmarks/json_count.py`` (``topologies/count.py`` with JSON values; or ``--topology``,
    e.g. ``topologies.windowed_count``), configured through ``STREAMS_APP_*`` variables (app
    id = the group, the broker, the guarantee, anything passed with ``--set``). With
    ``--processes N``: streams_app's own supervisor (``worker --processes N``,
    :mod:`streams_app.cli.supervisor`) running N of these workers, each a child process of
    this module with its own state directory.
``aiokafka``
    The ceiling: a bare aiokafka consume -> transactional produce loop. Each transaction holds
    every record fetched during one commit interval, forwarded unchanged, and the offsets
    (``send_offsets_to_transaction``); each value parsed as JSON (as every system here does),
    no state. ``--instance`` numbers the processes of one group (transactional ids).
``faust``
    faust-streaming's ``exactly_once`` on the same count topology (see ``faust_count.py``).
``quix``
    quixstreams on the same count topology (see ``quix_count.py``), under ``--guarantee``.

Kafka Streams, the Java row, speaks the same stdout protocol from its own JVM
(``kafka_streams/CountBench.java``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

INPUT_TOPIC = "count-input"
OUTPUT_TOPIC = "count-output"
CEILING_OUTPUT_TOPIC = "ceiling-output"


class FirstRecord:
    """Prints ``FIRST <time>`` once, when the first input record arrives."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self) -> None:
        if not self.seen:
            self.seen = True
            print(f"FIRST {time.time():.6f}", flush=True)


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


# -- streams_app -------------------------------------------------------------------------


async def run_streams_app(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["STREAMS_APP_ID"] = args.group
    os.environ["STREAMS_APP_BROKER"] = args.bootstrap
    os.environ["STREAMS_APP_PROCESSING_GUARANTEE"] = args.guarantee
    os.environ.setdefault("STREAMS_APP_WEB_PORT", "0")  # on, as in production; any free port
    if args.commit_interval is not None:
        os.environ["STREAMS_APP_COMMIT_INTERVAL"] = str(args.commit_interval)
    for item in args.set:
        name, _, value = item.partition("=")
        os.environ["STREAMS_APP_" + name.upper()] = value

    # Stamp the first fetched input record without touching the runtime or the topology.
    from streams_app.transport.kafka import KafkaConsumerClient

    first = FirstRecord()
    getmany = KafkaConsumerClient.getmany
    # The latency mode's breakdown (BENCH_TRACE_LATENCY=1; off in throughput runs): for every
    # 8th input record, how old it was when fetched (its CreateTime, stamped by the producer,
    # against this machine's clock) and how long it then waited for its commit to begin.
    trace = os.environ.get("BENCH_TRACE_LATENCY") == "1"
    fetch_age: list[float] = []
    #: Records per poll that returned any: live input comes in small polls, a backlog in full
    #: ones, and every poll has a fixed cost (dispatch, settle, the commit check).
    poll_sizes: list[float] = []
    awaiting_commit: list[float] = []
    until_commit: list[float] = []

    async def stamped(self: KafkaConsumerClient, timeout_ms: int, max_records: int | None = None):  # type: ignore[no-untyped-def]
        batch = await getmany(self, timeout_ms, max_records)
        if not first.seen and self._config.group_id is not None and any(batch.values()):
            first()
        if trace and self._config.group_id is not None:
            wall, now = time.time() * 1000, time.monotonic()
            size = sum(map(len, batch.values()))
            if size:
                poll_sizes.append(size / 1000)  # _percentiles reports ms: x1000 gives records
            for records in batch.values():
                for r in records[::8]:
                    fetch_age.append((wall - r.timestamp) / 1000)
                    awaiting_commit.append(now)
        return batch

    KafkaConsumerClient.getmany = stamped  # type: ignore[method-assign]

    # Time spent inside commits (the worker processes nothing meanwhile): the EOS/ALOS gap.
    from streams_app.runtime.commit import Committer

    commit_time = [0.0]
    seen_version: list[int | None] = [None]
    commit = Committer.commit
    #: (start, seconds) of every commit that committed something: the latency mode's breakdown.
    commits: list[tuple[float, float]] = []
    #: Per commit, seconds by phase (filled by ``clocked`` below); kept for the slowest ones.
    this_commit: dict[str, float] = {}
    #: The latency mode's marks of every exactly-once commit: (sealed, EndTxn sent, EndTxn
    #: answered), monotonic (one clock for every process on Linux: the harness compares them
    #: with the times its reader saw each output).
    commit_marks: list[tuple[float, float, float]] = []
    commit_phases: list[tuple[float, dict[str, float]]] = []

    async def timed(self: Committer, *args: Any, **kwargs: Any) -> bool:
        if seen_version[0] is None:
            seen_version[0] = _transaction_version(self.producer)
        t0 = time.monotonic()
        committed = False
        this_commit.clear()
        if awaiting_commit:
            until_commit.extend(t0 - fetched for fetched in awaiting_commit)
            awaiting_commit.clear()
        try:
            committed = await commit(self, *args, **kwargs)
            return committed
        finally:
            if first.seen:
                took = time.monotonic() - t0
                commit_time[0] += took
                if committed:
                    commits.append((t0, took))
                    commit_phases.append((took, dict(this_commit)))
                    if trace and "end_txn_at" in this_commit:
                        # Sealed once its changelog was sent (runtime/commit.py, step 1).
                        sealed = t0 + this_commit.get("changelog", 0.0)
                        commit_marks.append(
                            (sealed, this_commit["end_txn_sent_at"], this_commit["end_txn_at"])
                        )

    Committer.commit = timed  # type: ignore[method-assign]

    # The collector's pauses, by generation: a full collection stalls everything, commits too.
    import gc

    gc_pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        elif first.seen:
            gc_pauses[info["generation"]].append(time.perf_counter() - gc_started[0])

    gc.callbacks.append(on_gc)

    # ... and by phase: which of the commit's steps the time goes to (see runtime/commit.py).
    from streams_app.runtime.producer import StreamsProducer

    phases: dict[str, float] = {}

    def clocked(cls: Any, name: str, label: str) -> None:
        original = getattr(cls, name)

        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            try:
                return await original(self, *args, **kwargs)
            finally:
                if first.seen:
                    spent = time.monotonic() - t0
                    phases[label] = phases.get(label, 0.0) + spent
                    this_commit[label] = this_commit.get(label, 0.0) + spent

        setattr(cls, name, wrapper)

    def clocked_sync(cls: Any, name: str, label: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            try:
                return original(self, *args, **kwargs)
            finally:
                if first.seen:
                    spent = time.monotonic() - t0
                    phases[label] = phases.get(label, 0.0) + spent
                    this_commit[label] = this_commit.get(label, 0.0) + spent

        setattr(cls, name, wrapper)

    clocked(Committer, "_send_changelog", "changelog")
    clocked_sync(Committer, "_apply_state", "state")
    # A commit that processed records meanwhile applies its sealed writes table by table.
    from streams_app.state.base import PartitionTransaction

    clocked_sync(PartitionTransaction, "commit_sealed", "state")
    clocked(StreamsProducer, "flush_and_check", "send_gate")
    clocked(StreamsProducer, "commit", "producer_commit")
    from streams_app.transport.kafka import KafkaProducerClient

    clocked(KafkaProducerClient, "send_offsets_to_transaction", "offsets")
    clocked(KafkaProducerClient, "commit_transaction", "end_txn")
    end_txn = KafkaProducerClient.commit_transaction

    async def marked(self: Any, *args: Any, **kwargs: Any) -> Any:
        this_commit["end_txn_sent_at"] = time.monotonic()  # marks, not phases: left out below
        result = await end_txn(self, *args, **kwargs)
        this_commit["end_txn_at"] = time.monotonic()
        return result

    KafkaProducerClient.commit_transaction = marked  # type: ignore[method-assign]

    import importlib

    app = importlib.import_module(args.topology).app
    worker = app.worker(state_dir=Path(args.state_dir))
    stop = _stop_event()
    stopper = asyncio.create_task(_stop_on(stop, worker.request_stop))
    reporter = (
        asyncio.create_task(_report_memory(worker, args.report_every))
        if args.report_every
        else None
    )
    try:
        await worker.run()
    finally:
        stopper.cancel()
        if reporter is not None:
            reporter.cancel()
    return {
        "records_processed": worker.records_processed,
        # Of them, processed while a commit was in flight (process_during_commit).
        "processed_during_commit": worker.processed_during_commit,
        "commits": worker.parts.committer.commits if worker.parts else None,
        "transactions": worker.transactions_committed if worker.parts else None,
        "commit_seconds": round(commit_time[0], 3),
        "commit_phase_seconds": {k: round(v, 3) for k, v in sorted(phases.items())},
        "commit_ms": _percentiles([took for _, took in commits]),
        "commit_gap_ms": _percentiles([b[0] - a[0] for a, b in itertools.pairwise(commits)]),
        "gc_pause_ms": {f"gen{g}": _percentiles(v) for g, v in gc_pauses.items()},
        "fetch_age_ms": _percentiles(fetch_age),
        "fetched_to_commit_ms": _percentiles(until_commit),
        "poll_records": _percentiles(poll_sizes),
        # The slowest 2% of commits, by phase (ms): what a latency tail is made of.
        "slowest_commits_ms": [
            {
                "total": round(took * 1000, 1),
                **{k: round(v * 1000, 1) for k, v in p.items() if not k.endswith("_at")},
            }
            for took, p in sorted(commit_phases, key=lambda c: c[0])[-max(1, len(commits) // 50) :]
        ],
        "transaction_version": seen_version[0],
        "commit_marks": [tuple(round(t, 6) for t in mark) for mark in commit_marks],
    }


def _percentiles(seconds: list[float]) -> dict[str, float]:
    """p50/p90/p99/max in milliseconds (empty when there is nothing to rank)."""
    if not seconds:
        return {}
    ranked = sorted(seconds)

    def at(q: float) -> float:
        return round(ranked[min(len(ranked) - 1, int(q * len(ranked)))] * 1000, 1)

    return {"n": len(ranked), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0)}


async def _report_memory(worker: Any, every: float) -> None:
    """Print ``MEM <json>`` every ``every`` seconds: the worker's state-memory counters and
    RocksDB's own figures, for the state-scale benchmark (benchmarks/state_scale.py)."""
    await worker.started.wait()
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(Exception):  # a rebalance may close partitions meanwhile
            print("MEM " + json.dumps(_memory_figures(worker)), flush=True)


def _memory_figures(worker: Any) -> dict[str, Any]:
    figures: dict[str, Any] = dict(worker.memory.stats()) if hasattr(worker, "memory") else {}
    memtables = 0
    block_cache = None
    table_readers = 0
    partitions = 0
    for store in worker.stores.values():
        for part in list(getattr(store, "_partitions", {}).values()):
            db = getattr(part, "_db", None)
            if db is None:
                continue
            partitions += 1
            memtables += db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
            table_readers += db.property_int_value("rocksdb.estimate-table-readers-mem") or 0
            block_cache = db.property_int_value("rocksdb.block-cache-usage")
    figures.update(
        rocksdb_partitions=partitions,
        rocksdb_memtable_bytes=memtables,
        rocksdb_block_cache_bytes=block_cache,
        rocksdb_table_readers_bytes=table_readers,
        records_processed=worker.records_processed,
        commits=worker.parts.committer.commits if worker.parts else None,
        early_commits=worker.parts.committer.early_commits if worker.parts else None,
    )
    return figures


def _transaction_version(producer: Any) -> int | None:
    """1 or 2 (KIP-890) for the worker's transactional producer, None otherwise."""
    client = getattr(producer, "_client", None)
    inner = getattr(client, "_producer", None)
    version = getattr(inner, "transaction_version", None)
    return version if isinstance(version, int) else None


async def _stop_on(event: asyncio.Event, action: Callable[[], None]) -> None:
    await event.wait()
    action()


async def run_supervised(args: argparse.Namespace, argv: list[str]) -> int:
    """``--processes N``: the supervisor of ``worker --processes N`` with this module's
    instrumented worker as its children. They print ``FIRST`` and ``STATS`` to the stdout they
    share with it; the parent sums their figures."""
    from streams_app.cli.supervisor import ChildSpec, Supervisor, plan_children

    # This command line without --processes and --state-dir (each child gets its own).
    own: list[str] = []
    args_iter = iter(argv)
    for arg in args_iter:
        if arg in ("--processes", "--state-dir"):
            next(args_iter, None)  # and its value
        else:
            own.append(arg)
    specs = plan_children(
        args.processes,
        state_dir=Path(args.state_dir),
        web_enabled=False,  # each child takes a free port (STREAMS_APP_WEB_PORT=0, above)
        web_port=0,
        group_instance_id=None,
    )

    def command(spec: ChildSpec, port: int | None) -> list[str]:
        return [sys.executable, "-m", "benchmarks.child", *own, "--state-dir", str(spec.state_dir)]

    return await Supervisor(specs, command).run()


# -- the bare aiokafka ceiling -------------------------------------------------------------


async def run_aiokafka(args: argparse.Namespace) -> dict[str, Any]:
    from json import loads

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    interval = args.commit_interval if args.commit_interval is not None else 0.1
    consumer = AIOKafkaConsumer(
        INPUT_TOPIC,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=args.max_poll_records,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        transactional_id=f"{args.group}-txn-{args.instance}",
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        max_batch_size=256 * 1024,
    )
    await producer.start()
    await consumer.start()
    stop = _stop_event()
    first = FirstRecord()
    records = transactions = 0
    offsets: dict[TopicPartition, int] = {}
    in_txn = False
    last_commit = time.monotonic()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=int(interval * 1000))
            if batch:
                first()
                if not in_txn:
                    await producer.begin_transaction()
                    in_txn = True
                send = producer.send
                for tp, msgs in batch.items():
                    for msg in msgs:
                        loads(msg.value)
                        await send(
                            CEILING_OUTPUT_TOPIC,
                            key=msg.key,
                            value=msg.value,
                            partition=tp.partition,
                        )
                    offsets[tp] = msgs[-1].offset + 1
                    records += len(msgs)
            if in_txn and time.monotonic() - last_commit >= interval:
                await producer.send_offsets_to_transaction(offsets, args.group)
                await producer.commit_transaction()
                in_txn = False
                offsets = {}
                transactions += 1
                last_commit = time.monotonic()
        if in_txn:
            await producer.send_offsets_to_transaction(offsets, args.group)
            await producer.commit_transaction()
            transactions += 1
    finally:
        await consumer.stop()
        await producer.stop()
    return {"records_processed": records, "transactions": transactions}


# -- faust-streaming -----------------------------------------------------------------------


SYSTEMS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]] = {
    "streams_app": run_streams_app,
    "aiokafka": run_aiokafka,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=[*sorted(SYSTEMS), "faust", "quix"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--guarantee", default="exactly_once_v2")
    parser.add_argument("--commit-interval", type=float, default=None)
    parser.add_argument("--max-poll-records", type=int, default=2000)
    parser.add_argument("--state-dir", default="bench-state")
    parser.add_argument(
        "--topology", default="benchmarks.json_count", help="streams_app: the module of the app"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="streams_app: N workers under streams_app's supervisor (worker --processes N)",
    )
    parser.add_argument("--instance", type=int, default=0, help="aiokafka: this process's number")
    parser.add_argument("--set", action="append", default=[], help="streams_app NAME=VALUE")
    parser.add_argument(
        "--report-every", type=float, default=0.0, help="print MEM <json> every N seconds"
    )
    parser.add_argument("--profile", help="write a pyinstrument profile to PATH(.txt/.html)")
    args = parser.parse_args(argv)
    if args.system == "faust":  # faust runs its own event loop (and prints STATS itself)
        from benchmarks.faust_count import run as run_faust

        run_faust(args)
        return 0
    if args.system == "quix":  # quixstreams runs its own (synchronous) loop, prints STATS itself
        from benchmarks.quix_count import run as run_quix

        run_quix(args)
        return 0
    if args.system == "streams_app" and args.processes > 1:
        return asyncio.run(run_supervised(args, argv if argv is not None else sys.argv[1:]))
    run = SYSTEMS[args.system]

    profiler: Any = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
    try:
        stats = asyncio.run(run(args))
    finally:
        if profiler is not None:
            profiler.stop()
            path = Path(args.profile)
            path.with_suffix(".txt").write_text(
                profiler.output_text(unicode=True, show_all=False, timeline=False)
            )
            with contextlib.suppress(Exception):
                path.with_suffix(".html").write_text(profiler.output_html())
    print("STATS " + json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
