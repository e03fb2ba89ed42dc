"""``txn hanging`` calls a transaction hanging only if the partition's leader still holds it open
after the coordinator was read (ops.transactions.open_transactions).

What the networked chaos run found (CHAOS.md, "What the partitions found"): a leader killed while
its transaction was being committed. The first read (DescribeProducers) still showed the
transaction open, the coordinator read after it said CompleteCommit, and the judge said "hanging,
no marker will come", while the COMMIT marker was already in the log and the leader's last stable
offset far past the transaction. The same happens when DescribeProducers reaches a replica that
is behind (Kafka answers it from any replica's local log). Here the admin is a stand-in for those
answers, in the order they came; the real-broker case of a truly hanging transaction is
tests/ops/test_txn_inspector.py::test_hanging_transaction_found_and_aborted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from streams_app.kafka.ops_admin import ProducerState, TransactionDescription
from streams_app.kafka.txn_protocol import TransactionListing
from streams_app.ops.transactions import HANGING, now_ms, open_transactions

TOPIC = "cnt"
TP = (TOPIC, 1)
PRODUCER = 3000
START = 186342
TXN_ID = "eos-test-1"


def producer(start: int, *, idle_ms: int = 29_000) -> ProducerState:
    return ProducerState(PRODUCER, 163, 476, now_ms() - idle_ms, 7, start)


class Answers:
    """An admin answering from scripted reads: producer states in turn, then a fixed
    coordinator view and last stable offset."""

    def __init__(self, producer_reads: list[list[ProducerState]], stable: int) -> None:
        self.producer_reads = producer_reads
        self.stable = stable
        self.describe_producers_calls = 0

    async def partitions(self, topic: str) -> list[int]:
        return [1]

    async def describe_producers(self, partitions: Collection[Any]) -> dict[Any, Any]:
        read = self.producer_reads[min(self.describe_producers_calls, len(self.producer_reads) - 1)]
        self.describe_producers_calls += 1
        return {TP: read}

    async def broker_config(self, name: str) -> str:
        return "900000"

    async def list_transactions(self, **_: Any) -> tuple[list[TransactionListing], list[int]]:
        return [TransactionListing(TXN_ID, PRODUCER, "CompleteCommit", 2)], []

    async def describe_transactions(self, ids: Collection[str]) -> dict[str, Any]:
        # The transaction ended; the producer is many transactions further on.
        return {
            TXN_ID: TransactionDescription(
                TXN_ID, 2, "CompleteCommit", PRODUCER, 196, 10_000, -1, ()
            )
        }

    async def end_offsets(
        self, partitions: Collection[Any], *, committed: bool = False
    ) -> dict[Any, int]:
        assert committed, "the leader's last stable offset is what shows an open transaction"
        return {TP: self.stable}


def judge(admin: Answers) -> list[tuple[Any, str]]:
    found = asyncio.run(open_transactions(admin, topics=[TOPIC]))  # type: ignore[arg-type]
    return [(t.tp, t.verdict) for t in found]


def test_a_marker_written_between_the_two_reads_is_not_a_hanging_transaction() -> None:
    # Open at the first read; the marker landed before the coordinator was read; gone after.
    admin = Answers([[producer(START)], [producer(-1)]], stable=196_948)
    assert judge(admin) == []
    assert admin.describe_producers_calls == 2


def test_a_replica_behind_its_leader_does_not_make_a_hanging_transaction() -> None:
    # Every DescribeProducers reaches the same stale replica; the leader's LSO is far past.
    admin = Answers([[producer(START)]], stable=196_948)
    assert judge(admin) == []


def test_a_transaction_the_leader_still_holds_open_is_hanging() -> None:
    admin = Answers([[producer(START)]], stable=START)
    assert judge(admin) == [(TP, HANGING)]


def test_a_recent_uncounted_transaction_is_left_unconfirmed_without_a_second_read() -> None:
    admin = Answers([[producer(START, idle_ms=1_000)]], stable=START)
    assert judge(admin) == [(TP, "unconfirmed")]
    assert admin.describe_producers_calls == 1
