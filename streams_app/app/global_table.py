"""GlobalTable: every worker holds the whole table.

Writes work as in a :class:`~streams_app.app.table.Table`: a task writes the partition of the
record it processes, and the write commits with its transaction. Reads see every partition:
each worker restores all of the table's changelog partitions at start (``read_committed``) and
keeps reading them, so ``table[key]`` finds a key written by any worker once its transaction
committed, and the task's own uncommitted writes before that.

The price is Faust's: every worker stores and reads all of it, and a read reflects other
workers' commits with a small delay (their commit, then the changelog read).

Built from a topic (``source=``), its changelog is that topic: restore and the reader store
each record as the table's codecs encode it and skip (and log) one that cannot be decoded
(runtime/global_tables.py, docs/joins.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streams_app.app.table import Table
from streams_app.state.base import DELETED, PartitionTransaction
from streams_app.topology.contract import MISSING, current_event, current_runtime, current_task


class GlobalTable(Table):
    is_global = True

    def _pending(self) -> PartitionTransaction | None:
        event = current_event.get()
        task = event.task if event is not None else current_task.get()
        if task is None:
            return None
        return task.tables.get(self.name)

    def _lookup(self, key: Any) -> Any:
        tx = self._pending()
        if tx is not None:
            pending = tx.pending(key, MISSING)
            if pending is not MISSING:
                return MISSING if pending is DELETED else pending
        runtime = current_runtime.get()
        if runtime is None:
            return MISSING
        return runtime.global_lookup(self, key)

    def __getitem__(self, key: Any) -> Any:
        value = self._lookup(key)
        if value is MISSING:
            if self.default is None:
                raise KeyError(key)
            return self.default()
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._lookup(key)
        return default if value is MISSING else value

    def __contains__(self, key: object) -> bool:
        return self._lookup(key) is not MISSING

    def __delitem__(self, key: Any) -> None:
        if self._lookup(key) is MISSING:
            raise KeyError(key)
        self._writable().delete(key)

    def _items(self) -> Iterator[tuple[Any, Any]]:
        merged = dict(self.local_items())
        tx = self._pending()
        if tx is not None:
            for key, value in tx.dirty_items():
                if value is DELETED:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        return iter(merged.items())

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self._items())

    def __len__(self) -> int:
        return sum(1 for _ in self._items())

    def _check_key(self, key: Any) -> None:
        """Any key is fine: every worker reads every partition."""
