"""The exactly-once commit's order of requests (``StreamsProducer.commit``), on a recording fake.

Unit test of our own logic: which client call comes first is ours to decide. Offsets must not
be sent before every record of the transaction is acknowledged: a Kafka 4.x broker checks a
transaction's first write to a partition and its offsets through one slot per transactional
id, and the two displace each other (a 100 ms retry each time; BENCHMARKS.md). What the broker
then does with them is tested against the real broker in tests/kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from streams_app.runtime.producer import StreamsProducer
from streams_app.transport.base import GroupMetadata, ProducerConfig, TopicPartition


class RecordingClient:
    """A transactional ProducerClient that logs its calls; sends complete when flushed."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self._unacked: list[asyncio.Future[Any]] = []

    @property
    def transactional(self) -> bool:
        return True

    async def start(self) -> None:
        self.calls.append("start")

    async def stop(self) -> None:
        self.calls.append("stop")

    async def begin_transaction(self) -> None:
        self.calls.append("begin")

    async def send(
        self,
        topic: str,
        *,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[Any]:
        self.calls.append(f"send {topic}")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._unacked.append(future)
        return future

    async def flush(self) -> None:
        self.calls.append("flush")
        for future in self._unacked:
            future.set_result(None)
        self._unacked.clear()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        assert not self._unacked, "offsets sent while records of the transaction are in flight"
        self.calls.append("offsets")

    async def commit_transaction(self) -> None:
        self.calls.append("end_txn")

    async def abort_transaction(self) -> None:
        self.calls.append("abort")


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    @property
    def address(self) -> str:
        return "fake:9092"

    def producer(self, config: ProducerConfig) -> RecordingClient:
        return RecordingClient(self.calls)

    def consumer(self, config: Any) -> Any:
        raise NotImplementedError

    def admin(self) -> Any:
        raise NotImplementedError


async def test_offsets_go_out_after_the_send_gate_and_before_end_txn() -> None:
    transport = RecordingTransport()
    producer = StreamsProducer(transport, ProducerConfig(transactional_id="tx"))  # type: ignore[arg-type]
    await producer.start()
    await producer.send("out", key=b"k", value=b"v")
    await producer.send("changelog", key=b"k", value=b"1", partition=0)
    group = GroupMetadata("g", 3, "member-1")
    await producer.commit({TopicPartition("in", 0): 42}, group)
    assert transport.calls == [
        "start",
        "begin",
        "send out",
        "send changelog",
        "flush",
        "offsets",
        "end_txn",
    ]
