"""Every benchmark run's output is checked, so that a fast wrong answer cannot win.

After a run has stopped, its output (the records it appended to its output topic since the run
began) is read ``read_committed`` and compared with the input:

- **count** systems (streams_app, Kafka Streams, quixstreams, faust): the values for each key, in
  partition order, must be 1, 2, 3, ... (a repeat is a duplicate, a jump is a gap), and each key's
  last value must be the number of input records with that key (nothing lost);
- **windowed** (the count in one-minute tumbling windows): the same, except that a key's count
  starts again at 1 when its next window opens; the per-window final counts must add up to the
  number of input records with that key;
- **join** (the join rows, ``benchmarks/join_bench.py``): one output per input record, valued
  ``"<seq>:<tier>"``: no input ``seq`` twice (a duplicate), each with its key's tier (the right
  partner), and each key with as many outputs as the input has records for it (nothing lost);
- **echo** (the bare aiokafka loop, which forwards records unchanged to the same partition): each
  output partition must hold exactly its input partition's records, in order.

For a system that claims exactly-once the output must also have been written transactionally:
the offsets of the run's range that ``read_committed`` does not return are transaction markers
(plus the records of aborted transactions, which the checks above already rule out as visible).
A transactional writer leaves at least one marker in every partition it wrote to; a plain
producer leaves none. Their count is reported as ``txn_markers``.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Problems reported per run (the first few of each kind; counts are always complete).
MAX_EXAMPLES = 5


@dataclass
class InputSummary:
    """What the outputs are checked against: per-key counts and per-partition digests."""

    records: int
    key_counts: Counter[bytes]
    partition_digests: dict[int, str]
    partition_counts: dict[int, int]


@dataclass
class Verdict:
    correct: bool
    records: int
    txn_markers: int
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "correct": self.correct,
            "output_records": self.records,
            "txn_markers": self.txn_markers,
            "problems": self.problems,
        }


def _digest_update(
    digests: dict[int, Any], partition: int, key: bytes | None, value: bytes
) -> None:
    h = digests.get(partition)
    if h is None:
        h = digests[partition] = hashlib.blake2b(digest_size=16)
    h.update(len(key or b"").to_bytes(4, "big"))
    h.update(key or b"")
    h.update(len(value).to_bytes(4, "big"))
    h.update(value)


async def _read(
    bootstrap: str,
    topic: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    isolation: str,
    timeout: float,
    visit: Callable[[int, list[Any]], None],
) -> dict[int, int]:
    """Hand every record of ``topic`` from ``start`` up to ``end`` (exclusive) to ``visit``,
    batch by batch, in order within each partition (millions of records are never held at
    once); returns the records read per partition."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
    )
    await consumer.start()
    try:
        wanted = {p: e for p, e in end.items() if e > start.get(p, 0)}
        tps = [TopicPartition(topic, p) for p in sorted(wanted)]
        counts: dict[int, int] = {p: 0 for p in end}
        if not tps:
            return counts
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start.get(tp.partition, 0))
        deadline = time.monotonic() + timeout
        pending = set(tps)
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: could not read up to the end offsets within {timeout:.0f}s "
                    f"(a transaction left open?): {sorted(tp.partition for tp in pending)}"
                )
            batch = await consumer.getmany(*pending, timeout_ms=500, max_records=50_000)
            for tp, records in batch.items():
                counts[tp.partition] += len(records)
                visit(tp.partition, records)
            for tp in list(pending):
                if await consumer.position(tp) >= wanted[tp.partition]:
                    pending.discard(tp)
        return counts
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermarks (read_uncommitted end offsets) of every partition of ``topic``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in sorted(parts)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def commit_offsets(
    bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]
) -> None:
    """Commit ``offsets`` (per partition of ``topic``) for a group that has no member yet, so
    that it starts there instead of at ``auto.offset.reset`` (every system under test resumes
    from its group's committed offsets)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in offsets])
        await consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "") for p, o in offsets.items()}
        )
    finally:
        await consumer.stop()


async def summarise_input(
    bootstrap: str, topic: str, start: Mapping[int, int] | None = None
) -> InputSummary:
    """What ``topic`` holds from ``start`` (per partition; default its beginning) to its end."""
    ends = await end_offsets(bootstrap, topic)
    keys: Counter[bytes] = Counter()
    digests: dict[int, Any] = {}

    def visit(partition: int, records: list[Any]) -> None:
        for r in records:
            keys[r.key] += 1
            _digest_update(digests, partition, r.key, r.value)

    counts = await _read(bootstrap, topic, start or {}, ends, "read_uncommitted", 300, visit)
    return InputSummary(
        records=sum(counts.values()),
        key_counts=keys,
        partition_digests={p: h.hexdigest() for p, h in digests.items()},
        partition_counts=counts,
    )


async def check_output(
    bootstrap: str,
    topic: str,
    start: Mapping[int, int],
    expected: InputSummary,
    *,
    kind: str,
    transactional: bool,
    complete: bool = True,
    timeout: float = 300.0,
) -> Verdict:
    """Check one run's output (see the module doc). ``complete=False`` (a run stopped at its
    time limit) checks the per-key sequences but not that every input was counted."""
    end = await end_offsets(bootstrap, topic)
    checker: Counts | Echo | Joined
    if kind in ("count", "windowed"):
        checker = Counts(windowed=kind == "windowed")
    elif kind == "join":
        checker = Joined()
    elif kind == "echo":
        checker = Echo()
    else:
        raise ValueError(f"unknown output kind {kind!r}")
    try:
        counts = await _read(bootstrap, topic, start, end, "read_committed", timeout, checker.visit)
    except TimeoutError as exc:
        return Verdict(False, 0, 0, [str(exc)])
    total = sum(counts.values())
    span = sum(max(0, e - start.get(p, 0)) for p, e in end.items())
    markers = span - total
    problems = checker.problems(expected, complete, counts)
    if transactional:
        written = [p for p, n in counts.items() if n]
        unmarked = [p for p in written if end[p] - start.get(p, 0) <= counts[p]]
        if unmarked:
            problems.append(
                f"claims exactly-once, but partitions {unmarked} of {topic} hold no "
                "transaction marker (written without a transaction)"
            )
    elif markers:
        problems.append(f"{markers} offsets of {topic} are not readable (markers or aborted)")
    return Verdict(not problems, total, markers, problems)


class Counts:
    """The count systems' output, record by record: per key 1, 2, 3, ... ``windowed``: a 1
    after a count > 1 opens the key's next window (the input spans seconds to minutes, windows
    a minute: a key sees a few), and ``last`` then holds the sum of the windows' counts so far
    plus the current one's. A key lives in one partition, so partitions may interleave."""

    def __init__(self, *, windowed: bool = False) -> None:
        self.windowed = windowed
        self.last: dict[bytes, int] = {}
        self.closed: dict[bytes, int] = {}
        self.duplicates = self.gaps = self.bad = 0
        self.examples: list[str] = []

    def visit(self, partition: int, records: list[Any]) -> None:
        last, closed, examples = self.last, self.closed, self.examples
        for r in records:
            try:
                value = int(r.value)
            except (TypeError, ValueError):
                self.bad += 1
                if len(examples) < MAX_EXAMPLES:
                    examples.append(f"unreadable value at {partition}@{r.offset}")
                continue
            previous = last.get(r.key, 0) - closed.get(r.key, 0)
            if self.windowed and value == 1 and previous > 1:
                closed[r.key] = last[r.key]
                previous = 0
            if value != previous + 1:
                if value <= previous:
                    self.duplicates += 1
                else:
                    self.gaps += 1
                if len(examples) < MAX_EXAMPLES:
                    examples.append(
                        f"key {r.key!r} at {partition}@{r.offset}: {value} after {previous}"
                    )
            last[r.key] = closed.get(r.key, 0) + max(previous, value)

    def problems(
        self, expected: InputSummary, complete: bool, counts: Mapping[int, int]
    ) -> list[str]:
        problems = []
        if self.duplicates:
            problems.append(f"{self.duplicates} duplicate counts")
        if self.gaps:
            problems.append(f"{self.gaps} gaps in counts")
        if self.bad:
            problems.append(f"{self.bad} unreadable values")
        last = self.last
        unknown = [k for k in last if k not in expected.key_counts]
        if unknown:
            problems.append(f"{len(unknown)} keys not in the input, e.g. {unknown[0]!r}")
        if complete:
            short = [k for k, n in expected.key_counts.items() if last.get(k, 0) != n]
            if short:
                k = short[0]
                problems.append(
                    f"{len(short)} keys with a final count other than their input count, e.g. "
                    f"{k!r}: {last.get(k, 0)} instead of {expected.key_counts[k]}"
                )
        return problems + self.examples if problems else []


