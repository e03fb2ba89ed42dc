"""The bad-input corpus (issue 10, "Done when" 1), against the real broker, under every policy.

Every kind of record a worker can be fed that it cannot process, mixed with good records on
many partitions, all in the topic before the worker starts (so they fall in one fetch and one
uncommitted window). For each, where it ends up (the dead-letter topic with headers saying
why, or a clear stop naming it), that every good record around them is committed exactly
once (read back ``read_committed``, by lineage headers), that nothing livelocks (the number of
aborted transactions is bounded) and that no partition waits for another's failure.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from streams_app import App, WorkerStopped
from streams_app.readback import ReadRecord, group_lag, read_topics, wait_committed
from streams_app.runtime.dead_letter_size import H_ORIGINAL_SIZE, H_TRUNCATED
from streams_app.runtime.errors_policy import (
    H_AGENT,
    H_ATTEMPTS,
    H_ERROR_TYPE,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TOPIC,
)
from streams_app.runtime.worker import Worker
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import await_started, wait_until

PARTITIONS = 24
GOOD_PER_PARTITION = 4
RETRY_BACKOFF = 0.05
RETRY_BACKOFF_MAX = 0.4
MAX_RETRIES = 3


class Item(faust.Record, serializer="json"):
    id: str
    qty: int


def good_value(partition: int, index: int) -> bytes:
    return json.dumps({"id": f"g{partition}-{index}", "qty": index}).encode()


#: kind -> (key, value, the dead-letter error type). Keys are str on the wire (key_type=str).
BAD_RECORDS: dict[str, tuple[bytes | None, bytes | None, str]] = {
    "not json": (b"k", b"{not json", "DecodeError"),
    "missing field": (b"k", b'{"id":"x"}', "DecodeError"),
    "wrong field type": (b"k", b'{"id":"x","qty":"two"}', "DecodeError"),
    "json array": (b"k", b"[1,2]", "DecodeError"),
    "binary garbage": (b"k", b"\x00\xff\xfe\x81garbage\x00", "DecodeError"),
    "non-utf-8 key": (b"\xff\xfe\xfd", good_value(99, 0), "DecodeError"),
    "empty value": (b"k", b"", "DecodeError"),
    "tombstone": (b"k", None, "TombstoneError"),
    "null key": (None, good_value(98, 0), "NullKeyError"),
}
POISON = json.dumps({"id": "poison", "qty": 13}).encode()


def corpus_app(unique: str, bootstrap: str, policy: str, **settings: object) -> App:
    """Counts each key in a table and echoes the item; qty 13 makes the agent raise."""
    app = App(
        f"corpus-{unique}",
        broker=bootstrap,
        topic_partitions=PARTITIONS,
        error_policy=policy,
        max_retries=MAX_RETRIES,
        retry_backoff=RETRY_BACKOFF,
        retry_backoff_max=RETRY_BACKOFF_MAX,
        **settings,
    )
    source = app.topic(f"corpus-in-{unique}", key_type=str, value_type=Item)
    out = app.topic(f"corpus-out-{unique}", key_type=str, value_type=Item)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def process(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            item = event.value
            if item.qty == 13:
                raise RuntimeError("unlucky number")
            counts[event.key] += 1  # a null key raises here, before anything is written
            await out.send(key=event.key, value=item)

    return app


@dataclass(frozen=True)
class Fed:
    partition: int
    offset: int
    kind: str  # "good", "poison" or a BAD_RECORDS kind
    key: bytes | None


async def feed(
    bootstrap: str, topic: str, plan: dict[int, list[tuple[str, bytes | None, bytes | None]]]
) -> list[Fed]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=20
    )
    await producer.start()
    try:
        futures = []
        for partition, records in plan.items():
            for kind, key, value in records:
                future = await producer.send(topic, key=key, value=value, partition=partition)
                futures.append((kind, key, future))
        await producer.flush()
        fed = []
        for kind, key, future in futures:
            metadata = await future
            fed.append(Fed(metadata.partition, metadata.offset, kind, key))
        return fed
    finally:
        await producer.stop()


def corpus_plan(poison_partitions: int) -> dict[int, list[tuple[str, bytes | None, bytes | None]]]:
    """Partitions 0..poison_partitions-1: good records around one poison record; the others:
    good records around the bad records, spread round-robin."""
    plan: dict[int, list[tuple[str, bytes | None, bytes | None]]] = {}
    for partition in range(PARTITIONS):
        plan[partition] = [
            ("good", f"k{partition}-{i}".encode(), good_value(partition, i))
            for i in range(GOOD_PER_PARTITION)
        ]
    for partition in range(poison_partitions):
        plan[partition].insert(2, ("poison", f"p{partition}".encode(), POISON))
    others = list(range(poison_partitions, PARTITIONS))
    for index, (kind, (key, value, _)) in enumerate(BAD_RECORDS.items()):
        records = plan[others[index % len(others)]]
        records.insert(1 + index % (len(records) - 1), (kind, key, value))
    return plan


async def start(app: App, state_dir: Path) -> tuple[Worker, asyncio.Task[None]]:
    worker = app.worker(state_dir=state_dir)
    task = asyncio.create_task(worker.run())
    await await_started(worker, task)
    return worker, task


async def stop(worker: Worker, task: asyncio.Task[None]) -> None:
    worker.request_stop()
    await asyncio.wait_for(task, 60)


async def lag_of(bootstrap: str, group: str, topic: str) -> dict[tuple[str, int], int] | None:
    """The group's lag per partition; None while the group coordinator is not there yet."""
    try:
        return await group_lag(bootstrap, group, [topic])
    except KafkaError:
        return None


