"""Windowed tables, with Faust's surface: ``table[key]`` is a :class:`WindowSet`.

    views = app.Table("views", default=int).tumbling(60, grace=10, emit_final="views-final")

    @app.agent(pageviews)
    async def count(stream):
        async for view in stream:
            views[view.page] += 1                 # every window holding the record's time
            total = views[view.page].current()    # the window of this record

``table[key]`` returns a :class:`WindowSet` bound to the record being processed; its in-place
operators update every window the record's time falls in (for sliding and session windows, as
Kafka Streams' algorithms do), and ``.current()``, ``.now()``, ``.value()``, ``.delta(d)``
read one window. Which time a record has is the wrapper's *time relativity*: the record's
timestamp (the default, and ``relative_to_stream()``), a field of its value
(``relative_to_field(Model.field)``), or the wall clock (``relative_to_now()``).

What happens around the updates (stream time, lateness, emitting closed windows, expiry) is in
:class:`WindowedTableState`, one per task and windowed table, driven by the runtime at the end of
each batch; see ``docs/windows.md``.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from streams_app.app.windows import (
    Duration,
    Op,
    WindowRange,
    Windows,
    duration_ms,
    instant_ms,
)
from streams_app.errors import TopologyError
from streams_app.state.windowed import SlidingValue, WindowedTransaction, WindowKey
from streams_app.topology.contract import (
    Event,
    TaskScope,
    current_event,
    current_runtime,
    current_task,
)

if TYPE_CHECKING:
    from streams_app.app.table import Table

_MISSING: Any = object()

#: How a wrapper finds a record's time: ``f(event) -> ms``.
RelativeHandler = Callable[[Event | None], int]


class WindowedTableState:
    """One task's windows of one windowed table partition.

    Holds the partition's *observed stream time* (the largest timestamp that updated it; it
    decides lateness and closing, as ``observedStreamTime`` does in Kafka Streams' windowed
    aggregations) and two heaps: windows still to close, and windows still to expire. Both are
    rebuilt from the store whenever the state is opened, i.e. after every start, rebalance and
    abort: a window whose close time is past the committed observed time was emitted in the
    transaction that closed it, so it is not queued again.
    """

    def __init__(self, table: Table, view: WindowedTransaction, observed: int) -> None:
        window = table.window
        assert window is not None
        self.table = table
        self.windows: Windows = window
        self.view = view
        self.observed = observed
        #: The observed time before the record being applied (see WindowState.prior).
        self.prior = observed
        #: The newest window start written (see WindowState.newest_start).
        self.newest_start = -(1 << 63)
        #: Updates to windows that had already closed (Kafka Streams' dropped-records count).
        self.skipped_windows = 0
        self.initial = table.initial
        # Windows as plain (key, start, end) tuples: the garbage collector stops tracking a
        # tuple once it has seen it hold only atoms (str, int), and these entries of the heaps
        # with it, but never a WindowKey (a tuple subclass). Thousands of windows per task
        # then made every full collection longer.
        self._closes: list[tuple[int, int, tuple[Any, int, int]]] = []
        self._expiries: list[tuple[int, int, tuple[Any, int, int]]] = []
        self._tracked: set[tuple[Any, int, int]] = set()
        self._seq = 0
        #: Windows up to this close time have been emitted (by this state, or before it opened).
        self._emitted_upto = observed
        #: Final values of closed sessions replaced before they were emitted (see reclose).
        self._replaced: dict[tuple[Any, int, int], list[Any]] = {}
        for stored, _ in view.all_windows():
            self.track(stored)
            if stored.start > self.newest_start:
                self.newest_start = stored.start

    def track(self, window: tuple[Any, int, int]) -> None:
        if window in self._tracked:
            return
        if type(window) is not tuple:
            window = (window[0], window[1], window[2])
        self._tracked.add(window)
        self._seq += 1
        close = self.windows.close_at(window)
        if close > self.observed:
            heapq.heappush(self._closes, (close, self._seq, window))
        heapq.heappush(self._expiries, (self.windows.expire_at(window), self._seq, window))

    def reclose(self, window: tuple[Any, int, int]) -> None:
        """``window``, a session, is about to be written although it is already closed: a
        record exactly at the close point starts a session that is closed at once (Kafka
        Streams accepts such a record and emits the session at once). Queue it to be emitted;
        a closed session with the same bounds that it overwrites keeps its own final value
        for its own emission, if that has not happened yet."""
        window = (window[0], window[1], window[2])
        close = self.windows.close_at(window)
        # A window of these bounds queued to close and not emitted yet reads the store when it
        # is: it emits the new session (a session merged away before, or the replaced one's
        # value kept here, ahead of a new entry for the new session).
        pending = window in self._tracked and close > self._emitted_upto
        replaced = self.view.get(window, _MISSING)
        if pending and replaced is _MISSING:
            return
        if pending:
            self._replaced.setdefault(window, []).append(self.windows.aggregate(replaced))
        elif window not in self._tracked:
            self.track(window)  # closed already: queued to expire only
        self._seq += 1
        heapq.heappush(self._closes, (close, self._seq, window))

    def update(self, key: Any, timestamp: int, op: Op, value: Any) -> bool:
        """Apply a record's update; False if it was late for every window (nothing changed)."""
        self.prior = self.observed
        if timestamp > self.observed:
            self.observed = timestamp
        return self.windows.update(self, key, timestamp, op, value)

    def visible(self, window: tuple[Any, int, int]) -> bool:
        return self.windows.expire_at(window) > self.windows.expiry_time(self)

    def read(self, window: WindowKey | None) -> Any:
        if window is None or not self.visible(window):
            return _MISSING
        stored = self.view.get(window, _MISSING)
        return stored if stored is _MISSING else self.windows.aggregate(stored)

    def closed(self) -> list[tuple[WindowKey, Any]]:
        """Windows that closed since the last call, oldest close first, with final values."""
        out = []
        closes = self._closes
        while closes and closes[0][0] <= self.observed:
            _, _, window = heapq.heappop(closes)
            replaced = self._replaced.get(window)
            if replaced:  # a final value overwritten since (reclose): that value, first
                out.append((WindowKey._make(window), replaced.pop(0)))
                if not replaced:
                    del self._replaced[window]
                continue
            stored = self.view.get(window, _MISSING)
            if stored is not _MISSING:  # not merged away or deleted meanwhile
                out.append((WindowKey._make(window), self.windows.aggregate(stored)))
        self._emitted_upto = self.observed
        return out

    def expire(self) -> int:
        """Delete windows past retention (their changelog tombstones go out at commit)."""
        removed = 0
        expiries = self._expiries
        now = self.windows.expiry_time(self)
        while expiries and expiries[0][0] <= now:
            _, _, window = heapq.heappop(expiries)
            self._tracked.discard(window)
            if self.view.get(window, _MISSING) is not _MISSING:
                self.view.delete(window)
                removed += 1
        return removed

    def keys(self) -> list[Any]:
        seen: dict[Any, None] = {}
        for window, _ in self.view.all_windows():
            if self.visible(window):
                seen.setdefault(window.key, None)
        return list(seen)


