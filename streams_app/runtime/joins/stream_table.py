"""Stream-table and stream-GlobalTable joins (Kafka Streams' ``KStreamKTableJoin`` and
``KStreamGlobalKTableJoin``; docs/joins.md).

Only the stream side triggers: each stream record, as the dispatcher hands it over in its
task's timestamp order with the table's source partition, meets the table's row for its key as
the table is *then* (a versioned table: the row as of the record's time, KIP-914). A table
update emits nothing. The result keeps the stream record's key and timestamp.

- A stream record without a value is dropped (Kafka Streams counts it as dropped).
- A stream record without a key: an inner join drops it; a left join emits it with ``None``
  on the right without looking the table up (KIP-962).
- GlobalTable: ``key=`` maps the record to the table's key (default: the record's key); a
  record mapped to no key is handled as a null key above (KS: inner drops, left joins None).

A join declared with ``grace=`` on a versioned table waits for late table updates: each
stream record waits in a changelogged buffer until the join's stream time passes its time plus
grace, then looks the table up as of its time (KIP-923). Until then nothing is emitted for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any

from streams_app.app.joins import INNER
from streams_app.app.table import Table
from streams_app.app.versioned import VersionedTable
from streams_app.runtime.joins.base import JoinProcessor
from streams_app.runtime.joins.runtime import register
from streams_app.state.unmatched import UnmatchedTransaction
from streams_app.topology.contract import MISSING, Event, current_event
from streams_app.topology.description import STREAM_GLOBAL, STREAM_TABLE

if TYPE_CHECKING:
    from streams_app.runtime.actor import Feeder
    from streams_app.runtime.task import Task
    from streams_app.topology.contract import TaskScope

#: The side number the grace buffer files stream records under (it has one side).
_STREAM = 0
#: What a stream record joins to when it emits nothing (an inner join, no table row).
_NO_RESULT: Any = object()


@register
class StreamTableJoin(JoinProcessor):
    """A stream-table join, inner or left, plain or versioned (as of), with optional grace."""

    kind = STREAM_TABLE
    #: A run's results are its stream records', with their keys (a record without a key
    #: emits at once, through an await: never collected; with grace, results are released
    #: by time, through awaits too).
    keys_are_triggers = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        join = self.join
        self.left_join = join.how != INNER
        self.table = join.right_table
        self.versioned = self.table if isinstance(self.table, VersionedTable) else None
        self.grace_ms = join.grace_ms
        #: A plain table is read in the record's task directly (the task is the event's):
        #: ``Table.get`` would look the task up through the current record first, a
        #: ContextVar read and a call more on every stream record.
        self._plain = self.table.name if type(self.table) is Table else None

    def feeders(self) -> Iterable[tuple[str, Feeder]]:
        return ((self.join.left_topic.name, self),)

    @property
    def has_after_batch(self) -> bool:
        return self.grace_ms is not None

    def open(self, task: TaskScope) -> UnmatchedTransaction:
        """The grace buffer: stream records by release time (``close = t + grace - 1``: due
        once stream time exceeds it, i.e. reaches ``t + grace``)."""
        assert self.grace_ms is not None
        codec: Any = self.join.stores["buffer"].key_codec
        return UnmatchedTransaction(self.store(task, "buffer"), codec, (self.grace_ms - 1, 0))

    def forward_nowait(self, event: Event) -> Awaitable[None] | None:
        """:meth:`forward` without a coroutine for the common record (keyed, with a value, no
        grace buffer, its result sent on the batch path): None when it is done, else what is
        left to await (the rest of the result's sends, or :meth:`_forward_rare`, of which
        nothing was done yet)."""
        value = event.value
        if value is None or event.raw_key is None or self.grace_ms is not None:
            return self._forward_rare(event)
        task, key, timestamp = event.task, event.key, event.timestamp
        result = self._result(task, key, value, timestamp)
        if result is _NO_RESULT:
            return None
        sent = self.emit_nowait(task, key, result, timestamp, event)
        return None if sent < 0 else self.emit_rest(sent, task, key, result, timestamp, event)

    async def forward(self, event: Event) -> None:
        rest = self.forward_nowait(event)
        if rest is not None:
            await rest

    def forward_run(self, events: list[Event]) -> Awaitable[None] | None:
        """A run of records, the results sent together (:meth:`JoinProcessor.run`).

        A plain table without grace (the common join) goes through the run in one loop, as
        :meth:`forward_nowait` would take each record: each record current while it is
        joined (a joiner may read tables), the table read in the record's task, the result
        collected. A record without a value or a key (:meth:`_forward_rare`, which may await)
        hands the rest of the run to :meth:`JoinProcessor.run`'s record-by-record path, after
        what the loop collected has been sent."""
        name = self._plain
        if name is None or self.grace_ms is not None:
            return self.run(self.forward_nowait, events)
        out: list[tuple[TaskScope, Any, Any, int, Event | None]] = []
        append = out.append
        result = self.join.result_of
        left_join = self.left_join
        set_current = current_event.set
        task: TaskScope | None = None
        get: Any = None
        for at, event in enumerate(events):
            set_current(event)
            value = event.value
            if value is None or event.raw_key is None:
                return self._run_on(out, self._forward_rare(event), self.forward_nowait, events, at)
            if event.task is not task:
                task = event.task
                tx = task.tables.get(name)
                get = (tx if tx is not None else task.open_table(self.table)).get
            right = get(event.key, MISSING)
            if right is MISSING:
                if not left_join:
                    continue
                right = None
            append((task, event.key, result(value, right), event.timestamp, event))
        return self._send_run(out, True)

    async def _forward_rare(self, event: Event) -> None:
        """A record without a value or a key, or any record of a join with grace."""
        task, value = event.task, event.value
        buffer: UnmatchedTransaction | None = None
        if self.grace_ms is not None:
            # Every stream record moves the join's stream time, dropped ones too (as in KS).
            buffer = self.state(task)
            buffer.advance(event.timestamp)
        if value is not None:
            if event.raw_key is None:
                if self.left_join:  # KIP-962: a left join emits it unjoined, at once
                    result = self.join.result(value, None)
                    await self.emit(task, None, result, event.timestamp, event)
            elif buffer is not None:
                buffer.add(_STREAM, event.key, event.timestamp, event.offset, value)
        if buffer is not None:
            await self._release(task, buffer)

    async def after_batch(self, task: Task) -> None:
        if self.join.stores["buffer"].name not in task.tables:
            return  # nothing buffered in this task since it opened
        await self._release(task, self.state(task))

    async def on_idle(self, task: Task, now_ms: int) -> bool:
        if self.grace_ms is None:
            return False
        buffer: UnmatchedTransaction = self.state(task)
        if not buffer.advance(now_ms):
            return False
        await self._release(task, buffer)
        return True

    async def _release(self, task: TaskScope, buffer: UnmatchedTransaction) -> None:
        for waiting in buffer.due():  # removed from the buffer as they are read
            await self._join(task, waiting.key, waiting.value, waiting.timestamp, None)

    async def _join(
        self, task: TaskScope, key: Any, value: Any, timestamp: int, trigger: Event | None
    ) -> None:
        result = self._result(task, key, value, timestamp)
        if result is not _NO_RESULT:
            await self.emit(task, key, result, timestamp, trigger)

    def _result(self, task: TaskScope, key: Any, value: Any, timestamp: int) -> Any:
        """The joined value of a stream record, or ``_NO_RESULT`` (inner, no table row)."""
        versioned = self.versioned
        if versioned is not None:
            found = versioned.view(task).get_as_of(key, timestamp)
            right = MISSING if found is None else found.value
        elif self._plain is not None:
            tx = task.tables.get(self._plain)
            if tx is None:
                tx = task.open_table(self.table)
            right = tx.get(key, MISSING)
        else:
            right = self.table.get(key, MISSING)
        if right is MISSING:
            if not self.left_join:
                return _NO_RESULT
            right = None
        return self.join.result(value, right)


@register
class StreamGlobalJoin(JoinProcessor):
    """A stream-GlobalTable join, inner or left, through a key mapper (no co-partitioning:
    every worker holds the whole table, restored before processing starts)."""

    kind = STREAM_GLOBAL

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        join = self.join
        self.left_join = join.how != INNER
        self.table = join.right_table

    def feeders(self) -> Iterable[tuple[str, Feeder]]:
        return ((self.join.left_topic.name, self),)

    async def forward(self, event: Event) -> None:
        value = event.value
        if value is None:
            return
        mapper = self.join.key
        ref = mapper(value) if mapper is not None else event.key  # None for a null key
        right = MISSING if ref is None else self.table.get(ref, MISSING)
        if right is MISSING:
            if not self.left_join:
                return
            right = None
        await self.emit(
            event.task, event.key, self.join.result(value, right), event.timestamp, event
        )
