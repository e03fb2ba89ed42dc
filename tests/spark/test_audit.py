"""The audit job finds seeded duplicates, gaps and aborted reads in an at-least-once output, and
nothing wrong in a transactional one. Real broker, local Spark."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaProducer
from pyspark.sql import SparkSession

from streams_app.lineage import lineage_headers
from streams_app.spark import lineage as former_lineage
from streams_app.spark.audit import PartitionAudit, audit, format_report
from tests.spark.support import create_topic, run_async, transactional_producer

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

INPUTS = 30  # input i goes to partition i % 2, at offset i // 2


def by_partition(rows: Sequence[PartitionAudit]) -> dict[int | None, PartitionAudit]:
    return {row.partition: row for row in rows}


def test_audit_finds_duplicates_and_gaps_only_where_they_are(
    spark: SparkSession, bootstrap_servers: str, unique: str
) -> None:
    source, at_least_once, exactly_once = (
        f"orders-{unique}",
        f"echo-alo-{unique}",
        f"echo-eos-{unique}",
    )

    async def produce() -> None:
        for topic in (source, at_least_once, exactly_once):
            await create_topic(bootstrap_servers, topic, partitions=2)
        plain = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
        txn = transactional_producer(bootstrap_servers, f"tx-{unique}")
        await plain.start()
        await txn.start()
        try:
            for i in range(INPUTS):
                await plain.send_and_wait(source, f"in-{i}".encode(), partition=i % 2)
            # An input record of an aborted transaction, at partition 0 offset 15.
            await txn.begin_transaction()
            await txn.send_and_wait(source, b"in-aborted", partition=0)
            await txn.abort_transaction()

            async def echo(
                producer: AIOKafkaProducer, topic: str, partition: int, offset: int
            ) -> None:
                # Both formats in one topic: the compact header, and on odd offsets the two
                # split headers older workers (and the former spark.lineage builder) wrote.
                headers = (
                    former_lineage.lineage_headers(partition, offset)
                    if offset % 2
                    else lineage_headers(source, partition, offset)
                )
                value = f"out-{partition}-{offset}".encode()
                await producer.send(topic, value, partition=partition, headers=headers)

            # At-least-once with retries: re-sent records, skipped records, a tail not reached.
            skipped = {10, 21, 27, 29}
            resent = [4, 8, 8, 7]
            for i in range(INPUTS):
                if i not in skipped:
                    await echo(plain, at_least_once, i % 2, i // 2)
            for i in resent:
                await echo(plain, at_least_once, i % 2, i // 2)
            await echo(plain, at_least_once, 0, 15)  # read the aborted input record
            await echo(plain, at_least_once, 1, 99)  # names an input record that never existed
            await plain.send(at_least_once, b"no-lineage", partition=0)
            await plain.send(at_least_once, b"no-lineage", partition=1)
            bad = [("src", b"%s:x:1" % source.encode())]  # a partition that is no number
            await plain.send(at_least_once, b"bad-lineage", partition=1, headers=bad)
            await plain.flush()

            # Exactly-once: transactions of 5; one aborts and its inputs are redone.
            for start in range(0, INPUTS, 5):
                batch = range(start, start + 5)
                if start == 10:
                    await txn.begin_transaction()
                    for i in batch:
                        await echo(txn, exactly_once, i % 2, i // 2)
                    await txn.abort_transaction()
                await txn.begin_transaction()
                for i in batch:
                    await echo(txn, exactly_once, i % 2, i // 2)
                await txn.commit_transaction()
        finally:
            await plain.stop()
            await txn.stop()

    run_async(produce())

    eos = audit(spark, bootstrap_servers, source, exactly_once)
    print(format_report(eos))
    assert [row.partition for row in eos] == [0, 1]
    assert all(row.exactly_once for row in eos), format_report(eos)
    assert all(row.input_records == row.outputs == 15 for row in eos)
    # Inputs 10..14 were first written in the aborted transaction: 10, 12, 14 -> p0; 11, 13 -> p1.
    assert [row.aborted_outputs for row in eos] == [3, 2]

    alo = audit(spark, bootstrap_servers, source, at_least_once)
    print(format_report(alo))
    rows = by_partition(alo)
    assert set(rows) == {None, 0, 1}
    assert not any(row.exactly_once for row in alo)
    p0, p1, unattributed = rows[0], rows[1], rows[None]
    assert (p0.input_records, p0.outputs) == (15, 18)
    assert (p0.duplicates, p0.first_duplicate) == (3, 2)  # input 4 once more, input 8 twice more
    assert (p0.missing, p0.gaps, p0.unprocessed, p0.first_gap) == (1, 1, 0, 5)
    assert (p0.aborted_reads, p0.unknown_sources, p0.aborted_outputs) == (1, 0, 0)
    assert (p1.input_records, p1.outputs) == (15, 14)
    assert (p1.duplicates, p1.first_duplicate) == (1, 3)
    assert (p1.missing, p1.gaps, p1.unprocessed, p1.first_gap) == (3, 1, 2, 10)
    assert (p1.aborted_reads, p1.unknown_sources) == (0, 1)
    assert (unattributed.outputs, unattributed.unknown_sources) == (3, 3)
    assert unattributed.duplicates == 0
