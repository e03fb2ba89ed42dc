"""``KafkaTransport``: the runtime's view of Kafka, on the real broker."""

from __future__ import annotations

import asyncio

import pytest

from streams_app.errors import BrokerUnavailable, ConfigError, TopologyError
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.transport import (
    AdminClient,
    CommitFailedError,
    ConsumerClient,
    ConsumerConfig,
    FatalProducerError,
    GroupMetadata,
    ProducerClient,
    ProducerConfig,
    ProducerFencedError,
    SendFailedError,
    TopicPartition,
    TopicSpec,
    TransportError,
)
from streams_app.transport.kafka import KafkaTransport
from tests.kafka.helpers import eventually, no_open_transaction, read_committed

DEAD = "127.0.0.1:9"


def consumer_config(group: str | None, **overrides: object) -> ConsumerConfig:
    settings: dict[str, object] = {
        "group_id": group,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 500,
    }
    settings.update(overrides)
    return ConsumerConfig(**settings)  # type: ignore[arg-type]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.fail_on_assign = False

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", set(revoked)))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", set(assigned)))
        if self.fail_on_assign:
            raise RuntimeError("setup failed")


async def test_an_unreachable_broker_is_named() -> None:
    transport = KafkaTransport(DEAD)
    clients: list[AdminClient | ConsumerClient | ProducerClient] = [
        transport.admin(),
        transport.consumer(consumer_config("g")),
        transport.producer(ProducerConfig(transactional_id="t")),
        transport.producer(ProducerConfig(transactional_id=None)),
    ]
    for client in clients:
        with pytest.raises(BrokerUnavailable) as info:
            await client.start()
        assert info.value.address == DEAD
        assert DEAD in str(info.value)


def test_security_settings_are_checked_and_never_shown() -> None:
    transport = KafkaTransport(
        "h:1", security={"security_protocol": "SASL_SSL", "sasl_plain_password": "hunter2"}
    )
    assert "hunter2" not in repr(transport)
    with pytest.raises(ConfigError, match="sasl_pasword"):
        KafkaTransport("h:1", security={"sasl_pasword": "hunter2"})
    with pytest.raises(ConfigError, match="acks"):
        KafkaTransport("h:1").producer(ProducerConfig(transactional_id="t", acks=1))


async def test_admin_basics(bootstrap_servers: str, unique: str) -> None:
    transport = KafkaTransport(bootstrap_servers)
    admin = transport.admin()
    await admin.start()
    try:
        await admin.check_exactly_once_support()  # Kafka 4.3: TxnOffsetCommit v5, OffsetFetch v10

        a, b = f"a-{unique}", f"b-{unique}"
        specs = [TopicSpec(a, 3, 1), TopicSpec(b, 1, 1, {"cleanup.policy": "compact"})]
        await admin.create_topics(specs)
        await admin.create_topics(specs)  # existing topics are fine
        assert await admin.partition_counts([a, b, f"missing-{unique}"]) == {a: 3, b: 1}

        bad = f"bad-{unique}"
        with pytest.raises(TopologyError, match=bad) as info:
            await admin.create_topics([TopicSpec(bad, 1, 1, {"cleanup.policy": "bogus"})])
        assert "INVALID_CONFIG" in str(info.value)
        assert bad not in await admin.partition_counts([bad])

        tps = [TopicPartition(a, p) for p in range(3)]
        assert await admin.end_offsets(tps) == dict.fromkeys(tps, 0)
        producer = transport.producer(ProducerConfig(transactional_id=f"tx-{unique}"))
        await producer.start()
        try:
            await producer.begin_transaction()
            for _ in range(4):
                await producer.send(a, value=b"v", partition=1)
            await producer.commit_transaction()
        finally:
            await producer.stop()
        # Four records and the commit marker (written shortly after EndTxn returns).
        assert await no_open_transaction(bootstrap_servers, TopicPartition(a, 1)) == 5
        assert (await admin.end_offsets(tps))[TopicPartition(a, 1)] == 5
        assert await admin.beginning_offsets(tps) == dict.fromkeys(tps, 0)
    finally:
        await admin.close()


