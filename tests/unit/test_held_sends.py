"""Sends held while a commit is in flight (``StreamsProducer.hold`` / ``release``), on the
recording fake of test_commit_order: unit test of our own ordering logic. That the held
records land in the next transaction, exactly once, is tested against the real broker in
tests/runtime/test_process_during_commit.py."""

from __future__ import annotations

import asyncio

import pytest

from streams_app.runtime.producer import HeldSend, StreamsProducer
from streams_app.transport.base import GroupMetadata, ProducerConfig, TopicPartition
from tests.unit.test_commit_order import RecordingTransport

GROUP = GroupMetadata("g", 3, "member-1")


async def _producer() -> tuple[StreamsProducer, RecordingTransport]:
    transport = RecordingTransport()
    producer = StreamsProducer(transport, ProducerConfig(transactional_id="tx"))  # type: ignore[arg-type]
    await producer.start()
    return producer, transport


async def test_held_sends_join_the_next_transaction_after_end_txn_in_order() -> None:
    producer, transport = await _producer()
    await producer.send("out", key=b"k", value=b"1")
    producer.hold()
    committing = asyncio.ensure_future(producer.commit({TopicPartition("in", 0): 1}, GROUP))
    held = [await producer.send("out", key=b"k", value=b"%d" % n) for n in (2, 3)]
    assert all(isinstance(h, HeldSend) and not h.done() for h in held)
    with pytest.raises(asyncio.InvalidStateError):
        held[0].result()
    await committing
    # Nothing of the held records went out before EndTxn.
    assert transport.calls[-1] == "end_txn" and transport.calls.count("send out") == 1
    waiter = asyncio.ensure_future(_await(held[1]))
    await producer.release()
    assert transport.calls[-3:] == ["begin", "send out", "send out"]
    await producer.commit({TopicPartition("in", 0): 3}, GROUP)
    await waiter  # resolved by the second transaction's flush
    assert all(h.done() and not h.cancelled() for h in held)


async def _await(future: HeldSend) -> object:
    return await future


async def test_an_abort_drops_the_held_sends() -> None:
    producer, transport = await _producer()
    producer.hold()
    held = await producer.send("out", key=b"k", value=b"1")
    waiter = asyncio.ensure_future(_await(held))  # type: ignore[arg-type]
    await producer.abort()
    assert held.cancelled() and not producer.holding
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await producer.release()  # nothing left to release
    assert "send out" not in transport.calls


async def test_dead_letters_sent_while_a_commit_is_in_flight_count_with_the_next_one() -> None:
    from streams_app.runtime.dead_letters import DeadLetter, DeadLetters

    producer, _ = await _producer()
    committed: list[str] = []
    letters = DeadLetters(producer, {"in": "in.dlq"}, {}, on_committed=committed.append)

    def letter(offset: int) -> DeadLetter:
        return DeadLetter("in", 0, offset, b"k", b"v", [], ValueError("bad"), "agent")

    await letters.send(letter(1))
    letters.seal()  # a commit goes into flight carrying the first letter
    producer.hold()
    await letters.send(letter(2))  # processed meanwhile: the next transaction's
    letters.committed()
    assert (letters.committed_count, committed) == (1, ["in"])
    letters.committed()  # the next commit carries the second
    assert letters.committed_count == 2


# -- held batches: the batch path while a commit is in flight (in-memory broker) -------------


async def _batching_producer(**config: object) -> tuple[StreamsProducer, object]:
    from streams_app.testing.memory.broker import MemoryKafka

    kafka = MemoryKafka()
    kafka.create_topic("out", 1)
    kafka.create_topic("in", 1)
    producer = StreamsProducer(
        kafka.transport(),
        ProducerConfig(transactional_id="tx", **config),  # type: ignore[arg-type]
    )
    await producer.start()
    await producer.maybe_begin()
    return producer, kafka


def _values(kafka: object, *, read_committed: bool) -> list[bytes]:
    return [r.value for r in kafka.read("out", read_committed=read_committed)]  # type: ignore[attr-defined]


