"""A changelog's records at commit (``StreamsProducer.send_records``), which fills batches
inline: every record in order, across batches that fill up, and the future of the last one.
And a join's run of results (``StreamsProducer.send_run_nowait``): the same records, by key,
as sent one by one; where it stops; while a commit is in flight; before the transaction.
Unit test of our own batching on the in-memory transport; the changelog on the real broker is
tested by every exactly-once test with a table (tests/runtime/test_crash.py, ...)."""

from __future__ import annotations

import asyncio

from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.send_futures import RecordFuture
from streams_app.transport.base import GroupMetadata, ProducerConfig
from tests.unit.test_held_sends import _batching_producer

GROUP = GroupMetadata("g", 3, "member-1")


async def test_records_fill_batch_after_batch_in_order_and_the_last_future_is_returned() -> None:
    producer, kafka = await _batching_producer(max_batch_size=1024)
    # One record through the unheld path first: send_records continues its open batch.
    assert producer.send_nowait("out", b"k", b"first", None, None, None) is not None
    records = [(b"key-%d" % n, None if n % 9 == 4 else b"%d" % n + b"." * 50) for n in range(120)]
    last = await producer.send_records("out", 0, records)
    assert isinstance(last, RecordFuture) and not last.done()
    assert await producer.send_records("out", 0, []) is None
    await producer.commit({}, GROUP)
    read = kafka.read("out", read_committed=True)  # type: ignore[attr-defined]
    assert [(r.key, r.value) for r in read] == [(b"k", b"first"), *records]
    # Several batches (1,024 bytes hold about a dozen of these), one record count each.
    assert len({r.offset for r in read}) == 121 and [r.offset for r in read] == sorted(
        r.offset for r in read
    )
    assert last.done() and last.result().offset == read[-1].offset
    # Each batch sealed with its own record count (the count a direct batch is sealed with,
    # by which the producer's sequence numbers advance).
    assert producer.stats.records_out["out"] == 121
    assert producer.stats.batch_records.count > 5


def _partitions(kafka: object, topic: str) -> dict[int, list[tuple[object, ...]]]:
    """What ``topic`` holds (committed), by partition: key, value, headers, timestamp."""
    out: dict[int, list[tuple[object, ...]]] = {}
    for r in kafka.read(topic, read_committed=True):  # type: ignore[attr-defined]
        out.setdefault(r.partition, []).append((r.key, r.value, list(r.headers), r.timestamp))
    return out


def _run_rows(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]:
    return [
        (
            b"key-%d" % (i % 7),
            None if i % 11 == 3 else b"v%d" % i + b"." * 40,
            [("src_offset", b"%d" % i)] if i % 2 else [],
            1_000 + i,
        )
        for i in range(n)
    ]


async def test_a_run_lands_as_the_same_records_sent_one_by_one() -> None:
    producer, kafka = await _batching_producer(max_batch_size=1024)
    kafka.create_topic("run", 3)  # type: ignore[attr-defined]
    kafka.create_topic("each", 3)  # type: ignore[attr-defined]
    rows = _run_rows(150)
    assert producer.send_run_nowait("run", rows) == len(rows)
    for key, value, headers, ts in rows:
        await producer.send("each", key=key, value=value, headers=headers, timestamp_ms=ts)
    await producer.commit({}, GROUP)
    run, each = _partitions(kafka, "run"), _partitions(kafka, "each")
    assert run == each and len(run) == 3  # by key, in order, headers and times kept
    assert sum(map(len, run.values())) == 150
    # Several batches per partition, each sealed with its own count.
    assert producer.stats.records_out["run"] == 150
    assert producer.stats.batch_records.count > 6


async def test_a_run_stops_at_the_first_record_the_batch_path_refuses() -> None:
    producer, kafka = await _batching_producer(max_batch_size=1024)
    rows = _run_rows(20)
    rows[12] = (b"key-x", b"L" * 4096, [], 5)  # too large for the batch path
    assert producer.send_run_nowait("out", rows) == 12
    for key, value, headers, ts in rows[12:]:
        await producer.send("out", key=key, value=value, headers=headers, timestamp_ms=ts)
    await producer.commit({}, GROUP)
    assert [r.value for r in kafka.read("out", read_committed=True)] == [r[1] for r in rows]  # type: ignore[attr-defined]