async def test_consumer_basics(bootstrap_servers: str, unique: str) -> None:
    topic, group = f"in-{unique}", f"g-{unique}"
    transport = KafkaTransport(bootstrap_servers)
    admin = transport.admin()
    await admin.start()
    await admin.create_topics([TopicSpec(topic, 2, 1)])
    feeder = transport.producer(ProducerConfig(transactional_id=None))
    await feeder.start()
    for i in range(10):
        await feeder.send(topic, key=None, value=b"%d" % i, partition=i % 2)
    await feeder.flush()
    await feeder.stop()

    consumer = transport.consumer(consumer_config(group))
    listener = Recorder()
    consumer.subscribe([topic], listener)  # before start: applied once started
    await consumer.start()
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    try:
        await eventually(lambda: consumer.assignment() == {tp0, tp1}, what="assignment")
        assert listener.events == [("revoked", set()), ("assigned", {tp0, tp1})]
        assert all(type(tp) is TopicPartition for _, tps in listener.events for tp in tps)
        assert consumer.group_metadata().is_valid
        assert await consumer.committed_offsets([tp0, tp1]) == {tp0: None, tp1: None}

        records: dict[TopicPartition, list[bytes | None]] = {tp0: [], tp1: []}
        while sum(map(len, records.values())) < 10:
            for tp, fetched in (await consumer.getmany(timeout_ms=1000)).items():
                assert type(tp) is TopicPartition
                records[tp].extend(r.value for r in fetched)
        assert records[tp0] == [b"0", b"2", b"4", b"6", b"8"]
        assert await consumer.position(tp0) == 5

        consumer.seek(tp0, 3)
        consumer.pause([tp1])
        batch = await consumer.getmany(timeout_ms=2000)
        assert set(batch) == {tp0}
        assert [r.offset for r in batch[tp0]] == [3, 4]
        consumer.resume([tp1])

        await consumer.commit({tp0: 5, tp1: 4})
        assert await consumer.committed_offsets([tp0, tp1]) == {tp0: 5, tp1: 4}
    finally:
        await consumer.stop()
        await admin.close()


async def test_a_listener_error_is_raised_from_the_next_getmany(
    bootstrap_servers: str, unique: str
) -> None:
    topic, group = f"in-{unique}", f"g-{unique}"
    transport = KafkaTransport(bootstrap_servers)
    admin = transport.admin()
    await admin.start()
    await admin.create_topics([TopicSpec(topic, 1, 1)])
    await admin.close()
    consumer = transport.consumer(consumer_config(group))
    listener = Recorder()
    listener.fail_on_assign = True
    await consumer.start()
    try:
        consumer.subscribe([topic], listener)
        await eventually(lambda: consumer.assignment(), what="assignment")
        with pytest.raises(RuntimeError, match="setup failed"):
            await consumer.getmany(timeout_ms=100)
        await consumer.getmany(timeout_ms=100)  # raised once
    finally:
        await consumer.stop()


