"""The lineage format (streams_app/lineage.py): what the collector writes is what every reader
reads back, in the compact format and in the split one older workers wrote; what is not a
lineage reads as none."""

from __future__ import annotations

import pytest

from streams_app.lineage import (
    compact_value,
    lineage_headers,
    parse_compact,
    parse_lineage,
    source_format,
    source_prefix,
)
from streams_app.readback import ReadRecord
from streams_app.spark import lineage as former
from streams_app.testing import OutputRecord


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize(
    ("topic", "partition", "offset"),
    [("orders", 3, 1042), ("a.b-c_d", 0, 0), ("t" * 249, 99_999, 2**63 - 1)],
)
def test_both_formats_read_back_as_written(
    split: bool, topic: str, partition: int, offset: int
) -> None:
    headers = lineage_headers(topic, partition, offset, split=split)
    assert len(headers) == (3 if split else 1)
    assert parse_lineage(headers) == (topic, partition, offset)
    record = ReadRecord("out", 0, 0, 0, None, None, tuple(headers))
    assert record.lineage == (topic, partition, offset)
    assert OutputRecord("out", 0, 0, 0, None, None, tuple(headers)).lineage == (
        topic,
        partition,
        offset,
    )
    assert former.parse_lineage(headers) == (partition, offset)


def test_the_compact_value_is_the_partitions_prefix_and_the_offset() -> None:
    assert compact_value("orders", 3, 1042) == b"orders:3:1042"
    assert source_prefix("orders", 3) + b"1042" == compact_value("orders", 3, 1042)
    # The writer's format of the offset gives the same value (a "%" would be escaped).
    assert source_format("orders", 3) % 1042 == compact_value("orders", 3, 1042)
    assert source_format("a%d", 0) % 7 == b"a%d:0:7"
    assert lineage_headers("orders", 3, 1042) == [("src", b"orders:3:1042")]


def test_the_compact_header_wins_over_split_ones_and_other_headers_are_ignored() -> None:
    headers = [
        ("trace", b"x"),
        ("src_partition", b"1"),
        ("src_offset", b"2"),
        ("src", b"in:4:5"),
    ]
    assert parse_lineage(headers) == ("in", 4, 5)


def test_split_headers_without_a_topic_name_none() -> None:
    headers = former.lineage_headers(3, 42)
    assert parse_lineage(headers) == (None, 3, 42)
    assert former.parse_lineage(headers) == (3, 42)
    # The harness's lineage names a topic, or is none.
    assert OutputRecord("out", 0, 0, 0, None, None, tuple(headers)).lineage is None


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("trace", b"x")],
        [("src", b"orders:3")],
        [("src", b"orders:x:1")],
        [("src", b"orders:3:")],
        [("src", b"\xff:3:1")],
        [("src_partition", b"3")],
        [("src_partition", b"3"), ("src_offset", b"seven")],
        [("src_partition", None), ("src_offset", b"7")],
        [("src_topic", b"\xff"), ("src_partition", b"3"), ("src_offset", b"7")],
    ],
)
def test_what_is_no_lineage_reads_as_none(headers: list[tuple[str, bytes]]) -> None:
    assert parse_lineage(headers) is None
    assert ReadRecord("out", 0, 0, 0, None, None, tuple(headers)).lineage is None


def test_parse_compact_splits_from_the_right() -> None:
    assert parse_compact(b"orders:3:7") == ("orders", 3, 7)
    assert parse_compact(b"a:b:3:7") == ("a:b", 3, 7)  # not a topic Kafka allows; still read
    assert parse_compact(b"3:7") is None
