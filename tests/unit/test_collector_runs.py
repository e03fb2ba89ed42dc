"""RecordCollector.send_run_nowait: a run's results get the lineage header each would get
sent on its own (``headers_of``), whether the run is one partition's records (one
comprehension) or not (row by row), in the format ``lineage_format`` names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from streams_app.app.faust_settings import AppSettings
from streams_app.lineage import parse_lineage
from streams_app.runtime.scope import in_processing
from streams_app.runtime.worker.collector import RecordCollector
from streams_app.topology.contract import Event


class _Producer:
    """Takes every row and keeps what it was given (the collector's side only)."""

    transactional_id = None

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def send_run_nowait(self, topic: str, rows: Sequence[Any]) -> int:
        self.rows += rows
        return len(rows)


def _event(topic: str, partition: int, offset: int) -> Event:
    return Event(topic, partition, offset, 1_000, "k", "v", (), b"k", b"v", None)


def _sent(collector: RecordCollector, producer: _Producer, rows: list[Any]) -> list[Any]:
    producer.rows.clear()
    token = in_processing.set(True)
    try:
        assert collector.send_run_nowait("out", rows) == len(rows)
    finally:
        in_processing.reset(token)
    return producer.rows


def _collector(**settings: Any) -> tuple[RecordCollector, _Producer]:
    conf = AppSettings(id="runs", **settings)
    collector = RecordCollector(conf, None)  # type: ignore[arg-type]
    producer = _Producer()
    collector.attach(producer, lambda: None)  # type: ignore[arg-type]
    return collector, producer


def test_a_runs_rows_carry_each_records_lineage() -> None:
    collector, producer = _collector()
    events = [_event("in", 3, offset) for offset in (7, 8, 12)]
    rows = [(b"k%d" % i, b"v", 1_000 + i, e) for i, e in enumerate(events)]
    sent = _sent(collector, producer, rows)
    assert [(k, v, ms) for k, v, _, ms in sent] == [(k, v, ms) for k, v, ms, _ in rows]
    assert [h for _, _, h, _ in sent] == [[("src", b"in:3:%d" % e.offset)] for e in events]
    assert [h for _, _, h, _ in sent] == [collector.headers_of(None, e) for e in events]
    assert [parse_lineage(h) for _, _, h, _ in sent] == [("in", 3, e.offset) for e in events]


def test_the_split_format_writes_the_three_headers_readers_also_take() -> None:
    collector, producer = _collector(lineage_format="split")
    events = [_event("in", 3, offset) for offset in (7, 8)]
    sent = _sent(collector, producer, [(b"k", b"v", 1_000, e) for e in events])
    assert [h for _, _, h, _ in sent] == [
        [("src_topic", b"in"), ("src_partition", b"3"), ("src_offset", b"%d" % e.offset)]
        for e in events
    ]
    assert [parse_lineage(h) for _, _, h, _ in sent] == [("in", 3, e.offset) for e in events]


def test_a_record_of_its_own_headers_keeps_them_before_the_lineage() -> None:
    collector, _ = _collector()
    token = in_processing.set(True)
    try:
        assert collector.headers_of([("trace", b"x")], _event("in", 0, 5)) == [
            ("trace", b"x"),
            ("src", b"in:0:5"),
        ]
    finally:
        in_processing.reset(token)


@pytest.mark.parametrize(
    "odd",
    [
        _event("in", 4, 7),  # another partition
        _event("other", 3, 9),  # another topic, the same partition number
        None,  # of no record (an idle close's null)
        _event("in", 3, -1),  # a result fed back to readers: no offset
    ],
    ids=["partition", "topic", "no-record", "no-offset"],
)
def test_a_row_not_of_the_runs_partition_gets_its_own_headers(odd: Event | None) -> None:
    collector, producer = _collector()
    events = [_event("in", 3, 7), odd, _event("in", 3, 8)]
    rows = [(b"k", b"v", 1_000, e) for e in events]
    sent = _sent(collector, producer, rows)
    assert [h for _, _, h, _ in sent] == [collector.headers_of(None, e) for e in events]
    assert sent[0][2] == [("src", b"in:3:7")]


def test_without_lineage_headers_a_run_carries_none() -> None:
    collector, producer = _collector(lineage_headers=False)
    rows = [(b"k", b"v", 1_000, _event("in", 3, offset)) for offset in (1, 2)]
    assert [h for _, _, h, _ in _sent(collector, producer, rows)] == [None, None]
