"""The transaction inspector on a real broker: committed, aborted, open and hanging transactions
each shown correctly by ``txn list``, ``txn describe``, ``txn dump`` and ``txn hanging``, and
``txn dump`` equal, offset by offset, to Kafka's own DumpLogSegments on the broker's segment.

The broker is a dedicated one with ``transaction.partition.verification.enable=false``: since
Kafka 3.6 brokers verify that a transactional write belongs to a transaction its coordinator
knows (KIP-890), which is what prevents hanging transactions. To show one, the test turns that
check off and makes the write that used to cause them: a produce request from a producer that
is killed mid-transaction, to a partition its coordinator was never told about. Nothing else in
these tests depends on the setting.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams_app.broker import TEST_SETTINGS, EmbeddedKafka
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.dump import ABORTED, COMMITTED, CONTROL, OPEN, PLAIN, Dump, dump_partition
from streams_app.ops.transactions import (
    HANGING,
    RUNNING,
    PartitionTransaction,
    describe_transaction,
    open_transactions,
)
from tests.ops.support import REPO, dump_log_segments, killed_producer, run_cli

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def inspected_kafka() -> Iterator[EmbeddedKafka]:
    kafka = EmbeddedKafka(
        1, settings={**TEST_SETTINGS, "transaction.partition.verification.enable": "false"}
    )
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def write_history(bootstrap: str, topic: str, txn_id: str) -> None:
    """Non-transactional records, a committed transaction (gzip), an aborted one."""
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    txn = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=txn_id, compression_type="gzip"
    )
    await plain.start()
    await txn.start()
    try:
        for i in range(2):
            await plain.send_and_wait(topic, b"plain-%d" % i, key=b"p", partition=0)
        async with txn.transaction():
            await txn.send_and_wait(topic, b"c-0", key=b"c", partition=0, headers=[("h1", b"x")])
            futures = [await txn.send(topic, b"c-%d" % i, key=b"c", partition=0) for i in (1, 2)]
            await asyncio.gather(*futures)
        await txn.begin_transaction()
        await txn.send_and_wait(topic, b"a-0", key=None, partition=0)
        await txn.send_and_wait(topic, b"a-1", key=b"a", partition=0)
        await txn.abort_transaction()
    finally:
        await txn.stop()
        await plain.stop()


async def write_plain(bootstrap: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def fence(bootstrap: str, txn_id: str) -> None:
    """A new producer with the same transactional id: its InitProducerId aborts the open one."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    await producer.start()
    await producer.stop()


async def read_committed_offsets(bootstrap: str, topic: str, partition: int) -> list[int]:
    """Offsets a read_committed consumer returns from the partition, up to its LSO."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        offsets: list[int] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            offsets.extend(r.offset for r in batch.get(tp, []) if r.offset < end)
        return offsets
    finally:
        await consumer.stop()


async def inspect(bootstrap: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    async with OpsAdmin(bootstrap) as admin:
        return await fn(admin, *args, **kwargs)


def statuses(dump: Dump) -> list[tuple[int, str]]:
    """(offset, status) of every offset shown, whatever the producers' batching was."""
    return [
        (offset, d.status)
        for d in dump.batches
        for offset in range(d.batch.base_offset, d.batch.last_offset + 1)
    ]


def assert_same_as_kafka(dump: Dump, kafka: list[dict[str, Any]]) -> None:
    """Our dump and DumpLogSegments agree on every batch and record field both print."""
    assert len(dump.batches) == len(kafka)
    position = 0
    for ours, theirs in zip((d.batch for d in dump.batches), kafka, strict=True):
        expected = {
            "baseOffset": ours.base_offset,
            "lastOffset": ours.last_offset,
            "count": ours.count,
            "baseSequence": ours.base_sequence,
            "lastSequence": ours.last_sequence,
            "producerId": ours.producer_id,
            "producerEpoch": ours.producer_epoch,
            "partitionLeaderEpoch": ours.partition_leader_epoch,
            "isTransactional": str(ours.is_transactional).lower(),
            "isControl": str(ours.is_control).lower(),
            "position": position,
            ours.timestamp_type: ours.max_timestamp,
            "size": ours.size,
            "magic": ours.magic,
            "compresscodec": ours.compression,
            "crc": ours.crc,
            "isvalid": str(ours.crc_valid).lower(),
        }
        assert {k: theirs[k] for k in expected} == {k: str(v) for k, v in expected.items()}
        position += ours.size
        assert len(ours.records) == len(theirs["records"])
        for record, line in zip(ours.records, theirs["records"], strict=True):
            fields = {
                "offset": record.offset,
                ours.timestamp_type: record.timestamp,
                "keySize": record.key_size,
                "valueSize": record.value_size,
                "sequence": record.sequence,
                "headerKeys": f"[{','.join(record.header_keys)}]",
            }
            if record.control is not None:
                fields["endTxnMarker"] = record.control.type
                fields["coordinatorEpoch"] = record.control.coordinator_epoch
            assert {k: line[k] for k in fields} == {k: str(v) for k, v in fields.items()}
            assert set(line) == set(fields)