async def test_transactional_producer_errors_are_classified(
    bootstrap_servers: str, unique: str
) -> None:
    source, sink, group = f"in-{unique}", f"out-{unique}", f"g-{unique}"
    transport = KafkaTransport(bootstrap_servers)
    admin = transport.admin()
    await admin.start()
    await admin.create_topics(
        [TopicSpec(source, 1, 1), TopicSpec(sink, 1, 1, {"max.message.bytes": "1024"})]
    )
    await admin.close()
    consumer = transport.consumer(consumer_config(group))
    await consumer.start()
    listener = Recorder()
    consumer.subscribe([source], listener)
    await eventually(lambda: consumer.assignment(), what="assignment")
    membership = consumer.group_metadata()
    tp, out = TopicPartition(source, 0), TopicPartition(sink, 0)
    config = ProducerConfig(transactional_id=f"tx-{unique}", transaction_timeout_ms=60_000)
    producer = transport.producer(config)
    assert producer.transactional
    await producer.start()
    try:
        # Commit: records and offsets together.
        await producer.begin_transaction()
        future = await producer.send(sink, key=b"k", value=b"ok", headers=[("h", b"1")])
        await producer.send_offsets_to_transaction({tp: 1}, membership)
        await producer.commit_transaction()
        assert (await future).offset == 0
        assert await consumer.committed_offsets([tp]) == {tp: 1}

        # A stale or invalid membership: CommitFailedError, still abortable.
        for stale in (
            GroupMetadata(group, membership.generation_id - 1, membership.member_id),
            GroupMetadata(group, -1, ""),
        ):
            await producer.begin_transaction()
            await producer.send(sink, key=None, value=b"stale")
            with pytest.raises(CommitFailedError):
                await producer.send_offsets_to_transaction({tp: 2}, stale)
            await producer.abort_transaction()
        await producer.abort_transaction()  # no transaction open: a no-op

        # A failed send: flush and commit say SendFailedError; then the producer must go.
        await producer.begin_transaction()
        await producer.send(sink, key=None, value=b"x" * 10_000)
        with pytest.raises(SendFailedError):
            await producer.flush()
        with pytest.raises(SendFailedError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        with pytest.raises(FatalProducerError):
            await producer.begin_transaction()
        assert await read_committed(bootstrap_servers, out) == [b"ok"]
        await no_open_transaction(bootstrap_servers, out)
    finally:
        await producer.stop()

    # Fenced by a newer instance with the same transactional.id.
    old, new = transport.producer(config), transport.producer(config)
    await old.start()
    try:
        await old.begin_transaction()
        await old.send(sink, key=None, value=b"old")
        await new.start()
        with pytest.raises(ProducerFencedError):
            await old.commit_transaction()
        with pytest.raises(ProducerFencedError):
            await old.abort_transaction()
    finally:
        await old.stop()
        await new.stop()
        await consumer.stop()


@pytest.mark.parametrize(
    "config",
    [
        ProducerConfig(transactional_id=None),  # at-least-once: acks=all, idempotent
        ProducerConfig(transactional_id=None, acks=0, enable_idempotence=False),  # at-most-once
    ],
    ids=["at-least-once", "at-most-once"],
)
async def test_non_transactional_producers(
    bootstrap_servers: str, unique: str, config: ProducerConfig
) -> None:
    topic = f"t-{unique}"
    transport = KafkaTransport(bootstrap_servers)
    admin = transport.admin()
    await admin.start()
    await admin.create_topics([TopicSpec(topic, 1, 1)])
    producer = transport.producer(config)
    assert not producer.transactional
    await producer.start()
    try:
        futures = [await producer.send(topic, key=None, value=b"%d" % i) for i in range(5)]
        await producer.flush()
        await asyncio.gather(*futures)
        for call in (
            producer.begin_transaction(),
            producer.commit_transaction(),
            producer.abort_transaction(),
            producer.send_offsets_to_transaction({}, GroupMetadata("g", 1, "m")),
        ):
            with pytest.raises(TransportError, match="transactional"):
                await call
        tp = TopicPartition(topic, 0)
        # acks=0: acknowledged by nobody, so poll the broker for them.
        assert await eventually(lambda: _has(admin, tp, 5), what="5 records")
    finally:
        await producer.stop()
        await admin.close()


async def _has(admin: AdminClient, tp: TopicPartition, count: int) -> bool:
    return (await admin.end_offsets([tp]))[tp] == count


async def test_unsubscribe_then_subscribe_rejoins_as_a_new_member(
    bootstrap_servers: str, unique: str
) -> None:
    """What the runtime does after being fenced: leave, and join again right away."""
    topic, group = f"in-{unique}", f"g-{unique}"
    transport = KafkaTransport(bootstrap_servers)
    admin = transport.admin()
    await admin.start()
    await admin.create_topics([TopicSpec(topic, 2, 1)])
    await admin.close()
    consumer = transport.consumer(consumer_config(group))
    await consumer.start()
    try:
        listener = Recorder()
        consumer.subscribe([topic], listener)
        await eventually(lambda: len(consumer.assignment()) == 2, what="assignment")
        first = consumer.group_metadata()

        consumer.unsubscribe()
        again = Recorder()
        consumer.subscribe([topic], again)  # no await in between
        await eventually(
            lambda: len(consumer.assignment()) == 2 and again.events, what="a new assignment"
        )
        second = consumer.group_metadata()
        assert second.is_valid
        assert second.member_id != first.member_id
        assert again.events[-1] == (
            "assigned",
            {TopicPartition(topic, 0), TopicPartition(topic, 1)},
        )
        # Nothing is left over from the leave to disturb the new membership: its LeaveGroup
        # ended before the new member joined (subscribe waits for it), and the broker holds
        # the new member alone, stable, with both partitions.
        leaving = consumer._leaving  # type: ignore[attr-defined]
        assert leaving is not None and leaving.done() and leaving.exception() is None
        async with OpsAdmin(bootstrap_servers) as ops:
            described = await ops.describe_group(group)
        assert described.state == "Stable", described
        assert [(m.member_id, m.assignment) for m in described.members] == [
            (second.member_id, ((topic, 0), (topic, 1)))
        ]
        assert consumer.group_metadata() == second
        await consumer.commit({TopicPartition(topic, 0): 0})
    finally:
        await consumer.stop()
