"""The consumer of a worker whose app reads no topic: timers, tasks, services and channels only.

Faust runs such apps, and so do we. A consumer group is how workers share input partitions;
with no input topic there is nothing to share, so the worker joins no group (none is created on
the broker) and this stands in for the group consumer: it is never assigned anything, and a
poll just waits out its timeout, which paces the worker's loop (timers fire, commits fall due)
as an idle poll would.

What the timers send still commits under exactly-once: a transaction with outputs and no
offsets needs no group (``StreamsProducer.commit``). Every worker of such an app runs every
timer that is not ``on_leader`` (as in Faust); ``on_leader`` timers and tasks need the leader
topic, which is an input, so their apps do join a group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence

from streams_app.transport.base import (
    CommittedOffset,
    GroupMetadata,
    RebalanceListener,
    RecordLike,
    TopicPartition,
)
from streams_app.transport.errors import TransportError


class NoInputs:
    """A :class:`~streams_app.transport.base.ConsumerClient` with no subscription and no group."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def subscribe(self, topics: Collection[str], listener: RebalanceListener) -> None:
        if topics:
            raise TransportError(f"a worker without inputs cannot subscribe to {sorted(topics)}")

    def unsubscribe(self) -> None:
        return None

    def assign(self, partitions: Collection[TopicPartition]) -> None:
        if partitions:
            raise TransportError("a worker without inputs is assigned no partition")

    def assignment(self) -> set[TopicPartition]:
        return set()

    def fetch_ready(self) -> bool:
        return True

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[RecordLike]]:
        await asyncio.sleep(max(0, timeout_ms) / 1000)
        return {}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        raise TransportError(f"a worker without inputs does not read {tp}")

    async def position(self, tp: TopicPartition) -> int:
        raise TransportError(f"a worker without inputs does not read {tp}")

    async def committed_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        return dict.fromkeys(partitions)

    async def committed_offsets_with_metadata(
        self, partitions: Collection[TopicPartition], *, stable: bool = True
    ) -> dict[TopicPartition, CommittedOffset | None]:
        return dict.fromkeys(partitions)

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        if offsets:
            raise TransportError("a worker without inputs has no offsets to commit")

    def fetched_lag(self, tp: TopicPartition) -> int | None:
        return None

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        return None

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        return None

    def group_metadata(self) -> GroupMetadata:
        raise TransportError("a worker without inputs is in no consumer group")

    def highwater(self, tp: TopicPartition) -> int | None:
        return None

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return None

    def partition_hosts(self) -> Mapping[TopicPartition, str]:
        return {}
