"""Which predecessors a new owner fences (runtime.fencing.fence_predecessors): last committers
and holders of open transactions under the app's ids, when they are not in the group.

Fakes stand in for the consumer, the admin client and the transport: this is our selection
logic only. That the fence reaches the broker and ends the dead worker's transaction is shown
on the real broker by tests/runtime/test_unknown_predecessor.py (a worker that had committed)
and tests/runtime/test_hanging_predecessor.py (one that never committed).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, cast

from streams_app.runtime.fencing import fence_predecessors
from streams_app.runtime.guarantees import is_worker_transactional_id
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


class _Admin:
    def __init__(self, open_ids: list[str] | None) -> None:
        self.open_ids = open_ids
        self.prefixes: list[str] = []

    async def open_transactions(self, prefix: str) -> list[str]:
        self.prefixes.append(prefix)
        if self.open_ids is None:
            raise TransportError("ListTransactions denied")
        return [tid for tid in self.open_ids if tid.startswith(prefix)]


NO_ADMIN = _Admin([])
DEAD = "app-" + "d" * 32
LIVE = "app-" + "a" * 32
ME = "app-" + "b" * 32
NEVER_COMMITTED = "app-" + "c" * 32


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
            _tp(0): CommittedOffset(10, encode_metadata(1, {}, DEAD)),
            _tp(1): CommittedOffset(11, encode_metadata(1, {}, DEAD)),
            _tp(2): CommittedOffset(12, encode_metadata(1, {}, LIVE)),
            _tp(3): CommittedOffset(13, ""),  # at-least-once or Faust metadata: nobody named
            _tp(4): None,  # never committed
        }
    )
    transport = _Transport()
    fenced = await fence_predecessors(
        cast(Any, consumer),
        cast(Any, NO_ADMIN),
        cast(Any, transport),
        [_tp(p) for p in range(5)],
        app_id="app",
        members={LIVE, ME},
        client_id="t",
    )
    assert fenced == [DEAD]
    assert transport.started == [DEAD]  # once, though it committed two partitions
    assert consumer.asked_stable == [False]  # the stable read would wait on its transaction


async def test_nobody_outside_the_group_or_an_unreadable_answer_fences_nothing() -> None:
    transport = _Transport()
    ours = _Consumer({_tp(0): CommittedOffset(1, encode_metadata(1, {}, ME))})
    failing = _Consumer({})
    for consumer in (ours, failing):
        fenced = await fence_predecessors(
            cast(Any, consumer),
            cast(Any, _Admin(None)),
            cast(Any, transport),
            [_tp(0)],
            app_id="app",
            members={ME},
            client_id="t",
        )
        assert fenced == []
    assert transport.started == []


async def test_fences_open_transactions_of_the_apps_ids_outside_the_group_only() -> None:
    admin = _Admin(
        [
            NEVER_COMMITTED,  # died before its first commit: named in no offset's metadata
            DEAD,  # also the last committer: fenced once
            LIVE,  # a member of this generation
            ME,
            "app-v2-" + "e" * 32,  # another app whose id starts with ours
            "app-" + "f" * 31,  # not a process id
            "app-manual-txn",  # someone else's producer
        ]
    )
    consumer = _Consumer({_tp(0): CommittedOffset(5, encode_metadata(1, {}, DEAD))})
    transport = _Transport()
    fenced = await fence_predecessors(
        cast(Any, consumer),
        cast(Any, admin),
        cast(Any, transport),
        [_tp(0)],
        app_id="app",
        members={LIVE, ME},
        client_id="t",
    )
    assert sorted(fenced) == sorted([DEAD, NEVER_COMMITTED])
    assert sorted(transport.started) == sorted([DEAD, NEVER_COMMITTED])
    assert admin.prefixes == ["app-"]


def test_a_worker_transactional_id_is_the_app_id_and_a_process_id_exactly() -> None:
    assert is_worker_transactional_id("app", "app-" + "0123456789abcdef" * 2)
    assert is_worker_transactional_id("a.b", "a.b-" + "f" * 32)
    assert not is_worker_transactional_id("a.b", "aXb-" + "f" * 32)  # the dot is literal
    assert not is_worker_transactional_id("app", "app-v2-" + "f" * 32)
    assert not is_worker_transactional_id("app", "app-" + "F" * 32)
    assert not is_worker_transactional_id("app", "app-" + "f" * 33)
