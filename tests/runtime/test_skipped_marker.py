"""A transaction given up whose ABORT marker the broker never wrote (duplicates after an outage).

After the two-minute outage the worker's open transaction had timed out: the coordinator
aborted it as the broker came back, but wrote no ABORT marker on its partitions. Kafka 4.3's
marker sender skips a partition that has no leader at that moment, taking it for a deleted one
("Couldn't find leader endpoint ... likely deleted already and hence can be skipped"): the
restarted broker's coordinator ran before its new incarnation was registered, and the old
one's fencing left every partition leaderless for an instant. The records stayed an open
transaction of the worker's producer id, the worker rewound to its committed offsets (a known
abort), processed the same inputs again, and its next transaction joined the open one on that
partition: the commit marker committed both copies (``echo`` had 2,000 records twice; the
broker's log showed the epoch-4 batch followed by the epoch-12 batch, one COMMIT marker, no
ABORT; report-outdup.md).

Here the same broker behaviour is made exact on a real three-node cluster: the partition's
only replica is on a node that is killed, so it has no leader when the coordinator times the
transaction out; the node comes back before the producer is recreated, or only after (then the
partition cannot be checked at first, and must be asked again).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import TopicPartition as AioTopicPartition

from streams_app import App
from streams_app.broker import EmbeddedKafka
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import read_topics
from streams_app.runtime.guarantees import producer_config
from streams_app.runtime.left_open_file import LEFT_OPEN_FILE, LeftOpenFile
from streams_app.runtime.producer import StreamsProducer
from streams_app.state.directory import StateDirectory
from streams_app.transport.base import GroupMetadata, TopicPartition, TopicSpec
from streams_app.transport.errors import TransactionLeftOpenError, TransactionTimedOutError
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import running_worker, wait_until

#: Short, so that the coordinator times the transaction out while its partition has no leader.
TIMEOUT_MS = 3_000


async def _leader(admin: OpsAdmin, topic: str, partition: int) -> int:
    client: Any = admin._client  # the test reads the cluster metadata as is
    await client.force_metadata_update()
    leader = client.cluster.leader_for_partition(AioTopicPartition(topic, partition))
    return -1 if leader is None else int(leader)


class _Scene:
    """A producer whose transaction was given up while its partition's only node was down."""

    def __init__(
        self,
        kafka: EmbeddedKafka,
        unique: str,
        state: Path | None = None,
        timeout_ms: int = TIMEOUT_MS,
    ) -> None:
        """With ``state``: the producer of the worker whose state directory is under it (its
        transactional id, and its file of entries to check)."""
        self.kafka = kafka
        self.bootstrap = kafka.bootstrap_servers
        self.topic = f"skipped-{unique}"
        self.app = App(f"skipped-{unique}", broker=self.bootstrap)
        process_id, self.left_open_file = unique, None
        if state is not None:
            with StateDirectory(state, self.app.conf.id) as directory:
                process_id = directory.process_id
                self.left_open_file = LeftOpenFile(directory.path / LEFT_OPEN_FILE)
        config = dataclasses.replace(
            producer_config(self.app.conf, process_id), transaction_timeout_ms=timeout_ms
        )
        self.config = config
        assert config.transactional_id is not None
        self.tid = config.transactional_id
        self.producer = StreamsProducer(
            self.app.transport(), config, left_open_file=self.left_open_file
        )
        self.partition = self.node = self.pid = self.epoch = -1
        self.down = False
        self.admin: OpsAdmin

    async def open(self) -> None:
        # One replica per partition: a partition whose node is down has no leader.
        await create_topics(self.bootstrap, TopicSpec(self.topic, 3, 1))
        await self.producer.start()
        self.admin = await OpsAdmin(self.bootstrap).start()

    async def close(self) -> None:
        await self.admin.close()
        await self.producer.stop()

    async def leave_open(self, *, time_out: bool = True) -> None:
        """A record in the open transaction; its node killed; the coordinator times the
        transaction out while the partition has no leader (unless not ``time_out``: the
        transaction stays open, for the caller to end). The node stays down."""
        admin, producer, tid = self.admin, self.producer, self.tid
        coordinator = (await admin.describe_transactions([tid]))[tid]
        assert coordinator is not None
        # A partition led by a node that is not the transaction coordinator.
        leaders = {p: await _leader(admin, self.topic, p) for p in range(3)}
        self.partition, self.node = next(
            (p, leader) for p, leader in leaders.items() if leader != coordinator.coordinator_id
        )
        await producer.maybe_begin()
        await producer.send(self.topic, key=b"k", value=b"given up", partition=self.partition)
        await producer.flush_and_check()  # in the partition's log, in the open transaction
        self.pid, self.epoch = producer.client.producer_identity()  # type: ignore[attr-defined]
        await asyncio.get_running_loop().run_in_executor(None, self.kafka.kill_node, self.node)
        self.down = True

        async def leaderless() -> bool:
            return await _leader(admin, self.topic, self.partition) < 0

        await wait_until(leaderless, timeout=60, interval=0.2)
        if not time_out:
            return

        async def timed_out() -> bool:
            found = (await admin.describe_transactions([tid]))[tid]
            return found is not None and found.state in ("CompleteAbort", "Empty")

        # The coordinator times the transaction out and completes it at once: the marker of
        # the leaderless partition is skipped (with a marker pending it would stay
        # PrepareAbort until the node is back, and this would time out).
        await wait_until(timed_out, timeout=60, interval=0.2)

    async def held_until_the_node_is_back(
        self,
        producer: StreamsProducer,
        operation: Coroutine[Any, Any, None],
        *,
        rounds: int = 1,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Run ``operation`` (a recreate, an abort, a start) while the partition has no leader:
        it must still be in the check after ``rounds`` rounds, with the partition unanswered
        (``meanwhile`` checks more then); the node is restarted, and the operation must end."""
        producer.left_open_deadline = 180  # the node's restart, on a loaded machine
        running = asyncio.ensure_future(operation)
        try:
            await wait_until(lambda: producer.left_open_checks >= rounds, timeout=60, interval=0.1)
            assert not running.done()
            assert [e.tp.partition for e in producer.unchecked_left_open] == [self.partition]
            if meanwhile is not None:
                meanwhile()
            await self.restart_node()
            await asyncio.wait_for(running, timeout=120)
        finally:
            if not running.done():
                running.cancel()

    async def restart_node(self) -> None:
        if not self.down:  # already back (a test's cleanup after the helper restarted it)
            return
        self.down = False
        await asyncio.get_running_loop().run_in_executor(None, self.kafka.start_node, self.node)

        async def led() -> bool:
            return await _leader(self.admin, self.topic, self.partition) >= 0

        await wait_until(led, timeout=60, interval=0.2)

    async def assert_left_open(self) -> None:
        tp = (self.topic, self.partition)
        states = (await self.admin.describe_producers([tp]))[tp]
        left_open = [s for s in states if s.producer_id == self.pid and s.has_open_transaction]
        assert left_open and left_open[0].producer_epoch == self.epoch, (
            "the broker wrote the abort marker this time: the fault under test did not happen "
            f"({states})"
        )

    async def process_again(self) -> list[bytes | None]:
        """What the worker does after the recreate: the same input again, the same partition,
        committed; returns what read_committed shows in the partition."""
        producer = self.producer
        await producer.maybe_begin()
        await producer.send(
            self.topic, key=b"k", value=b"processed again", partition=self.partition
        )
        await producer.commit({}, None)
        read = await read_topics(
            self.bootstrap, [self.topic], partitions={self.topic: [self.partition]}
        )
        return [r.value for r in read[self.topic]]


async def test_a_transaction_left_open_by_a_skipped_marker_is_aborted_before_the_next(
    kafka_cluster: EmbeddedKafka, unique: str
) -> None:
    scene = _Scene(kafka_cluster, unique)
    await scene.open()
    try:
        try:
            await scene.leave_open()
        finally:
            await scene.restart_node()
        await scene.assert_left_open()
        # What the worker does after the transaction failed: a new producer, then the same
        # inputs again.
        await scene.producer.recreate()
        assert scene.producer.left_open_aborted == 1
        assert await scene.process_again() == [b"processed again"]
    finally:
        await scene.close()


async def test_a_partition_still_leaderless_at_the_recreate_is_checked_once_it_is_back(
    kafka_cluster: EmbeddedKafka, unique: str
) -> None:
    """The production shape: the partition's broker is still down when the worker recreates
    its producer, and comes back later. Its partition cannot answer the check then; the new
    producer takes no send until it has, and the records left open are aborted when it does
    (before: the check gave up after a few seconds, and the next commit committed them)."""
    scene = _Scene(kafka_cluster, unique)
    await scene.open()
    restarted = False
    try:
        await scene.leave_open()
        producer = scene.producer
        # The worker's commit after the timeout: it sends its offsets first, and is told the
        # transaction is over. Its group's __consumer_offsets partition is checked too.
        group = GroupMetadata(f"skipped-{unique}", 1, "member-1")
        with pytest.raises(TransactionTimedOutError):
            await producer.commit({TopicPartition(scene.topic, scene.partition): 1}, group)

        def unpublished() -> None:
            with pytest.raises(RuntimeError, match="not started"):
                producer.client  # noqa: B018 - the new producer is not published meanwhile

        # Two rounds of the check found the partition without a leader: still recreating.
        await scene.held_until_the_node_is_back(
            producer, producer.recreate(), rounds=2, meanwhile=unpublished
        )
        restarted = True
        assert producer.left_open_aborted == 1
        assert producer.unchecked_left_open == []
        assert await scene.process_again() == [b"processed again"]
    finally:
        if not restarted:
            await scene.restart_node()
        await scene.close()


async def test_an_answered_abort_whose_partition_has_no_leader_is_checked_before_the_next(
    kafka_cluster: EmbeddedKafka, unique: str
) -> None:
    """The worker aborts (an agent's error, a revocation) and the coordinator answers; but the
    partition the transaction wrote has no leader (its only replica's node is down), so the
    coordinator skips its ABORT marker. The worker sees the partition leaderless after the
    answer, recreates its producer and checks: the records are found open and aborted once the
    node is back, and the next transaction commits only its own (before: the abort was taken
    as done, and the next commit to the partition committed the aborted record too)."""
    scene = _Scene(kafka_cluster, unique)
    await scene.open()
    restarted = False
    try:
        await scene.leave_open(time_out=False)
        producer = scene.producer
        # A round of the check found the partition without a leader: still aborting.
        await scene.held_until_the_node_is_back(producer, producer.abort())
        restarted = True
        assert producer.transactions_aborted == 1 and producer.recreated == 1
        # Found open: the broker had skipped the marker (the fault under test happened).
        assert producer.left_open_aborted == 1
        assert await scene.process_again() == [b"processed again"]
    finally:
        if not restarted:
            await scene.restart_node()
        await scene.close()


async def test_a_process_killed_mid_transaction_has_its_partitions_checked_at_restart(
    kafka_cluster: EmbeddedKafka, unique: str, tmp_path: Path
) -> None:
    """The worker process dies in the middle of a transaction, its partition's node down
    too: it gave nothing up, so nothing was listed. Its restart's InitProducerId aborts the
    transaction while the partition has no leader, and the marker is skipped. The new
    producer asks the coordinator what was ongoing before that, and checks it: the records are
    aborted once the node is back, before its first transaction (before: they stayed open and
    the first commit to the partition committed them too)."""
    state = tmp_path / "state"
    # A long timeout: the transaction is still ongoing at its coordinator when the restart
    # comes (the coordinator's timeout would end it otherwise, which the restart cannot see).
    scene = _Scene(kafka_cluster, unique, state, timeout_ms=120_000)
    await scene.open()
    restarted = False
    try:
        await scene.leave_open(time_out=False)
        await scene.producer.stop()  # the process is gone: no EndTxn was sent
        again = StreamsProducer(
            scene.app.transport(), scene.config, left_open_file=scene.left_open_file
        )

        def listed() -> None:
            assert scene.left_open_file is not None and scene.left_open_file.load()

        # A round of the check found the partition without a leader: still starting.
        await scene.held_until_the_node_is_back(again, again.start(), meanwhile=listed)
        restarted = True
        # Found open at the epoch that wrote it: the broker had skipped the marker.
        assert again.left_open_aborted == 1
        scene.producer = again
        assert await scene.process_again() == [b"processed again"]
    finally:
        if not restarted:
            await scene.restart_node()
        await scene.close()


async def test_a_worker_restarted_on_its_state_directory_aborts_what_it_left_open_first(
    kafka_cluster: EmbeddedKafka, unique: str, tmp_path: Path
) -> None:
    """The worker gives up on the check (its deadline passes with the node still down) and
    stops; it is restarted on the same state directory (as `worker --processes` and process
    managers do): the same transactional id, so the same producer id. Its producer's
    InitProducerId bumps the epoch, but the state directory's left-open.json still lists the
    partition with the epoch that wrote the records, whose leader still has that epoch for our
    producer id: the restarted worker aborts them before its first transaction, which writes to
    that partition (before: it knew nothing of them, and that commit committed them too)."""
    state = tmp_path / "state"
    scene = _Scene(kafka_cluster, unique, state)
    file = scene.left_open_file
    assert file is not None
    await scene.open()
    restarted = False
    try:
        await scene.leave_open()
        group = GroupMetadata(f"skipped-{unique}", 1, "member-1")
        with pytest.raises(TransactionTimedOutError):
            await scene.producer.commit({TopicPartition(scene.topic, scene.partition): 1}, group)
        scene.producer.left_open_deadline = 2  # the node stays down longer: the worker stops
        with pytest.raises(TransactionLeftOpenError, match=str(file.path)):
            await scene.producer.recreate()
        # The group's __consumer_offsets partition answered; the data partition did not.
        assert [(e.tp, e.producer_id, e.producer_epoch) for e in file.load()] == [
            (TopicPartition(scene.topic, scene.partition), scene.pid, scene.epoch)
        ]
        await scene.producer.stop()  # the process ends

        await scene.restart_node()
        restarted = True
        await scene.assert_left_open()  # the broker did skip the marker: the records are open

        # The restarted worker: its one agent processes the input again, into that partition.
        app = scene.app
        source = app.topic(f"in-{unique}", value_serializer="raw")
        sink = app.topic(scene.topic, value_serializer="raw")

        @app.agent(source)
        async def again(stream):  # type: ignore[no-untyped-def]
            async for value in stream:
                await sink.send(key=b"k", value=value, partition=scene.partition)

        async with running_worker(app, state) as worker:
            assert worker.producer.left_open_aborted == 1  # at start, before any transaction
            identity = worker.producer.client.producer_identity()  # type: ignore[attr-defined]
            assert identity[0] == scene.pid and identity[1] > scene.epoch
            assert not file.path.exists()
            async with app.producer() as producer:
                await producer.send(source, value=b"processed again")

            async def committed() -> list[bytes | None]:
                read = await read_topics(
                    scene.bootstrap, [scene.topic], partitions={scene.topic: [scene.partition]}
                )
                return [r.value for r in read[scene.topic]]

            await wait_until(committed, timeout=60, interval=0.2)
            assert await committed() == [b"processed again"]
    finally:
        if not restarted:
            await scene.restart_node()
        await scene.close()