def _scope() -> tuple[TaskScope, Event | None]:
    event = current_event.get()
    if event is not None:
        return event.task, event
    task = current_task.get()
    if task is None:
        raise TopologyError(
            "a windowed table was used outside of processing a record (or a stream-time timer "
            "or window-close callback): windows belong to the task that owns the record. From "
            "a page, read the committed windows at /tables/<table>/<key> of the worker's web "
            "server; elsewhere, keep what you need in a plain table"
        )
    return task, None


def _windows(task: TaskScope, table: Table) -> WindowedTableState:
    """The task's windows of ``table``: the state :meth:`Table.open_windowed` made (the
    contract types it as the little the commit needs of it)."""
    return task.windowed(table)  # type: ignore[return-value]


class WindowSet:
    """The windows of one key, bound to a record (Faust's ``WindowSet``).

    In-place operators (``+=``, ``-=``, ...) update every window the record's time falls in
    (:meth:`apply`). Reads pick one window: :meth:`current` (of the record's timestamp),
    :meth:`value` (of the wrapper's time relativity), :meth:`now` (of the wall clock),
    :meth:`delta` (``d`` seconds before the record). A window that does not exist (or has expired)
    reads as the table's default, or raises ``KeyError`` without one. Iterating gives the key's
    windows as :class:`~streams_app.app.windows.WindowRange`; :meth:`items` with their values.
    """

    __slots__ = ("event", "key", "wrapper")

    def __init__(self, key: Any, wrapper: WindowWrapper, event: Event | None = None) -> None:
        self.key = key
        self.wrapper = wrapper
        self.event = event

    def _state(self) -> WindowedTableState:
        task, _ = _scope()
        return _windows(task, self.wrapper.table)

    def _read(self, state: WindowedTableState, window: WindowKey | None) -> Any:
        if window is not None and state.visible(window):
            stored = state.view.tx.get(window, _MISSING)
            if stored is not _MISSING:
                return state.windows.aggregate(stored)
        return state.initial()

    # -- updates --------------------------------------------------------------------------

    def apply(self, op: Op, value: Any, event: Event | None = None) -> WindowSet:
        """Apply ``op(aggregate, value)`` to every window of the record's time."""
        event = event or self.event
        if event is None:
            task, event = _scope()
        else:
            task = event.task
        table = self.wrapper.table
        if not table._warned_key and (event is None or self.key is not event.key):
            table._check_key(self.key)  # a key other than the record's: one value per partition
        state = _windows(task, table)
        relative = self.wrapper._relative_to
        timestamp = (
            event.timestamp
            if relative is None and event is not None
            else (self.wrapper.get_timestamp(event))
        )
        # WindowedTableState.update, inlined: this runs for every record of every windowed table.
        state.prior = state.observed
        if timestamp > state.observed:
            state.observed = timestamp
        if not state.windows.update(state, self.key, timestamp, op, value) and event is not None:
            task.record_late(event, table)
        return self

    def __iadd__(self, other: Any) -> WindowSet:
        return self.apply(operator.add, other)

    def __isub__(self, other: Any) -> WindowSet:
        return self.apply(operator.sub, other)

    def __imul__(self, other: Any) -> WindowSet:
        return self.apply(operator.mul, other)

    def __itruediv__(self, other: Any) -> WindowSet:
        return self.apply(operator.truediv, other)

    def __ifloordiv__(self, other: Any) -> WindowSet:
        return self.apply(operator.floordiv, other)

    def __imod__(self, other: Any) -> WindowSet:
        return self.apply(operator.mod, other)

    def __ipow__(self, other: Any) -> WindowSet:
        return self.apply(operator.pow, other)

    def __ilshift__(self, other: Any) -> WindowSet:
        return self.apply(operator.lshift, other)

    def __irshift__(self, other: Any) -> WindowSet:
        return self.apply(operator.rshift, other)

    def __iand__(self, other: Any) -> WindowSet:
        return self.apply(operator.and_, other)

    def __ixor__(self, other: Any) -> WindowSet:
        return self.apply(operator.xor, other)

    def __ior__(self, other: Any) -> WindowSet:
        return self.apply(operator.or_, other)

    # -- reads ----------------------------------------------------------------------------

    def value(self, event: Event | None = None) -> Any:
        """The window of the wrapper's time relativity (the record's timestamp by default)."""
        state = self._state()
        timestamp = self.wrapper.get_timestamp(event or self.event)
        value = state.windows.current_value(
            state.view, self.key, timestamp, state.observed, _MISSING
        )
        return state.initial() if value is _MISSING else value

    def current(self, event: Event | None = None) -> Any:
        """The window of the record's timestamp (Faust: relative to the stream)."""
        event = event or self.event or current_event.get()
        if event is None:
            raise TopologyError("this read needs the record being processed (it has none here)")
        state = _windows(event.task, self.wrapper.table)
        value = state.windows.current_value(
            state.view, self.key, event.timestamp, state.observed, _MISSING
        )
        return state.initial() if value is _MISSING else value

    def now(self) -> Any:
        """The earliest window holding the wall-clock time (Faust's ``now()``)."""
        state = self._state()
        timestamp = _wall_ms()
        return self._read(state, state.windows.earliest(state.view, self.key, timestamp))

    def delta(self, d: Duration, event: Event | None = None) -> Any:
        """The window of ``d`` seconds (or a timedelta) before the record's timestamp."""
        state = self._state()
        timestamp = _event_time(event or self.event) - duration_ms(d, "delta")
        return self._read(state, state.windows.current(state.view, self.key, timestamp))

    def windows(self) -> list[tuple[WindowRange, Any]]:
        """This key's live windows, oldest first, with their values."""
        state = self._state()
        return [
            (WindowRange.of(window), state.windows.aggregate(stored))
            for window, stored in state.view.windows(self.key)
            if state.visible(window)
        ]

    def __iter__(self) -> Iterator[WindowRange]:
        return (window for window, _ in self.windows())

    def items(self) -> list[tuple[WindowRange, Any]]:
        return self.windows()

    def keys(self) -> list[WindowRange]:
        return [window for window, _ in self.windows()]

    def values(self) -> list[Any]:
        return [value for _, value in self.windows()]

    def __getitem__(self, w: Any) -> Any:
        """``ws[event]``: bound to another record; ``ws[(start, end)]``: that window's value."""
        if isinstance(w, Event):
            return type(self)(self.key, self.wrapper, w)
        state = self._state()
        return self._read(state, self._window(w))

    def __setitem__(self, w: Any, value: Any) -> None:
        if isinstance(w, Event):
            raise NotImplementedError("cannot set a WindowSet item keyed by an event")
        state = self._state()
        window = self._window(w)
        if state.windows.kind == "sliding":  # sliding windows also keep their newest record time
            value = SlidingValue(value, window.end)
        state.track(window)
        state.view.put(window, value)

    def __delitem__(self, w: Any) -> None:
        if isinstance(w, Event):
            raise NotImplementedError("cannot delete a WindowSet item keyed by an event")
        self._state().view.delete(self._window(w))

    def _window(self, w: Any) -> WindowKey:
        start, end = w
        return WindowKey(self.key, instant_ms(start, "window start"), instant_ms(end, "window end"))

    def __repr__(self) -> str:  # no key: it may be personal data
        return f"<WindowSet of {self.wrapper.table.name}>"


