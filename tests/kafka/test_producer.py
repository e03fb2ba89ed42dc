"""The KIP-447 transactional producer against the real broker."""

from __future__ import annotations

import aiokafka.errors as aerrors
import pytest
from aiokafka import TopicPartition

from streams_app.kafka import (
    InvalidGroupMetadataError,
    OffsetCommitFencedError,
    ProducerUnusableError,
    TransactionSendFailedError,
)
from streams_app.transport.base import GroupMetadata, TopicSpec
from tests.kafka.helpers import (
    create_topics,
    eventually,
    joined,
    member,
    no_open_transaction,
    read_committed,
    transactional,
)


async def test_offsets_and_records_commit_atomically(bootstrap_servers: str, unique: str) -> None:
    source, sink, group = f"in-{unique}", f"out-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 2, 1), TopicSpec(sink, 1, 1))
    in0, in1, out = TopicPartition(source, 0), TopicPartition(source, 1), TopicPartition(sink, 0)
    consumer = member(bootstrap_servers, group)
    producer = transactional(bootstrap_servers, f"tx-{unique}")
    await consumer.start()
    await producer.start()
    try:
        await joined(consumer, [source])
        membership = consumer.group_metadata()
        assert membership.is_valid and membership.group_id == group

        await producer.begin_transaction()
        for value in (b"a", b"b", b"c"):
            await producer.send(sink, value)
        await producer.send_offsets_to_transaction({in0: 3, in1: 5}, membership)
        await producer.commit_transaction()

        assert await read_committed(bootstrap_servers, out) == [b"a", b"b", b"c"]
        assert await consumer.committed_offsets([in0, in1]) == {in0: 3, in1: 5}

        # An aborted transaction changes neither records nor offsets.
        await producer.begin_transaction()
        await producer.send(sink, b"aborted")
        await producer.send_offsets_to_transaction({in0: 9}, membership)
        await producer.abort_transaction()
        assert await consumer.committed_offsets([in0, in1]) == {in0: 3, in1: 5}
        assert await read_committed(bootstrap_servers, out) == [b"a", b"b", b"c"]
        await no_open_transaction(bootstrap_servers, out)
    finally:
        await producer.stop()
        await consumer.stop()


async def test_a_zombie_is_fenced_by_the_group_generation(
    bootstrap_servers: str, unique: str
) -> None:
    source, sink, group = f"in-{unique}", f"out-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 2, 1), TopicSpec(sink, 1, 1))
    in0, in1, out = TopicPartition(source, 0), TopicPartition(source, 1), TopicPartition(sink, 0)
    a, b = member(bootstrap_servers, group), member(bootstrap_servers, group)
    zombie = transactional(bootstrap_servers, f"tx-a-{unique}")
    await a.start()
    await b.start()
    await zombie.start()
    try:
        await joined(a, [source])
        snapshot = a.group_metadata()
        assert a.assignment() == {in0, in1}

        # B joins: a rebalance moves the group to the next generation; A's snapshot is stale.
        await joined(b, [source])
        await eventually(
            lambda: (
                a.group_metadata().generation_id > snapshot.generation_id
                and len(a.assignment()) == 1
            ),
            what="A to rejoin in the next generation",
        )

        await zombie.begin_transaction()
        await zombie.send(sink, b"zombie")
        with pytest.raises(OffsetCommitFencedError) as info:
            await zombie.send_offsets_to_transaction({in0: 5, in1: 5}, snapshot)
        assert info.value.error is aerrors.IllegalGenerationError
        with pytest.raises(OffsetCommitFencedError):
            await zombie.commit_transaction()  # the transaction can only be aborted now
        await zombie.abort_transaction()

        # The abort really reached the broker: no transaction is left open on the output.
        await no_open_transaction(bootstrap_servers, out)
        assert await read_committed(bootstrap_servers, out) == []
        assert await b.committed_offsets([in0, in1]) == {in0: None, in1: None}

        # The same producer goes on under the current membership; the zombie record stays
        # aborted (aiokafka's own abort would leave it in an open transaction that this
        # next commit would commit).
        await zombie.begin_transaction()
        await zombie.send(sink, b"current")
        (mine,) = a.assignment()
        await zombie.send_offsets_to_transaction({mine: 1}, a.group_metadata())
        await zombie.commit_transaction()
        assert await read_committed(bootstrap_servers, out) == [b"current"]
        assert (await b.committed_offsets([mine]))[mine] == 1

        # A member that left the group: UNKNOWN_MEMBER_ID, also abortable.
        last = a.group_metadata()
        await a.stop()
        await eventually(lambda: b.assignment() == {in0, in1}, what="B to take over")
        await zombie.begin_transaction()
        await zombie.send(sink, b"gone")
        with pytest.raises(OffsetCommitFencedError) as info:
            await zombie.send_offsets_to_transaction({in0: 7}, last)
        assert info.value.error is aerrors.UnknownMemberIdError
        await zombie.abort_transaction()
        assert await read_committed(bootstrap_servers, out) == [b"current"]
        assert (await b.committed_offsets([in0]))[in0] != 7
    finally:
        await zombie.stop()
        await b.stop()
        await a.stop()


async def test_offsets_without_a_valid_membership_are_refused_before_sending(
    bootstrap_servers: str, unique: str
) -> None:
    sink = f"out-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(sink, 1, 1))
    producer = transactional(bootstrap_servers, f"tx-{unique}")
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send(sink, b"x")
        with pytest.raises(InvalidGroupMetadataError):
            await producer.send_offsets_to_transaction(
                {TopicPartition(sink, 0): 1}, GroupMetadata(f"g-{unique}", -1, "")
            )
        await producer.abort_transaction()
        await no_open_transaction(bootstrap_servers, TopicPartition(sink, 0))
    finally:
        await producer.stop()


