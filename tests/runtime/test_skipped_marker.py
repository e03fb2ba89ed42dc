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
transaction out.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from aiokafka.structs import TopicPartition as AioTopicPartition

from streams_app import App
from streams_app.broker import EmbeddedKafka
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import read_topics
from streams_app.runtime.guarantees import producer_config
from streams_app.runtime.producer import StreamsProducer
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import wait_until

#: Short, so that the coordinator times the transaction out while its partition has no leader.
TIMEOUT_MS = 3_000


async def _leader(admin: OpsAdmin, topic: str, partition: int) -> int:
    client: Any = admin._client  # the test reads the cluster metadata as is
    await client.force_metadata_update()
    leader = client.cluster.leader_for_partition(AioTopicPartition(topic, partition))
    return -1 if leader is None else int(leader)


async def test_a_transaction_left_open_by_a_skipped_marker_is_aborted_before_the_next(
    kafka_cluster: EmbeddedKafka, unique: str
) -> None:
    kafka = kafka_cluster
    bootstrap = kafka.bootstrap_servers
    loop = asyncio.get_running_loop()
    topic = f"skipped-{unique}"
    # One replica per partition: a partition whose node is down has no leader.
    await create_topics(bootstrap, TopicSpec(topic, 3, 1))
    app = App(f"skipped-{unique}", broker=bootstrap)
    config = dataclasses.replace(
        producer_config(app.conf, unique), transaction_timeout_ms=TIMEOUT_MS
    )
    tid = config.transactional_id
    assert tid is not None
    producer = StreamsProducer(app.transport(), config)
    await producer.start()
    admin = await OpsAdmin(bootstrap).start()
    try:
        coordinator = (await admin.describe_transactions([tid]))[tid]
        assert coordinator is not None
        # A partition led by a node that is not the transaction coordinator.
        leaders = {p: await _leader(admin, topic, p) for p in range(3)}
        partition, node = next(
            (p, leader) for p, leader in leaders.items() if leader != coordinator.coordinator_id
        )
        await producer.maybe_begin()
        await producer.send(topic, key=b"k", value=b"given up", partition=partition)
        await producer.flush_and_check()  # in the partition's log, in the open transaction
        pid, epoch = producer.client.producer_identity()  # type: ignore[attr-defined]

        await loop.run_in_executor(None, kafka.kill_node, node)
        try:

            async def leaderless() -> bool:
                return await _leader(admin, topic, partition) < 0

            await wait_until(leaderless, timeout=60, interval=0.2)

            async def timed_out() -> bool:
                found = (await admin.describe_transactions([tid]))[tid]
                return found is not None and found.state in ("CompleteAbort", "Empty")

            # The coordinator times the transaction out and completes it at once: the marker of
            # the leaderless partition is skipped (with a marker pending it would stay
            # PrepareAbort until the node is back, and this would time out).
            await wait_until(timed_out, timeout=60, interval=0.2)
        finally:
            await loop.run_in_executor(None, kafka.start_node, node)

        async def led() -> bool:
            return await _leader(admin, topic, partition) >= 0

        await wait_until(led, timeout=60, interval=0.2)
        states = (await admin.describe_producers([(topic, partition)]))[(topic, partition)]
        left_open = [s for s in states if s.producer_id == pid and s.has_open_transaction]
        assert left_open and left_open[0].producer_epoch == epoch, (
            "the broker wrote the abort marker this time: the fault under test did not happen "
            f"({states})"
        )

        # What the worker does after the transaction failed: a new producer, the same inputs
        # again, the same partition.
        await producer.recreate()
        assert producer.left_open_aborted == 1
        await producer.maybe_begin()
        await producer.send(topic, key=b"k", value=b"processed again", partition=partition)
        await producer.commit({}, None)
    finally:
        await admin.close()
        await producer.stop()
    records = (await read_topics(bootstrap, [topic], partitions={topic: [partition]}))[topic]
    assert [r.value for r in records] == [b"processed again"]
