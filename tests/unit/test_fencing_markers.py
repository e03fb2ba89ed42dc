"""The fence of a departed worker's transactional id checks what that worker had ongoing.

Unit test of our own logic, on a fake producer: the fence asks the coordinator (before its
InitProducerId) which partitions the departed worker's transaction was ongoing on, and once
the fence has aborted it, asks those partitions whether the abort's marker was written (Kafka
skips it on a partition without a leader). The broker's side is tested on a real cluster in
tests/runtime/test_skipped_marker.py.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import pytest

from streams_app.runtime.fencing import fence_transactional_ids
from streams_app.transport.base import LeftOpen, LeftOpenCheck, ProducerConfig, TopicPartition

P1, P2 = TopicPartition("app-counts-changelog", 1), TopicPartition("out", 0)


class _Fencer:
    """A LeftoverAbortingProducerClient whose calls are logged in order."""

    transactional = True

    def __init__(self, calls: list[str], ongoing: list[LeftOpen], answer: LeftOpenCheck) -> None:
        self.calls, self.ongoing, self.answer = calls, ongoing, answer

    async def left_open_before_start(self, *, request_timeout_ms: int) -> list[LeftOpen]:
        self.calls.append("describe")
        return self.ongoing

    async def start(self) -> None:
        self.calls.append("init_producer_id")

    async def stop(self) -> None:
        self.calls.append("stop")

    async def abort_left_open(
        self, left: Collection[LeftOpen], *, request_timeout_ms: int
    ) -> LeftOpenCheck:
        self.calls.append(f"check {sorted(e.tp for e in left)}")
        return self.answer

    def producer_identity(self) -> tuple[int, int] | None:
        return 9, 4

    async def leaderless(self, partitions: Collection[TopicPartition]) -> set[TopicPartition]:
        return set()

    # The rest of ProducerClient: never called by a fence.
    async def send(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("a fence sends nothing")

    async def flush(self) -> None:
        raise AssertionError("a fence sends nothing")

    async def begin_transaction(self) -> None:
        raise AssertionError("a fence begins nothing")

    async def send_offsets_to_transaction(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a fence commits nothing")

    async def commit_transaction(self) -> None:
        raise AssertionError("a fence commits nothing")

    async def abort_transaction(self) -> None:
        raise AssertionError("a fence aborts through InitProducerId")


class _Transport:
    def __init__(self, ongoing: list[LeftOpen], answer: LeftOpenCheck) -> None:
        self.calls: list[str] = []
        self.ongoing, self.answer = ongoing, answer

    def producer(self, config: ProducerConfig) -> _Fencer:
        return _Fencer(self.calls, self.ongoing, self.answer)


async def test_the_partitions_of_the_aborted_transaction_are_checked_after_the_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ongoing = [LeftOpen(P1, 9, 3), LeftOpen(P2, 9, 3)]
    transport = _Transport(
        ongoing,
        LeftOpenCheck(aborted={ongoing[0]: 120}, unanswered={ongoing[1]: "no leader"}),
    )
    with caplog.at_level(logging.WARNING, logger="streams_app.runtime.fencing"):
        fenced = await fence_transactional_ids(transport, ["app-w1"], client_id="c")  # type: ignore[arg-type]
    assert fenced == ["app-w1"]
    assert transport.calls == [
        "describe",  # before InitProducerId: after it the coordinator has forgotten them
        "init_producer_id",
        f"check {[P1, P2]}",
        "stop",
    ]
    text = caplog.text
    assert "app-counts-changelog[1] from offset 120" in text and "aborted it here" in text
    assert "could not check out[0]" in text and "txn hanging --abort" in text


async def test_nothing_ongoing_nothing_checked() -> None:
    transport = _Transport([], LeftOpenCheck())
    assert await fence_transactional_ids(transport, ["app-w1"], client_id="c") == ["app-w1"]  # type: ignore[arg-type]
    assert transport.calls == ["describe", "init_producer_id", "stop"]