async def test_a_failed_send_blocks_the_commit(bootstrap_servers: str, unique: str) -> None:
    sink = f"small-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(sink, 1, 1, {"max.message.bytes": "1024"}))
    out = TopicPartition(sink, 0)
    producer = transactional(bootstrap_servers, f"tx-{unique}")
    await producer.start()
    try:
        await producer.begin_transaction()
        first = await producer.send(sink, b"small")
        await first
        too_big = await producer.send(sink, b"x" * 10_000)  # the broker refuses it
        with pytest.raises(aerrors.MessageSizeTooLargeError):
            await too_big
        with pytest.raises(TransactionSendFailedError) as info:
            await producer.commit_transaction()
        assert any(isinstance(e, aerrors.MessageSizeTooLargeError) for e in info.value.failures)
        await producer.abort_transaction()
        await no_open_transaction(bootstrap_servers, out)
        assert await read_committed(bootstrap_servers, out) == []

        # The refused batch took sequence numbers the broker never saw: aiokafka (no KIP-360)
        # cannot reuse this producer for that partition, so it refuses to begin again.
        assert producer.sequence_gap is not None
        with pytest.raises(ProducerUnusableError):
            await producer.begin_transaction()
    finally:
        await producer.stop()

    replacement = transactional(bootstrap_servers, f"tx-{unique}")
    await replacement.start()
    try:
        await replacement.begin_transaction()
        await replacement.send(sink, b"after")
        await replacement.commit_transaction()
        assert await read_committed(bootstrap_servers, out) == [b"after"]
    finally:
        await replacement.stop()


async def test_a_send_that_raises_also_blocks_the_commit(
    bootstrap_servers: str, unique: str
) -> None:
    sink = f"out-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(sink, 1, 1))
    out = TopicPartition(sink, 0)
    producer = transactional(bootstrap_servers, f"tx-{unique}", max_request_size=2048)
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send(sink, b"kept")
        with pytest.raises(aerrors.MessageSizeTooLargeError):
            await producer.send(sink, b"x" * 5000)  # refused before it is queued
        with pytest.raises(TransactionSendFailedError):
            await producer.commit_transaction()  # even if the caller swallowed the error
        await producer.abort_transaction()
        assert await read_committed(bootstrap_servers, out) == []

        # Nothing reached the broker, so there is no sequence gap: the producer goes on.
        assert producer.sequence_gap is None
        await producer.begin_transaction()
        await producer.send(sink, b"next")
        await producer.commit_transaction()
        assert await read_committed(bootstrap_servers, out) == [b"next"]
    finally:
        await producer.stop()


@pytest.mark.parametrize("next_operation", ["commit", "send"])
async def test_the_older_of_two_producers_with_one_transactional_id_is_fenced(
    bootstrap_servers: str, unique: str, next_operation: str
) -> None:
    sink = f"out-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(sink, 1, 1))
    old = transactional(bootstrap_servers, f"tx-{unique}")
    new = transactional(bootstrap_servers, f"tx-{unique}")
    await old.start()
    try:
        await old.begin_transaction()
        await (await old.send(sink, b"old"))
        await new.start()  # InitProducerId: bumps the epoch, aborts old's transaction
        with pytest.raises(aerrors.ProducerFenced):
            if next_operation == "send":
                await (await old.send(sink, b"old-2"))
            await old.commit_transaction()
        with pytest.raises(aerrors.ProducerFenced):
            await old.begin_transaction()

        await new.begin_transaction()
        await new.send(sink, b"new")
        await new.commit_transaction()
        assert await read_committed(bootstrap_servers, TopicPartition(sink, 0)) == [b"new"]
    finally:
        await old.stop()
        await new.stop()


async def test_a_commit_inside_on_partitions_revoked_succeeds(
    bootstrap_servers: str, unique: str
) -> None:
    """The runtime commits before giving partitions up: during the rebalance, before this
    member rejoins, its membership is still current and TxnOffsetCommit v3 is accepted."""
    from aiokafka.abc import ConsumerRebalanceListener

    source, sink, group = f"in-{unique}", f"out-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 2, 1), TopicSpec(sink, 1, 1))
    in0, in1 = TopicPartition(source, 0), TopicPartition(source, 1)
    a, b = member(bootstrap_servers, group), member(bootstrap_servers, group)
    producer = transactional(bootstrap_servers, f"tx-{unique}")
    outcomes: list[str] = []

    class CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
        snapshot: GroupMetadata | None = None

        async def on_partitions_revoked(self, revoked: object) -> None:
            if self.snapshot is None:
                return
            try:
                await producer.begin_transaction()
                await producer.send(sink, b"on-revoke")
                await producer.send_offsets_to_transaction({in0: 4, in1: 6}, self.snapshot)
                await producer.commit_transaction()
                outcomes.append("committed")
            except Exception as exc:  # recorded, asserted below
                outcomes.append(repr(exc))
                await producer.abort_transaction()

        async def on_partitions_assigned(self, assigned: object) -> None:
            self.snapshot = a.group_metadata()

    await producer.start()
    await a.start()
    await b.start()
    try:
        a.subscribe([source], listener=CommitOnRevoke())
        await eventually(lambda: len(a.assignment()) == 2, what="A assigned")
        await joined(b, [source])
        await eventually(lambda: outcomes, what="the revocation commit")
        assert outcomes == ["committed"]
        assert await b.committed_offsets([in0, in1]) == {in0: 4, in1: 6}
        assert await read_committed(bootstrap_servers, TopicPartition(sink, 0)) == [b"on-revoke"]
    finally:
        await b.stop()
        await a.stop()
        await producer.stop()