def test_committed_aborted_and_open_transactions(
    inspected_kafka: EmbeddedKafka, unique: str, tmp_path: Path
) -> None:
    bootstrap = inspected_kafka.bootstrap_servers
    topic, done_id, open_id = f"inspect-{unique}", f"done-{unique}", f"open-{unique}"
    asyncio.run(create_topic(bootstrap, topic, 1))
    asyncio.run(write_history(bootstrap, topic, done_id))
    killed = killed_producer(
        {
            "bootstrap": bootstrap,
            "transactional_id": open_id,
            "topic": topic,
            "partition": 0,
            "timeout_ms": 600_000,  # open for the whole test: it ends by being fenced
        },
        tmp_path,
    )
    asyncio.run(write_plain(bootstrap, topic, b"behind"))

    # -- txn dump: every batch labelled as a read_committed reader treats it ----------------
    dump = asyncio.run(inspect(bootstrap, dump_partition, topic, 0))
    assert statuses(dump) == [
        (0, PLAIN),
        (1, PLAIN),
        (2, COMMITTED),
        (3, COMMITTED),
        (4, COMMITTED),
        (5, CONTROL),
        (6, ABORTED),
        (7, ABORTED),
        (8, CONTROL),
        (9, OPEN),  # the killed producer's two records
        (10, OPEN),
        (11, PLAIN),  # written after them: not transactional, but behind the open transaction
    ]
    markers = {d.batch.base_offset: d.batch.marker for d in dump.batches if d.batch.is_control}
    assert markers[5] is not None and markers[5].type == "COMMIT"
    assert markers[8] is not None and markers[8].type == "ABORT"
    assert [d.batch.producer_id for d in dump.batches if d.status == OPEN] == [
        killed["producer_id"]
    ]
    summary = dump.summary
    assert (summary.last_stable_offset, summary.high_watermark) == (9, 12)
    assert [t.first_offset for t in summary.open_transactions] == [9]
    assert summary.records == {COMMITTED: 3, ABORTED: 2, OPEN: 2, PLAIN: 3, CONTROL: 2}
    # What we call visible is exactly what a read_committed consumer returns.
    visible = [r.offset for d in dump.batches if d.visible_now for r in d.batch.records]
    assert visible == asyncio.run(read_committed_offsets(bootstrap, topic, 0)) == [0, 1, 2, 3, 4]

    # ... and Kafka's own DumpLogSegments, run on the broker's segment file, agrees.
    segment = inspected_kafka.node(1).data_dir / f"{topic}-0" / "00000000000000000000.log"
    assert_same_as_kafka(dump, dump_log_segments(segment))

    code, text = run_cli("txn", "dump", topic, "0", "--bootstrap", bootstrap)
    assert code == 0
    assert "LSO 9 < high watermark 12: read_committed readers stop at offset 9" in text
    assert (
        f"producer {killed['producer_id']} (epoch {killed['producer_epoch']}) from offset 9" in text
    )
    assert text.count("not yet (open)") == 1 and text.count("never (aborted)") == 2
    code, text = run_cli(
        "txn",
        "dump",
        topic,
        "0",
        "--from",
        "6",
        "--count",
        "2",
        "--records",
        "--bootstrap",
        bootstrap,
    )
    assert code == 0
    assert "baseOffset: 6 lastOffset: 6" in text and "baseOffset: 8" not in text
    assert "| offset: 7" in text and "keySize: 1 valueSize: 3" in text
    assert "a-1" not in text  # record data is never printed

    # -- txn list: the aborted-last id and the open one ------------------------------------
    code, text = run_cli("txn", "list", "--bootstrap", bootstrap)
    assert code == 0
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:] if line.strip()}
    assert rows[done_id][1] == "CompleteAbort"
    assert rows[open_id][1:4] == [
        "Ongoing",
        str(killed["producer_id"]),
        str(killed["producer_epoch"]),
    ]
    assert rows[open_id][-1] == f"{topic}[0]"
    code, text = run_cli("txn", "list", "--state", "ongoing", "--bootstrap", bootstrap)
    assert open_id in text and done_id not in text
    code, text = run_cli("txn", "list", "--older-than", "1h", "--bootstrap", bootstrap)
    assert open_id not in text and "no transactional ids match" in text

    # -- txn describe: the coordinator's view and its logged history -----------------------
    code, text = run_cli("txn", "describe", done_id, "--bootstrap", bootstrap)
    assert code == 0
    assert (
        "Ongoing -> PrepareCommit -> CompleteCommit -> Ongoing -> PrepareAbort -> "
        "CompleteAbort" in text
    )
    detail = asyncio.run(inspect(bootstrap, describe_transaction, open_id))
    assert detail.current is not None and detail.current.state == "Ongoing"
    assert detail.current.partitions == ((topic, 0),)
    assert [e.state for e in detail.history][-1] == "Ongoing"

    # -- txn hanging: the open transaction is open, not hanging: its coordinator will end it
    found = asyncio.run(inspect(bootstrap, open_transactions, topics=[topic]))
    assert [(t.tp, t.verdict, t.transactional_id) for t in found] == [
        ((topic, 0), RUNNING, open_id)
    ]
    code, text = run_cli("txn", "hanging", "--topic", topic, "--bootstrap", bootstrap)
    assert code == 0 and "HANGING" not in text

    # -- ending the open transaction: a new producer with its id fences it (abort) ----------
    asyncio.run(fence(bootstrap, open_id))
    dump = asyncio.run(inspect(bootstrap, dump_partition, topic, 0))
    assert statuses(dump)[-4:] == [(9, ABORTED), (10, ABORTED), (11, PLAIN), (12, CONTROL)]
    assert dump.summary.last_stable_offset == dump.summary.high_watermark == 13
    detail = asyncio.run(inspect(bootstrap, describe_transaction, open_id))
    # InitProducerId of the new producer: abort the open transaction, then a fresh epoch.
    assert [e.state for e in detail.history] == [
        "Empty",
        "Ongoing",
        "PrepareAbort",
        "CompleteAbort",
        "Empty",
    ]
    assert detail.history[-1].producer_epoch > killed["producer_epoch"]


