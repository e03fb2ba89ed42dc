"""Agent errors and poison records: nothing partial is ever visible and the policy is applied."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import MessageSizeTooLargeError

from streams_app import App, WorkerStopped
from streams_app.readback import read_topics
from streams_app.runtime.dead_letter_size import H_ORIGINAL_SIZE, H_TRUNCATED
from streams_app.runtime.errors_policy import (
    H_ATTEMPTS,
    H_ERROR_TYPE,
    H_SOURCE_OFFSET,
    H_SOURCE_TOPIC,
)
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import await_started, running_worker, wait_until


def failing_app(
    unique: str, bootstrap: str, attempts: dict[int, int], fail_times: int, **settings: object
) -> App:
    """Echo + running sum per key; a value of 13 raises the first ``fail_times`` attempts."""
    app = App(f"err-{unique}", broker=bootstrap, topic_partitions=2, retry_backoff=0.05, **settings)
    source = app.topic(f"in-{unique}", key_type=str, value_type=int)
    echo = app.topic(f"echo-{unique}", key_type=str, value_type=int)
    sums = app.topic(f"sum-{unique}", key_type=str, value_type=int)
    table = app.Table("sums", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def process(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            await echo.send(key=event.key, value=event.value)
            table[event.key] += event.value  # written before the failure: must be undone
            if event.value == 13:
                attempts[event.offset] = attempts.get(event.offset, 0) + 1
                if attempts[event.offset] <= fail_times:
                    raise RuntimeError("refusing 13")
            await sums.send(key=event.key, value=table[event.key])

    return app


async def feed(app: App, topic: str, records: list[tuple[str, object]], raw: bool = False) -> None:
    async with app.producer() as producer:
        for key, value in records:
            if raw:
                await producer.send(topic, key=key, value=None, partition=0)
            await producer.send(topic, key=key, value=value, partition=0)


RECORDS: list[tuple[str, object]] = [("a", 1), ("a", 2), ("a", 13), ("a", 4), ("b", 5)]


async def outputs(bootstrap: str, unique: str) -> dict[str, list[tuple[str, int]]]:
    names = {"echo": f"echo-{unique}", "sum": f"sum-{unique}"}
    data = await read_topics(bootstrap, list(names.values()))
    return {k: [(r.key.decode(), json.loads(r.value)) for r in data[v]] for k, v in names.items()}


async def test_retry_policy_retries_the_failed_record_and_outputs_once(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=2, error_policy="retry")
    async with running_worker(app, tmp_path / "s") as worker:
        await feed(app, f"in-{unique}", RECORDS)
        await wait_until(
            lambda: (
                worker.committer.commits > 0
                and worker.records_processed >= 5
                and not worker.tasks.restoring()
            )
        )

        async def done() -> bool:
            return len((await outputs(bootstrap_servers, unique))["sum"]) >= 5

        await wait_until(done)
    out = await outputs(bootstrap_servers, unique)
    assert attempts == {2: 3}  # failed twice, then succeeded
    assert [v for _, v in out["echo"]] == [1, 2, 13, 4, 5]
    assert out["sum"] == [("a", 1), ("a", 3), ("a", 16), ("a", 20), ("b", 5)]


async def test_dlq_policy_dead_letters_the_record_once_and_goes_on(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=99, error_policy="dlq")
    async with running_worker(app, tmp_path / "s"):
        await feed(app, f"in-{unique}", RECORDS)

        async def done() -> bool:
            return len((await outputs(bootstrap_servers, unique))["sum"]) >= 4

        await wait_until(done)
    out = await outputs(bootstrap_servers, unique)
    # The failed record's echo and table update were aborted with its transaction.
    assert [v for _, v in out["echo"]] == [1, 2, 4, 5]
    assert out["sum"] == [("a", 1), ("a", 3), ("a", 7), ("b", 5)]
    dlq = (await read_topics(bootstrap_servers, [f"in-{unique}.dlq"]))[f"in-{unique}.dlq"]
    assert len(dlq) == 1
    assert json.loads(dlq[0].value) == 13
    assert dlq[0].header(H_ERROR_TYPE) == b"RuntimeError"
    assert dlq[0].header(H_SOURCE_TOPIC) == f"in-{unique}".encode()
    assert dlq[0].header(H_SOURCE_OFFSET) == b"2"
    # Retried max_retries (3) times, each after a backoff of its partition, then dead-lettered.
    assert dlq[0].header(H_ATTEMPTS) == b"4"
    assert attempts == {2: 4}


async def test_stop_policy_stops_the_worker_with_nothing_partial_visible(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=99, error_policy="stop")
    worker = app.worker(state_dir=tmp_path / "s")
    run = asyncio.create_task(worker.run())
    await await_started(worker, run)
    await feed(app, f"in-{unique}", RECORDS)
    with pytest.raises(WorkerStopped, match=rf"in-{unique}\[0\]@2"):
        await asyncio.wait_for(run, 60)
    out = await outputs(bootstrap_servers, unique)
    # Records before the failure may have committed; nothing of the failed one did.
    assert 13 not in [v for _, v in out["echo"]]
    assert all(v < 13 for _, v in out["sum"])


async def test_undecodable_record_goes_to_the_dead_letter_topic_in_the_transaction(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=0)
    async with running_worker(app, tmp_path / "s"):
        async with app.producer() as producer:
            await producer.send(f"in-{unique}", key="a", value=1, partition=0)
            # Not JSON: the int value type cannot decode it.
            raw = app.topic("raw-view", value_serializer="raw")
            raw.name = f"in-{unique}"
            await producer.send(raw, key=None, value=b"\x00poison", partition=0)
            await producer.send(f"in-{unique}", key="a", value=2, partition=0)

        async def done() -> bool:
            return len((await outputs(bootstrap_servers, unique))["sum"]) >= 2

        await wait_until(done)
    out = await outputs(bootstrap_servers, unique)
    assert out["sum"] == [("a", 1), ("a", 3)]
    dlq = (await read_topics(bootstrap_servers, [f"in-{unique}.dlq"]))[f"in-{unique}.dlq"]
    assert [r.value for r in dlq] == [b"\x00poison"]
    assert dlq[0].header(H_ERROR_TYPE) == b"DecodeError"
    assert dlq[0].header(H_SOURCE_OFFSET) == b"1"


async def test_two_poison_records_in_one_window_are_both_dead_lettered_without_livelock(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """Two records that make the agent raise, on two partitions, fetched in one batch (one
    uncommitted window): each failure aborts the transaction, and the dead-letter decision of
    the first must survive the abort caused by the second."""
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=99, error_policy="dlq")
    topic = f"in-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(topic, 2, 1))
    async with app.producer() as producer:  # both in the topic before the worker fetches
        for partition in (0, 1):
            for value in (1, 13, 2):
                await producer.send(topic, key="a", value=value, partition=partition)
    async with running_worker(app, tmp_path / "s") as worker:

        async def done() -> bool:
            return len((await outputs(bootstrap_servers, unique))["sum"]) >= 4

        await wait_until(done, timeout=30)
        aborts = worker.producer.transactions_aborted
    dlq = (await read_topics(bootstrap_servers, [f"{topic}.dlq"]))[f"{topic}.dlq"]
    assert sorted((r.partition, r.header(H_SOURCE_OFFSET)) for r in dlq) == [(0, b"1"), (1, b"1")]
    out = await outputs(bootstrap_servers, unique)
    assert sorted(v for _, v in out["echo"]) == [1, 1, 2, 2]
    # Each poison record costs at most (max_retries + 1) aborts; nothing loops.
    assert aborts <= 2 * ((app.conf.max_retries or 0) + 1)


async def limit_topic(bootstrap: str, topic: str, max_bytes: int) -> None:
    """Lower a topic's max.message.bytes while a worker runs (a start-time check cannot see
    it coming), and wait until the broker applies it: a probe twice that size is refused.
    The probes carry no dead-letter or lineage headers, so the checks below tell them apart."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"max.message.bytes": str(max_bytes)})]
        )
    finally:
        await admin.close()

    async def refused() -> bool:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"x" * (2 * max_bytes), partition=0)
        except MessageSizeTooLargeError:
            return True
        finally:
            await producer.stop()
        return False

    await wait_until(refused, timeout=30, interval=0.2)


