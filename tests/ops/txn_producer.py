"""A transactional producer in a process of its own, so a test can SIGKILL it mid-transaction.

    python -m tests.ops.txn_producer '<json config>'

Config: ``bootstrap``, ``transactional_id``, ``topic``, ``partition`` (written inside the
transaction: the coordinator knows it), ``timeout_ms`` (the transaction timeout), ``ready`` (a
file written once the records are on the broker), and optionally ``late_partition``: a partition
written with the same producer id and epoch *without* telling the coordinator, as a produce
request that arrives after its transaction ended did before KIP-890. That write makes a hanging
transaction (on a broker with ``transaction.partition.verification.enable=false``; with
verification on, the broker refuses it with INVALID_TXN_STATE).

The process speaks the protocol itself (InitProducerId, AddPartitionsToTxn, Produce) through
aiokafka's client and request structs, because no client lets a caller skip AddPartitionsToTxn.
After writing, it waits to be killed: the transaction stays open.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.transaction import AddPartitionsToTxnRequest, InitProducerIdRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition

TRANSACTION_COORDINATOR = 1


def batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=None, key=b"k%d" % i, value=value, headers=[])
    return bytes(builder.build())


def check(response: Any, what: str) -> None:
    codes = []
    if hasattr(response, "error_code"):
        codes.append(response.error_code)
    for _topic, parts in getattr(response, "errors", []):
        codes.extend(code for _p, code in parts)
    for _topic, parts in getattr(response, "topics", []):
        codes.extend(part[1] for part in parts)
    for code in codes:
        if code:
            raise for_code(code)(what)


async def run(config: dict[str, Any]) -> None:
    client = AIOKafkaClient(bootstrap_servers=config["bootstrap"])
    await client.bootstrap()
    txn_id, topic = config["transactional_id"], config["topic"]
    deadline = time.monotonic() + 60
    while True:  # the first transactional id of a cluster creates __transaction_state
        try:
            coordinator = await client.coordinator_lookup(TRANSACTION_COORDINATOR, txn_id)
            init = await client.send(
                coordinator, InitProducerIdRequest(txn_id, config["timeout_ms"])
            )
            check(init, "InitProducerId")
            break
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    pid, epoch = init.producer_id, init.producer_epoch
    partition = config["partition"]
    added = await client.send(
        coordinator, AddPartitionsToTxnRequest(txn_id, pid, epoch, [(topic, [partition])])
    )
    check(added, "AddPartitionsToTxn")
    client.add_topic(topic)
    await client.force_metadata_update()
    writes = [(partition, [b"inside-1", b"inside-2"])]
    if config.get("late_partition") is not None:
        writes.append((config["late_partition"], [b"late-1"]))
    for target, values in writes:
        leader = client.cluster.leader_for_partition(TopicPartition(topic, target))
        request = ProduceRequest(
            txn_id, -1, 30_000, [(topic, [(target, batch(pid, epoch, 0, values))])]
        )
        check(await client.send(leader, request), f"Produce to {topic}[{target}]")
    # Written whole, then renamed: the test kills this process as soon as the file exists.
    ready = Path(config["ready"])
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(json.dumps({"producer_id": pid, "producer_epoch": epoch}))
    os.replace(tmp, ready)
    while True:  # hold the transaction open until killed
        time.sleep(3600)


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
