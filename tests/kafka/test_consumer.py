"""The require_stable consumer and its group metadata, against the real broker."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics, eventually, joined, member, transactional


async def committed_offsets_wait_for_open_transaction(
    bootstrap: str, unique: str, *, commit: bool
) -> tuple[int | None, int | None]:
    """(what a plain OffsetFetch answers meanwhile, what committed_offsets() finally returns)."""
    source, group = f"in-{unique}", f"g-{unique}"
    await create_topics(bootstrap, TopicSpec(source, 1, 1))
    tp = TopicPartition(source, 0)
    owner = member(bootstrap, group)
    reader = member(bootstrap, group)  # same group, never joins: just reads offsets
    plain = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    producer = transactional(bootstrap, f"tx-{unique}")
    for client in (owner, reader, plain, producer):
        await client.start()
    try:
        await joined(owner, [source])
        membership = owner.group_metadata()
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({tp: 3}, membership)
        await producer.commit_transaction()
        assert await reader.committed_offsets([tp]) == {tp: 3}

        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({tp: 10}, membership)
        waiting = asyncio.create_task(reader.committed_offsets([tp]))
        done, _ = await asyncio.wait([waiting], timeout=1.5)
        assert not done, "committed_offsets() answered while the transaction was still open"
        stale = await plain.committed(tp)  # OffsetFetch v3: no require_stable
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
        final = (await asyncio.wait_for(waiting, 15))[tp]
        return stale, final
    finally:
        for client in (producer, plain, reader, owner):
            await client.stop()


async def test_committed_offsets_wait_for_the_transaction_to_commit(
    bootstrap_servers: str, unique: str
) -> None:
    stale, final = await committed_offsets_wait_for_open_transaction(
        bootstrap_servers, unique, commit=True
    )
    assert stale == 3  # what aiokafka alone would have started from
    assert final == 10


async def test_committed_offsets_return_the_old_value_after_an_abort(
    bootstrap_servers: str, unique: str
) -> None:
    stale, final = await committed_offsets_wait_for_open_transaction(
        bootstrap_servers, unique, commit=False
    )
    assert stale == 3
    assert final == 3


async def test_a_new_owner_does_not_start_from_a_stale_offset(
    bootstrap_servers: str, unique: str
) -> None:
    """The zombie case require_stable exists for: offsets accepted under the old generation
    are pending when the partition moves; the new owner must wait for them."""
    source, group = f"in-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 1, 1))
    tp = TopicPartition(source, 0)
    feeder = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await feeder.start()
    for i in range(12):
        await feeder.send_and_wait(source, b"%d" % i)
    await feeder.stop()

    old_owner, new_owner = member(bootstrap_servers, group), member(bootstrap_servers, group)
    zombie = transactional(bootstrap_servers, f"tx-{unique}")
    await old_owner.start()
    await zombie.start()
    try:
        await joined(old_owner, [source])
        await zombie.begin_transaction()
        await zombie.send_offsets_to_transaction({tp: 10}, old_owner.group_metadata())
        await old_owner.stop()  # leaves the group; its offsets are still pending

        await new_owner.start()
        await joined(new_owner, [source])
        position = asyncio.create_task(new_owner.position(tp))
        done, _ = await asyncio.wait([position], timeout=1.5)
        assert not done, "the new owner got a position while the offsets were unstable"
        await zombie.commit_transaction()
        assert await asyncio.wait_for(position, 15) == 10
        batch = await new_owner.getmany(tp, timeout_ms=5000)
        assert [r.offset for r in batch[tp]][:1] == [10]
    finally:
        await zombie.stop()
        await new_owner.stop()
        await old_owner.stop()


async def test_group_metadata_follows_membership(bootstrap_servers: str, unique: str) -> None:
    source, group = f"in-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 1, 1))
    consumer = member(bootstrap_servers, group)
    before = consumer.group_metadata()
    assert (before.generation_id, before.member_id, before.is_valid) == (-1, "", False)
    await consumer.start()
    try:
        await joined(consumer, [source])
        first = consumer.group_metadata()
        assert first.is_valid and first.group_instance_id is None

        # Leaving (and a new subscribe) makes a new member with a new id.
        leave = consumer.unsubscribe()
        assert leave is not None
        await leave
        assert not consumer.group_metadata().is_valid
        await joined(consumer, [source])
        second = consumer.group_metadata()
        assert second.is_valid and second.member_id != first.member_id
    finally:
        await consumer.stop()
    assert not consumer.group_metadata().is_valid


async def test_range_assignment_keeps_co_partitioned_topics_together(
    bootstrap_servers: str, unique: str
) -> None:
    left, right, group = f"left-{unique}", f"right-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(left, 3, 1), TopicSpec(right, 3, 1))
    a, b = member(bootstrap_servers, group), member(bootstrap_servers, group)
    await a.start()
    await b.start()
    try:
        a.subscribe([left, right])
        b.subscribe([left, right])
        await eventually(
            lambda: (
                len(a.assignment()) + len(b.assignment()) == 6 and a.assignment() and b.assignment()
            ),
            what="both members assigned",
        )
        for consumer in (a, b):
            by_topic: dict[str, set[int]] = {left: set(), right: set()}
            for tp in consumer.assignment():
                by_topic[tp.topic].add(tp.partition)
            assert by_topic[left] == by_topic[right]
    finally:
        await a.stop()
        await b.stop()