def _hanging(found: list[PartitionTransaction]) -> list[tuple[tuple[str, int], str]]:
    return [(t.tp, t.verdict) for t in found]


def test_hanging_transaction_found_and_aborted(
    inspected_kafka: EmbeddedKafka, unique: str, tmp_path: Path
) -> None:
    bootstrap = inspected_kafka.bootstrap_servers
    topic, txn_id = f"hang-{unique}", f"hang-{unique}"
    asyncio.run(create_topic(bootstrap, topic, 2))
    killed = killed_producer(
        {
            "bootstrap": bootstrap,
            "transactional_id": txn_id,
            "topic": topic,
            "partition": 0,
            "late_partition": 1,  # written without AddPartitionsToTxn
            "timeout_ms": 2000,
        },
        tmp_path,
    )

    # The coordinator times the transaction out and aborts the partition it knows (0); nothing
    # will ever end the write to partition 1. Kafka offers no event for either: poll.
    async def wait_hanging() -> list[PartitionTransaction]:
        deadline = asyncio.get_running_loop().time() + 120
        async with OpsAdmin(bootstrap) as admin:
            while True:
                found = await open_transactions(admin, topics=[topic])
                if _hanging(found) == [((topic, 1), HANGING)]:
                    return found
                assert asyncio.get_running_loop().time() < deadline, found
                await asyncio.sleep(0.5)

    found = asyncio.run(wait_hanging())
    assert found[0].start_offset == 0
    assert found[0].producer.producer_id == killed["producer_id"]
    assert found[0].transactional_id == txn_id  # the coordinator knows the id, not the write
    dump = asyncio.run(inspect(bootstrap, dump_partition, topic, 0))
    assert statuses(dump) == [(0, ABORTED), (1, ABORTED), (2, CONTROL)]  # the coordinator's
    dump = asyncio.run(inspect(bootstrap, dump_partition, topic, 1))
    assert statuses(dump) == [(0, OPEN)]
    assert (dump.summary.last_stable_offset, dump.summary.high_watermark) == (0, 1)

    code, text = run_cli("txn", "hanging", "--bootstrap", bootstrap)
    assert code == 1, text
    assert f"{topic}[1]" in text and "HANGING" in text and f"{topic}[0]" not in text
    # Refusing the confirmation changes nothing.
    code, text = run_cli("txn", "hanging", "--abort", "--bootstrap", bootstrap, stdin="n\n")
    assert code == 1 and f"left {topic}[1] alone" in text

    # The real command, confirmed on its stdin.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "streams_app",
            "txn",
            "hanging",
            "--abort",
            "--bootstrap",
            bootstrap,
        ],
        input="y\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Abort the transaction of producer {killed['producer_id']}" in proc.stdout
    assert f"aborted: {topic}[1]" in proc.stdout
    assert "last stable offset now 2 (high watermark 2)" in proc.stdout

    dump = asyncio.run(inspect(bootstrap, dump_partition, topic, 1))
    assert statuses(dump) == [(0, ABORTED), (1, CONTROL)]
    assert dump.summary.last_stable_offset == dump.summary.high_watermark == 2
    assert asyncio.run(read_committed_offsets(bootstrap, topic, 1)) == []
    code, text = run_cli("txn", "hanging", "--bootstrap", bootstrap)
    assert code == 0 and "no open transactions" in text
