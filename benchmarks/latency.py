"""End-to-end latency: from producing an input record to its output being visible to a
``read_committed`` reader (``python -m benchmarks.run --latency``).

A fresh worker group starts at the input's end (its offsets are committed there before it
joins), so it sees only what this mode produces. A generator then writes ``rate`` records per
second for ``seconds`` seconds, in 10 ms ticks, to random keys; a ``read_committed`` consumer
reads the output at the same time. The count topology makes every output identifiable: the
``n``-th input with key ``k`` produces the output ``(k, n)``, so each output's latency is the
time it was read minus the time its input was handed to the producer.

Under exactly-once an output becomes visible only when its transaction commits, so the latency
is about the time to the next commit plus the commit itself: the target is p99 <= commit
interval + 50 ms at half of the worker's capacity. The rounds run at half of the drain rate
the run measured and, with ``--latency-capacity``, at half of the live rate a worker was found
to sustain (:func:`live_capacity`). The worker's own commit times (how long each
commit took, how far apart they began) come back in its ``STATS`` line, so a result says which
part of the latency is the commit cycle.

The generator and the reader run in this (the benchmark's) process, on the same two cores as the
worker and the broker. With ``client="confluent"`` (the default) they are librdkafka's producer
(``linger.ms`` 5, as a typical producer: that wait is inside the figures) and a
``read_committed`` consumer on a thread of its own: a few microseconds of CPU per record, so at
tens of thousands of records per second the harness leaves the cores to what it measures.
The first ``warmup`` seconds of input (the worker's first transactions) are left out of the
percentiles; ``p99_ms_by_second`` shows every second, warm-up included.
``client="aiokafka"`` is the earlier harness (aiokafka producer and consumer on this process's
event loop): at half capacity it takes about a core itself and its reader falls behind, which
the figures then include.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICK_S = 0.01


async def _commit_group_at_end(bootstrap: str, group: str, topic: str) -> None:
    from benchmarks.check import commit_offsets, end_offsets

    ends = await end_offsets(bootstrap, topic)
    if not ends:
        raise RuntimeError(f"latency: no partitions found for {topic}")
    await commit_offsets(bootstrap, group, topic, ends)


async def _wait_stable(bootstrap: str, group: str, timeout: float = 60.0) -> None:
    """Until the group has members with partitions (Kafka gives no event for it: poll)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described = await admin.describe_consumer_groups([group])
            for desc in described:
                for _err, _group, state, _ptype, _proto, members, *_ in getattr(desc, "groups", []):
                    if state == "Stable" and members:
                        return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"latency: group {group} did not become stable in {timeout:.0f}s")
    finally:
        await admin.close()


class _Load:
    """What a latency run shares between its generator and its reader."""

    def __init__(self, keys: int) -> None:
        #: (key, n) -> monotonic time the n-th input of key was handed to the producer; the
        #: reader pops it (dict item operations are atomic, so the reader may be a thread).
        self.sent: dict[tuple[bytes, int], float] = {}
        #: (sent at, latency) of every output read.
        self.latencies: list[tuple[float, float]] = []
        self.key_bytes = [f"key-{k:06d}".encode() for k in range(keys)]
        self.counts = [0] * keys
        self.rng = random.Random(7)

    def next_key(self) -> bytes:
        k = self.rng.randrange(len(self.counts))
        self.counts[k] += 1
        self.sent[(self.key_bytes[k], self.counts[k])] = time.monotonic()
        return self.key_bytes[k]

    def seen(self, key: bytes | None, value: bytes | None, now: float) -> None:
        if key is None or value is None:
            return
        at = self.sent.pop((key, int(value)), None)
        if at is not None:
            self.latencies.append((at, now - at))

    async def drained(self, timeout: float = 30.0) -> None:
        """Until every output was read (or ``timeout``: what is left counts as missing)."""
        deadline = time.monotonic() + timeout
        while self.sent and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


async def _ticks(
    load: _Load, rate: int, seconds: float, send: Callable[[bytes], Awaitable[Any] | None]
) -> tuple[int, float]:
    """Send ``rate`` records per second in ``TICK_S`` ticks; return (records, achieved rate)."""
    per_tick = max(1, round(rate * TICK_S))
    start = time.monotonic()
    produced = 0
    for tick in range(int(seconds / TICK_S)):
        for _ in range(per_tick):
            pending = send(load.next_key())
            if pending is not None:
                await pending
            produced += 1
        delay = start + (tick + 1) * TICK_S - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    return produced, produced / (time.monotonic() - start)