async def test_sends_while_holding_go_into_held_batches_shipped_after_end_txn_in_order() -> None:
    from streams_app.runtime.send_futures import RecordFuture

    # Small batches: some held batches fill up while holding, and wait sealed.
    producer, kafka = await _batching_producer(max_batch_size=1024)
    assert producer.send_nowait("out", b"k", b"0", None, None, None) is not None
    producer.hold()
    committing = asyncio.ensure_future(producer.commit({}, GROUP))
    small = [
        producer.send_nowait("out", b"k", b"%d" % n + b"." * 60, None, None, None)
        for n in range(1, 40)
    ]
    assert all(isinstance(f, RecordFuture) and not f.done() for f in small)
    # A value too large for the batch path is held as it was; every send after it too, so
    # that release() keeps the order.
    large = await producer.send("out", key=b"k", value=b"L" * 4096)
    after = producer.send_nowait("out", b"k", b"after", None, None, None)
    assert isinstance(large, HeldSend) and isinstance(after, HeldSend)
    await committing
    # Nothing held reached the broker before EndTxn, not even uncommitted.
    assert _values(kafka, read_committed=False) == [b"0"]
    await producer.release()
    assert not producer.holding
    await producer.commit({}, GROUP)
    expected = [b"0", *(b"%d" % n + b"." * 60 for n in range(1, 40)), b"L" * 4096, b"after"]
    assert _values(kafka, read_committed=True) == expected
    assert all(f.done() and not f.cancelled() for f in [*small, large, after])  # type: ignore[union-attr]
    # Each record's own offset, read from its batch's first.
    offsets = [r.offset for r in kafka.read("out")][1:40]  # type: ignore[attr-defined]
    assert [f.result().offset for f in small] == offsets  # type: ignore[union-attr]


async def test_an_abort_while_holding_drops_the_held_batches() -> None:
    producer, kafka = await _batching_producer()
    producer.hold()
    held = producer.send_nowait("out", b"k", b"1", None, None, None)
    assert held is not None
    waiter = asyncio.ensure_future(_await(held))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    producer.drop_held()
    await producer.abort()
    assert held.cancelled() and not producer.holding and not producer.lingering
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await producer.release()  # nothing left to release
    await producer.send("out", key=b"k", value=b"2")
    await producer.commit({}, GROUP)
    assert _values(kafka, read_committed=False) == [b"2"]


async def test_the_linger_does_not_ship_held_batches() -> None:
    producer, kafka = await _batching_producer(linger_ms=0)
    producer.hold()
    assert producer.send_nowait("out", b"k", b"1", None, None, None) is not None
    producer.send_lingering()
    for _ in range(5):
        await asyncio.sleep(0.001)
    assert _values(kafka, read_committed=False) == []
    await producer.release()
    await producer.commit({}, GROUP)
    assert _values(kafka, read_committed=True) == [b"1"]


async def test_a_send_made_while_release_re_sends_does_not_overtake_the_held_ones() -> None:
    """release() re-sends a held send that cannot take the batch path with an ``await``; a
    record sent meanwhile (a timer, an agent fed from outside processing) must queue behind
    the held ones, not reach the partition before them."""
    producer, kafka = await _batching_producer(max_batch_size=1024)
    client = producer.client
    real_send = client.send
    sending_large = asyncio.Event()
    go_on = asyncio.Event()

    async def gated_send(topic: str, **kwargs: object) -> object:
        if kwargs.get("value") == b"L1" * 2048:
            sending_large.set()
            await go_on.wait()
        return await real_send(topic, **kwargs)

    client.send = gated_send  # type: ignore[method-assign]
    producer.hold()
    committing = asyncio.ensure_future(producer.commit({}, GROUP))
    first = await producer.send("out", key=b"k", value=b"L1" * 2048)
    second = await producer.send("out", key=b"k", value=b"L2" * 2048)
    assert isinstance(first, HeldSend) and isinstance(second, HeldSend)
    await committing
    releasing = asyncio.ensure_future(producer.release())
    await sending_large.wait()  # release() is re-sending the first held send
    late = producer.send_nowait("out", b"k", b"late", None, None, None)
    assert isinstance(late, HeldSend)  # still holding: it queues behind the held ones
    go_on.set()
    await releasing
    assert not producer.holding
    await producer.commit({}, GROUP)
    assert _values(kafka, read_committed=True) == [b"L1" * 2048, b"L2" * 2048, b"late"]
    assert all(f.done() and not f.cancelled() for f in (first, second, late))