async def test_a_dead_letter_the_topic_refuses_is_sent_again_truncated(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """The dead-letter topic takes at most 2 kB (its max.message.bytes, lowered while the
    worker runs, so the worker cannot know): the broker refuses the copy of a 5 kB poison record
    at commit. Retrying it whole would fail the same way forever, and stopping would block
    every partition at every restart: the record is dead-lettered again, truncated to its
    first kilobyte, and the worker goes on (runtime/dead_letter_size.py)."""
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=0)
    topic = f"in-{unique}"
    async with running_worker(app, tmp_path / "s") as worker:
        await limit_topic(bootstrap_servers, f"{topic}.dlq", 2000)
        async with app.producer() as producer:
            await producer.send(topic, key="a", value=1, partition=0)
            raw = app.topic("raw-view", value_serializer="raw")
            raw.name = topic
            await producer.send(raw, key=None, value=b"x" * 5000, partition=0)  # not an int
            await producer.send(topic, key="a", value=2, partition=0)
        await wait_until(lambda: worker.dead_lettered == 1 and worker.records_processed >= 2)
        assert worker.producer.transactions_aborted <= 2
    dlq = (await read_topics(bootstrap_servers, [f"{topic}.dlq"]))[f"{topic}.dlq"]
    dlq = [r for r in dlq if r.header(H_SOURCE_OFFSET) is not None]  # not limit_topic's probes
    assert len(dlq) == 1
    assert dlq[0].value == b"x" * 1024
    assert dlq[0].header(H_TRUNCATED) == b"value"
    assert dlq[0].header(H_ORIGINAL_SIZE) == b"5000"
    assert dlq[0].header(H_SOURCE_OFFSET) == b"1"
    assert [v for _, v in (await outputs(bootstrap_servers, unique))["echo"]] == [1, 2]