@dataclass(frozen=True)
class _Run:
    """Where a latency run's generator writes and its reader reads, and how fast and long."""

    bootstrap: str
    input_topic: str
    output_topic: str
    #: The output's end offsets before the run: the reader starts there.
    out_start: dict[int, int]
    rate: int
    seconds: float


async def _drive_aiokafka(load: _Load, run: _Run) -> tuple[int, float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=run.bootstrap, acks="all", linger_ms=0)
    reader = AIOKafkaConsumer(
        bootstrap_servers=run.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        fetch_max_wait_ms=5,
    )
    await producer.start()
    await reader.start()
    try:
        tps = [TopicPartition(run.output_topic, p) for p in sorted(run.out_start)]
        reader.assign(tps)
        for tp in tps:
            reader.seek(tp, run.out_start[tp.partition])

        async def read() -> None:
            while True:
                batch = await reader.getmany(timeout_ms=50)
                now = time.monotonic()
                for records in batch.values():
                    for r in records:
                        load.seen(r.key, r.value, now)

        reading = asyncio.create_task(read())
        payload = b"x" * 100
        try:
            produced, achieved = await _ticks(
                load,
                run.rate,
                run.seconds,
                lambda key: producer.send(run.input_topic, key=key, value=payload),
            )
            await producer.flush()
            await load.drained()
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        return produced, achieved
    finally:
        await producer.stop()
        await reader.stop()


async def _drive_confluent(load: _Load, run: _Run) -> tuple[int, float]:
    from confluent_kafka import Consumer, Producer  # type: ignore[import-untyped]
    from confluent_kafka import TopicPartition as CTopicPartition

    # Batches for up to 5 ms, as a typical producer does (that time is inside the figures):
    # record-sized produce requests at tens of thousands a second would load the broker more
    # than the worker does.
    producer = Producer({"bootstrap.servers": run.bootstrap, "acks": "all", "linger.ms": 5})
    reader = Consumer(
        {
            "bootstrap.servers": run.bootstrap,
            "group.id": f"latency-reader-{uuid.uuid4().hex[:6]}",  # assign() only: never joins
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            # Kafka's default. The broker answers a waiting fetch as soon as the output's
            # last stable offset moves (the commit's markers), so a longer wait costs the
            # reader nothing. 5 ms, used until the fourteenth session, sent the broker about
            # 200 empty fetches a second on the two cores it shares with the worker: about a
            # second of its CPU per 25 s round (BENCHMARKS.md, Latency).
            "fetch.wait.max.ms": 500,
        }
    )
    reader.assign(
        [CTopicPartition(run.output_topic, p, o) for p, o in sorted(run.out_start.items())]
    )
    done = threading.Event()

    def read() -> None:  # librdkafka waits with the GIL released
        while not done.is_set():
            # poll() returns with the first message; consume() with a timeout would wait
            # until it has num_messages or the timeout is up (up to 50 ms on every figure).
            # What else is already queued comes without waiting.
            head = reader.poll(0.05)
            if head is None:
                continue
            now = time.monotonic()
            for m in (head, *reader.consume(num_messages=10_000, timeout=0)):
                if m.error() is None:
                    load.seen(m.key(), m.value(), now)

    reading = threading.Thread(target=read, name="latency-reader", daemon=True)
    reading.start()
    payload = b"x" * 100

    def send(key: bytes) -> None:
        while True:
            try:
                producer.produce(run.input_topic, key=key, value=payload)
                break
            except BufferError:  # librdkafka's queue is full: serve it and try again
                producer.poll(0.001)
        producer.poll(0)

    try:
        produced, achieved = await _ticks(load, run.rate, run.seconds, send)
        await asyncio.to_thread(producer.flush, 30)
        await load.drained()
        return produced, achieved
    finally:
        done.set()
        await asyncio.to_thread(reading.join, 5)
        reader.close()


CLIENTS = {"confluent": _drive_confluent, "aiokafka": _drive_aiokafka}


