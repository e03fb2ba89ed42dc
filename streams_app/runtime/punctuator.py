"""What happens when stream time moves: windows close and expire, late records, stream-time timers.

Runs for every running task at the end of each batch, after every record of the batch has been
processed and before the next commit, so everything it does joins the transaction of the records
that moved stream time:

1. **Late records** a windowed table refused (``late_records="dlq"``) go to the dead-letter topic
   of their source topic, with the error type ``LateRecord``; all of them are counted.
2. **Closed windows** are emitted once: to the table's ``emit_final`` topic (key ``{"key",
   "start", "end"}``, the window's final value, timestamped with the window's last millisecond)
   and to its ``on_window_close(key, value)`` callback. A window is closed when its table's
   observed stream time reaches its close time; that time is committed with the offsets in the
   same transaction (``runtime.stream_time``), so after a crash a window is emitted by the
   replay if and only if the emission was not committed: exactly once either way.
3. **Expired windows** are deleted from the store; their tombstones reach the changelog at commit.
4. **Stream-time timers** (``@app.timer(interval, on="stream_time")``) fire for each task whose
   stream time reached the next multiple of their interval (Kafka Streams' ``STREAM_TIME``
   punctuation, aligned to the epoch); the next one is due at the following multiple, so a timer
   fires at most once per batch. After a restart the first due time follows the committed
   stream time, so a firing that was committed is never repeated.

Callbacks and timers run with :data:`~streams_app.topology.contract.current_task` set to the
task, so the tables they touch are that task's partitions.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streams_app.app.background import STREAM_TIME, Timer, call
from streams_app.app.windows import WindowRange
from streams_app.errors import LateRecord
from streams_app.runtime.scope import in_processing
from streams_app.runtime.task import Task
from streams_app.topology.contract import current_task

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.table import Table
    from streams_app.app.topic import Topic
    from streams_app.app.windowed import WindowedTableState
    from streams_app.state.windowed import WindowKey
    from streams_app.topology.contract import Event

log = logging.getLogger(__name__)

SendFn = Callable[..., Awaitable[Any]]
DeadLetterFn = Callable[[Any, BaseException, "str | None"], Awaitable[None]]


class CallbackFailed(Exception):
    """A window-close callback or a stream-time timer raised (handled as an agent error)."""

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__(f"{what} failed: {type(error).__name__}: {error}")
        self.what = what
        self.error = error


@dataclass(frozen=True)
class _EventRecord:
    """A processed record as the dead-letter path wants it: its raw bytes and provenance."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]

    @classmethod
    def of(cls, event: Event) -> _EventRecord:
        return cls(
            event.topic,
            event.partition,
            event.offset,
            event.timestamp,
            event.raw_key,
            event.raw_value,
            event.headers,
        )


def final_key(window: WindowKey) -> dict[str, Any]:
    """The key of a final-result record: the table key and the window in epoch ms."""
    return {"key": window.key, "start": window.start, "end": window.end}


class Punctuator:
    def __init__(self, app: App, send: SendFn, dead_letter: DeadLetterFn) -> None:
        self.app = app
        self._send = send
        self._dead_letter = dead_letter
        self.timers: list[Timer] = [
            t for t in app.timers if isinstance(t, Timer) and t.on == STREAM_TIME
        ]
        self.windowed = any(t.window is not None for t in app.tables.values())
        self.late_records = 0
        #: Windowed table -> records late for every window they belong to (dropped).
        self.late_by_table: Counter[str] = Counter()
        #: Windowed table -> window updates dropped because that window had closed: Kafka
        #: Streams' dropped-records-total (per window a record skipped, whether it was late for
        #: some of its windows or all of them; once for a late sliding or session record).
        self.dropped_by_table: Counter[str] = Counter()
        self.late_dead_lettered = 0
        self.windows_emitted = 0
        self.windows_expired = 0
        self.punctuations = 0

    @property
    def idle(self) -> bool:
        """Nothing to do for any task, ever (no windowed table, no stream-time timer)."""
        return not self.windowed and not self.timers

    async def after_batch(self, tasks: Iterable[Task]) -> None:
        # Inside processing: what timers, window-close callbacks and final results send joins
        # the worker's transaction (outside it, sends go through the plain producer).
        processing = in_processing.set(True)
        try:
            await self._after_batch(tasks)
        finally:
            in_processing.reset(processing)

    async def _after_batch(self, tasks: Iterable[Task]) -> None:
        for task in tasks:
            token = current_task.set(task)
            try:
                if task.late:
                    await self._late(task)
                if task.windowed_states:
                    await self._windows(task)
                if self.timers:
                    await self._timers(task)
            finally:
                current_task.reset(token)

    async def _late(self, task: Task) -> None:
        late, task.late = task.late, []
        for event, late_for, observed in late:
            table: Table = late_for  # type: ignore[assignment]  # the app's windowed tables
            self.late_records += 1
            self.late_by_table[table.name] += 1
            if table.late_records != "dlq":
                continue
            error = LateRecord(
                f"late for windowed table {table.name!r}: timestamp {event.timestamp} ms, its "
                f"windows closed (observed stream time {observed} ms, grace "
                f"{table.window.grace_ms if table.window else 0} ms)"
            )
            await self._dead_letter(_EventRecord.of(event), error, f"table:{table.name}")
            self.late_dead_lettered += 1

    async def _windows(self, task: Task) -> None:
        # The app's windowed table states (the contract types them as their observed time).
        states: list[WindowedTableState] = list(task.windowed_states.values())  # type: ignore[arg-type]
        for state in states:
            table = state.table
            if state.skipped_windows:
                self.dropped_by_table[table.name] += state.skipped_windows
                state.skipped_windows = 0
            topic: Topic | None = table.emit_final_topic
            callback = table.on_window_close
            for window, value in state.closed():
                self.windows_emitted += 1
                if topic is not None:
                    last = window.end - 1 if state.windows.kind == "time" else window.end
                    await self._send(
                        topic, key=final_key(window), value=value, timestamp=last / 1000
                    )
                if callback is not None:
                    try:
                        result = callback((window.key, WindowRange.of(window)), value)
                        if inspect.isawaitable(result):
                            await result
                    except Exception as exc:
                        raise CallbackFailed(f"on_window_close of {table.name}", exc) from exc
            self.windows_expired += state.expire()

    async def _timers(self, task: Task) -> None:
        now = task.stream_time
        if now < 0:
            return
        for timer in self.timers:
            interval = timer.interval_ms
            due = task.timer_due.get(timer.name)
            if due is None:
                committed = max(task.committed_partition_times.values(), default=-1)
                due = 0 if committed < 0 else (committed // interval + 1) * interval
                task.timer_due[timer.name] = due
            if now < due:
                continue
            task.timer_due[timer.name] = (now // interval + 1) * interval
            self.punctuations += 1
            try:
                await call(timer.fun, self.app)
            except Exception as exc:
                raise CallbackFailed(f"timer:{timer.name}", exc) from exc
