"""Throughput of streams_app against its peers at steady state, on one broker: ``make bench``.

    python -m benchmarks.run [--records 4000000] [--machine-records 8000000] [--repeat 3]
                             [--modes per-core,machine]
    python -m benchmarks.run --quick          # 200,000 records, one round: for development
    make bench BENCH_ARGS="--repeat 5"

Systems (``--systems``; default: the first seven): streams_app under ``exactly_once_v2``
(``eos``) and ``at_least_once`` (``alos``); the bare aiokafka consume -> transactional produce
loop, the ceiling for any framework on aiokafka (``ceiling``); Kafka Streams (``kstreams-eos``,
``kstreams-alos``: the Java app in ``benchmarks/kafka_streams/``); quixstreams (``quix-eos``,
``quix-alos``); on request faust-streaming's ``exactly_once`` (``faust``, first round only and
at most ``--faust-timeout`` seconds) and the windowed count (``windowed``). Every system runs
the same count and parses every input value (a JSON object of ``--value-bytes``) as JSON;
the join rows (``join-st``, ``join-ss`` and Kafka Streams' ``kstreams-join-st``,
``kstreams-join-ss``: ``benchmarks/join_bench.py``) join the same input with one record per key
instead, as a table and as a stream.

Two machine modes (``--modes``), in every round:

- **per core** (``per-core``): the system under test pinned to one CPU (``sched_setaffinity``:
  the last one), the broker and this harness to the others; one worker process, one stream
  thread. What a core of each system does.
- **whole machine** (``machine``): nothing pinned; as many workers as CPUs: streams_app
  through ``--processes N`` (its own supervisor), Kafka Streams with ``num.stream.threads=N``
  in one JVM, the Python peers and the aiokafka loop as N processes in one group.

One broker (full-JIT JVM options unless ``--jvm fast``) and one input topic, pre-loaded with
keyed records: each mode has its own count of them, so that every run processes long enough to
reach steady state (at least 30 s on this 2-core machine): a per-core run reads ``--records``
(default 4,000,000), a whole-machine run, which has every core, ``--machine-records`` (default
twice ``--records``). The topic holds the larger input; the smaller one is its tail (the last
``--records`` records), and each run's fresh consumer group has its input's first offsets
committed before its processes start, so every system reads exactly its mode's input
(``input_plan``, ``preload_inputs``). Then per round each mode and in it every system in turn
(the order rotates between rounds), each in fresh processes with a fresh consumer group.
While a run goes, its group's committed offsets and its processes'
CPU seconds are sampled every 100 ms (``benchmarks/steady.py``): the **steady-state** rate is
that of the records committed between 10 % and 90 % of the input, and the system's own CPU
per record (its process tree; the broker apart) is taken over the same window. The
**whole-run** rate is timed from the first fetched input record (JVM, worker start-up and the
group join excluded) until the committed offsets reach the input's end. Every ratio is one of
steady-state rates. Other work on the machine disturbs the figures: compare medians of the
interleaved rounds, and CPU per record.

After each run its output is checked (``benchmarks/check.py``) against its mode's input:
per-key counts with no duplicate and no gap, every input counted, and, for systems that claim
exactly-once, written in transactions (markers in every partition). A run that fails the
check is reported and left out of the medians and ratios. Then its output records and internal
topics are deleted.

``--state-scale`` runs the state-scale benchmark instead (``benchmarks/state_scale.py``: RSS,
records/s and read-cache hit rate with millions of distinct keys; its own options).

Prints tables and writes ``bench-results.json``: ``{"runs": [{"system", "guarantee", "key",
"mode", "records", "seconds", "records_per_s", "steady": {...}, "correct", ...}, ...],
"summary": {"modes": {...}, "targets": [...], ...}, "settings": {"input_records": {"per-core":
4000000, "machine": 8000000}, ...}}``; ``python -m benchmarks.report`` makes
BENCHMARKS.md's tables from it. Not a test. ``--profile eos`` samples a streams_app worker's
steady-state window with py-spy and writes a per-function summary; ``--compare LABEL=PATH``
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
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import steady
from benchmarks.check import (
    InputSummary,
    check_output,
    commit_offsets,
    end_offsets,
    summarise_input,
)
from benchmarks.child import CEILING_OUTPUT_TOPIC, INPUT_TOPIC, OUTPUT_TOPIC
from benchmarks.faust_count import FAUST_OUTPUT_TOPIC
from benchmarks.join_bench import USERS_TOPIC, tier_of
from benchmarks.quix_count import QUIX_OUTPUT_TOPIC
from benchmarks.steady import cpu_seconds
from benchmarks.summary import summarise

REPO = Path(__file__).resolve().parent.parent
KSTREAMS_OUTPUT_TOPIC = "kstreams-count-output"
WINDOWED_OUTPUT_TOPIC = "windowed-count-output"
JOIN_ST_OUTPUT_TOPIC = "join-st-output"
JOIN_SS_OUTPUT_TOPIC = "join-ss-output"
KSTREAMS_JOIN_ST_OUTPUT_TOPIC = "kstreams-join-st-output"
KSTREAMS_JOIN_SS_OUTPUT_TOPIC = "kstreams-join-ss-output"

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
    #: The ``system`` field of bench-results.json.
    label: str
    #: How the run is started (``benchmarks.child`` systems, or ``kafka_streams``: a JVM).
    child: str
    guarantee: str
    output_topic: str
    #: ``count`` (one running count per input) or ``echo`` (input forwarded unchanged).
    output_kind: str = "count"
    #: The checkout the child runs from (``--compare`` adds runs from another one).
    repo: Path = REPO
    #: The interpreter its Python children run on: this process's, or a compared checkout's
    #: own ``.venv`` (so that ``--compare`` can set two interpreter builds side by side).
    python: str = sys.executable
    #: streams_app only: the topology module the child runs (None: benchmarks.json_count).
    topology: str | None = None
    #: Kafka Streams only: the join row JoinBench runs (None: the count, CountBench).
    join: str | None = None

    @property
    def claims_exactly_once(self) -> bool:
        return self.guarantee.startswith("exactly_once")


EOS, ALOS = "exactly_once_v2", "at_least_once"
SYSTEMS = {
    s.key: s
    for s in (
        System("eos", "streams_app", "streams_app", EOS, OUTPUT_TOPIC),
        System("alos", "streams_app", "streams_app", ALOS, OUTPUT_TOPIC),
        System("ceiling", "aiokafka loop", "aiokafka", EOS, CEILING_OUTPUT_TOPIC, "echo"),
        System("kstreams-eos", "kafka_streams", "kafka_streams", EOS, KSTREAMS_OUTPUT_TOPIC),
        System("kstreams-alos", "kafka_streams", "kafka_streams", ALOS, KSTREAMS_OUTPUT_TOPIC),
        System("quix-eos", "quixstreams", "quix", EOS, QUIX_OUTPUT_TOPIC),
        System("quix-alos", "quixstreams", "quix", ALOS, QUIX_OUTPUT_TOPIC),
        System("faust", "faust-streaming", "faust", "exactly_once", FAUST_OUTPUT_TOPIC),
        # The same count in one-minute tumbling windows (issue 12): target >= 0.8 x eos.
        System(
            "windowed",
            "streams_app windowed",
            "streams_app",
            EOS,
            WINDOWED_OUTPUT_TOPIC,
            "windowed",
            topology="topologies.windowed_count",
        ),
        # The join rows (issue 37, benchmarks/join_bench.py): the count's input joined with one
        # row per key, as a table and as a stream, in streams_app and in Kafka Streams. Targets:
        # >= 1.5 x Kafka Streams' same join; the stream-table join >= 0.7 x the plain count.
        System(
            "join-st",
            "streams_app stream-table join",
            "streams_app",
            EOS,
            JOIN_ST_OUTPUT_TOPIC,
            "join",
            topology="benchmarks.join_stream_table",
        ),
        System(
            "join-ss",
            "streams_app stream-stream join",
            "streams_app",
            EOS,
            JOIN_SS_OUTPUT_TOPIC,
            "join",
            topology="benchmarks.join_stream_stream",
        ),
        System(
            "kstreams-join-st",
            "kafka_streams stream-table join",
            "kafka_streams",
            EOS,
            KSTREAMS_JOIN_ST_OUTPUT_TOPIC,
            "join",
            join="stream-table",
        ),
        System(
            "kstreams-join-ss",
            "kafka_streams stream-stream join",
            "kafka_streams",
            EOS,
            KSTREAMS_JOIN_SS_OUTPUT_TOPIC,
            "join",
            join="stream-stream",
        ),
    )
}
JOIN_SYSTEMS = ("join-st", "join-ss", "kstreams-join-st", "kstreams-join-ss")
#: faust (two orders of magnitude slower, and not exactly-once) and the windowed count run on
#: request only (``--systems``).
DEFAULT_SYSTEMS = (
    "eos",
    "alos",
    "ceiling",
    "kstreams-eos",
    "kstreams-alos",
    "quix-eos",
    "quix-alos",
    *JOIN_SYSTEMS,
)
#: The peers' exactly-once rows that streams_app's EOS is compared with (ratios in the summary).
PEER_EOS = ("kstreams-eos", "quix-eos", "faust")
FAUST_DEFAULT_COMMIT_INTERVAL = 2.8
#: Input records of each per-core run (``--records``): the fastest systems pinned to one core
#: of the 2-core machine (Kafka Streams' stream-table join at 123,000 records/s, streams_app's
#: count at 104,000) process for at least 30 s. A whole-machine run reads twice as many
#: (``--machine-records``): at 6,000,000 the count's runs took 36-52 s.
PER_CORE_RECORDS = 4_000_000
QUICK_RECORDS = 200_000


@dataclass(frozen=True)
class Mode:
    """How much of the machine each system gets (see the module doc)."""

    key: str
    label: str
    #: Worker processes (streams_app: --processes; Kafka Streams: stream threads).
    parallelism: int
    #: CPUs of the system under test (None: not pinned), and of the broker and this harness.
    system_cpus: tuple[int, ...] | None
    broker_cpus: tuple[int, ...] | None

    def describe(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "parallelism": self.parallelism,
            "system_cpus": self.system_cpus,
            "broker_cpus": self.broker_cpus,
        }


def machine_modes() -> dict[str, Mode]:
    cpus = steady.all_cpus()
    # One CPU for the system, the rest for the broker (a one-CPU machine: both on it).
    system, rest = (cpus[-1],), tuple(cpus[:-1]) or (cpus[-1],)
    return {
        "per-core": Mode("per-core", "per core", 1, system, rest),
        "machine": Mode("machine", "whole machine", len(cpus), None, None),
    }


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
            for name in (INPUT_TOPIC, *sorted({s.output_topic for s in SYSTEMS.values()}))
            if name not in existing
        ]
        if USERS_TOPIC not in existing:
            # The join rows' users: compacted, so a table built from it keeps it as its changelog.
            wanted.append(
                NewTopic(USERS_TOPIC, partitions, 1, topic_configs={"cleanup.policy": "compact"})
            )
        if wanted:
            await admin.create_topics(wanted)
    finally:
        await admin.close()


def json_value(rng: random.Random, key: str, seq: int, size: int, notes: list[str]) -> bytes:
    """A JSON object of ``size`` bytes (at least the fields'): what every system parses."""
    amount = f"{rng.randrange(1000)}.{rng.randrange(100):02d}"
    head = f'{{"user":"{key}","seq":{seq},"amount":{amount},"note":"'
    pad = max(0, size - len(head) - 2)
    note = notes[rng.randrange(len(notes))]
    while len(note) < pad:
        note += note
    return (head + note[:pad] + '"}').encode()


async def preload(
    bootstrap: str,
    records: int,
    keys: int,
    value_bytes: int,
    rng: random.Random,
    first_seq: int = 0,
) -> None:
    """Write ``records`` keyed records with JSON values (:func:`json_value`, ``seq`` from
    ``first_seq``), partitioned like Kafka's default partitioner (murmur2), in batches."""
    import string

    from aiokafka import AIOKafkaProducer
    from aiokafka.partitioner import DefaultPartitioner

    notes = ["".join(rng.choices(string.ascii_letters, k=64)) for _ in range(1024)]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20
    )
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(INPUT_TOPIC))
        partitioner = DefaultPartitioner()
        key_names = [f"key-{k:06d}" for k in range(keys)]
        key_bytes = [k.encode() for k in key_names]
        key_partition = [partitioner(k, partitions, partitions) for k in key_bytes]
        batches = {p: producer.create_batch() for p in partitions}
        futures = []
        for seq in range(first_seq, first_seq + records):
            k = rng.randrange(keys)
            partition = key_partition[k]
            value = json_value(rng, key_names[k], seq, value_bytes, notes)
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


