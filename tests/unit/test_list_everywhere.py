"""ListTransactions on every broker at once (kafka.txn_protocol.list_everywhere): what each
broker answered, and what the ones that listed nothing answered instead. The real-broker cases
are tests/ops/test_txn_inspector.py and tests/runtime/test_hanging_predecessor.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import aiokafka.errors as aerrors

from streams_app.kafka.txn_protocol import (
    ListTransactionsRequest,
    TransactionListing,
    list_everywhere,
)

COORDINATOR_LOAD_IN_PROGRESS = 14


def _answer(error_code: int, *ids: str) -> SimpleNamespace:
    return SimpleNamespace(
        error_code=error_code,
        transaction_states=[(txn_id, 100 + i, "Ongoing", {}) for i, txn_id in enumerate(ids)],
    )


async def test_answers_errors_failures_and_a_frozen_broker_are_told_apart() -> None:
    frozen = asyncio.Event()
    asked: dict[int, ListTransactionsRequest] = {}

    async def send(node: int, request: ListTransactionsRequest) -> Any:
        asked[node] = request
        if node == 1:
            return _answer(0, "app-a", "app-b")
        if node == 2:
            return _answer(COORDINATOR_LOAD_IN_PROGRESS)
        if node == 3:
            raise aerrors.KafkaConnectionError("connection refused")
        await frozen.wait()  # node 4 never answers
        raise AssertionError("unreachable")

    listings, missing = await list_everywhere(send, [1, 2, 3, 4], states=("Ongoing",), timeout=0.05)

    assert listings == [
        TransactionListing("app-a", 100, "Ongoing", 1),
        TransactionListing("app-b", 101, "Ongoing", 1),
    ]
    assert missing[2] == COORDINATOR_LOAD_IN_PROGRESS
    assert isinstance(missing[3], aerrors.KafkaConnectionError)
    assert isinstance(missing[4], TimeoutError)
    assert sorted(missing) == [2, 3, 4]
    # Every broker was asked, each with the caller's filter.
    assert sorted(asked) == [1, 2, 3, 4]
    assert all(request.states == ["Ongoing"] for request in asked.values())


async def test_brokers_are_asked_together_not_one_after_another() -> None:
    """Two brokers that each take a while answer in the time of one: the second is asked
    before the first has answered."""
    started: list[int] = []
    both_asked = asyncio.Event()

    async def send(node: int, request: ListTransactionsRequest) -> Any:
        started.append(node)
        if len(started) == 2:
            both_asked.set()
        await both_asked.wait()
        return _answer(0, f"app-{node}")

    listings, missing = await list_everywhere(send, [1, 2], timeout=5.0)

    assert missing == {}
    assert sorted(t.transactional_id for t in listings) == ["app-1", "app-2"]