class Joined:
    """The join rows' output (see the module doc): each input ``seq`` once, with its key's
    tier, and every key's input records all joined."""

    def __init__(self) -> None:
        from benchmarks.join_bench import tier_of

        self.tier_of = tier_of
        self.seqs: set[int] = set()
        self.per_key: Counter[bytes] = Counter()
        self.duplicates = self.wrong = self.bad = 0
        self.examples: list[str] = []

    def visit(self, partition: int, records: list[Any]) -> None:
        for r in records:
            try:
                seq_text, tier = r.value.decode().split(":")
                seq, key = int(seq_text), r.key.decode()
            except (AttributeError, TypeError, ValueError):
                self.bad += 1
                if len(self.examples) < MAX_EXAMPLES:
                    self.examples.append(f"unreadable record at {partition}@{r.offset}")
                continue
            if seq in self.seqs:
                self.duplicates += 1
                if len(self.examples) < MAX_EXAMPLES:
                    self.examples.append(f"seq {seq} again at {partition}@{r.offset}")
            self.seqs.add(seq)
            if tier != self.tier_of(key):
                self.wrong += 1
                if len(self.examples) < MAX_EXAMPLES:
                    self.examples.append(f"key {key!r} joined with tier {tier!r}")
            self.per_key[r.key] += 1

    def problems(
        self, expected: InputSummary, complete: bool, counts: Mapping[int, int]
    ) -> list[str]:
        problems = []
        if self.duplicates:
            problems.append(f"{self.duplicates} input records joined more than once")
        if self.wrong:
            problems.append(f"{self.wrong} records joined with another key's row")
        if self.bad:
            problems.append(f"{self.bad} unreadable records")
        unknown = [k for k in self.per_key if k not in expected.key_counts]
        if unknown:
            problems.append(f"{len(unknown)} keys not in the input, e.g. {unknown[0]!r}")
        if complete:
            short = [k for k, n in expected.key_counts.items() if self.per_key.get(k, 0) < n]
            if short:
                k = short[0]
                problems.append(
                    f"{len(short)} keys with input records not joined, e.g. {k!r}: "
                    f"{self.per_key.get(k, 0)} of {expected.key_counts[k]}"
                )
        return problems + self.examples if problems else []


class Echo:
    """The aiokafka loop's output: each partition exactly its input partition, in order."""

    def __init__(self) -> None:
        self.digests: dict[int, Any] = {}

    def visit(self, partition: int, records: list[Any]) -> None:
        for r in records:
            _digest_update(self.digests, partition, r.key, r.value)

    def problems(
        self, expected: InputSummary, complete: bool, counts: Mapping[int, int]
    ) -> list[str]:
        problems = []
        for partition, want in expected.partition_digests.items():
            got = self.digests.get(partition)
            if got is None or got.hexdigest() != want:
                problems.append(
                    f"partition {partition}: {counts.get(partition, 0)} records that are not "
                    f"the input's {expected.partition_counts[partition]}, in order"
                )
        return problems