def input_plan(counts: Mapping[str, int]) -> list[tuple[int, tuple[str, ...]]]:
    """How the one input topic is written so that each mode's runs read their own count of
    records, the topic's last ones: segments of (records, the modes whose input starts with
    it), the largest input's first. ``{"per-core": 4M, "machine": 8M}`` gives
    ``[(4M, ("machine",)), (4M, ("per-core",))]``: the whole machine reads both segments, a
    pinned system the second only."""
    sizes = sorted(set(counts.values()), reverse=True)
    return [
        (size - smaller, tuple(mode for mode, n in counts.items() if n == size))
        for size, smaller in zip(sizes, [*sizes[1:], 0], strict=True)
    ]


@dataclass(frozen=True)
class ModeInput:
    """The input of one mode's runs: the input topic from ``start`` (per partition) to its end.
    Each run's group has ``start`` committed before its processes start, so every system reads
    exactly these records, and its output is checked against ``expected``."""

    start: dict[int, int]
    expected: InputSummary


async def preload_inputs(
    bootstrap: str, counts: Mapping[str, int], *, keys: int, value_bytes: int, seed: int
) -> dict[str, ModeInput]:
    """Write the input topic by :func:`input_plan` (one data set: every mode's input is the
    tail of the largest one) and summarise each mode's part of it for the output checks."""
    rng = random.Random(seed)
    starts: dict[str, dict[int, int]] = {}
    seq = 0
    for records, modes in input_plan(counts):
        mark = await end_offsets(bootstrap, INPUT_TOPIC)
        starts.update({mode: mark for mode in modes})
        await preload(bootstrap, records, keys, value_bytes, rng, first_seq=seq)
        seq += records
    return {
        mode: ModeInput(start, await summarise_input(bootstrap, INPUT_TOPIC, start))
        for mode, start in starts.items()
    }


