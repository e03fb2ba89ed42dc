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
interval + 50 ms at half of the worker's capacity. The generator and the reader run in this
(the benchmark's) process, on the same cores as the worker and the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

TICK_S = 0.01


async def _commit_group_at_end(bootstrap: str, group: str, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    from benchmarks.check import end_offsets

    ends = await end_offsets(bootstrap, topic)
    if not ends:
        raise RuntimeError(f"latency: no partitions found for {topic}")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in ends])
        await consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "") for p, o in ends.items()}
        )
    finally:
        await consumer.stop()


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
) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from benchmarks.check import end_offsets

    await _commit_group_at_end(bootstrap, group, input_topic)
    out_start = await end_offsets(bootstrap, output_topic)
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.DEVNULL, stderr=log, cwd=cwd
        )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        fetch_max_wait_ms=5,
    )
    sent: dict[tuple[bytes, int], float] = {}
    latencies: list[float] = []
    try:
        await _wait_stable(bootstrap, group)
        await producer.start()
        await reader.start()
        tps = [TopicPartition(output_topic, p) for p in sorted(out_start)]
        reader.assign(tps)
        for tp in tps:
            reader.seek(tp, out_start[tp.partition])

        async def read() -> None:
            while True:
                batch = await reader.getmany(timeout_ms=50)
                now = time.monotonic()
                for records in batch.values():
                    for r in records:
                        at = sent.pop((r.key, int(r.value)), None)
                        if at is not None:
                            latencies.append(now - at)

        reading = asyncio.create_task(read())
        rng = random.Random(7)
        key_bytes = [f"key-{k:06d}".encode() for k in range(keys)]
        counts = [0] * keys
        per_tick = max(1, round(rate * TICK_S))
        start = time.monotonic()
        ticks = int(seconds / TICK_S)
        produced = 0
        for tick in range(ticks):
            for _ in range(per_tick):
                k = rng.randrange(keys)
                counts[k] += 1
                sent[(key_bytes[k], counts[k])] = time.monotonic()
                await producer.send(input_topic, key=key_bytes[k], value=b"x" * 100)
                produced += 1
            delay = start + (tick + 1) * TICK_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        achieved = produced / (time.monotonic() - start)
        await producer.flush()
        deadline = time.monotonic() + 30
        while sent and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
    finally:
        await producer.stop()
        await reader.stop()
        if proc.returncode is None:
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    latencies.sort()

    def pct(q: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1)

    return {
        "rate_target": rate,
        "rate_achieved": round(achieved),
        "records": produced,
        "outputs_seen": len(latencies),
        "missing": len(sent),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": pct(1.0),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 1) if latencies else None,
    }


def new_group(key: str) -> str:
    return f"bench-latency-{key}-{uuid.uuid4().hex[:6]}"
