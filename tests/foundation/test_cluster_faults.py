"""A broker dies amid transactional writes: committed data survives, aborted data never shows.

Runs on the embedded 3-node cluster (replication 3, min.insync.replicas=2), so losing one node
loses nothing that was acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from streams_app.broker import EmbeddedKafka
from tests.foundation.kafka_helpers import create_topic, read_all

PARTITIONS = 3
TRANSACTIONS = 60
PER_TRANSACTION = 20


@pytest.mark.cluster
async def test_committed_writes_survive_a_broker_kill(
    kafka_cluster: EmbeddedKafka, unique: str
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = f"cluster-txn-{unique}"
    await create_topic(bootstrap, topic, partitions=PARTITIONS, replication=3)

    committed: list[list[bytes]] = []
    aborted: list[list[bytes]] = []
    unknown: list[list[bytes]] = []  # the commit call failed: it may or may not have committed

    def new_producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=f"tx-{unique}",
            request_timeout_ms=15000,
            transaction_timeout_ms=20000,
        )

    producer = new_producer()
    await producer.start()
    killed = asyncio.Event()
    restarted = asyncio.Event()

    async def fault() -> None:
        # Kill the node that leads partition 0 once a third of the transactions are done.
        while len(committed) < TRANSACTIONS // 3:
            await asyncio.sleep(0.01)
        leader = producer.client.cluster.leader_for_partition(TopicPartition(topic, 0))
        assert leader is not None and leader >= 0
        await asyncio.to_thread(kafka_cluster.kill_node, leader)
        killed.set()
        # Restart it after another third, while the writes go on.
        while len(committed) + len(unknown) < 2 * TRANSACTIONS // 3:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(kafka_cluster.start_node, leader)
        restarted.set()

    fault_task = asyncio.create_task(fault())
    try:
        for n in range(TRANSACTIONS):
            values = [f"{n}-{i}".encode() for i in range(PER_TRANSACTION)]
            commit = n % 3 != 2
            try:
                await producer.begin_transaction()
                futures = [
                    await producer.send(topic, value, partition=i % PARTITIONS)
                    for i, value in enumerate(values)
                ]
                await asyncio.gather(*futures)
                if commit:
                    await producer.commit_transaction()
                    committed.append(values)
                else:
                    await producer.abort_transaction()
                    aborted.append(values)
            except KafkaError:
                # A producer that failed mid-transaction is replaced: the new one's
                # InitProducerId fences the old epoch and aborts what it left open.
                (unknown if commit else aborted).append(values)
                with contextlib.suppress(Exception):
                    await producer.stop()
                producer = new_producer()
                await producer.start()
        await asyncio.wait_for(fault_task, 120)
    finally:
        fault_task.cancel()
        await producer.stop()

    assert killed.is_set() and restarted.is_set()
    seen = await read_all(bootstrap, topic, "read_committed", partitions=PARTITIONS)
    seen_set = set(seen)
    assert len(seen) == len(seen_set), "a committed record was read twice"
    for values in committed:
        assert set(values) <= seen_set, f"lost committed records of transaction {values[0]!r}"
    for values in aborted:
        assert not set(values) & seen_set, f"read records of aborted transaction {values[0]!r}"
    for values in unknown:  # atomic: all of it or none of it
        assert set(values) <= seen_set or not set(values) & seen_set
    expected = {v for t in committed for v in t}
    assert seen_set - expected <= {v for t in unknown for v in t}
    assert len(committed) >= TRANSACTIONS // 2
