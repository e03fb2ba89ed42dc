"""Window definitions: tumbling, hopping, sliding and session windows, as Kafka Streams has them.

Units. Sizes, steps, gaps, grace periods and retention are *durations*: seconds (int or float) or
``timedelta`` in the API, like Faust. Inside, every time is an integer number of milliseconds,
like Kafka's record timestamps, so window arithmetic is exact.

What each kind of window is (all as Kafka Streams defines them):

- **Tumbling / hopping** (``TimeWindows``): ``[start, end)`` with ``end = start + size``, starts
  aligned to the epoch in multiples of the step (``step == size``: tumbling). A record at ``t``
  belongs to every window with ``start <= t < end`` and ``start >= 0``.
- **Sliding** (``SlidingWindows``, KIP-450): ``[start, end]``, both inclusive, ``end - start ==
  size``. Windows exist only where records make them: each record's *left* window ``[t - size,
  t]``, and the *right* window ``[t + 1, t + 1 + size]`` of a record once a later record falls in
  it. So every distinct, non-empty set of records no more than ``size`` apart has one window.
- **Session** (``SessionWindows``): ``[first, last]`` record timestamps of a key, inclusive; a
  record within ``gap`` of a session joins it, and a record that bridges two sessions merges them.

Each table partition has an *observed stream time* (the largest timestamp that updated it, as the
processor-level ``observedStreamTime`` of Kafka Streams' windowed aggregations). A window is
**closed** once that time reaches its end plus ``grace`` (for sessions: plus the gap as well):
updates to it are then late, and its final value is emitted. It is **expired**, deleted from the
store and tombstoned in the changelog, once it falls out of ``retention`` (by default the
smallest Kafka Streams allows: ``size + grace``, ``2 * size + grace`` for sliding windows, ``gap +
grace`` for sessions).
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeAlias

from streams_app.state.windowed import SlidingValue, WindowKey

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from streams_app.state.windowed import WindowedTransaction

Duration: TypeAlias = "int | float | timedelta"

#: ``op(old_aggregate, value) -> new_aggregate`` (``operator.add`` for ``+=``).
Op: TypeAlias = Callable[[Any, Any], Any]
_MISSING: Any = object()


def duration_ms(value: Duration, what: str) -> int:
    """Seconds or a timedelta, as whole milliseconds (rounded)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{what} must be seconds (int or float) or a timedelta, got {value!r}")
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return round(seconds * 1000)


def instant_ms(value: Any, what: str = "timestamp") -> int:
    """A point in time as epoch milliseconds: a ``datetime`` or seconds since the epoch."""
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return round(value * 1000)
    raise TypeError(f"{what} must be a datetime or seconds since the epoch, got {value!r}")


class WindowRange(NamedTuple):
    """A window's bounds in seconds since the epoch (Faust's ``(start, end)``).

    ``end`` is exclusive for tumbling and hopping windows and inclusive for sliding and session
    windows, as in Kafka Streams (Faust's own ranges end 0.1 s before the next window starts).
    """

    start: float
    end: float

    @classmethod
    def of(cls, window: WindowKey) -> WindowRange:
        return cls(window.start / 1000, window.end / 1000)

    @property
    def start_ms(self) -> int:
        return round(self.start * 1000)

    @property
    def end_ms(self) -> int:
        return round(self.end * 1000)


class WindowState(Protocol):
    """What an update works on: a task's windows of a table partition (``WindowedTableState``)."""

    view: WindowedTransaction
    #: The partition's observed stream time, this record's timestamp included.
    observed: int
    #: The observed stream time before this record (sessions: a session closed by then is
    #: final and never merged again, even when this record moves stream time).
    prior: int
    #: The newest window start written (sliding windows: it decides which windows are still
    #: in the store, as the stream time of Kafka Streams' window store does).
    newest_start: int
    #: Window updates dropped because their window had closed, as Kafka Streams'
    #: ``dropped-records-total`` counts them: one per window a record skipped, and one for a
    #: sliding or session record late for every window (whose windows do not exist).
    skipped_windows: int

    def initial(self) -> Any:
        """A new aggregate (the table's default)."""

    def track(self, window: tuple[Any, int, int]) -> None:
        """A window (a WindowKey or a plain ``(key, start, end)``) was written: queue it to
        close and expire (if it is not already)."""

    def reclose(self, window: tuple[Any, int, int]) -> None:
        """A session about to be written although already closed (WindowedTableState.reclose)."""


