"""A restore killed part-way resumes from its checkpointed progress, not from offset 0, and one
killed just after it finished restores nothing again; what a checkpoint left in the store is
exactly the changelog's committed prefix up to the offset stored with it (real broker, RocksDB
with write-behind, SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streams_app.state import RocksDBStorePartition, restore_partitions
from streams_app.state.restore import CHECKPOINT_RECORDS
from streams_app.transport.base import TopicPartition
from tests.state.test_restore import Offsets, RestoreConsumer, create_topic

pytestmark = pytest.mark.kafka

RECORDS = 60_000
KEYS = 15_000
REPO = Path(__file__).resolve().parents[2]


def record(i: int) -> tuple[bytes, bytes]:
    return b"k%d" % (i % KEYS), b"%d" % i


def prefix_state(upto: int) -> dict[bytes, bytes]:
    """The latest value per key among changelog offsets ``[0, upto)``."""
    return dict(record(i) for i in range(upto))


async def write_changelog(bootstrap: str, topic: str) -> None:
    await create_topic(bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, enable_idempotence=True)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=value, key=key, partition=0)
            for key, value in map(record, range(RECORDS))
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def killed_at(bootstrap: str, topic: str, path: Path, stop_at: int) -> int:
    """Run the restoring child until it reaches ``stop_at``, SIGKILL it; its position then."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.state.restore_child",
            bootstrap,
            topic,
            str(path),
            f"{stop_at}",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("AT "), line
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    return int(line.split()[1])


async def resume(bootstrap: str, topic: str, part: RocksDBStorePartition) -> tuple[int, int]:
    consumer, offsets = RestoreConsumer(bootstrap), Offsets(bootstrap)
    await consumer.consumer.start()
    await offsets.consumer.start()
    try:
        results = await restore_partitions({TopicPartition(topic, 0): part}, consumer, offsets)
    finally:
        await consumer.consumer.stop()
        await offsets.consumer.stop()
    result = results[TopicPartition(topic, 0)]
    return result.from_offset, result.to_offset


def test_a_killed_restore_resumes_from_its_checkpoint(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    topic = f"restore-resume-{unique}"
    asyncio.run(write_changelog(bootstrap_servers, topic))
    path = tmp_path / "p"

    position = killed_at(bootstrap_servers, topic, path, stop_at=RECORDS * 6 // 10)
    part = RocksDBStorePartition(path)
    try:
        stored = part.changelog_offset
        assert stored is not None, "nothing of the restore survived the kill"
        # Checkpointed at least every CHECKPOINT_RECORDS records (batches of 500): what the
        # kill lost is less than that, and the store is exactly the prefix below its offset.
        assert position - CHECKPOINT_RECORDS - 500 <= stored <= position, (stored, position)
        assert dict(part.items()) == prefix_state(stored)
        start, end = asyncio.run(resume(bootstrap_servers, topic, part))
        assert (start, end) == (stored, RECORDS)
        assert dict(part.items()) == prefix_state(RECORDS)
    finally:
        part.close()

    # Killed just after it finished: the end was checkpointed, nothing is read again.
    fresh = tmp_path / "q"
    assert killed_at(bootstrap_servers, topic, fresh, stop_at=RECORDS) == RECORDS
    part = RocksDBStorePartition(fresh)
    try:
        assert part.changelog_offset == RECORDS
        assert asyncio.run(resume(bootstrap_servers, topic, part)) == (RECORDS, RECORDS)
    finally:
        part.close()
