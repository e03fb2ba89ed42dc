"""A table's accessors find the record's transaction inline (``Table.__getitem__``, ``get``,
``__setitem__``) once ``_transaction`` has found it for that record: the same transaction, the
same refusals. Unit tests of our own logic: a plain dict stands in for the transaction."""

from __future__ import annotations

from typing import Any

import pytest

import streams_app
from streams_app.errors import TopologyError
from streams_app.topology.contract import Event, current_event


class _Tx:
    """What the accessors call on a ``PartitionTransaction``."""

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}

    def get(self, key: Any, default: Any) -> Any:
        return self.data.get(key, default)

    def set(self, key: Any, value: Any) -> None:
        self.data[key] = value


class _Task:
    outside_processing = False

    def __init__(self, tables: dict[str, Any]) -> None:
        self.tables = tables


def _event(task: _Task, key: str) -> Event:
    return Event("t", 0, 5, 1_000, key, "v", (), key.encode(), b'"v"', task)  # type: ignore[arg-type]


def test_the_records_transaction_serves_every_access_and_moves_with_the_record() -> None:
    app = streams_app.App("table-access", broker="kafka://127.0.0.1:1")
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    first, second = _Tx(), _Tx()
    token = current_event.set(_event(_Task({"counts": first}), "a"))
    try:
        counts["a"] += 1
        counts["a"] += 1
        assert counts["a"] == 2 and counts.get("a") == 2 and first.data == {"a": 2}
        current_event.set(_event(_Task({"counts": second}), "a"))  # the next record's task
        counts["a"] += 5
        assert second.data == {"a": 5} and first.data == {"a": 2}
    finally:
        current_event.reset(token)


def test_a_table_built_from_a_topic_refuses_writes_after_a_read() -> None:
    app = streams_app.App("table-access-src", broker="kafka://127.0.0.1:1")
    source = app.topic("customers", key_type=str, value_type=str)
    customers = app.Table("customers", source=source)
    tx = _Tx()
    tx.data["c1"] = "ann"
    token = current_event.set(_event(_Task({"customers": tx}), "c1"))
    try:
        assert customers["c1"] == "ann"  # the read found the record's transaction
        with pytest.raises(TopologyError, match="built from topic 'customers'"):
            customers["c1"] = "bob"
        assert tx.data == {"c1": "ann"}
    finally:
        current_event.reset(token)