def _event_time(event: Event | None) -> int:
    if event is None:
        event = current_event.get()
    if event is None:
        raise TopologyError("this read needs the record being processed (it has none here)")
    return event.timestamp


def _wall_ms() -> int:
    runtime = current_runtime.get()
    if runtime is None:
        raise TopologyError("windows relative to the wall clock need a running worker")
    return round(runtime.wall_time() * 1000)


class WindowWrapper:
    """A windowed table (Faust's ``WindowWrapper``): ``wrapper[key]`` is a :class:`WindowSet`."""

    def __init__(self, table: Table, *, relative_to: RelativeHandler | None = None) -> None:
        self.table = table
        self._relative_to = relative_to
        #: The WindowSet handed out last (see __getitem__).
        self._last: WindowSet | None = None

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def window(self) -> Windows:
        window = self.table.window
        assert window is not None
        return window

    # -- time relativity ------------------------------------------------------------------

    def clone(self, relative_to: RelativeHandler | None) -> WindowWrapper:
        return type(self)(self.table, relative_to=relative_to)

    def relative_to(self, ts: Any) -> WindowWrapper:
        """Fixed time (datetime or epoch seconds), a model field, or ``f(event) -> seconds``."""
        if isinstance(ts, (datetime, int, float)):
            fixed = instant_ms(ts)
            return self.clone(lambda event: fixed)
        if hasattr(ts, "getattr") or hasattr(ts, "field"):
            return self.relative_to_field(ts)
        if callable(ts):
            fun = ts
            return self.clone(lambda event: instant_ms(fun(event), "relative_to result"))
        raise TypeError(f"relative_to takes a datetime, seconds, a field or a function: {ts!r}")

    def relative_to_now(self) -> WindowWrapper:
        """Windows by the wall clock, not the records' time."""
        return self.clone(lambda event: _wall_ms())

    def relative_to_stream(self) -> WindowWrapper:
        """Windows by the record's timestamp (the default)."""
        return self.clone(None)

    def relative_to_field(self, field: Any) -> WindowWrapper:
        """Windows by a field of the record's value (a datetime or epoch seconds), e.g.
        ``relative_to_field(PageView.viewed_at)``."""
        name = getattr(field, "field", None) or getattr(field, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"relative_to_field takes a model field descriptor, got {field!r}")

        def from_field(event: Event | None) -> int:
            if event is None:
                raise TopologyError("relative_to_field needs the record being processed")
            return instant_ms(getattr(event.value, name), f"field {name!r}")

        return self.clone(from_field)

    def get_timestamp(self, event: Event | None = None) -> int:
        """The time (ms) this wrapper places ``event`` at."""
        if event is None:
            event = current_event.get()
        if self._relative_to is not None:
            return self._relative_to(event)
        if event is None:
            raise TopologyError("a windowed table needs the record being processed")
        return event.timestamp

    # -- dict-like ------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> WindowSet:
        # ``table[key] += 1; table[key].current()`` asks twice for the same key while handling
        # the same record: the second time gets the same (immutable) WindowSet back.
        event = current_event.get()
        last = self._last
        if last is not None and last.key is key and last.event is event and event is not None:
            return last
        windows = self._last = WindowSet(key, self, event)
        return windows

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, WindowSet):
            return  # the second half of ``wrapper[key] += 1``: already applied
        WindowSet(key, self, current_event.get()).apply(_replace, value)

    def __delitem__(self, key: Any) -> None:
        task, event = _scope()
        state = _windows(task, self.table)
        timestamp = self.get_timestamp(event)
        window = state.windows.current(state.view, key, timestamp)
        if window is not None:
            state.view.delete(window)

    def __contains__(self, key: Any) -> bool:
        task, event = _scope()
        state = _windows(task, self.table)
        timestamp = self.get_timestamp(event)
        return state.read(state.windows.current(state.view, key, timestamp)) is not _MISSING

    def keys(self) -> list[Any]:
        """Keys with live windows in the current task's partition."""
        task, _ = _scope()
        return _windows(task, self.table).keys()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def items(self) -> list[tuple[Any, Any]]:
        """``(key, value of the window of the wrapper's time)`` for every key."""
        return [(key, self[key].value()) for key in self.keys()]

    def values(self) -> list[Any]:
        return [value for _, value in self.items()]

    def __repr__(self) -> str:
        return f"<WindowWrapper {self.table.name} {self.window!r}>"


def _replace(_old: Any, new: Any) -> Any:
    return new
