"""A changelog's records at commit (``StreamsProducer.send_records``), which fills batches
inline: every record in order, across batches that fill up, and the future of the last one.
Unit test of our own batching on the in-memory transport; the changelog on the real broker is
tested by every exactly-once test with a table (tests/runtime/test_crash.py, ...)."""

from __future__ import annotations

from streams_app.runtime.send_futures import RecordFuture
from streams_app.transport.base import GroupMetadata
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
