"""A table's accessors find the record's transaction inline (``Table.__getitem__``, ``get``,
``__setitem__``) once ``_transaction`` has found it for that record: the same transaction, the
same refusals; a pending write is read through ``PartitionTransaction.pending_get`` before
``get``. Unit tests of our own logic, on real transactions over in-memory store partitions."""

from __future__ import annotations

from typing import Any

import pytest

import streams_app
from streams_app.codecs import codec_for
from streams_app.errors import TopologyError
from streams_app.state.base import PartitionTransaction
from streams_app.state.memory import MemoryStorePartition
from streams_app.topology.contract import Event, current_event


def _tx(committed: dict[str, Any] | None = None) -> PartitionTransaction:
    """A transaction over a partition that holds ``committed`` (JSON text keys and values)."""
    codec = codec_for(str, None, "json")
    partition = MemoryStorePartition()
    tx = PartitionTransaction(partition, codec, codec)
    for key, value in (committed or {}).items():
        tx.set(key, value)
    tx.commit(0)
    return tx


def _pending(tx: PartitionTransaction) -> dict[Any, Any]:
    return dict(tx.dirty_items())


class _Task:
    outside_processing = False

    def __init__(self, tables: dict[str, Any]) -> None:
        self.tables = tables


def _event(task: _Task, key: str) -> Event:
    return Event("t", 0, 5, 1_000, key, "v", (), key.encode(), b'"v"', task)  # type: ignore[arg-type]


def test_the_records_transaction_serves_every_access_and_moves_with_the_record() -> None:
    app = streams_app.App("table-access", broker="kafka://127.0.0.1:1")
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    first, second = _tx(), _tx({"a": 10})
    token = current_event.set(_event(_Task({"counts": first}), "a"))
    try:
        counts["a"] += 1
        counts["a"] += 1
        assert counts["a"] == 2 and counts.get("a") == 2 and _pending(first) == {"a": 2}
        current_event.set(_event(_Task({"counts": second}), "a"))  # the next record's task
        assert counts["a"] == 10  # committed, nothing pending yet
        counts["a"] += 5
        assert _pending(second) == {"a": 15} and _pending(first) == {"a": 2}
    finally:
        current_event.reset(token)


def test_a_pending_delete_reads_as_absent_even_over_a_committed_value() -> None:
    """``pending_get`` finds DELETED for a key deleted in this transaction: the read is a
    miss (the default, or KeyError), not the committed value underneath."""
    app = streams_app.App("table-access-del", broker="kafka://127.0.0.1:1")
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    names = app.Table("names", key_type=str, value_type=str)
    counts_tx, names_tx = _tx({"a": 3}), _tx({"a": "ann"})
    token = current_event.set(_event(_Task({"counts": counts_tx, "names": names_tx}), "a"))
    try:
        assert counts["a"] == 3 and names["a"] == "ann"
        del counts["a"]
        del names["a"]
        assert counts["a"] == 0  # the default, not the committed 3
        with pytest.raises(KeyError):
            names["a"]
        assert names.get("a") is None and "a" not in names
        counts["a"] += 1
        assert counts["a"] == 1
    finally:
        current_event.reset(token)


def test_a_table_built_from_a_topic_refuses_writes_after_a_read() -> None:
    app = streams_app.App("table-access-src", broker="kafka://127.0.0.1:1")
    source = app.topic("customers", key_type=str, value_type=str)
    customers = app.Table("customers", source=source)
    tx = _tx({"c1": "ann"})
    token = current_event.set(_event(_Task({"customers": tx}), "c1"))
    try:
        assert customers["c1"] == "ann"  # the read found the record's transaction
        with pytest.raises(TopologyError, match="built from topic 'customers'"):
            customers["c1"] = "bob"
        assert _pending(tx) == {} and customers["c1"] == "ann"
    finally:
        current_event.reset(token)