async def preload_users(bootstrap: str, keys: int) -> None:
    """The join rows' users (benchmarks/join_bench.py): one JSON record per key of the input,
    written before it (earlier timestamps), partitioned as the input (murmur2)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20
    )
    await producer.start()
    try:
        futures = []
        for k in range(keys):
            key = f"key-{k:06d}"
            value = json.dumps({"user": key, "tier": tier_of(key)}).encode()
            futures.append(await producer.send(USERS_TOPIC, key=key.encode(), value=value))
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
        #: The last committed total seen (kept through a poll the coordinator did not answer).
        self.last = 0
        return self

    @property
    def total(self) -> int:
        return sum(self.ends.values())

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()
        await self.admin.close()

    async def progress(self, group: str, start: Mapping[int, int]) -> tuple[int, bool]:
        """(records committed since ``start``, whether every partition is committed to its
        end)."""
        from aiokafka.errors import KafkaError

        try:
            committed = await self.admin.list_consumer_group_offsets(group, partitions=self.tps)
        except KafkaError as exc:
            if not getattr(exc, "retriable", False):
                raise
            return self.last, False  # the coordinator moving or loading: the next poll sees it
        total = sum(
            max(0, committed[tp].offset - start.get(tp.partition, 0))
            for tp in self.tps
            if tp in committed
        )
        done = all(tp in committed and committed[tp].offset >= self.ends[tp] for tp in self.tps)
        self.last = total
        return total, done

    async def committed_total(self, group: str, start: Mapping[int, int]) -> int:
        return (await self.progress(group, start))[0]

    async def forget(self, group: str, output_topic: str) -> None:
        """After a run's check: delete its output records and the topics named after its group
        (changelogs, repartition topics), so that a long benchmark does not fill the disk."""
        from aiokafka import TopicPartition
        from aiokafka.admin import RecordsToDelete

        ends = await end_offsets(self.bootstrap, output_topic)
        with contextlib.suppress(Exception):  # a cleanup: never fail a benchmark over it
            await self.admin.delete_records(
                {
                    TopicPartition(output_topic, p): RecordsToDelete(before_offset=end)
                    for p, end in ends.items()
                    if end > 0
                }
            )
        internal = [t for t in await self.admin.list_topics() if group in t]
        if internal:
            with contextlib.suppress(Exception):
                await self.admin.delete_topics(internal)


def commit_interval_for(system: System, args: argparse.Namespace) -> float:
    if args.commit_interval is not None:
        return float(args.commit_interval)
    if system.child == "faust":
        return FAUST_DEFAULT_COMMIT_INTERVAL  # its broker_commit_interval default
    return 1.0 if system.guarantee == ALOS else 0.1


def processes_of(system: System, mode: Mode) -> int:
    """Processes the harness starts for ``system`` in ``mode``: one where the system spreads
    over the cores itself (streams_app's supervisor, Kafka Streams' stream threads)."""
    return 1 if system.child in ("streams_app", "kafka_streams") else mode.parallelism


def child_command(
    system: System,
    args: argparse.Namespace,
    *,
    bootstrap: str,
    group: str,
    state_dir: Path,
    profile_path: Path | None = None,
    parallelism: int = 1,
    instance: int = 0,
) -> list[str]:
    """The command line of one process of ``system`` (``instance`` of the group's processes),
    spreading over ``parallelism`` cores where the system can."""
    commit_interval = commit_interval_for(system, args)
    if system.child == "kafka_streams":
        from benchmarks import kafka_streams

        return kafka_streams.command(
            args.kstreams_classpath,
            bootstrap=bootstrap,
            application_id=group,
            input_topic=INPUT_TOPIC,
            output_topic=system.output_topic,
            guarantee=system.guarantee,
            commit_interval_s=commit_interval,
            state_dir=state_dir,
            threads=parallelism,
            join=system.join,
            users_topic=USERS_TOPIC,
        )
    cmd = [
        system.python,
        "-m",
        "benchmarks.child",
        system.child,
        "--bootstrap",
        bootstrap,
        "--group",
        group,
        "--guarantee",
        system.guarantee,
        "--state-dir",
        str(state_dir),
        "--max-poll-records",
        str(args.max_poll_records),
        "--commit-interval",
        str(commit_interval),
        "--instance",
        str(instance),
    ]
    if system.child == "streams_app":
        if system.topology:
            cmd += ["--topology", system.topology]
        if parallelism > 1:
            cmd += ["--processes", str(parallelism)]
        for item in args.set:
            cmd += ["--set", item]
    if profile_path is not None and args.profiler == "pyinstrument":
        cmd += ["--profile", str(profile_path)]
    return cmd


def _pinned(cpus: tuple[int, ...] | None) -> Any:
    """A ``preexec_fn`` putting the child (and whatever it starts) on ``cpus``."""
    if cpus is None:
        return None
    wanted = set(cpus)

    def pin() -> None:
        os.sched_setaffinity(0, wanted)

    return pin


def place_broker_and_harness(mode: Mode, broker_pid: int | None) -> None:
    """The broker's threads and this process's onto the mode's CPUs (all of them: unpinned)."""
    cpus = mode.broker_cpus or steady.MACHINE_CPUS
    if broker_pid is not None:
        steady.pin(broker_pid, cpus)
    steady.pin(os.getpid(), cpus)


async def _start_spy(pid: int, path: Path, *, children: bool) -> Any:
    """py-spy sampling ``pid`` (and its children: a supervisor's workers) from outside."""
    return await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "py-spy"),
        "record",
        "--nonblocking",
        *(["--subprocesses"] if children else []),
        "--rate",
        "250",
        "--format",
        "raw",
        "--output",
        str(path) + ".collapsed",
        "--pid",
        str(pid),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def _stop_spy(spy: Any, path: Path) -> None:
    if spy.returncode is None:
        spy.send_signal(signal.SIGINT)
        await spy.wait()
    from benchmarks.profile_summary import summarise_collapsed

    collapsed = Path(str(path) + ".collapsed")
    if collapsed.exists():
        path.with_suffix(".txt").write_text(summarise_collapsed(collapsed))


