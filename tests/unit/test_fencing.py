"""Which last committers a new owner fences (runtime.fencing.fence_last_committers).

Fakes stand in for the consumer and the transport: this is our selection logic only. That
the fence reaches the broker and ends the dead worker's transaction is shown on the real
broker by tests/runtime/test_unknown_predecessor.py.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, cast

from streams_app.runtime.fencing import fence_last_committers
from streams_app.runtime.stream_time import encode_metadata
from streams_app.transport.base import CommittedOffset, ProducerConfig, TopicPartition
from streams_app.transport.errors import TransportError


class _Consumer:
    def __init__(self, found: dict[TopicPartition, CommittedOffset | None]) -> None:
        self.found = found
        self.asked_stable: list[bool] = []

    async def committed_offsets_with_metadata(
        self, partitions: Collection[TopicPartition], *, stable: bool = True
    ) -> dict[TopicPartition, CommittedOffset | None]:
        self.asked_stable.append(stable)
        if not self.found:
            raise TransportError("coordinator not available")
        return {tp: self.found.get(tp) for tp in partitions}


class _Producer:
    def __init__(self, started: list[str], transactional_id: str) -> None:
        self.started = started
        self.transactional_id = transactional_id

    async def start(self) -> None:
        self.started.append(self.transactional_id)

    async def stop(self) -> None:
        pass


class _Transport:
    def __init__(self) -> None:
        self.started: list[str] = []

    def producer(self, config: ProducerConfig) -> _Producer:
        assert config.transactional_id is not None
        return _Producer(self.started, config.transactional_id)


def _tp(partition: int) -> TopicPartition:
    return TopicPartition("in", partition)


async def test_fences_only_committers_outside_the_group_from_the_latest_metadata() -> None:
    consumer = _Consumer(
        {
            _tp(0): CommittedOffset(10, encode_metadata(1, {}, "app-dead")),
            _tp(1): CommittedOffset(11, encode_metadata(1, {}, "app-dead")),
            _tp(2): CommittedOffset(12, encode_metadata(1, {}, "app-live")),
            _tp(3): CommittedOffset(13, ""),  # at-least-once or Faust metadata: nobody named
            _tp(4): None,  # never committed
        }
    )
    transport = _Transport()
    fenced = await fence_last_committers(
        cast(Any, consumer),
        cast(Any, transport),
        [_tp(p) for p in range(5)],
        members={"app-live", "app-me"},
        client_id="t",
    )
    assert fenced == ["app-dead"]
    assert transport.started == ["app-dead"]  # once, though it committed two partitions
    assert consumer.asked_stable == [False]  # the stable read would wait on its transaction


async def test_nobody_outside_the_group_or_an_unreadable_answer_fences_nothing() -> None:
    transport = _Transport()
    ours = _Consumer({_tp(0): CommittedOffset(1, encode_metadata(1, {}, "app-me"))})
    failing = _Consumer({})
    for consumer in (ours, failing):
        fenced = await fence_last_committers(
            cast(Any, consumer), cast(Any, transport), [_tp(0)], members={"app-me"}, client_id="t"
        )
        assert fenced == []
    assert transport.started == []