async def measure(
    *,
    bootstrap: str,
    command: list[str],
    cwd: Path,
    group: str,
    input_topic: str,
    output_topic: str,
    keys: int,
    rate: int,
    seconds: float,
    log_path: Path,
    client: str = "confluent",
    warmup: float = 0.0,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    from benchmarks.check import end_offsets
    from benchmarks.steady import cpu_seconds

    def cpu_now() -> tuple[float | None, float | None, float]:
        # The worker, the broker, and this process: the generator and the reader (librdkafka's
        # threads count in this process's CPU time).
        return cpu_seconds(proc.pid), cpu_seconds(broker_pid), time.process_time()

    drive = CLIENTS[client]
    await _commit_group_at_end(bootstrap, group, input_topic)
    out_start = await end_offsets(bootstrap, output_topic)
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            cwd=cwd,
            env={**os.environ, "BENCH_TRACE_LATENCY": "1"},  # benchmarks/child.py
        )
    load = _Load(keys)
    try:
        await _wait_stable(bootstrap, group)
        started = time.monotonic()
        cpu_before = cpu_now()
        produced, achieved = await drive(
            load,
            _Run(bootstrap, input_topic, output_topic, out_start, rate, seconds + warmup),
        )
        cpu_after = cpu_now()
        window = time.monotonic() - started
    finally:
        if proc.returncode is None:
            proc.terminate()
        try:
            stdout, _ = await asyncio.wait_for(proc.communicate(), 60)
        except TimeoutError:
            proc.kill()
            stdout, _ = await proc.communicate()
    # The first ``warmup`` seconds are the worker's first transactions, caches and fetches:
    # steady state is what the target is about. They are reported apart, per second.
    steady = started + warmup
    latencies = sorted(lat for at, lat in load.latencies if at >= steady)
    per_second: dict[int, list[float]] = {}
    for at, lat in load.latencies:
        per_second.setdefault(int(at - started), []).append(lat)

    def pct(q: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1)

    stats = _stats(stdout)
    return {
        "client": client,
        "rate_target": rate,
        "rate_achieved": round(achieved),
        "records": produced,
        "outputs_seen": len(latencies),
        "missing": len(load.sent),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": pct(1.0),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 1) if latencies else None,
        "warmup_s": warmup,
        # Where the machine's cores went over the round (seconds of CPU in window_s).
        "cpu_s": {
            "window_s": round(window, 1),
            **{
                name: None if a is None or b is None else round(b - a, 2)
                for name, a, b in zip(
                    ("worker", "broker", "generator_and_reader"), cpu_before, cpu_after, strict=True
                )
            },
        },
        # p99 (ms) of the outputs of each second's inputs, warm-up included: a tail that is
        # a transient shows here as a few bad seconds, a steady one as all of them.
        "p99_ms_by_second": [
            round(sorted(v)[min(len(v) - 1, int(0.99 * len(v)))] * 1000)
            for _, v in sorted(per_second.items())
        ],
        # The worker's side: how long its commits took and how far apart they began.
        "worker_commit_ms": stats.get("commit_ms", {}),
        "worker_commit_gap_ms": stats.get("commit_gap_ms", {}),
        "worker_slowest_commits_ms": stats.get("slowest_commits_ms", []),
        "worker_gc_pause_ms": stats.get("gc_pause_ms", {}),
        # Where a record's time goes before its commit: its age when the worker fetched it,
        # then the wait from the fetch to the beginning of the commit that covers it.
        "worker_fetch_age_ms": stats.get("fetch_age_ms", {}),
        "worker_fetched_to_commit_ms": stats.get("fetched_to_commit_ms", {}),
        # How many records each of the worker's polls brought (p50/p90/p99/max; n polls).
        "worker_poll_records": stats.get("poll_records", {}),
        # Exactly-once: each output's latency cut at its commit's seal and EndTxn.
        "breakdown_ms": breakdown(
            [(at, lat) for at, lat in load.latencies if at >= steady],
            stats.get("commit_marks") or [],
        ),
    }


def breakdown(
    latencies: list[tuple[float, float]], marks: list[tuple[float, ...]]
) -> dict[str, Any]:
    """Where each output's latency went, by the commit that made it visible: the last one whose
    EndTxn was sent before the reader saw it. ``to_seal``: from the input's produce call to
    that commit's seal (the producer's linger, the worker's fetch, its processing, the wait for
    the commit to begin); ``seal_to_end``: the commit's round trips up to EndTxn (send gate,
    offsets); ``end_to_read``: EndTxn's round trip, the broker's transaction markers and the
    reader's fetch. For all outputs and for the slowest 1% (what the p99 is made of); empty
    without marks (at-least-once has no transactions).

    Not by the EndTxn *answered* before the read (until the fourteenth session): the reader, a
    C client on a thread of its own, often sees a commit's outputs before the worker's event
    loop has taken in the answer, and such an output was then put on the commit before, with
    an "EndTxn to read" of about one commit interval. ``read_before_answer`` is their share.
    A ``--compare`` checkout older than that reports (sealed, answered) only: its outputs are
    cut at the answer, as they were then."""
    if not latencies or not marks:
        return {}
    marks = [mark if len(mark) == 3 else (mark[0], mark[1], mark[1]) for mark in marks]
    sent = [mark[1] for mark in marks]
    parts: list[tuple[float, float, float, float]] = []
    early = 0
    for at, lat in latencies:
        read = at + lat
        i = bisect.bisect_right(sent, read) - 1
        if i < 0:
            continue
        sealed, end_sent, answered = marks[i]
        early += read < answered
        parts.append((lat, sealed - at, end_sent - sealed, read - end_sent))
    if not parts:
        return {}

    def summary(rows: list[tuple[float, float, float, float]]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(rows)}
        for index, name in ((1, "to_seal"), (2, "seal_to_end"), (3, "end_to_read")):
            ranked = sorted(r[index] for r in rows)
            out[name] = {
                q: round(ranked[min(len(ranked) - 1, int(f * len(ranked)))] * 1000, 1)
                for q, f in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
            }
        return out

    parts.sort()
    tail = parts[int(0.99 * len(parts)) :]
    return {
        "all": summary(parts),
        "slowest_1pct": summary(tail),
        "read_before_answer": round(early / len(parts), 4),
    }