@dataclass(frozen=True)
class Bench:
    """What every run of one benchmark shares: its options, broker, inputs and directory."""

    args: argparse.Namespace
    bootstrap: str
    broker_pid: int | None
    watcher: OffsetWatcher
    #: Each mode's input (by mode key).
    inputs: dict[str, ModeInput]
    workdir: Path


async def run_once(
    system: System, mode: Mode, index: int, bench: Bench, *, limit: float | None = None
) -> dict[str, Any]:
    """One run of ``system`` in ``mode`` (``limit``: stop that many seconds after the first
    record, a warm-up)."""
    args, bootstrap, broker_pid = bench.args, bench.bootstrap, bench.broker_pid
    watcher, source, workdir = bench.watcher, bench.inputs[mode.key], bench.workdir
    expected, start = source.expected, source.start
    records = expected.records
    name = system.key.replace("@", ".")
    group = f"bench-{name}-{mode.key}-{index}-{uuid.uuid4().hex[:6]}"
    commit_interval = commit_interval_for(system, args)
    processes = processes_of(system, mode)
    timeout = args.faust_timeout if system.child == "faust" else args.timeout
    output_start = await end_offsets(bootstrap, system.output_topic)
    profile_path = None
    if system.key in args.profile and index >= 1:  # not in warm-up runs
        profile_path = Path(args.profile_dir) / f"profile-{system.key}-{mode.key}-{index}"
        profile_path.parent.mkdir(parents=True, exist_ok=True)

    log_path = workdir / f"{group}.log"
    # The group starts at its mode's input (the topic's last ``records`` records).
    await commit_offsets(bootstrap, group, INPUT_TOPIC, start)
    place_broker_and_harness(mode, broker_pid)
    load_before = load_average()
    spawned = time.time()
    procs = []
    with open(log_path, "wb") as log:
        for n in range(processes):
            # Each process of a multi-process run has its own state directory.
            command = child_command(
                system,
                args,
                bootstrap=bootstrap,
                group=group,
                state_dir=workdir / group / f"process-{n}",
                profile_path=profile_path,
                parallelism=mode.parallelism,
                instance=n,
            )
            procs.append(
                await asyncio.create_subprocess_exec(
                    *command,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log,
                    cwd=system.repo,
                    preexec_fn=_pinned(mode.system_cpus),
                )
            )
    pids = [p.pid for p in procs]
    first: float | None = None
    first_seen = asyncio.Event()
    stats: dict[str, Any] = {}
    cpu_at_first: tuple[float | None, float | None] = (None, None)

    def cpu_now() -> tuple[float | None, float | None]:
        return steady.tree_cpu_seconds(pids), cpu_seconds(broker_pid)

    async def read_stdout(proc: asyncio.subprocess.Process) -> None:
        nonlocal first, cpu_at_first
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if "FIRST " in line:  # faust may put terminal escapes before it
                stamp = float(line.split("FIRST ", 1)[1].split()[0])
                if first is None:
                    first = stamp
                    cpu_at_first = cpu_now()
                    first_seen.set()
            elif "STATS " in line:
                for key, value in json.loads(line.split("STATS ", 1)[1]).items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        stats[key] = stats.get(key, 0) + value
                    else:
                        stats[key] = value

    readers = [asyncio.create_task(read_stdout(proc)) for proc in procs]
    progress = steady.Progress(records)
    spy = None
    spy_done = False
    deadline = time.monotonic() + timeout
    done_at: float | None = None
    cpu_at_done: tuple[float | None, float | None] = (None, None)
    finished = False
    done_records = records
    try:
        while time.monotonic() < deadline:
            if any(proc.returncode is not None for proc in procs):
                break
            committed, done = 0, False
            if first_seen.is_set():  # (before it, the group may have no coordinator yet)
                committed, done = await watcher.progress(group, start)
            now = time.time()
            worker_cpu, broker_cpu = cpu_now()
            progress.add(now, committed, worker_cpu, broker_cpu)
            if profile_path is not None and args.profiler == "py-spy" and not spy_done:
                # The steady-state window only: from 10 % of the input committed to 90 %.
                if spy is None and committed >= steady.STEADY_FROM * records:
                    spy = await _start_spy(pids[0], profile_path, children=mode.parallelism > 1)
                elif spy is not None and committed >= steady.STEADY_TO * records:
                    await _stop_spy(spy, profile_path)
                    spy_done = True
            if first_seen.is_set() and done:
                done_at, cpu_at_done, finished = now, (worker_cpu, broker_cpu), True
                break
            if limit is not None and first is not None and now - first >= limit:
                break  # a warm-up: long enough
            await asyncio.sleep(steady.POLL_INTERVAL)
        if not finished and first_seen.is_set() and all(p.returncode is None for p in procs):
            # Too slow for --timeout: report the rate of what it committed so far.
            done_at = time.time()
            cpu_at_done = cpu_now()
            done_records = await watcher.committed_total(group, start)
    finally:
        load_after = load_average()
        if spy is not None and not spy_done:
            assert profile_path is not None
            await _stop_spy(spy, profile_path)
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*readers), 5)
        # The check reads millions of records: on every CPU, not the broker's alone.
        place_broker_and_harness(machine_modes()["machine"], None)
    if done_at is None or first is None:
        tail = log_path.read_text(errors="replace")[-3000:]
        codes = [proc.returncode for proc in procs]
        raise RuntimeError(f"{system.key} run {index} did not finish (exit {codes}):\n{tail}")
    seconds = done_at - first

    def delta(i: int) -> float | None:
        a, b = cpu_at_first[i], cpu_at_done[i]
        return None if a is None or b is None else round(b - a, 2)

    verdict = await check_output(
        bootstrap,
        system.output_topic,
        output_start,
        expected,
        kind=system.output_kind,
        transactional=system.claims_exactly_once,
        complete=finished,
    )
    if not args.keep:
        await watcher.forget(group, system.output_topic)
    worker_cpu, broker_cpu = delta(0), delta(1)
    cpu_total = None if worker_cpu is None else round(worker_cpu + (broker_cpu or 0.0), 2)
    return {
        **_which(system, mode, index),
        "processes": processes,
        "records": done_records,
        "finished": finished,
        "seconds": round(seconds, 3),
        "records_per_s": round(done_records / seconds),
        # Between 10 % and 90 % of the input committed (benchmarks/steady.py); None for a run
        # that did not get that far.
        "steady": progress.steady() if finished else None,
        "progress": progress.timeline(first),
        "total_seconds": round(done_at - spawned, 3),
        "commit_interval_s": commit_interval,
        "worker_cpu_s": worker_cpu,
        "broker_cpu_s": broker_cpu,
        # The system's processes and the broker over the whole timed window.
        "cpu_seconds": cpu_total,
        "cpu_us_per_record": (
            None if cpu_total is None else round(cpu_total * 1e6 / max(1, done_records), 2)
        ),
        "worker_cpu_us_per_record": (
            None if worker_cpu is None else round(worker_cpu * 1e6 / max(1, done_records), 2)
        ),
        **verdict.as_json(),
        "load_before": load_before,
        "load_after": load_after,
        "profile": str(profile_path) + ".txt" if profile_path else None,
        **{f"child_{k}": v for k, v in stats.items()},
    }