def lineage(records: list[ReadRecord]) -> Counter[tuple[int, int]]:
    sources = (r.lineage for r in records)
    return Counter((s[1], s[2]) if s is not None else (-1, -1) for s in sources)


def attempts_within(seconds: float) -> int:
    """How many times one record can be tried in ``seconds`` under exponential backoff."""
    doublings = math.ceil(math.log2(RETRY_BACKOFF_MAX / RETRY_BACKOFF))
    return 2 + doublings + math.ceil(seconds / RETRY_BACKOFF_MAX)


# Each policy once in make test, with 2 or 20 poison records; the other three combinations
# in make test-long.
@pytest.mark.parametrize(
    ("policy", "poison_partitions"),
    [
        ("dlq", 20),
        ("stop", 2),
        ("retry", 20),
        pytest.param("dlq", 2, marks=pytest.mark.long),
        pytest.param("stop", 20, marks=pytest.mark.long),
        pytest.param("retry", 2, marks=pytest.mark.long),
    ],
)
async def test_bad_input_corpus(
    bootstrap_servers: str, unique: str, tmp_path: Path, policy: str, poison_partitions: int
) -> None:
    app = corpus_app(unique, bootstrap_servers, policy)
    source, out = f"corpus-in-{unique}", f"corpus-out-{unique}"
    dlq, changelog = f"{source}.dlq", f"corpus-{unique}-counts-changelog"
    await create_topics(bootstrap_servers, TopicSpec(source, PARTITIONS, 1))
    fed = await feed(bootstrap_servers, source, corpus_plan(poison_partitions))
    good = {(f.partition, f.offset) for f in fed if f.kind == "good"}
    poison = {(f.partition, f.offset) for f in fed if f.kind == "poison"}
    bad = {(f.partition, f.offset): f.kind for f in fed if f.kind in BAD_RECORDS}
    loop = asyncio.get_running_loop()

    worker, task = await start(app, tmp_path / "state")
    began = loop.time()
    stopped: BaseException | None = None
    try:
        if policy == "stop":
            with pytest.raises(WorkerStopped) as raised:
                await asyncio.wait_for(asyncio.shield(task), 60)
            stopped = raised.value
        elif policy == "dlq":

            async def drained() -> bool:
                lag = await lag_of(bootstrap_servers, app.id, source)
                return lag is not None and not lag

            await wait_until(drained, timeout=90)
        else:  # retry: only the poison partitions wait, exactly at their poison record

            async def only_poison_waits() -> bool:
                lag = await lag_of(bootstrap_servers, app.id, source)
                return lag is not None and set(lag) == {(source, p) for p, _ in poison}

            await wait_until(only_poison_waits, timeout=90)
        elapsed = loop.time() - began
        aborts = worker.producer.transactions_aborted
    finally:
        if not task.done():
            await stop(worker, task)

    # No livelock: every abort is one failed attempt of one poison record, and a record is
    # tried a bounded number of times (retry: as often as its backoff allows in the time).
    # A bad record the agent trips over (a null key at the table) costs one abort.
    tries = MAX_RETRIES + 1 if policy != "retry" else attempts_within(elapsed)
    in_agent = sum(1 for kind in bad.values() if kind == "null key")
    assert aborts <= len(poison) * tries + in_agent, (aborts, len(poison), tries)

    data = await read_topics(bootstrap_servers, [out, dlq, changelog])
    outputs = lineage(data[out])
    # Every good record committed at most once, nothing of a bad or poison record.
    assert all(count == 1 for count in outputs.values()), outputs.most_common(3)
    assert set(outputs) <= good
    dead = {
        (int(r.header(H_SOURCE_PARTITION) or b"-1"), int(r.header(H_SOURCE_OFFSET) or b"-1")): r
        for r in data[dlq]
    }
    assert len(dead) == len(data[dlq]), "a record was dead-lettered twice"
    for position, record in dead.items():
        assert record.header(H_SOURCE_TOPIC) == source.encode()
        if position in poison:
            assert record.header(H_ERROR_TYPE) == b"RuntimeError"
            assert record.header(H_ATTEMPTS) == str(MAX_RETRIES + 1).encode()
            assert record.header(H_AGENT) == b"process[0]"
        else:
            assert position in bad, position
            assert record.header(H_ERROR_TYPE) == BAD_RECORDS[bad[position]][2].encode()
            assert record.partition == position[0]
    # A null key never touched a table row: the changelog holds the good keys only.
    # (Table keys are JSON, as Faust writes them; record keys raw.)
    changelog_keys = {json.loads(r.key) for r in data[changelog] if r.key is not None}
    good_keys = {f.key.decode() for f in fed if f.kind == "good" and f.key is not None}
    assert changelog_keys <= good_keys

    if policy == "dlq":
        # Everything ends somewhere: good records in the output, the rest dead-lettered.
        assert set(outputs) == good
        assert set(dead) == set(bad) | poison
        assert changelog_keys == good_keys
    elif policy == "retry":
        # The other partitions went on: all their good records are out, their bad records
        # dead-lettered; the poison partitions stopped exactly at their poison record.
        waiting = {p for p, _ in poison}
        assert {g for g in good if g[0] not in waiting} <= set(outputs)
        assert set(bad) <= set(dead)
        assert not poison & set(dead)
        committed_poison_partition = [
            g for g in outputs if g[0] in waiting and g[1] > min(o for p, o in poison if p == g[0])
        ]
        assert not committed_poison_partition
    else:
        assert stopped is not None
        message = str(stopped)
        assert "agent process[0]" in message and "RuntimeError" in message
        assert any(f"{source}[{p}]@{o}" in message for p, o in poison), message
        assert not poison & set(dead)


