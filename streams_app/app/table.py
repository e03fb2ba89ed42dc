"""Table: a dict-like, partitioned, changelog-backed state store.

Inside an agent, ``table[key]`` reads and writes the partition of the task that owns the record
being processed (tables are co-partitioned with the topics that update them). Reads see the
task's own uncommitted writes; writes become durable in RocksDB only after the Kafka
transaction that carries their changelog records commits.

A key that is not the key of the record being processed (``table["totals"] += 1`` in every
partition) is stored once per partition: each task owns its partition's value, which keeps
every write exactly-once. Faust kept one value per worker instead (whatever the last write in
any partition was). The first such write logs a warning, once per table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from streams_app.app import names
from streams_app.app.context import Event, TaskScope, current_event, current_runtime, current_scope
from streams_app.app.topic import Topic
from streams_app.codecs import Codec, CodecSpec, codec_for, json_dumps
from streams_app.errors import TopologyError
from streams_app.state.base import DELETED, PartitionTransaction

if TYPE_CHECKING:
    from streams_app.app.app import App

log = logging.getLogger(__name__)

_MISSING: Any = object()


class Table(MutableMapping[Any, Any]):
    #: Every worker holds every partition (GlobalTable).
    is_global = False

    def __init__(
        self,
        app: App,
        name: str,
        *,
        default: Callable[[], Any] | None = None,
        partitions: int | None = None,
        key_type: CodecSpec = None,
        value_type: CodecSpec = None,
        changelog_topic: str | Topic | None = None,
        help: str | None = None,
        key_serializer: str | Codec | None = None,
        value_serializer: str | Codec | None = None,
        **faust_options: Any,
    ) -> None:
        self.app = app
        self.name = name
        self.default = default
        self.partitions = partitions
        self.key_type = key_type
        self.value_type = value_type
        # Faust: a table's keys and values are JSON unless their model names a serializer.
        self.key_codec: Codec = codec_for(key_type, key_serializer, "json")
        self.value_codec: Codec = codec_for(value_type, value_serializer, "json")
        if isinstance(changelog_topic, Topic):
            changelog_topic = changelog_topic.name
        self._changelog_topic = changelog_topic
        self._changelog: Topic | None = None
        self.help = help or ""
        #: Faust's options without a counterpart here (``on_recover``, ``standby_buffer_size``,
        #: ``use_partitioner``, ...), kept as given.
        self.options = dict(faust_options)
        self._warned_key = False

    @property
    def changelog_topic_name(self) -> str:
        return self._changelog_topic or names.changelog_topic(self.app.conf.id, self.name)

    @property
    def changelog_topic(self) -> Topic:
        """The changelog as a Topic with the table's codecs (Faust's ``changelog_topic``)."""
        if self._changelog is None:
            self._changelog = Topic(
                self.app,
                self.changelog_topic_name,
                key_serializer=self.key_codec,
                value_serializer=self.value_codec,
                partitions=self.partitions,
                config={"cleanup.policy": "compact"},
                internal=True,
            )
        return self._changelog

    # -- the task's view ------------------------------------------------------------------

    def _transaction(self) -> PartitionTransaction:
        event = current_event.get()
        task = event.task if event is not None else current_scope.get()
        if task is None:
            return self._transaction_outside_event()
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
        if not self._warned_key:
            self._check_key(key)
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

    def _check_key(self, key: Any) -> None:
        """Warn (once per table) when a key other than the record's own is written."""
        event = current_event.get()
        if event is None:
            return
        if _same_key(key, event):
            return
        self._warned_key = True
        log.warning(
            "table %r: a key other than the record's key was written while processing "
            "%s[%d]. streams_app keeps one value per partition for such a key (Faust kept one "
            "per worker): add up the partitions' values, or group_by the stream so that the "
            "table key is the record key. (Logged once per table.)",
            self.name,
            event.topic,
            event.partition,
        )

    # -- outside processing ---------------------------------------------------------------

    def local_items(self) -> Iterator[tuple[Any, Any]]:
        """Committed items of every partition this worker holds (e.g. for a status page)."""
        runtime = current_runtime.get()
        if runtime is None:
            return iter(())
        return runtime.table_items(self)

    def as_ansitable(self, title: str = "{table.name}", **kwargs: Any) -> str:
        """The worker's committed items as a terminal table, exactly as Faust draws it
        (``key=``/``value=`` column titles, ``sort=``, ``sortkey=``, ``title=``)."""
        from faust.utils.terminal.tables import dict_as_ansitable

        return str(
            dict_as_ansitable(dict(self.local_items()), title=title.format(table=self), **kwargs)
        )

    def task_transaction(self, task: TaskScope) -> PartitionTransaction:
        tx = task.tables.get(self.name)
        return tx if tx is not None else task.open_table(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _same_key(key: Any, event: Event) -> bool:
    if key == event.key:
        return True
    raw = event.raw_key
    if raw is None:
        return False
    if isinstance(key, bytes):
        return key == raw
    if isinstance(key, str) and key.encode() == raw:
        return True
    try:
        return json_dumps(key) == raw or str(key).encode() == raw
    except (TypeError, ValueError):
        return False