# -- reporting ------------------------------------------------------------------------------


def table(runs: list[dict[str, Any]]) -> str:
    header = (
        f"{'system':<16} {'guarantee':<16} {'mode':<9} {'#':>2} {'records':>8} "
        f"{'steady/s':>9} {'whole/s':>9} {'steady s':>8} {'us/rec':>7} {'cores':>5} "
        f"{'broker us':>9} {'ok':>3} {'load':>11}"
    )
    lines = [header, "-" * len(header)]
    for r in runs:
        mode = r.get("mode", "-")
        if "error" in r:
            lines.append(
                f"{r['system']:<16} {r['guarantee']:<16} {mode:<9} {r['repeat']:>2}  FAILED"
            )
            continue
        load = f"{r['load_before']:.2f}/{r['load_after']:.2f}"
        st = r.get("steady") or {}
        lines.append(
            f"{r['system']:<16} {r['guarantee']:<16} {mode:<9} {r['repeat']:>2} "
            f"{r['records']:>8} {_int(st.get('records_per_s')):>9} {r['records_per_s']:>9,} "
            f"{_fmt(st.get('seconds'), 1):>8} {_fmt(st.get('worker_cpu_us_per_record'), 1):>7} "
            f"{_fmt(st.get('worker_cores')):>5} {_fmt(st.get('broker_cpu_us_per_record'), 1):>9} "
            f"{'yes' if r['correct'] else 'NO':>3} {load:>11}"
        )
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _int(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def checkout_python(repo: Path) -> str:
    """A compared checkout's own virtualenv interpreter if it has one (a clone set up with
    ``make setup``), else this process's (a git worktree sharing this checkout's packages)."""
    own = repo / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def interpreter(python: str = sys.executable) -> dict[str, str]:
    """Which CPython build runs the Python systems. A build configured without
    ``--enable-optimizations`` (pyenv's default) runs the per-record path measurably slower
    than a PGO build (distribution and official Docker images): BENCHMARKS.md, Method."""
    import subprocess

    probe = (
        "import platform, sys, sysconfig; "
        "print(platform.python_version()); print(sys.base_prefix); "
        "print(sysconfig.get_config_var('CONFIG_ARGS') or '')"
    )
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    version, prefix, config = [*out.stdout.splitlines(), "", "", ""][:3]
    flags = [f for f in ("--enable-optimizations", "--with-lto") if f in config]
    return {"version": version, "prefix": prefix, "configured_with": " ".join(flags)}


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "interpreter": interpreter(),
        "platform": platform.platform(),
    }


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    from streams_app.broker.jars import kafka_version

    found = {"kafka": kafka_version()}
    for package in ("aiokafka", "quixstreams", "confluent-kafka", "faust-streaming", "rocksdict"):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    return found


