"""Reproduce the produce retries exactly-once workers saw on a healthy broker, with our producer.

    python -m benchmarks.txn_race [--transactions 200] [--partitions 8]

Kafka 4.x checks a transaction's first write to each partition with the transaction
coordinator (KIP-890: verification under transaction version 1, adding the partition under
version 2), and checks a transactional offset commit's ``__consumer_offsets`` partition the
same way. Both checks go through the broker's ``AddPartitionsToTxnManager``, which keeps **one
pending check per transactional id**: a second one arriving before the first was sent displaces
it, and the displaced request fails retriably. A Produce then gets NOT_ENOUGH_REPLICAS (the
broker's stand-in for "retry" for old clients), a TxnOffsetCommit COORDINATOR_LOAD_IN_PROGRESS;
the client retries after ``retry_backoff_ms`` (100 ms). The previous transaction's markers are
*not* the cause: the coordinator answered no verification with CONCURRENT_TRANSACTIONS.

Each transaction here writes one batch to each of ``--partitions`` partitions (first writes of
the transaction, so each is checked) and commits offsets for a group the process is a member
of, in one of two orders:

- ``overlap``: offsets sent while the batches are in flight (what the runtime did);
- ``sequenced``: offsets after every batch is acknowledged (Kafka Streams' order, and ours now);

under transaction version 1 and 2. It prints the retries and the commit times of each.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from collections import Counter
from typing import Any

PRODUCE_RETRY = "Got error produce response"


class _Retries(logging.Handler):
    """Counts aiokafka's "retrying" warnings by error."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if PRODUCE_RETRY in message:
            # "... Error: <class 'X'>", or the broker's error message (Produce v8+)
            error = message.rsplit("Error: ", 1)[-1]
            error = error.split("'")[1] if error.startswith("<class") else error[:90]
            self.counts[error] += 1


async def run_case(
    bootstrap: str, topic: str, source: str, order: str, version: int, args: argparse.Namespace
) -> dict[str, Any]:
    from aiokafka import TopicPartition

    from streams_app.kafka import StableConsumer, TransactionalProducer

    retries = _Retries()
    logging.getLogger("aiokafka").addHandler(retries)
    group = f"race-{order}-v{version}-{time.monotonic_ns()}"
    consumer = StableConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    producer = TransactionalProducer(
        bootstrap_servers=bootstrap,
        transactional_id=group,
        transaction_version=version,
        linger_ms=0,
    )
    await consumer.start()
    await producer.start()
    offset_requests = 0
    original = producer.client.send

    async def counting(node_id: int, request: Any, **kwargs: Any) -> Any:
        nonlocal offset_requests
        offset_requests += request.API_KEY == 28  # TxnOffsetCommit
        return await original(node_id, request, **kwargs)

    producer.client.send = counting
    try:
        consumer.subscribe([source])
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=100)
        membership = consumer.group_metadata()
        src = TopicPartition(source, 0)
        durations = []
        for i in range(args.transactions):
            t0 = time.monotonic()
            await producer.begin_transaction()
            futures = []
            for partition in range(args.partitions):
                batch = producer.create_batch()
                for j in range(args.records):
                    batch.append(key=b"k%d" % j, value=b"v" * 100, timestamp=None)
                batch.close()
                futures.append(await producer.send_batch(batch, topic, partition=partition))
            if order == "sequenced":
                await asyncio.gather(*futures)
            await producer.send_offsets_to_transaction({src: i + 1}, membership)
            await asyncio.gather(*futures)
            await producer.commit_transaction()
            durations.append(time.monotonic() - t0)
        durations.sort()
        return {
            "order": order,
            "transaction_version": producer.transaction_version,
            "produce_retries": dict(retries.counts),
            "txn_offset_commit_retries": offset_requests - args.transactions,
            "median_ms": round(statistics.median(durations) * 1000, 1),
            "p90_ms": round(durations[int(len(durations) * 0.9)] * 1000, 1),
            "total_s": round(sum(durations), 2),
        }
    finally:
        logging.getLogger("aiokafka").removeHandler(retries)
        await producer.stop()
        await consumer.stop()


async def main_async(args: argparse.Namespace) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from streams_app.broker.cluster import EmbeddedKafka

    with EmbeddedKafka(1) as kafka:
        bootstrap = kafka.bootstrap_servers
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics(
            [NewTopic("race-out", args.partitions, 1), NewTopic("race-in", 1, 1)]
        )
        await admin.close()
        for round_ in range(args.rounds):
            for version in (1, 2):
                for order in ("overlap", "sequenced"):
                    result = await run_case(bootstrap, "race-out", "race-in", order, version, args)
                    print(f"round {round_ + 1}: {result}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records", type=int, default=50, help="per batch")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.CRITICAL)  # the retries are counted, not printed
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
