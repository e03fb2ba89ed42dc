"""Stream time's pieces without a broker: the offset-metadata codec, topic stages, window
definitions (boundaries, close and expiry times, durations) and the PartitionGroup's order."""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta

import pytest

from streams_app import App
from streams_app.app.windows import SessionWindows, SlidingWindows, TimeWindows, duration_ms
from streams_app.errors import InvalidTimestamp
from streams_app.runtime.partition_group import PartitionGroup
from streams_app.runtime.stream_time import decode_metadata, encode_metadata, topic_stages
from streams_app.state.windowed import WindowKey
from streams_app.testing.memory.broker import MemoryRecord
from streams_app.transport.base import TopicPartition


def test_stream_time_metadata_round_trips_and_tolerates_foreign_metadata() -> None:
    meta = decode_metadata(encode_metadata(1_700_000_000_123, {"views": 1_700_000_000_000}))
    assert (meta.partition_time, meta.tables) == (1_700_000_000_123, {"views": 1_700_000_000_000})
    for foreign in ("", None, "AgAAAYvX", "sa1:{not json", "sa1:[1]"):
        assert decode_metadata(foreign).partition_time == -1
        assert decode_metadata(foreign).committer is None
    assert meta.committer is None  # at-least-once commits name nobody
    # Exactly-once commits name their transactional id, for a successor to fence.
    named = decode_metadata(encode_metadata(5, {}, "app-0123abcd"))
    assert (named.partition_time, named.committer) == (5, "app-0123abcd")
    assert decode_metadata('sa1:{"p":5,"x":7}').committer is None  # not an id: ignored
    # Near the broker's offset.metadata.max.bytes, the id is what gives way.
    crowded = {f"window-table-{i:03d}": 1_700_000_000_000 for i in range(123)}
    near = encode_metadata(5, crowded, "app-" + "f" * 32)
    assert len(near) == len(encode_metadata(5, crowded)) == 4076  # 4119 with the id
    assert decode_metadata(near).tables == crowded and decode_metadata(near).committer is None
    roomy = encode_metadata(5, dict(list(crowded.items())[:100]), "app-" + "f" * 32)
    assert decode_metadata(roomy).committer == "app-" + "f" * 32


def test_stages_count_group_by_hops() -> None:
    stages = topic_stages(
        ["in", "in-a-repartition", "in-b-repartition"],
        {
            "in-a-repartition": "in",
            "in-b-repartition": "in-a-repartition",
        },
    )
    assert stages == {"in": 0, "in-a-repartition": 1, "in-b-repartition": 2}


def test_time_windows_follow_kafka_streams_boundaries() -> None:
    hopping = TimeWindows(20, 5, grace=3)
    assert list(hopping.starts_for(1_700_000_012_345)) == [
        1_699_999_995_000,
        1_700_000_000_000,
        1_700_000_005_000,
        1_700_000_010_000,
    ]
    assert list(hopping.starts_for(7_000)) == [0, 5_000]  # never a negative start
    w = WindowKey("k", 0, 20_000)
    assert hopping.close_at(w) == 23_000  # closed once stream time reaches end + grace
    assert hopping.expire_at(w) == 23_001  # retention size + grace: kept while start + it >= t
    sliding, session = SlidingWindows(10, grace=3), SessionWindows(5, grace=3)
    assert sliding.close_at(WindowKey("k", 0, 10_000)) == 13_001  # ends are inclusive
    assert session.close_at(WindowKey("k", 100, 200)) == 200 + 5_000 + 3_000  # as Kafka Streams 4.3
    # Faust's expires shorter than the window (tumbling(10, expires=1)): kept until it closes.
    assert TimeWindows(60, expires=30).retention_ms == 60_000
    assert TimeWindows(60, expires=90).retention_ms == 90_000
    assert duration_ms(timedelta(minutes=1), "size") == duration_ms(60, "size") == 60_000
    assert duration_ms(0.0015, "grace") == 2  # rounded to whole ms


def test_timestamp_fn_and_invalid_timestamps() -> None:
    app = App("ts-unit")
    topic = app.topic("t", timestamp_fn=lambda v: v["at"])
    at = datetime(2024, 1, 1, tzinfo=UTC)
    assert topic.timestamp_of(5, {"at": at}, -1) == 1_704_067_200_000
    assert topic.timestamp_of(5, {"at": 1.5}, -1) == 1_500
    with pytest.raises(InvalidTimestamp, match="returned None"):
        topic.timestamp_of(5, {"at": None}, -1)
    lenient = app.topic("u", timestamp_fn=lambda v: v["at"], on_invalid_timestamp="record_time")
    assert lenient.timestamp_of(5, {"at": -3}, -1) == 5
    by_partition = app.topic("w", on_invalid_timestamp="partition_time")
    assert by_partition.timestamp_of(-1, None, 42) == 42
    with pytest.raises(InvalidTimestamp):
        by_partition.timestamp_of(-1, None, -1)