#: A second whose outputs have a p99 above this is a second the worker was behind: ten 100 ms
#: commit intervals. One that keeps up stays within a few hundred ms (at 60,000/s on this
#: machine: every second under 500 ms); one that does not falls seconds behind (70,000/s:
#: 1.0-1.3 s within 25 s, and growing while the load lasts).
SUSTAINED_P99_MS = 1000
#: Backpressure is *prolonged* when this many seconds in a row are behind.
PROLONGED_SECONDS = 3
#: The search's first rate and its steps, as fractions of the drain rate.
CAPACITY_FIRST, CAPACITY_STEP = 0.55, 0.10
#: Seconds of each search step before the ones judged (the worker's first transactions).
CAPACITY_WARMUP_S = 5.0


def sustained(result: dict[str, Any]) -> bool:
    """Whether a latency round kept up with its rate: the generator produced it, every output
    arrived, and after the warm-up the worker was never behind (a p99 over
    :data:`SUSTAINED_P99_MS`) for :data:`PROLONGED_SECONDS` seconds in a row, nor in the last
    full second of the load. One bad second it recovers from is a transient (the machine's
    other processes), not a rate it cannot sustain. The last entry of ``p99_ms_by_second`` is
    the part-second after the load stopped: left out."""
    steady = result["p99_ms_by_second"][int(result.get("warmup_s") or 0) : -1]
    behind = [p99 > SUSTAINED_P99_MS for p99 in steady]
    prolonged = any(
        all(behind[i : i + PROLONGED_SECONDS]) for i in range(len(behind) - PROLONGED_SECONDS + 1)
    )
    return (
        result["missing"] == 0
        and result["rate_achieved"] >= 0.98 * result["rate_target"]
        and bool(steady)
        and not prolonged
        and not behind[-1]
    )


async def live_capacity(
    probe: Callable[[int], Awaitable[bool]], drain_rate: float
) -> tuple[int | None, list[tuple[int, bool]]]:
    """The highest live rate a worker sustains, to a tenth of the drain rate: ``probe(rate)``
    runs one live round and says whether it kept up. From 0.55 of the drain rate it steps up
    while rounds keep up (to the drain rate at most), or down until one does (to 0.15).

    The drain rate (a backlog read in large fetches) is not what a live input can be fed at:
    live records arrive in small fetches and produce requests, and the generator and the reader
    share the cores. "Half capacity", for a latency target, is half of this sustainable rate,
    as in the streaming benchmarks that define it (Karimov et al., ICDE 2018: the highest load
    without prolonged backpressure). Returns ``(None, steps)`` when no rate tried kept up."""
    steps: list[tuple[int, bool]] = []

    async def kept(fraction: float) -> bool:
        rate = int(drain_rate * fraction)
        ok = await probe(rate)
        steps.append((rate, ok))
        return ok

    fraction = CAPACITY_FIRST
    if await kept(fraction):
        while fraction + CAPACITY_STEP <= 1.0 + 1e-9 and await kept(fraction + CAPACITY_STEP):
            fraction += CAPACITY_STEP
    else:
        while fraction - CAPACITY_STEP >= 0.15 - 1e-9:
            fraction -= CAPACITY_STEP
            if await kept(fraction):
                break
    best = max((rate for rate, ok in steps if ok), default=None)
    return best, steps


def _stats(stdout: bytes) -> dict[str, Any]:
    for line in reversed(stdout.decode(errors="replace").splitlines()):
        if line.startswith("STATS "):
            parsed: dict[str, Any] = json.loads(line[len("STATS ") :])
            return parsed
    return {}


def new_group(key: str) -> str:
    return f"bench-latency-{key}-{uuid.uuid4().hex[:6]}"
