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
