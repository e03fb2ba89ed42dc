"""The global tables' background reader never stores an offset past a record it did not apply.

A fake consumer (our own reader logic; the Kafka side of global tables is covered on the real
broker in tests/joins): one changelog partition as a list of records, read from a position
that ``getmany`` advances and ``seek`` sets, as aiokafka's does (a seek drops what was
fetched from the old position).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from streams_app.runtime.global_tables import GlobalTables
from streams_app.state.memory import MemoryStore
from streams_app.transport.base import TopicPartition
from tests.runtime.helpers import wait_until

TOPIC = "app-lookup-changelog"
TP = TopicPartition(TOPIC, 0)


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    topic: str = TOPIC
    partition: int = 0
    timestamp: int = 0
    headers: Sequence[tuple[str, bytes]] = ()


@dataclass
class FakeConsumer:
    log: list[Record] = field(default_factory=list)
    position: int = 0
    #: Offsets sought to, in order.
    seeks: list[int] = field(default_factory=list)

    def assign(self, partitions: Collection[TopicPartition]) -> None:
        assert set(partitions) == {TP}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.position = offset
        self.seeks.append(offset)

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[Record]]:
        records = self.log[self.position :]
        if not records:
            await asyncio.sleep(timeout_ms / 1000)  # the fetch's wait for data
            return {}
        self.position = records[-1].offset + 1
        return {TP: records}


@dataclass(frozen=True)
class Table:
    name: str = "lookup"
    source: None = None  # a plain GlobalTable: its changelog is written by tasks, not filtered


def record(offset: int) -> Record:
    return Record(offset, f"k{offset}".encode(), f"v{offset}".encode())


async def test_a_partition_no_longer_owned_is_read_again_from_its_stores_offset() -> None:
    """A local task owned the partition (the reader fetched and skipped its records, to 5);
    its last commit, of records 2-4, had an unknown outcome and did commit, so the task was
    closed with its store still at 2 (``close_all``). Before the next assignment repositions
    the reader, another worker commits record 5. The reader must apply 2-5, not store 6 with 5
    alone (records 2-4 then never applied)."""
    store = MemoryStore("lookup")
    part = store.partition(0)
    part.write({b"k0": b"v0", b"k1": b"v1"}, 2)
    consumer = FakeConsumer([record(offset) for offset in range(5)])
    owned = {"yes": True}
    tables = GlobalTables(
        [Table()],  # type: ignore[list-item]
        {"lookup": store},
        {"lookup": TOPIC},
        {"lookup": 1},
        owned=lambda tp: owned["yes"],
    )
    tables._consumer = consumer  # type: ignore[assignment]
    tables.reposition()
    reader = asyncio.ensure_future(tables._read())
    try:
        await wait_until(lambda: consumer.position == 5, timeout=10)
        assert part.changelog_offset == 2  # the task's, untouched by the reader

        owned["yes"] = False  # close_all: no local task; no reposition yet
        consumer.log.append(record(5))
        await wait_until(lambda: part.changelog_offset == 6, timeout=10)
        assert dict(part.items()) == {f"k{o}".encode(): f"v{o}".encode() for o in range(6)}
        assert consumer.seeks == [2, 2]  # reposition, then back to the store's offset
        assert tables.applied == 4
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def test_a_partition_never_owned_is_applied_without_going_back() -> None:
    store = MemoryStore("lookup")
    part = store.partition(0)
    consumer = FakeConsumer([record(offset) for offset in range(3)])
    tables = GlobalTables(
        [Table()],  # type: ignore[list-item]
        {"lookup": store},
        {"lookup": TOPIC},
        {"lookup": 1},
        owned=lambda tp: False,
    )
    tables._consumer = consumer  # type: ignore[assignment]
    tables.reposition()
    reader = asyncio.ensure_future(tables._read())
    try:
        await wait_until(lambda: part.changelog_offset == 3, timeout=10)
        consumer.log.append(record(3))
        await wait_until(lambda: part.changelog_offset == 4, timeout=10)
        assert dict(part.items()) == {f"k{o}".encode(): f"v{o}".encode() for o in range(4)}
        assert consumer.seeks == [0]  # the reposition only
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