def _records(topic: str, stamps: list[int]) -> list[MemoryRecord]:
    return [MemoryRecord(topic, 0, i, ts, None, None, ()) for i, ts in enumerate(stamps)]


def test_partition_group_takes_the_smallest_timestamp_and_waits_for_lagging_inputs() -> None:
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    lags: dict[TopicPartition, int | None] = {a: 0, b: None}
    group = PartitionGroup([a, b], max_idle=2.0, lag=lags.get, limit=100)
    group.add(a, _records("a", [10, 30, 50]), lambda r: r.timestamp)
    assert not group.ready(0.0)  # b never fetched: its records may be one fetch away
    lags[b] = 3
    assert not group.ready(0.0)  # b has records on the broker
    lags[b] = 0
    assert not group.ready(0.0)  # b is caught up: wait max_task_idle for it
    assert group.ready(2.0) and group.enforced == 1
    group.add(b, _records("b", [20, 40]), lambda r: r.timestamp)
    order = []
    while group.buffered and group.ready(3.0):
        tp, run = group.next_run()
        order += [(tp.topic, r.timestamp) for r in run]
        if not group.queues[b] and group.queues[a]:
            break  # b is empty again: the rest waits
    assert order == [("a", 10), ("b", 20), ("a", 30), ("b", 40)]
    assert [r.timestamp for r in group.queues[a]] == [50]
    assert group.clear() == [] and group.buffered == 0 and group.queues[a] == deque()


def test_partition_group_takes_each_timestamp_once_and_none_for_a_lone_partition() -> None:
    """Only heads are timed, each once while it is the head (a ``timestamp_fn`` may decode
    the value); a partition that is the only one with records hands its whole buffer over
    without any timestamp taken (a join's stream partition, its table's read up)."""
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    group = PartitionGroup([a, b], max_idle=-1, lag=lambda tp: 0, limit=100)
    timed: list[int] = []

    def timestamp(record: MemoryRecord) -> int:
        timed.append(record.timestamp)
        return record.timestamp

    group.add(a, _records("a", [10, 20, 30]), timestamp)
    tp, run = group.next_run()
    assert (tp, [r.timestamp for r in run], timed) == (a, [10, 20, 30], [])
    group.add(a, _records("a", [10, 30, 50]), timestamp)
    group.add(b, _records("b", [20, 40]), timestamp)
    order = []
    while group.buffered:
        tp, run = group.next_run()
        order += [(tp.topic, r.timestamp) for r in run]
    assert order == [("a", 10), ("b", 20), ("a", 30), ("b", 40), ("a", 50)]
    # Each record timed once (the one that stops a run stays the timed head).
    assert sorted(timed) == [10, 20, 30, 40, 50]


def test_partition_group_drops_a_held_partition() -> None:
    """A partition held back for busy agents: its buffered records are dropped (the consumer
    seeks back and fetches them again, in order), and the group does not wait for it."""
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    held: set[TopicPartition] = set()
    group = PartitionGroup([a, b], max_idle=0.0, lag=lambda tp: 0 if tp in held else 5, limit=2)
    group.add(a, _records("a", [10, 30, 50]), lambda r: r.timestamp)
    group.add(b, _records("b", [20]), lambda r: r.timestamp)
    assert group.to_pause() == [a]
    tp, run = group.next_run()
    assert (tp, [r.timestamp for r in run]) == (a, [10])
    tp, run = group.next_run()
    assert (tp, [r.timestamp for r in run]) == (b, [20])
    assert not group.ready(0.0)  # b is empty and has records on the broker
    held.add(b)
    group.drop(a)
    assert group.buffered == 0 and not group.paused and not group.ready(0.0)
    group.add(a, _records("a", [30, 50]), lambda r: r.timestamp)
    assert group.ready(0.0)  # b is held: not waited for


def test_max_task_idle_is_validated() -> None:
    from streams_app.errors import ConfigError
    from streams_app.settings import Settings

    assert Settings.build("x", {"max_task_idle": -1}, environ={}).max_task_idle == -1
    with pytest.raises(ConfigError, match="max_task_idle"):
        Settings.build("x", {"max_task_idle": -2}, environ={})
