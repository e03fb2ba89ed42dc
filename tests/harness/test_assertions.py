"""The assertion helpers' failure messages: what was expected, what was seen, and where."""

from __future__ import annotations

import pytest

from streams_app.lineage import lineage_headers
from streams_app.testing import (
    OutputRecord,
    assert_exactly_once,
    assert_no_duplicates,
    assert_output,
    assert_partitions,
    assert_table,
)


def rec(
    key: str, value: object, partition: int, offset: int, src: int | None = None
) -> OutputRecord:
    headers: tuple[tuple[str, bytes], ...] = ()
    if src is not None:
        headers = tuple(lineage_headers("in", 0, src))
    return OutputRecord("out", partition, offset, 0, key, value, headers)


def test_assert_output_names_the_key_the_partition_and_the_difference() -> None:
    records = [rec("apple", 1, 2, 0), rec("apple", 2, 2, 1), rec("apple", 2, 2, 2)]
    with pytest.raises(AssertionError) as failure:
        assert_output(records, [("apple", 1), ("apple", 2), ("pear", 9)])
    message = str(failure.value)
    assert message.splitlines()[0] == "topic 'out': the output differs from what was expected"
    assert "key 'apple' (partition 2): expected 2 record(s), saw 3; repeated: 2" in message
    assert "extra from [2]: [2]" in message
    assert "key 'pear': expected [9], saw nothing" in message


def test_assert_output_passes_on_per_key_order_only() -> None:
    records = [rec("b", 1, 0, 0), rec("a", 1, 1, 0), rec("a", 2, 1, 1)]
    assert_output(records, [("a", 1), ("b", 1), ("a", 2)])
    with pytest.raises(AssertionError, match=r"first difference at \[0\]: expected 2, saw 1"):
        assert_output(records, [("a", 2), ("a", 1), ("b", 1)])
    assert_output(records, [("a", 2), ("a", 1), ("b", 1)], ordered=False)


def test_assert_partitions_compares_whole_partitions() -> None:
    records = [rec("a", 1, 0, 0), rec("b", 1, 1, 0)]
    with pytest.raises(AssertionError) as failure:
        assert_partitions(records, {0: [("a", 1)], 1: []}, topic="out")
    assert "partition 1: expected 0 record(s), saw 1; extra from [0]: [('b', 1)]" in str(
        failure.value
    )


def test_assert_table_lists_missing_unexpected_and_wrong_keys() -> None:
    with pytest.raises(AssertionError) as failure:
        assert_table({"a": 1, "b": 3, "z": 0}, {"a": 1, "b": 2, "c": 5}, table="stock")
    lines = str(failure.value).splitlines()
    assert lines[0] == "table 'stock' differs from what was expected"
    assert "  key 'b': expected 2, saw 3" in lines
    assert "  key 'c': expected 5, missing" in lines
    assert "  key 'z': not expected, saw 0" in lines


def test_assert_no_duplicates_points_at_both_copies() -> None:
    records = [rec("a", 1, 0, 0, src=7), rec("a", 1, 0, 5, src=7), rec("b", 1, 1, 0, src=8)]
    with pytest.raises(AssertionError) as failure:
        assert_no_duplicates(records)
    assert (
        "input in[0]@7 produced ('a', 1) 2 times: partition 0 offset 0, partition 0 offset 5"
        in str(failure.value)
    )


def test_assert_exactly_once_reports_repeats_and_misses() -> None:
    with pytest.raises(AssertionError) as failure:
        assert_exactly_once(["o1", "o1", "o3"], ["o1", "o2"], what="card charges")
    message = str(failure.value)
    assert "'o1': expected 1 time(s), seen 2 times" in message
    assert "'o2': expected once, never seen" in message
    assert "'o3': not expected, seen 1 time(s)" in message