async def measure_latencies(
    args: argparse.Namespace,
    bootstrap: str,
    summary: dict[str, Any],
    workdir: Path,
    systems: list[System],
    broker_pid: int | None,
) -> dict[str, Any]:
    """``--latency``: produce-to-visible latency of streams_app per guarantee, at half of the
    capacity this run measured (``--latency-rate`` when given or not measured); with
    ``--compare``, the other checkout's workers too, and with ``--latency-repeat`` that many
    rounds, interleaved so that every variant sees the same machine."""
    from benchmarks import latency

    results: dict[str, Any] = {}
    medians = summary["median_records_per_s"]
    clients = [c.strip() for c in args.latency_client.split(",") if c.strip()]
    measured = [s for s in systems if s.key.partition("@")[0] in ("eos", "alos")]

    def rate_for(system: System) -> int:
        key = system.key.partition("@")[0]
        return int(args.latency_rate or (medians[key] // 2 if key in medians else 10_000))

    async def one(
        system: System, client: str, seconds: float, warmup: float, rate: int | None = None
    ) -> dict[str, Any]:
        group = latency.new_group(system.key.partition("@")[0])
        # Its generator writes plain 100-byte values: the count as topologies/count.py has it.
        raw = dataclasses.replace(system, topology=system.topology or "topologies.count")
        command = child_command(
            raw, args, bootstrap=bootstrap, group=group, state_dir=workdir / group
        )
        return await latency.measure(
            bootstrap=bootstrap,
            command=command,
            cwd=system.repo,
            group=group,
            input_topic=INPUT_TOPIC,
            output_topic=system.output_topic,
            keys=args.keys,
            rate=rate or rate_for(system),
            seconds=seconds,
            log_path=workdir / f"{group}.log",
            client=client,
            warmup=warmup,
            broker_pid=broker_pid,
        )

    if measured and args.latency_broker_warmup > 0:
        # The broker was started by this run: live produce-and-fetch load at the measured rate
        # first, unreported. Without it the first round's tail is the broker's warm-up (fresh
        # workers on one broker, 40,000/s: p99 225, 171, 150, 145 ms in rounds 1-4).
        warm = await one(measured[0], clients[0], args.latency_broker_warmup, 0.0)
        print(
            f"  latency broker warm-up ({measured[0].key}, {args.latency_broker_warmup:.0f}s at "
            f"{warm['rate_achieved']:,}/s, not reported): p99 {warm['p99_ms']} ms",
            flush=True,
        )
    # (name, system, rate): each guarantee at half its drain rate (or --latency-rate), and with
    # --latency-capacity exactly-once at half the live rate it was found to sustain.
    variants: list[tuple[str, System, int | None]] = [(s.key, s, None) for s in measured]
    eos = next((s for s in measured if s.key == "eos"), None)
    if args.latency_capacity and eos is not None and "eos" in medians:

        async def probe(rate: int) -> bool:
            trial = await one(
                eos, clients[0], args.latency_capacity_seconds, latency.CAPACITY_WARMUP_S, rate
            )
            kept = latency.sustained(trial)
            print(
                f"  live capacity: {trial['rate_achieved']:,}/s "
                f"{'kept up' if kept else 'fell behind'} (p99 {trial['p99_ms']} ms, by "
                f"second {trial['p99_ms_by_second']})",
                flush=True,
            )
            return kept

        best, steps = await latency.live_capacity(probe, medians["eos"])
        results["live_capacity"] = {
            "records_per_s": best,
            "drain_records_per_s": medians["eos"],
            "steps": [{"rate": rate, "sustained": ok} for rate, ok in steps],
            "sustained_p99_ms": latency.SUSTAINED_P99_MS,
            "prolonged_seconds": latency.PROLONGED_SECONDS,
            "seconds": args.latency_capacity_seconds,
            "warmup_s": latency.CAPACITY_WARMUP_S,
        }
        print(f"  live capacity (eos): {best} records/s; steps {steps}", flush=True)
        if best:
            variants.append(("eos at half live capacity", eos, best // 2))
    for index in range(1, args.latency_repeat + 1):
        # Rotated by one per round, as the throughput rounds are: no variant always runs first.
        shift = (index - 1) % len(variants) if variants else 0
        for label, system, rate in variants[shift:] + variants[:shift]:
            for client in clients:
                name = label if len(clients) == 1 else f"{label} ({client})"
                if args.latency_repeat > 1:
                    name += f" #{index}"
                result = await one(system, client, args.latency_seconds, args.latency_warmup, rate)
                result["commit_interval_s"] = commit_interval_for(system, args)
                results[name] = result
                commits, gaps = result["worker_commit_ms"], result["worker_commit_gap_ms"]
                cpu = result["cpu_s"]
                print(
                    f"  latency {name:<5} at {result['rate_achieved']:,}/s: p50 "
                    f"{result['p50_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms "
                    f"(commit interval {result['commit_interval_s'] * 1000:.0f} ms, "
                    f"{result['missing']} outputs missing); the worker's commits took "
                    f"p50 {commits.get('p50')} / p99 {commits.get('p99')} ms, began "
                    f"p50 {gaps.get('p50')} / p99 {gaps.get('p99')} ms apart; CPU seconds in "
                    f"{cpu['window_s']} s: worker {cpu['worker']}, broker {cpu['broker']}, "
                    f"generator and reader {cpu['generator_and_reader']}; p99 by second "
                    f"{result['p99_ms_by_second']}",
                    flush=True,
                )
                cut = result.get("breakdown_ms") or {}
                for part, figures in cut.items():
                    if not isinstance(figures, dict):
                        continue
                    print(
                        f"    {part} ({figures['n']} outputs), p50/p90/p99 ms: "
                        + "; ".join(
                            f"{name} {v['p50']}/{v['p90']}/{v['p99']}"
                            for name, v in figures.items()
                            if name != "n"
                        ),
                        flush=True,
                    )
                if cut.get("read_before_answer") is not None:
                    print(
                        f"    read before the worker had EndTxn's answer: "
                        f"{cut['read_before_answer']:.1%} of outputs",
                        flush=True,
                    )
    return results


def input_records(args: argparse.Namespace) -> dict[str, int]:
    """Input records per run of each mode to run: ``--records`` per core,
    ``--machine-records`` on the whole machine (a worker per CPU goes through the same input
    about twice as fast)."""
    counts = {"per-core": args.records, "machine": args.machine_records}
    return {mode: counts[mode] for mode in args.modes}


def _rounds(systems: list[System], index: int, once: list[str]) -> list[System]:
    """Round ``index``'s systems, rotated by one per round so none always runs first."""
    chosen = [s for s in systems if index == 1 or s.key not in once]
    shift = (index - 1) % len(chosen) if chosen else 0
    return chosen[shift:] + chosen[:shift]


# -- main -----------------------------------------------------------------------------------


def _which(system: System, mode: Mode, index: int) -> dict[str, Any]:
    """What a run's result says it was a run of."""
    return {
        "system": system.label,
        "guarantee": system.guarantee,
        "key": system.key,
        "mode": mode.key,
        "parallelism": mode.parallelism,
        "repeat": index,
    }


async def _timed_run(system: System, mode: Mode, index: int, bench: Bench) -> dict[str, Any]:
    """One counted run, printed as it ends (a failed one as a failed run, not an exception)."""
    try:
        run = await run_once(system, mode, index, bench)
    except RuntimeError as exc:
        print(f"  {system.key:<13} {mode.key:<9} #{index}: FAILED: {exc}", flush=True)
        return {
            **_which(system, mode, index),
            "error": str(exc)[:2000],
            "correct": False,
        }
    verdict = "correct" if run["correct"] else "WRONG: " + "; ".join(run["problems"])
    st = run["steady"] or {}
    cpu = _fmt(st.get("worker_cpu_us_per_record"), 1)
    print(
        f"  {system.key:<13} {mode.key:<9} #{index}: steady {_int(st.get('records_per_s')):>8} "
        f"records/s over {_fmt(st.get('seconds'), 1)}s ({cpu} us CPU/record, "
        f"{_fmt(st.get('worker_cores'))} cores; broker "
        f"{_fmt(st.get('broker_cpu_us_per_record'), 1)} us); whole run {run['records_per_s']:,}/s "
        f"in {run['seconds']:.1f}s; load {run['load_before']}/{run['load_after']}; {verdict}",
        flush=True,
    )
    return run


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from streams_app.broker.cluster import EmbeddedKafka
    from streams_app.broker.node import DEFAULT_JVM_OPTS

    # The recovery mode runs only streams_app workers: no peer to build or import.
    base = [] if args.recovery else [SYSTEMS[s] for s in args.systems.split(",")]
    systems = list(base)
    for item in args.compare:
        # A/B: the same systems from another checkout (e.g. a git worktree of the previous
        # commit), interleaved with ours so both see the same machine load.
        label, _, path = item.rpartition("=")
        label = label or Path(path).name
        repo = Path(path).resolve()
        python = checkout_python(repo)
        # Another interpreter changes the Python peers too: they run on it as well, so that
        # the ratios within each interpreter stay like for like.
        compared = (
            ("streams_app",)
            if python == sys.executable
            else ("streams_app", "quix", "aiokafka", "faust")
        )
        systems += [
            dataclasses.replace(
                s, key=f"{s.key}@{label}", label=f"{s.label}@{label}", repo=repo, python=python
            )
            for s in base
            if s.child in compared
        ]
    if any(s.child == "kafka_streams" for s in systems):
        from benchmarks import kafka_streams

        t0 = time.monotonic()
        args.kstreams_classpath = kafka_streams.build()
        print(f"Kafka Streams benchmark app ready ({time.monotonic() - t0:.1f}s)")
    if any(s.child == "quix" for s in systems):
        try:
            with warnings.catch_warnings():  # its dependencies' deprecation notices
                warnings.simplefilter("ignore")
                import quixstreams  # noqa: F401
        except ImportError:
            raise SystemExit(
                "the quixstreams rows need quixstreams: `make bench` installs it (pip install "
                "-e '.[bench]'), or leave quix-eos,quix-alos out of --systems"
            ) from None
    workdir = Path(tempfile.mkdtemp(prefix="streams-bench-"))
    kafka = None
    try:
        if args.bootstrap:
            bootstrap, broker_pid = args.bootstrap, None
        else:
            jvm_opts = FULL_JIT_OPTS if args.jvm == "full" else DEFAULT_JVM_OPTS
            print(f"starting the embedded broker ({args.jvm} JVM options, heap {args.heap})...")
            # Kafka's own default initial rebalance delay (the embedded broker's is 0, for fast
            # tests): the workers of a whole-machine run then join one generation, no rebalance
            # while timed.
            kafka = EmbeddedKafka(
                1,
                jvm_opts=jvm_opts,
                heap=args.heap,
                settings={"group.initial.rebalance.delay.ms": "3000"},
            ).start()
            bootstrap, broker_pid = kafka.bootstrap_servers, kafka.node(1).pid
        if args.recovery:  # benchmarks/recovery.py: failover and restore times only
            from benchmarks.recovery import bench_recovery

            return {
                "recovery": await bench_recovery(args, bootstrap, workdir),
                "machine": machine(),
                "versions": versions(),
            }
        await create_topics(bootstrap, args.partitions)
        t0 = time.monotonic()
        if any(s.output_kind == "join" for s in systems):
            await preload_users(bootstrap, args.keys)
        counts = input_records(args)
        inputs = await preload_inputs(
            bootstrap, counts, keys=args.keys, value_bytes=args.value_bytes, seed=args.seed
        )
        runs: list[dict[str, Any]] = []
        async with OffsetWatcher(bootstrap) as watcher:
            print(
                f"pre-loaded {INPUT_TOPIC}: {max(counts.values()):,} records over "
                f"{args.partitions} partitions ({args.value_bytes}-byte values, {args.keys:,} "
                f"keys) in {time.monotonic() - t0:.1f}s; each run reads its last "
                + ", ".join(
                    f"{source.expected.records:,} ({mode})" for mode, source in inputs.items()
                )
            )
            modes = [machine_modes()[m] for m in args.modes]
            bench = Bench(args, bootstrap, broker_pid, watcher, inputs, workdir)
            for index in range(args.warmup):
                # Untimed, per core and cut at --warmup-seconds: lets the broker's JIT compile
                # its produce, fetch, transaction and compacted-topic paths before the first
                # timed run (the first EOS run after a ceiling-only warm-up still saw 2-4x the
                # broker CPU of the later ones).
                for warm_system in (SYSTEMS["ceiling"], SYSTEMS["eos"]):
                    warm = await run_once(
                        warm_system, modes[0], -index, bench, limit=args.warmup_seconds
                    )
                    print(
                        f"  warm-up  {warm_system.key:<13} #{index + 1}: "
                        f"{warm['records_per_s']:>8,} records/s (not counted)"
                    )
            for index in range(1, args.repeat + 1):
                # Which mode goes first alternates between rounds, as the systems' order rotates.
                shift = (index - 1) % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    for system in _rounds(systems, index, args.once):
                        runs.append(await _timed_run(system, mode, index, bench))
        summary = summarise(runs)
        latency: dict[str, Any] = {}
        if args.latency:
            try:
                latency = await measure_latencies(
                    args, bootstrap, summary, workdir, systems, broker_pid
                )
            except Exception as exc:  # never lose the throughput rounds to it
                print(f"  latency FAILED: {exc!r}", flush=True)
                latency = {"error": repr(exc)[:2000]}
        database = None
        if args.database:  # the PostgreSQL sink and outbox relay rows (benchmarks/database.py)
            from benchmarks.database import bench_database

            database = await bench_database(bootstrap, broker_pid, workdir, repeat=args.repeat)
        return {
            "database": database,
            "runs": runs,
            "summary": summary,
            "latency": latency,
            "machine": machine(),
            "versions": versions(),
            "settings": {
                # Each mode's input, records per run (--records, --machine-records).
                "input_records": {m: source.expected.records for m, source in inputs.items()},
                "records": args.records,
                "machine_records": args.machine_records,
                "partitions": args.partitions,
                "value_bytes": args.value_bytes,
                "keys": args.keys,
                "jvm": args.jvm,
                "heap": args.heap,
                "max_poll_records": args.max_poll_records,
                "streams_app_overrides": args.set,
                "repeat": args.repeat,
                "latency_broker_warmup_s": args.latency_broker_warmup if args.latency else None,
                "systems": [s.key for s in systems],
                "modes": {m: machine_modes()[m].describe() for m in args.modes},
                "steady_window": [steady.STEADY_FROM, steady.STEADY_TO],
                "poll_interval_s": steady.POLL_INTERVAL,
                "value_format": "json",
                "warmup": args.warmup,
                "warmup_seconds": args.warmup_seconds,
                "command": " ".join(["python -m benchmarks.run", *args.argv]),
                # Each interpreter the Python systems ran on (a compared checkout may bring its
                # own: checkout_python).
                "interpreters": {
                    python: interpreter(python)
                    for python in sorted({s.python for s in systems if s.child != "kafka_streams"})
                },
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
    return run_benchmark(parse_args(argv))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options, with the defaults that depend on others (``--quick``, ``--records``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records",
        type=int,
        default=None,
        help=f"input records of each per-core run (default {PER_CORE_RECORDS:,}: at least 30 s "
        "of processing for the fastest system pinned to a core of this 2-core machine; "
        f"--quick: {QUICK_RECORDS:,})",
    )
    parser.add_argument(
        "--machine-records",
        type=int,
        default=None,
        help="input records of each whole-machine run (default: twice --records, "
        f"{2 * PER_CORE_RECORDS:,}; a worker per CPU gets through them about twice as fast)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"for development: {QUICK_RECORDS:,} records per core and twice that per machine, "
        "one round, a 5 s warm-up, no database rows (steady-state figures from runs of a few "
        "seconds are not steady)",
    )
    parser.add_argument(
        "--modes",
        default="per-core,machine",
        help="per-core (each system on one CPU, the broker on the others), machine (every "
        "CPU, a worker process or stream thread per CPU), or both (default)",
    )
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed ceiling + EOS runs first, each cut at --warmup-seconds (rounds)",
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=None,
        help="seconds of each warm-up run (default 20; --quick: 5)",
    )
    parser.add_argument(
        "--once",
        default="faust",
        help="systems run in the first round only (default: %(default)s, it is slow)",
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
        help="seconds, for every system (default: each guarantee's: 0.1 EOS, 1.0 ALOS; "
        "faust its own 2.8)",
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
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds per run before it counts as unfinished (default: %(default)s; a pinned "
        "system on a busy machine needs long for its millions of records)",
    )
    parser.add_argument(
        "--faust-timeout",
        type=float,
        default=60.0,
        help="seconds for the faust run, which reports its partial rate (default: %(default)s)",
    )
    parser.add_argument(
        "--latency",
        action="store_true",
        help="then measure streams_app's produce-to-visible latency per guarantee",
    )
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument(
        "--latency-warmup",
        type=float,
        default=5.0,
        help="seconds fed before the measured --latency-seconds (reported per second only)",
    )
    parser.add_argument(
        "--latency-repeat", type=int, default=1, help="latency rounds per variant, interleaved"
    )
    parser.add_argument(
        "--latency-broker-warmup",
        type=float,
        default=60.0,
        help="seconds of live load on the broker before the latency rounds, not reported "
        "(the run starts its broker: its first minute is slower); 0 to skip",
    )
    parser.add_argument(
        "--latency-client",
        default="confluent",
        help="the latency mode's generator and reader: confluent (librdkafka, off the event "
        "loop), aiokafka (the earlier harness), or both, comma-separated",
    )
    parser.add_argument(
        "--latency-capacity",
        action="store_true",
        help="with --latency: first find the highest live rate one exactly-once worker "
        "sustains (from 0.55 of its drain rate, in tenths), then add exactly-once rounds at "
        "half of it",
    )
    parser.add_argument(
        "--latency-capacity-seconds",
        type=float,
        default=20.0,
        help="seconds of each --latency-capacity step, after 5 s of warm-up (default: %(default)s)",
    )
    parser.add_argument(
        "--latency-rate",
        type=int,
        default=None,
        help="records/s (default: half of the guarantee's median throughput in this run)",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="comma-separated systems to profile (see --profiler)",
    )
    parser.add_argument("--profile-dir", default="bench-profiles")
    parser.add_argument("--profiler", choices=("py-spy", "pyinstrument"), default="py-spy")
    parser.add_argument(
        "--recovery",
        action="store_true",
        help="instead of throughput: failover and restore times with and without standbys "
        "(benchmarks/recovery.py); merged into --out under 'recovery'",
    )
    parser.add_argument("--recovery-keys", type=int, default=1_000_000, help="table size")
    parser.add_argument(
        "--recovery-scenarios",
        default="standby,no-standby,restarts,static",
        help="which of standby, no-standby, restarts (restart and full-restore), static (a "
        "restart as a static member, group_instance_id) to run",
    )
    parser.add_argument(
        "--rate", type=int, default=1000, help="input records/s during the recovery runs"
    )
    parser.add_argument(
        "--recovery-session-timeout",
        type=float,
        default=10.0,
        help="session_timeout of the recovery runs' workers (default: streams_app's)",
    )
    parser.add_argument(
        "--recovery-heartbeat",
        type=float,
        default=3.0,
        help="heartbeat_interval of the recovery runs' workers (default: streams_app's)",
    )
    parser.add_argument(
        "--recovery-static-session-timeout",
        type=float,
        default=10.0,
        help="session_timeout of the static-member restart (its heartbeat_interval: a third); "
        "the restart must land inside it (default: streams_app's)",
    )
    parser.add_argument("--out", default="bench-results.json")
    parser.add_argument("--keep", action="store_true", help="keep worker logs and state")
    parser.add_argument(
        "--database",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the PostgreSQL sink and outbox relay rows (benchmarks/database.py)",
    )
    args = parser.parse_args(argv)
    args.argv = list(argv)
    quick = args.quick
    if args.records is None:
        args.records = QUICK_RECORDS if quick else PER_CORE_RECORDS
    if args.machine_records is None:
        args.machine_records = 2 * args.records
    if args.records <= 0 or args.machine_records <= 0:
        parser.error("--records and --machine-records take a positive count")
    if args.repeat is None:
        args.repeat = 1 if quick else 3
    if args.warmup_seconds is None:
        args.warmup_seconds = 5.0 if quick else 20.0
    if quick:
        args.database = False
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.modes or any(m not in ("per-core", "machine") for m in args.modes):
        parser.error("--modes takes per-core, machine or per-core,machine")
    unknown = [s for s in args.systems.split(",") if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    args.profile = [p for p in args.profile.split(",") if p]
    if (
        args.profile
        and args.profiler == "py-spy"
        and not shutil.which("py-spy", path=str(Path(sys.executable).parent))
    ):
        parser.error("--profile needs py-spy in the virtualenv: pip install py-spy")
    args.once = [p for p in args.once.split(",") if p]
    return args


def run_benchmark(args: argparse.Namespace) -> int:
    load_start = os.getloadavg()
    print(f"load average before: {load_start}")
    started = time.monotonic()
    result = asyncio.run(main_async(args))
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    if args.recovery:
        return _write_recovery(args, result)
    # The machine's load around the whole benchmark (1, 5, 15 minutes): how quiet it was.
    result["load_average"] = {
        "start": [round(x, 2) for x in load_start],
        "end": [round(x, 2) for x in os.getloadavg()],
    }
    print()
    print(table(result["runs"]))
    print()
    from benchmarks.report import render

    print(render(result))
    if result.get("database"):
        from benchmarks.database import table as database_table

        print()
        print(database_table(result["database"]))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out} ({result['wall_seconds']:.0f}s in all)")
    return 0


def _write_recovery(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Print the recovery summary; put it under ``recovery`` in ``--out``, keeping the rest of
    an existing file (the throughput rounds of an earlier ``make bench``)."""
    from benchmarks.report import render_recovery

    recovery = result["recovery"]
    recovery["wall_seconds"] = result["wall_seconds"]
    recovery["machine"] = result["machine"]
    print()
    print(render_recovery(recovery), end="")
    out = Path(args.out)
    existing: dict[str, Any] = {}
    if out.exists():
        with contextlib.suppress(ValueError):
            existing = json.loads(out.read_text())
    existing["recovery"] = recovery
    out.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"wrote {args.out} (recovery; {result['wall_seconds']:.0f}s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