async def test_a_run_stops_where_the_queue_of_full_batches_reaches_its_bound() -> None:
    """A run takes rows until the batches it filled make the send queue reach its bound (the
    producer's backpressure): the rest, sent one by one, land as the same records sent one by
    one from the start."""
    producer, kafka = await _batching_producer(max_batch_size=1024)
    kafka.create_topic("run", 3)  # type: ignore[attr-defined]
    kafka.create_topic("each", 3)  # type: ignore[attr-defined]
    producer.MAX_QUEUED_BATCHES = 2  # type: ignore[misc]
    rows = _run_rows(150)
    taken = producer.send_run_nowait("run", rows)
    assert 12 < taken < 150 and len(producer._queue) >= 2
    assert producer.send_run_nowait("run", rows[taken:]) == 0  # still full: nothing taken
    for key, value, headers, ts in rows[taken:]:
        await producer.send("run", key=key, value=value, headers=headers, timestamp_ms=ts)
    for key, value, headers, ts in rows:
        await producer.send("each", key=key, value=value, headers=headers, timestamp_ms=ts)
    await producer.commit({}, GROUP)
    run, each = _partitions(kafka, "run"), _partitions(kafka, "each")
    assert run == each and sum(map(len, run.values())) == 150


async def test_a_run_while_holding_joins_the_next_transaction_in_order() -> None:
    producer, kafka = await _batching_producer(max_batch_size=1024)
    assert producer.send_nowait("out", b"k", b"first", None, None, None) is not None
    producer.hold()
    committing = asyncio.ensure_future(producer.commit({}, GROUP))
    rows = _run_rows(30)
    assert producer.send_run_nowait("out", rows) == 30
    await committing
    assert [r.value for r in kafka.read("out", read_committed=True)] == [b"first"]  # type: ignore[attr-defined]
    await producer.release()
    await producer.commit({}, GROUP)
    values = [r.value for r in kafka.read("out", read_committed=True)]  # type: ignore[attr-defined]
    assert values == [b"first", *(r[1] for r in rows)]


async def test_a_held_run_takes_the_batch_path_and_keeps_order_past_a_refused_record() -> None:
    """While holding, a run fills held batches inline (several, as they fill up); a record too
    large for the batch path becomes a held send, and every row after it queues behind it:
    after the release, the next transaction has them all, in order."""
    producer, kafka = await _batching_producer(max_batch_size=1024)
    producer.hold()
    committing = asyncio.ensure_future(producer.commit({}, GROUP))
    first, second = _run_rows(60), _run_rows(40)
    second[7] = (b"key-x", b"L" * 4096, [], 5)
    assert producer.send_run_nowait("out", first) == 60
    assert producer.send_nowait("out", b"k", b"one", None, None, None) is not None
    assert producer.send_run_nowait("out", second) == 40
    assert producer.send_run_nowait("out", _run_rows(3)) == 3  # behind the held send
    await committing
    assert kafka.read("out", read_committed=True) == []  # type: ignore[attr-defined]
    await producer.release()
    await producer.commit({}, GROUP)
    values = [r.value for r in kafka.read("out", read_committed=True)]  # type: ignore[attr-defined]
    assert values == [
        *(r[1] for r in first),
        b"one",
        *(r[1] for r in second),
        *(r[1] for r in _run_rows(3)),
    ]
    assert producer.stats.batch_records.count > 6  # held batches filled and sealed inline


async def test_no_run_is_taken_before_the_transaction_begins() -> None:
    from streams_app.testing.memory.broker import MemoryKafka

    kafka = MemoryKafka()
    kafka.create_topic("out", 1)
    producer = StreamsProducer(kafka.transport(), ProducerConfig(transactional_id="tx"))
    await producer.start()
    assert producer.send_run_nowait("out", _run_rows(3)) == 0
    await producer.maybe_begin()
    await producer.send("out", key=b"k", value=b"v")  # the topic's metadata
    assert producer.send_run_nowait("out", _run_rows(3)) == 3
