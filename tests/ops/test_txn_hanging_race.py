"""``txn hanging`` on a real broker: a transaction that commits between the inspector's two reads
is not called hanging.

What the networked chaos run met (CHAOS.md, "What the partitions found"). The inspector reads
the partition's producer state first and the coordinator after. A worker that lags its input
writes records whose timestamps (CreateTime) are old, so a transaction caught open by the first
read looked idle past its timeout. When the coordinator, read a moment later, had completed it,
the old judgement said "hanging, no marker will come", although the COMMIT marker was already in
the log and the last stable offset past it. Here the commit is made to land between the two
reads, by committing just before the coordinator is asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.transactions import OPEN_STATES, now_ms, open_transactions
from tests.ops.test_txn_inspector import create_topic

pytestmark = pytest.mark.kafka


async def race(bootstrap: str, topic: str, txn_id: str) -> list[Any]:
    await create_topic(bootstrap, topic, 1)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=txn_id, transaction_timeout_ms=10_000
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        # A record a minute old, as a lagging worker writes them: "idle" past the 10 s timeout.
        await producer.send_and_wait(topic, b"v", partition=0, timestamp_ms=now_ms() - 60_000)
        async with OpsAdmin(bootstrap) as admin:
            describe = admin.describe_transactions
            committed: list[bool] = []

            async def commit_then_describe(ids: Collection[str]) -> Any:
                await producer.commit_transaction()
                committed.append(True)
                # EndTxn answers once the commit is decided; the markers follow. The race is
                # with a coordinator that has written them all: wait for CompleteCommit.
                deadline = asyncio.get_running_loop().time() + 30
                while True:
                    found = await describe(ids)
                    if all(d is not None and d.state not in OPEN_STATES for d in found.values()):
                        return found
                    assert asyncio.get_running_loop().time() < deadline, found
                    await asyncio.sleep(0.05)  # no event for the coordinator's markers: poll

            admin.describe_transactions = commit_then_describe  # type: ignore[method-assign,assignment]
            found = await open_transactions(admin, topics=[topic])
            assert committed == [True], "the producer state was read with the transaction open"
            return found
    finally:
        await producer.stop()


def test_a_transaction_committed_between_the_two_reads_is_not_hanging(
    bootstrap_servers: str, unique: str
) -> None:
    found = asyncio.run(race(bootstrap_servers, f"race-{unique}", f"race-{unique}"))
    assert [(t.tp, t.verdict, t.reason) for t in found] == []