class Windows(ABC):
    """A kind of window: which windows a record updates, and when a window closes and expires."""

    kind: str
    grace_ms: int
    retention_ms: int

    # -- lifecycle ------------------------------------------------------------------------

    @abstractmethod
    def close_at(self, window: tuple[Any, int, int]) -> int:
        """The observed stream time at which ``window`` is closed (final, updates late)."""

    @abstractmethod
    def expire_at(self, window: tuple[Any, int, int]) -> int:
        """The time (:meth:`expiry_time`) at which ``window`` leaves the store."""

    def expiry_time(self, state: WindowState) -> int:
        """The time :meth:`expire_at` is compared with: the observed stream time."""
        return state.observed

    # -- updates --------------------------------------------------------------------------

    @abstractmethod
    def update(self, state: WindowState, key: Any, timestamp: int, op: Op, value: Any) -> bool:
        """Apply ``op(aggregate, value)`` for a record of ``key`` at ``timestamp``.

        Every window written is reported to ``state.track``; updates dropped because their
        window had closed are counted in ``state.skipped_windows``. Returns False when the
        record was late for every window it belongs to (it changed nothing).
        """

    # -- reads ----------------------------------------------------------------------------

    @abstractmethod
    def current(self, view: WindowedTransaction, key: Any, timestamp: int) -> WindowKey | None:
        """The window ``.current()`` reads for ``timestamp`` (Faust: the latest one holding it)."""

    def earliest(self, view: WindowedTransaction, key: Any, timestamp: int) -> WindowKey | None:
        """The window ``.now()`` reads (Faust: the earliest one holding the time)."""
        return self.current(view, key, timestamp)

    def current_value(
        self, view: WindowedTransaction, key: Any, timestamp: int, observed: int, default: Any
    ) -> Any:
        """The value of the window :meth:`current` picks, or ``default`` when there is none
        or it has expired by ``observed`` (``.current()`` runs this once per record)."""
        window = self.current(view, key, timestamp)
        if window is None or self.expire_at(window) <= observed:
            return default
        stored = view.tx.get(window, _MISSING)
        return default if stored is _MISSING else self.aggregate(stored)

    def aggregate(self, stored: Any) -> Any:
        """The user's value out of what the store holds."""
        return stored

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


def _check(size_ms: int, grace_ms: int, what: str) -> None:
    if size_ms <= 0:
        raise ValueError(f"{what} must be positive")
    if grace_ms < 0:
        raise ValueError("grace must not be negative")


def _retention(given: Duration | None, minimum: int, explain: str) -> int:
    if given is None:
        return minimum
    retention = duration_ms(given, "expires")
    if retention < minimum:
        # Faust apps write e.g. tumbling(10, expires=1) (Faust's expires counts from the window's
        # end, by the wall clock): keep their meaning, a window kept until it closes, and say so.
        log.warning(
            "expires=%gs is shorter than %s (%gs): windows are kept until they close, "
            "%gs after their start",
            retention / 1000,
            explain,
            minimum / 1000,
            minimum / 1000,
        )
        return minimum
    return retention