async def test_a_failing_group_by_key_mid_batch_aborts_cleanly(
    bootstrap_servers: str, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The key function of a group_by fails while the batch is still being handed out, so the
    other agent is still processing it: the agents are stopped before the abort, never sending
    into a transaction being aborted (that used to fail the retry transaction too)."""
    app = App(f"gb-{unique}", broker=bootstrap_servers, topic_partitions=1, retry_backoff=0.05)
    topic = f"gb-in-{unique}"
    source = app.topic(topic, key_type=str, value_type="json")
    echo = app.topic(f"gb-echo-{unique}", key_type=str, value_type="json")

    def bucket(value: object) -> int:
        assert isinstance(value, int), "not a number"
        return value % 10

    @app.agent(source)
    async def copy(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            await echo.send(key=key, value=value)

    @app.agent(source)
    async def regroup(stream):  # type: ignore[no-untyped-def]
        async for _ in stream.group_by(bucket, name="bucket"):
            pass

    await create_topics(bootstrap_servers, TopicSpec(topic, 1, 1))
    async with app.producer() as producer:  # all in one fetch
        for i in range(300):
            await producer.send(topic, key="k", value=i if i != 150 else "poison")
    async with running_worker(app, tmp_path / "s") as worker:
        await wait_until(lambda: worker.dead_lettered == 1 and worker.records_processed >= 299)
    assert not [r for r in caplog.records if "transaction failed" in r.getMessage()]
    out = (await read_topics(bootstrap_servers, [f"gb-echo-{unique}"]))[f"gb-echo-{unique}"]
    assert sorted(json.loads(r.value or b"null") for r in out) == [
        i for i in range(300) if i != 150
    ]


async def test_an_output_the_broker_refuses_at_commit_stops_the_worker_naming_the_topic(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """The echo topic takes at most 2 kB (lowered while the worker runs): the broker refuses a
    4 kB output when the transaction is sent. No input record can be blamed for it, and every
    retry would fail the same way, so the worker stops naming the topic (Kafka Streams'
    ProductionExceptionHandler: FAIL)."""
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=0)
    topic, echo = f"in-{unique}", f"echo-{unique}"
    worker = app.worker(state_dir=tmp_path / "s")
    run = asyncio.create_task(worker.run())
    await await_started(worker, run)
    await limit_topic(bootstrap_servers, echo, 2000)
    async with app.producer() as producer:
        await producer.send(topic, key="a", value=10**4000, partition=0)  # 4001 digits
    with pytest.raises(WorkerStopped, match=f"topic '{echo}' refused a record for good"):
        await asyncio.wait_for(run, 60)
    assert worker.producer.transactions_aborted <= 2
    outputs = (await read_topics(bootstrap_servers, [echo]))[echo]
    assert [r for r in outputs if r.lineage is not None] == []