@pytest.mark.parametrize("policy", ["dlq", "stop", "retry"])
async def test_a_record_over_the_request_limit_is_dead_lettered_truncated(
    bootstrap_servers: str, unique: str, tmp_path: Path, policy: str
) -> None:
    """Its output is refused by the producer (a bad record: no retry helps, whatever the
    policy), and a whole copy would be too: it is dead-lettered truncated to fit
    ``max_request_size`` (runtime/dead_letter_size.py), and the worker goes on."""
    app = corpus_app(
        unique,
        bootstrap_servers,
        policy,
        max_request_size=64 * 1024,
        producer_max_batch_size=32 * 1024,  # a batch must fit a request
    )
    source, out = f"corpus-in-{unique}", f"corpus-out-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 2, 1))
    big = json.dumps({"id": "x" * 200_000, "qty": 1}).encode()  # the broker takes 1 MB
    fed = await feed(
        bootstrap_servers,
        source,
        {
            0: [
                ("good", b"a", good_value(0, 0)),
                ("big", b"b", big),
                ("good", b"c", good_value(0, 1)),
            ],
            1: [("good", b"d", good_value(1, 0))],
        },
    )
    (big_record,) = [f for f in fed if f.kind == "big"]
    worker, task = await start(app, tmp_path / "state")
    try:
        await wait_committed(bootstrap_servers, app.conf.id, [source], outputs=[out])
        assert not task.done() and worker.error is None
    finally:
        await stop(worker, task)
    data = await read_topics(bootstrap_servers, [out, f"{source}.dlq"])
    (dead,) = data[f"{source}.dlq"]
    assert dead.header(H_SOURCE_OFFSET) == str(big_record.offset).encode()
    assert dead.header(H_TRUNCATED) == b"value"
    assert dead.header(H_ORIGINAL_SIZE) == str(len(big)).encode()
    assert dead.value is not None and big.startswith(dead.value)
    assert 32 * 1024 < len(dead.value) < 64 * 1024
    outputs = lineage(data[out])
    assert all(count == 1 for count in outputs.values())
    assert set(outputs) == {(f.partition, f.offset) for f in fed if f.kind == "good"}