class TimeWindows(Windows):
    """Tumbling (``step == size``) and hopping windows, ``[start, end)``, aligned to the epoch."""

    kind = "time"

    def __init__(
        self,
        size: Duration,
        step: Duration | None = None,
        *,
        grace: Duration = 0,
        expires: Duration | None = None,
    ) -> None:
        self.size_ms = duration_ms(size, "size")
        self.step_ms = self.size_ms if step is None else duration_ms(step, "step")
        self.grace_ms = duration_ms(grace, "grace")
        _check(self.size_ms, self.grace_ms, "size")
        if not 0 < self.step_ms <= self.size_ms:
            raise ValueError("step must be positive and no larger than size")
        self.retention_ms = _retention(
            expires, self.size_ms + self.grace_ms, "size + grace (Kafka Streams' minimum)"
        )

    @property
    def tumbling(self) -> bool:
        return self.step_ms == self.size_ms

    def starts_for(self, timestamp: int) -> Iterator[int]:
        """Starts of the windows holding ``timestamp``, oldest first (never below 0)."""
        size, step = self.size_ms, self.step_ms
        start = (max(0, timestamp - size + step) // step) * step
        while start <= timestamp:
            yield start
            start += step

    def close_at(self, window: tuple[Any, int, int]) -> int:
        return window[2] + self.grace_ms

    def expire_at(self, window: tuple[Any, int, int]) -> int:
        return window[1] + self.retention_ms + 1

    def update(self, state: WindowState, key: Any, timestamp: int, op: Op, value: Any) -> bool:
        # The hot path of windowed counts: plain tuples as transaction keys (equal to, and
        # hashing like, WindowKey), no generator, the transaction written directly (time
        # windows' views keep no per-key index).
        tx = state.view.tx
        size, step = self.size_ms, self.step_ms
        close = state.observed - self.grace_ms
        if size == step and timestamp >= 0:  # tumbling: one window
            start = timestamp - timestamp % size
            end = start + size
            if end <= close:
                state.skipped_windows += 1
                return False
            window = (key, start, end)
            old = tx.get(window, _MISSING)
            if old is _MISSING:
                old = state.initial()
                state.track(window)
            tx.set(window, op(old, value))
            return True
        start = (max(0, timestamp - size + step) // step) * step
        applied = False
        while start <= timestamp:
            end = start + size
            if end <= close:
                state.skipped_windows += 1
            else:
                window = (key, start, end)
                old = tx.get(window, _MISSING)
                if old is _MISSING:
                    old = state.initial()
                    state.track(window)
                tx.set(window, op(old, value))
                applied = True
            start += step
        return applied

    def current(self, view: WindowedTransaction, key: Any, timestamp: int) -> WindowKey | None:
        if timestamp < 0:
            return None
        start = (timestamp // self.step_ms) * self.step_ms
        return (key, start, start + self.size_ms)  # type: ignore[return-value]  # WindowKey-equal

    def current_value(
        self, view: WindowedTransaction, key: Any, timestamp: int, observed: int, default: Any
    ) -> Any:
        # current(), expire_at() and aggregate() (the stored value itself) in one call.
        if timestamp < 0:
            return default
        start = timestamp - timestamp % self.step_ms
        if start + self.retention_ms + 1 <= observed:
            return default
        return view.tx.get((key, start, start + self.size_ms), default)

    def earliest(self, view: WindowedTransaction, key: Any, timestamp: int) -> WindowKey | None:
        start = next(self.starts_for(timestamp), None)
        return None if start is None else WindowKey(key, start, start + self.size_ms)

    def bounds_for(self, key: Any, timestamp: int) -> list[WindowKey]:
        return [WindowKey(key, s, s + self.size_ms) for s in self.starts_for(timestamp)]


class SlidingWindows(Windows):
    """Kafka Streams' sliding windows (KIP-450): ``[t - size, t]`` per record, both ends inclusive.

    The update follows Kafka Streams' algorithm (``KStreamSlidingWindowAggregate``): a record
    updates every existing window that holds it, creates its own left window from the aggregate
    of the window just before it, creates its right window as a copy of the next window's
    aggregate when a later record exists, and creates the right window of the record before it
    when that window now holds something. Stored values are :class:`SlidingValue` (the aggregate
    and the largest timestamp in the window), which that algorithm needs.
    """

    kind = "sliding"

    def __init__(
        self, size: Duration, *, grace: Duration = 0, expires: Duration | None = None
    ) -> None:
        self.size_ms = duration_ms(size, "size")
        self.grace_ms = duration_ms(grace, "grace")
        _check(self.size_ms, self.grace_ms, "size")
        self.retention_ms = _retention(
            expires, 2 * self.size_ms + self.grace_ms, "2 * size + grace (Kafka Streams' minimum)"
        )

    def close_at(self, window: tuple[Any, int, int]) -> int:
        return window[2] + self.grace_ms + 1

    def expire_at(self, window: tuple[Any, int, int]) -> int:
        return window[1] + self.retention_ms + 1

    def expiry_time(self, state: WindowState) -> int:
        # Retention counts from the newest window start written, as Kafka Streams' window store
        # counts it (its stream time is the largest window start put): a window is gone once
        # its start is ``retention`` or more before that. What the update below sees depends
        # on that alone, never on where a batch (and with it the deletion of expired windows)
        # happened to end, so the windows updated and skipped are Kafka Streams' whatever the
        # batching.
        return state.newest_start + 1

    def aggregate(self, stored: Any) -> Any:
        return stored.value

    def update(self, state: WindowState, key: Any, timestamp: int, op: Op, value: Any) -> bool:
        view, initial, track = state.view, state.initial, state.track
        t, d = timestamp, self.size_ms
        close = state.observed - self.grace_ms
        if t + d < close:
            state.skipped_windows += 1  # Kafka Streams counts its newest window, once
            return False  # every window holding it has closed

        def created(window: WindowKey) -> None:
            track(window)
            if window.start > state.newest_start:
                state.newest_start = window.start

        def put(window: WindowKey, stored: SlidingValue | None, base: SlidingValue) -> None:
            """Add the record to ``window`` (whose current content is ``base``), if open."""
            if window.end < close:
                state.skipped_windows += 1
                return
            created(window)
            view.put(window, SlidingValue(op(base.value, value), max(t, base.max_timestamp)))

        # Windows out of retention (see expiry_time) are left out even before they are deleted
        # at the end of the batch.
        gone = state.newest_start - self.retention_ms
        windows = [
            found for found in view.windows(key, max(0, t - 2 * d), t + 1) if found[0].start > gone
        ]
        if t < d:
            self._early(view, key, t, windows, put, initial, created)
            return True
        starts = {w.start for w, _ in windows}
        left_agg: SlidingValue | None = None
        right_agg: SlidingValue | None = None
        left_exists = right_exists = False
        previous: int | None = None
        # Newest first: windows holding t, the left window ending at t, then the one before it.
        for window, stored in reversed(windows):
            end = window.start + d
            if window.start == t + 1:
                right_exists = True
            elif end > t:
                if right_agg is None:
                    right_agg = stored
                put(window, stored, stored)
            elif end == t:
                left_exists = True
                put(window, stored, stored)
                if stored.max_timestamp < t:
                    previous = stored.max_timestamp
                else:
                    return True  # a record at t came before: its windows are all there
            else:
                left_agg = stored
                previous = stored.max_timestamp
                break
        if previous is not None:
            start = previous + 1
            if start not in starts and start + d >= t:
                put(WindowKey(key, start, start + d), None, SlidingValue(initial(), t))
        if not left_exists:
            if previous is not None and t - d <= previous and left_agg is not None:
                base = SlidingValue(left_agg.value, t)
            else:
                base = SlidingValue(initial(), t)
            put(WindowKey(key, t - d, t), None, base)
        if not right_exists and right_agg is not None and right_agg.max_timestamp > t:
            window = WindowKey(key, t + 1, t + 1 + d)
            created(window)
            view.put(window, right_agg)
        return True

    def _early(
        self,
        view: WindowedTransaction,
        key: Any,
        t: int,
        windows: list[tuple[WindowKey, Any]],
        put: Callable[[WindowKey, SlidingValue | None, SlidingValue], None],
        initial: Callable[[], Any],
        created: Callable[[WindowKey], None],
    ) -> None:
        """A record before ``size`` ms after the epoch: its left window would start before 0, so
        it goes into ``[0, size]`` instead (Kafka Streams' ``processEarly``)."""
        d = self.size_ms
        combined: tuple[WindowKey, SlidingValue] | None = None
        right_agg: SlidingValue | None = None
        right_exists = False
        previous: int | None = None
        starts = {w.start for w, _ in windows}
        for window, stored in windows:
            if window.start == 0:
                combined = (window, stored)
                if stored.max_timestamp < t:
                    previous = stored.max_timestamp
            elif window.start <= t:
                right_agg = stored
                put(window, stored, stored)
            elif window.start == t + 1:
                right_exists = True
        if right_agg is None and combined is not None and combined[1].max_timestamp > t:
            right_agg = combined[1]
        if not right_exists and right_agg is not None and right_agg.max_timestamp > t:
            window = WindowKey(key, t + 1, t + 1 + d)
            created(window)
            view.put(window, right_agg)
        if previous is not None and previous + 1 not in starts:
            start = previous + 1
            put(WindowKey(key, start, start + d), None, SlidingValue(initial(), t))
        if combined is None:
            put(WindowKey(key, 0, d), None, SlidingValue(initial(), t))
        else:
            put(combined[0], combined[1], combined[1])

    def current(self, view: WindowedTransaction, key: Any, timestamp: int) -> WindowKey | None:
        start = max(0, timestamp - self.size_ms)
        return WindowKey(key, start, start + self.size_ms)


class SessionWindows(Windows):
    """Sessions of activity per key, separated by at least ``gap`` of inactivity; ``[first,
    last]`` inclusive. ``merge(a, b)`` combines two sessions' aggregates when a record bridges
    them (default ``a + b``: counts, sums, lists)."""

    kind = "session"

    def __init__(
        self,
        gap: Duration,
        *,
        grace: Duration = 0,
        expires: Duration | None = None,
        merge: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.gap_ms = duration_ms(gap, "inactivity gap")
        self.grace_ms = duration_ms(grace, "grace")
        _check(self.gap_ms, self.grace_ms, "inactivity gap")
        self.retention_ms = _retention(
            expires, self.gap_ms + self.grace_ms, "gap + grace (Kafka Streams' minimum)"
        )
        self.merge: Callable[[Any, Any], Any] = merge or (lambda a, b: a + b)

    def close_at(self, window: tuple[Any, int, int]) -> int:
        # Closed once stream time *reaches* end + gap + grace, as in Kafka Streams 4.3: its
        # session store then no longer returns the session (retention gap + grace from the
        # largest session end written), so a later record starts a new session instead of
        # extending it, and suppress(untilWindowCloses) emits it at that instant.
        return window[2] + self.gap_ms + self.grace_ms

    def expire_at(self, window: tuple[Any, int, int]) -> int:
        return window[2] + self.retention_ms + 1

    def sessions(
        self, view: WindowedTransaction, key: Any, low: int, high: int, observed: int
    ) -> list[tuple[WindowKey, Any]]:
        """Stored sessions of ``key`` ending at or after ``low`` and starting at or before
        ``high`` that were still open at stream time ``observed`` (Kafka Streams'
        ``findSessions``): a closed session is final, never merged into a new one."""
        close_at = self.close_at
        return [
            (w, v)
            for w, v in view.windows(key, None, high)
            if w.end >= low and close_at(w) > observed
        ]

    def update(self, state: WindowState, key: Any, timestamp: int, op: Op, value: Any) -> bool:
        view, observed = state.view, state.observed
        t, gap = timestamp, self.gap_ms
        close = observed - self.grace_ms - gap
        # Sessions open before this record: one that this very record's time closes (grace 0,
        # t == end + gap) is still extended, as in Kafka Streams, where the record is merged
        # before stream time moves.
        found = self.sessions(view, key, t - gap, t + gap, state.prior)
        start, end = t, t
        aggregate = state.initial()
        for window, stored in found:
            aggregate = self.merge(aggregate, stored)
            start, end = min(start, window.start), max(end, window.end)
        if end < close:
            state.skipped_windows += 1  # the session it would have made or extended
            return False
        merged = WindowKey(key, start, end)
        if (start, end) != (t, t):
            for window, _ in found:
                view.delete(window)
        if end == close:
            # Exactly at the close point: accepted, as in Kafka Streams, but closed at once. A
            # closed session of the same bounds ([t, t]) is replaced, not merged.
            state.reclose(merged)
        else:
            state.track(merged)
        view.put(merged, op(aggregate, value))
        return True

    def current(self, view: WindowedTransaction, key: Any, timestamp: int) -> WindowKey | None:
        for window, _ in view.windows(key, None, timestamp):
            if window.start <= timestamp <= window.end:
                return window
        return None
