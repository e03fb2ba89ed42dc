"""Table: a dict-like, partitioned, changelog-backed state store.

Inside an agent, ``table[key]`` reads and writes the partition of the task that owns the record
being processed (tables are co-partitioned with the topics that update them). A record without a
key says nothing about which partition holds a row, so using a table while processing one raises
:class:`~streams_app.errors.NullKeyError` (the record goes to the dead-letter topic). Reads see the
task's own uncommitted writes; writes become durable in RocksDB only after the Kafka
transaction that carries their changelog records commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from streams_app.app.context import TaskScope, current_event, current_runtime
from streams_app.codecs import Codec, CodecSpec, resolve_codec
from streams_app.errors import NullKeyError, TopologyError
from streams_app.state.base import DELETED, PartitionTransaction

if TYPE_CHECKING:
    from streams_app.app.app import App

_MISSING: Any = object()


class Table(MutableMapping[Any, Any]):
    def __init__(
        self,
        app: App,
        name: str,
        *,
        default: Callable[[], Any] | None = None,
        partitions: int | None = None,
        key_type: CodecSpec = None,
        value_type: CodecSpec = None,
        changelog_topic: str | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.default = default
        self.partitions = partitions
        self.key_codec: Codec = resolve_codec(key_type, default="json")
        self.value_codec: Codec = resolve_codec(value_type, default="json")
        self._changelog_topic = changelog_topic

    @property
    def changelog_topic(self) -> str:
        return self._changelog_topic or f"{self.app.conf.id}-{self.name}-changelog"

    # -- the task's view ------------------------------------------------------------------

    def _transaction(self) -> PartitionTransaction:
        event = current_event.get()
        if event is None:
            return self._transaction_outside_event()
        if event.raw_key is None:
            raise NullKeyError(
                f"table {self.name!r} used while processing {event.topic}[{event.partition}]"
                f"@{event.offset}, a record without a key: its partition says nothing about "
                "which table partition holds the row. Give the record a key (or re-key the "
                "stream with group_by) before using a table"
            )
        task = event.task
        tx = task.tables.get(self.name)
        if tx is None:
            tx = task.open_table(self)
        return tx

    def _transaction_outside_event(self) -> PartitionTransaction:
        raise TopologyError(
            f"table {self.name!r} was used outside of processing a record; inside an agent "
            "use it while handling an event, elsewhere use table.local_items() / table.read()"
        )

    def __getitem__(self, key: Any) -> Any:
        tx = self._transaction()
        value = tx.get(key, _MISSING)
        if value is _MISSING:
            if self.default is None:
                raise KeyError(key)
            return self.default()
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._transaction().set(key, value)

    def __delitem__(self, key: Any) -> None:
        tx = self._transaction()
        if not tx.contains(key):
            raise KeyError(key)
        tx.delete(key)

    def __contains__(self, key: object) -> bool:
        return self._transaction().contains(key)

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._transaction().get(key, _MISSING)
        return default if value is _MISSING else value

    def __iter__(self) -> Iterator[Any]:
        """Keys of the current task's partition (committed and pending)."""
        return iter(dict(self._partition_items(self._transaction())))

    def __len__(self) -> int:
        return len(dict(self._partition_items(self._transaction())))

    def _partition_items(self, tx: PartitionTransaction) -> Iterator[tuple[Any, Any]]:
        pending = dict(tx.dirty_items())
        for raw_key, raw_value in tx.partition.items():
            key = self.key_codec.loads(raw_key)
            if key in pending:
                continue
            yield key, self.value_codec.loads(raw_value)
        for key, value in pending.items():
            if value is not DELETED:
                yield key, value

    # -- outside processing ---------------------------------------------------------------

    def local_items(self) -> Iterator[tuple[Any, Any]]:
        """Committed items of every partition this worker holds (e.g. for a status page)."""
        runtime = current_runtime.get()
        if runtime is None:
            return iter(())
        return runtime.table_items(self)

    def task_transaction(self, task: TaskScope) -> PartitionTransaction:
        tx = task.tables.get(self.name)
        return tx if tx is not None else task.open_table(self)

    def __repr__(self) -> str:
        return f"<Table {self.name}>"
