"""Tables built from topics: each record of the topic sets its key (a tombstone deletes it).

``app.Table(name, source=topic)`` is Kafka Streams' ``builder.table(topic)``. Its source topic
is an input of the worker; :class:`TableSource` is the feeder the dispatcher hands each of its
records to, in the record's transaction and in the task's timestamp order with the topics
co-partitioned with it (so a stream-table join meets the table as it was at the stream
record's time). It writes the task's partition of the table (a versioned table: a version at
the record's time), the row's record time when a join keeps it (``Table.keep_times``), and
then tells the joins following the table (table-table, foreign key) what changed.

A record without a key changes nothing (a table has no row for it); one that cannot be decoded
never gets here (the dispatcher dead-letters it), and restore skips it the same way
(:func:`restore_filter`), so restored state equals processed state. Where the changelog is the
source topic itself, restore reads it up to the task's committed offset
(``state/restore.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams_app.app.versioned import VersionedTable
from streams_app.errors import InvalidTimestamp
from streams_app.topology.contract import MISSING, Event

if TYPE_CHECKING:
    from streams_app.app.table import Table
    from streams_app.app.topic import Topic
    from streams_app.runtime.joins.base import TableListener
    from streams_app.runtime.task import Task
    from streams_app.state.restore import Accept
    from streams_app.transport.base import RecordLike


class TableSource:
    """The feeder of one table built from a topic (module doc)."""

    def __init__(self, table: Table) -> None:
        assert table.source is not None
        self.table = table
        self.name = table.name
        self.label = f"table:{table.name}"
        self.listeners: list[TableListener] = []
        self._versioned = table if isinstance(table, VersionedTable) else None
        #: Versioned: task -> the observed time of its last purge of expired versions.
        self._purged: dict[Any, int] = {}

    async def forward(self, event: Event) -> None:
        if event.raw_key is None:
            return  # a table has no row for a record without a key
        task = event.task
        key, value = event.key, event.value
        versioned = self._versioned
        if versioned is not None:
            versioned.view(task).put(key, value, event.timestamp)
            return
        table = self.table
        tx = task.tables.get(self.name)
        if tx is None:
            tx = task.open_table(table)
        listeners = self.listeners
        old = tx.get(key, MISSING) if listeners else MISSING
        if value is None:
            tx.delete(key)
        else:
            tx.set(key, value)
        times = table.times
        if times is not None:
            times_tx = task.tables.get(times.name)
            if times_tx is None:
                times_tx = task.open_table(times)
            if value is None:
                times_tx.delete(key)
            else:
                times_tx.set(key, event.timestamp)
        new = MISSING if value is None else value
        for listener in listeners:
            await listener(event, key, old, new)

    @property
    def has_after_batch(self) -> bool:
        return self._versioned is not None

    async def after_batch(self, task: Task) -> None:
        """A versioned table sweeps versions past its history, every history of stream time
        (reads never see them either way: state/versioned.py)."""
        versioned = self._versioned
        if versioned is None or versioned.name not in task.tables:
            return
        view = versioned.view(task)
        history = versioned.versioned_ms or 0
        observed = view.observed
        if observed - self._purged.get(task.id, observed - history) >= history:
            view.purge()
            self._purged[task.id] = observed


def row_time(table: Table, task: Any, key: Any) -> int | None:
    """The record time of ``key``'s current row (None: no row, or times not kept)."""
    times = table.times
    if times is None:
        return None
    tx = task.tables.get(times.name)
    if tx is None:
        tx = task.open_table(times)
    found = tx.get(key, None)
    return None if found is None else int(found)


def restore_filter(table: Table) -> Accept:
    """What restore applies of a record of the source topic of ``table`` (whose changelog it
    is): what processing would have stored (key and value re-encoded by the table's codecs), or
    None for a record processing dead-letters (undecodable, no valid time)."""
    topic = table.source
    assert topic is not None
    loads_key, loads_value = topic.key_codec.loads, topic.value_codec.loads
    dumps_key, dumps_value = table.key_codec.dumps, table.value_codec.dumps

    def accept(record: RecordLike) -> tuple[bytes, bytes | None] | None:
        if record.key is None:
            return None
        try:
            key = loads_key(record.key)
            value = None if record.value is None else loads_value(record.value)
        except Exception:
            return None
        if restored_time(topic, record.timestamp, value) is None:
            return None
        return dumps_key(key), None if value is None else dumps_value(value)

    return accept


def restored_time(topic: Topic, timestamp: int, value: Any) -> int | None:
    """A source record's time as processing gives it, seen from restore (which knows no
    partition time); None where processing dead-letters the record for having none."""
    if topic.timestamp_fn is None and timestamp >= 0:
        return timestamp
    try:
        return topic.timestamp_of(timestamp, value, -1)
    except InvalidTimestamp:
        return None
