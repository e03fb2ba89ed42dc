"""Stream-stream windowed joins (inner, left, outer): the processor of one task's partition.

What it computes is docs/joins.md, "Stream-stream join" (Kafka Streams' ``KStream#join(KStream,
ValueJoiner, JoinWindows)`` and its left and outer variants), restated here as the code does it.

**Matching.** A left record at ``t`` matches the right records of its key with a time in
``[t - before, t + after]``, a right record at ``t`` the left records in ``[t - after, t +
before]`` (both ends inclusive, clamped at 0 as Kafka Streams clamps them). A record first looks
in the *other* side's buffer, then goes into its own (Kafka Streams' ``KStreamJoinWindow``
forwards a record to the join before storing it): so each pair is emitted once, by whichever of
the two is processed second, with the larger of the two times. Duplicates (one side, one key,
one time) are kept apart by their input offset and each pairs.

**What bounds matching, and what grace decides.** A buffered record can be found while it is
*retained*: its time is within ``before + after + grace`` of the largest time its side has
stored (:mod:`streams_app.state.join_windows`), as Kafka Streams' window stores keep it. That is
the only bound on pairs: a record later than grace still pairs with what the other side
retains, as in Kafka Streams (a record older than its own side's retention is not stored, and
counted in :attr:`StreamStreamJoinState.too_late`, Kafka Streams' dropped records). Grace
decides when a left/outer record's *null* is final.

**Nulls (left: left records; outer: both).** A record that found no partner when it arrived
waits in the unmatched store (:mod:`streams_app.state.unmatched`) until the join's stream time
passes its window's close, ``t + after + grace`` (left) or ``t + before + grace`` (right); a
partner arriving meanwhile removes it. When stream time passes the close, its null is emitted
with its own time, in close order, *before* the record that moved stream time is joined. The
record is then also deleted from its side's buffer: a released record takes no partner
afterwards, its result is final (KAFKA-10847 without Kafka Streams 4.3's exceptions,
docs/joins.md "Where Kafka Streams 4.3 is inconsistent"). A record that arrives unmatched with
its window already closed gets its null at once and is never buffered.

**Stream time** is the largest time of any record of either side (null keys and null values
included, as Kafka Streams' shared time tracker), kept in the unmatched store and committed
with it; an inner join has no nulls and needs none. :meth:`StreamStreamJoinState.advance_to`
moves it without a record: the opt-in idle close (docs/joins.md).

**Null keys and values.** A null value is dropped (it moves stream time). A null key cannot
match anything: on a left/outer side it is emitted at once with ``None`` for the other side
(KIP-962), on an inner side dropped.

**Transactions.** The state lives in three stores (one buffer per side, the unmatched records),
each through the task's :class:`~streams_app.state.base.PartitionTransaction`: written to the
store partitions only when the Kafka transaction that carries the join's results and the input
offsets commits, dropped when it aborts. Like the views it is built on, a state is made anew
after an abort (their in-memory hints are valid only within one line of transactions).

:class:`StreamStreamJoinState` does not know records, tasks or topics: it takes each record's
side, key, value, time and input offset, and returns results. :class:`StreamStreamProcessor`
is what the runtime runs (``runtime/joins/base.py``): it feeds it the records of both topics
as the dispatcher hands them over (in the task's timestamp order, in the transaction), sends
its results through the join's outputs, expires the buffers at the end of each batch, and
moves stream time on an idle close. (``JoinWindows`` here is the window in milliseconds; the
app's :class:`streams_app.JoinWindows` takes seconds and gives these.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from streams_app.codecs import Codec
from streams_app.runtime import rpc
from streams_app.runtime.joins.base import JoinProcessor
from streams_app.runtime.joins.runtime import register
from streams_app.runtime.joins.sources import restored_time
from streams_app.state.base import PartitionTransaction
from streams_app.state.composite import NO_TIME
from streams_app.state.join_windows import (
    BufferValueCodec,
    JoinWindowKeyCodec,
    JoinWindowTransaction,
    default_segment_ms,
    join_window_codecs,
)
from streams_app.state.unmatched import (
    LEFT,
    RIGHT,
    UnmatchedKeyCodec,
    UnmatchedTransaction,
    unmatched_codecs,
)
from streams_app.topology.contract import current_event
from streams_app.topology.description import STREAM_STREAM

if TYPE_CHECKING:
    from streams_app.app.topic import Topic
    from streams_app.runtime.actor import Feeder
    from streams_app.runtime.task import Task
    from streams_app.state.restore import Accept
    from streams_app.topology.contract import Event, TaskScope
    from streams_app.transport.base import RecordLike

__all__ = [
    "HOWS",
    "INNER",
    "LEFT",
    "LEFT_JOIN",
    "OUTER",
    "RIGHT",
    "JoinResult",
    "JoinWindows",
    "StreamStreamJoin",
    "StreamStreamJoinState",
    "StreamStreamProcessor",
]

log = logging.getLogger(__name__)

INNER = "inner"
LEFT_JOIN = "left"
OUTER = "outer"
HOWS = (INNER, LEFT_JOIN, OUTER)
#: Which sides get a null when nothing matches them.
_OUTER_SIDES = {INNER: (False, False), LEFT_JOIN: (True, False), OUTER: (True, True)}


@dataclass(frozen=True)
class JoinWindows:
    """A stream-stream join window in ms (Kafka Streams' ``JoinWindows``): a left record at
    ``t`` matches right records in ``[t - before, t + after]``; ``grace`` is how long after a
    window's end its null may still be cancelled by a late partner."""

    before: int
    after: int
    grace: int = 0

    def __post_init__(self) -> None:
        if self.before + self.after < 0:
            raise ValueError(
                f"a join window needs before + after >= 0 (before={self.before} ms, "
                f"after={self.after} ms): it would match nothing"
            )
        if self.grace < 0:
            raise ValueError(f"a join window's grace must not be negative ({self.grace} ms)")

    @property
    def retention(self) -> int:
        """How long each side's buffer keeps a record (Kafka Streams: window size + grace)."""
        return self.before + self.after + self.grace

    @property
    def close_after(self) -> tuple[int, int]:
        """How long after its time a left / right record's window closes (grace included)."""
        return (self.after + self.grace, self.before + self.grace)

    def other_side_range(self, side: int, timestamp: int) -> tuple[int, int]:
        """The other side's times that a record of ``side`` at ``timestamp`` matches."""
        if side == LEFT:
            low, high = timestamp - self.before, timestamp + self.after
        else:
            low, high = timestamp - self.after, timestamp + self.before
        return (low if low > 0 else 0), (high if high > 0 else 0)


_new = tuple.__new__


class JoinResult(NamedTuple):
    """One result: the key, the left and right values (None: no partner), the result's time."""

    key: Any
    left: Any
    right: Any
    timestamp: int


@dataclass(frozen=True)
class StreamStreamJoin:
    """A stream-stream join's definition as the runtime needs it: kind, window, and the codecs
    of its three stores (see :meth:`store_codecs`)."""

    how: str
    windows: JoinWindows
    #: By side: whether its buffer is restored from its input topic (``changelog="input"``:
    #: :class:`~streams_app.state.join_windows.JoinWindowTransaction`'s ``from_input``).
    from_input: tuple[bool, bool] = (False, False)

    def __post_init__(self) -> None:
        if self.how not in HOWS:
            raise ValueError(f"a stream-stream join is one of {HOWS}, not {self.how!r}")

    @property
    def outer_sides(self) -> tuple[bool, bool]:
        return _OUTER_SIDES[self.how]

    @property
    def has_unmatched(self) -> bool:
        """Whether the join keeps unmatched records (left and outer joins)."""
        return self.how != INNER

    @property
    def segment_ms(self) -> int:
        return default_segment_ms(self.windows.retention)

    def store_codecs(self, key: Codec, left: Codec, right: Codec) -> dict[str, tuple[Codec, Codec]]:
        """The (key, value) codecs of each store the join owns, by role: ``"left"`` and
        ``"right"`` (each side's buffer) and, for left and outer joins, ``"unmatched"``."""
        segment = self.segment_ms
        out: dict[str, tuple[Codec, Codec]] = {
            "left": join_window_codecs(key, left, segment),
            "right": join_window_codecs(key, right, segment),
        }
        if self.has_unmatched:
            out["unmatched"] = unmatched_codecs(key, left, right)
        return out

    def open(
        self,
        left: PartitionTransaction,
        right: PartitionTransaction,
        unmatched: PartitionTransaction | None,
    ) -> StreamStreamJoinState:
        """The state of one task partition of this join, over its stores' transactions (made
        with :meth:`store_codecs`' codecs)."""
        return StreamStreamJoinState(self, left, right, unmatched)


def _codec(tx: PartitionTransaction, kind: type) -> Any:
    codec = tx.key_codec
    if not isinstance(codec, kind):
        raise TypeError(f"a join store needs a {kind.__name__} key codec, not {codec!r}")
    return codec


class StreamStreamJoinState:
    """One task's join of one partition: both sides' buffers and the unmatched records.

    :meth:`process` takes one record and returns the results it makes, in order;
    :meth:`expire` (at the end of a batch) deletes what has fallen out of retention;
    :meth:`advance_to` moves stream time without a record (idle close).
    """

    __slots__ = (
        "buffers",
        "join",
        "outer",
        "reach",
        "released",
        "skipped",
        "too_late",
        "unmatched",
        "windows",
    )

    def __init__(
        self,
        join: StreamStreamJoin,
        left: PartitionTransaction,
        right: PartitionTransaction,
        unmatched: PartitionTransaction | None,
    ) -> None:
        windows = join.windows
        self.join = join
        self.windows = windows
        self.outer = join.outer_sides
        #: By side: how far before and after its time a record's partners may be.
        self.reach = ((windows.before, windows.after), (windows.after, windows.before))
        retention = windows.retention
        from_left, from_right = join.from_input
        self.buffers = (
            JoinWindowTransaction(left, _codec(left, JoinWindowKeyCodec), retention, from_left),
            JoinWindowTransaction(right, _codec(right, JoinWindowKeyCodec), retention, from_right),
        )
        self.unmatched: UnmatchedTransaction | None = None
        if join.has_unmatched:
            if unmatched is None:
                raise ValueError(f"a {join.how} join needs its unmatched store")
            self.unmatched = UnmatchedTransaction(
                unmatched, _codec(unmatched, UnmatchedKeyCodec), windows.close_after
            )
        #: Records not buffered because older than their side's retention (Kafka Streams'
        #: dropped records of a join window store); they still looked for partners.
        self.too_late = 0
        #: Records dropped for a null value, or a null key on an inner side.
        self.skipped = 0
        #: Nulls emitted because a record's window closed unmatched.
        self.released = 0

    @property
    def stream_time(self) -> int | None:
        """The join's stream time (None: an inner join keeps none, or nothing seen yet)."""
        unmatched = self.unmatched
        if unmatched is None:
            return None
        now = unmatched.stream_time
        return None if now == NO_TIME else now

    def process(
        self, side: int, key: Any, value: Any, timestamp: int, seq: int, raw: bytes | None = None
    ) -> list[JoinResult]:
        """Join one record of ``side`` (``LEFT``/``RIGHT``); ``seq``: its input offset (unique
        in its side's partition, and the same when the record is processed again after an
        abort); ``raw``: the bytes ``value`` was decoded from with its side's value codec, if
        known (buffered as they are: :meth:`JoinWindowTransaction.put`). Returns the nulls its
        time made due, then its own results."""
        unmatched = self.unmatched
        out: list[JoinResult] = []
        if unmatched is not None and unmatched.advance(timestamp):
            self._release(out)
        if key is None:
            if value is not None and self.outer[side]:
                out.append(
                    JoinResult(None, value, None, timestamp)
                    if side == LEFT
                    else JoinResult(None, None, value, timestamp)
                )
            else:
                self.skipped += 1
            return out
        if value is None:
            self.skipped += 1
            return out
        other = RIGHT - side  # LEFT <-> RIGHT (0 <-> 1)
        before, after = self.reach[side]  # JoinWindows.other_side_range, inlined
        low = timestamp - before
        high = timestamp + after
        partners = self.buffers[other].fetch(key, low if low > 0 else 0, high if high > 0 else 0)
        mine = self.buffers[side]
        if partners:
            unmatch = unmatched.remove if unmatched is not None and self.outer[other] else None
            for when, partner_seq, partner_value in partners:  # Buffered, unpacked
                if unmatch is not None:
                    unmatch(other, key, when, partner_seq)
                if when < timestamp:
                    when = timestamp
                # JoinResult(...) without its Python-level __new__ (a result per pair).
                out.append(
                    _new(JoinResult, (key, value, partner_value, when))
                    if side == LEFT
                    else _new(JoinResult, (key, partner_value, value, when))
                )
        elif unmatched is not None and self.outer[side]:
            if unmatched.closed(side, timestamp):
                # Its window closed before it came, and nothing matched it: final at once.
                out.append(
                    JoinResult(key, value, None, timestamp)
                    if side == LEFT
                    else JoinResult(key, None, value, timestamp)
                )
                self.released += 1
                mine.observe(timestamp)
                return out
            unmatched.add(side, key, timestamp, seq, value)
        if not mine.put(key, timestamp, seq, value, raw):
            self.too_late += 1
        return out

    def _release(self, out: list[JoinResult]) -> None:
        """The nulls of every waiting record whose window has closed, in close order; each
        released record leaves its buffer (it takes no partner afterwards)."""
        assert self.unmatched is not None
        buffers = self.buffers
        for record in self.unmatched.due():
            buffers[record.side].delete(record.key, record.timestamp, record.seq)
            if record.side == LEFT:
                out.append(JoinResult(record.key, record.value, None, record.timestamp))
            else:
                out.append(JoinResult(record.key, None, record.value, record.timestamp))
            self.released += 1

    def advance_to(self, timestamp: int) -> list[JoinResult]:
        """Move the join's stream time up to ``timestamp`` (never back) without a record, and
        return the nulls that makes due (the idle close; nothing for an inner join)."""
        out: list[JoinResult] = []
        unmatched = self.unmatched
        if unmatched is not None and unmatched.advance(timestamp):
            self._release(out)
        return out

    def next_close(self) -> int | None:
        """When the next waiting record's window closes (None: none waits)."""
        return None if self.unmatched is None else self.unmatched.next_close

    def expire(self) -> int:
        """Delete buffered records past retention (their changelog tombstones go out at
        commit); returns how many."""
        left, right = self.buffers
        return left.expire() + right.expire()


# -- in a worker --------------------------------------------------------------------------------


def buffer_restore_filter(topic: Topic, codec: JoinWindowKeyCodec) -> Accept:
    """What restore stores of a record of ``topic`` in the buffer it is the changelog of: what
    :meth:`StreamStreamJoinState.process` puts, ``(entry, stored value)`` as
    :meth:`JoinWindowTransaction.put` makes them (the record's bytes, tagged), or None for a
    record it puts nothing for: no key or value, a key or value that does not decode (the
    dispatcher dead-letters it), no valid time. A Faust request envelope is unwrapped as the
    dispatcher unwraps it, and its inner value stored as processing stores it."""
    loads_key, loads_value = topic.key_codec.loads, topic.value_codec.loads
    from_payload = getattr(topic.value_codec, "from_payload", None)
    stored = BufferValueCodec(topic.value_codec).stored

    def accept(record: RecordLike) -> tuple[bytes, bytes | None] | None:
        raw_key, raw = record.key, record.value
        if raw_key is None or raw is None:
            return None
        try:
            key = loads_key(raw_key)
            headers = tuple(record.headers or ())
            reply_to = rpc.request_headers(headers)[0] if headers else None
            envelope = rpc.unwrap_envelope(raw) if reply_to is None and raw[:1] == b"{" else None
            if envelope is not None:
                payload = envelope[2]
                value = from_payload(payload) if from_payload is not None else payload
                value_bytes = stored(value, None)
            else:
                value = loads_value(raw)
                value_bytes = stored(value, raw if reply_to is None else None)
        except Exception:
            return None
        if key is None or value is None:
            return None
        timestamp = restored_time(topic, record.timestamp, value)
        if timestamp is None:
            return None
        return codec.entry(key, timestamp, record.offset), value_bytes

    return accept


class _Side:
    """The feeder of one side's topic: hands each record to the processor with its side."""

    __slots__ = ("label", "processor", "side")

    def __init__(self, processor: StreamStreamProcessor, side: int) -> None:
        self.processor = processor
        self.side = side
        self.label = f"{processor.label}:{'left' if side == LEFT else 'right'}"

    def forward_nowait(self, event: Event) -> Awaitable[None] | None:
        """The record joined at once; what is left to await is the sending of its results,
        if it has any (most records of an inner join have none when they come first)."""
        processor = self.processor  # process(), without a coroutine of its own per record
        found = processor.join_record(self.side, event)
        return processor._emit_nowait(event.task, found, event) if found else None

    async def forward(self, event: Event) -> None:
        rest = self.forward_nowait(event)
        if rest is not None:
            await rest

    def forward_run(self, events: list[Event]) -> Awaitable[None] | None:
        """A run of records, the results sent together: :meth:`JoinProcessor.run` over
        :meth:`forward_nowait`, in one loop (:meth:`StreamStreamProcessor.join_run`)."""
        processor = self.processor
        return processor._send_run(processor.join_run(self.side, events))


@register
class StreamStreamProcessor(JoinProcessor):
    """A declared stream-stream join (``topic.join(other_topic, JoinWindows(...))``) in a
    worker: one :class:`StreamStreamJoinState` per task, over the join's stores in that task
    (``left``, ``right`` and, for left and outer joins, ``unmatched``: app/joins.py declares
    them with :meth:`StreamStreamJoin.store_codecs`' codecs)."""

    kind = STREAM_STREAM

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        join = self.join
        assert join.before_ms is not None and join.after_ms is not None
        self.definition = StreamStreamJoin(
            join.how,
            JoinWindows(join.before_ms, join.after_ms, join.grace_ms or 0),
            (join.stores["left"].changelog_is_source, join.stores["right"].changelog_is_source),
        )
        for role in ("left", "right"):
            store = join.stores[role]
            if store.source is not None:
                log.info(
                    "join %s: the %s buffer's changelog is its input topic %s (changelog='input')",
                    join.name,
                    role,
                    store.source.name,
                )

    def restore_filters(self) -> dict[str, Accept]:
        """Input topic -> what restore stores of its records, for each buffer restored from its
        input (``changelog="input"``): the entry processing buffered, or None for a record it
        did not buffer (no key or value, undecodable, no valid time)."""
        out: dict[str, Accept] = {}
        for role in ("left", "right"):
            store = self.join.stores[role]
            if store.source is not None:
                codec = store.key_codec
                assert isinstance(codec, JoinWindowKeyCodec)  # app/joins.py declares it so
                out[store.source.name] = buffer_restore_filter(store.source, codec)
        return out

    def feeders(self) -> Iterable[tuple[str, Feeder]]:
        join = self.join
        return (
            (join.left_topic.name, _Side(self, LEFT)),
            (join.right_topic.name, _Side(self, RIGHT)),
        )

    def open(self, task: TaskScope) -> StreamStreamJoinState:
        store = self.store
        unmatched = store(task, "unmatched") if self.definition.has_unmatched else None
        return self.definition.open(store(task, "left"), store(task, "right"), unmatched)

    async def process(self, side: int, event: Event) -> None:
        """One record of ``side``: the nulls its time made due, then its pairs (or, arriving
        unmatched with its window closed, its own null), in the record's transaction."""
        found = self.join_record(side, event)
        if found:
            await self._emit(event.task, found, event)

    def join_run(
        self, side: int, events: list[Event]
    ) -> list[tuple[TaskScope, Any, Any, int, Event | None]]:
        """The results of a run of ``side``'s records, ``(task, key, value, timestamp,
        trigger)`` in order, as :meth:`JoinProcessor.run` collects them from
        :meth:`_Side.forward_nowait` one record at a time: each record current while it is
        joined (a joiner may read tables), its state changes made, its results' values made by
        the joiner. In a run no record needs an await (every result is collected, none sent),
        so the run is one loop, without the layers a record goes through on its own. A record
        that fails stays current (the dispatcher names it) and the run's results are dropped
        with it: the failure aborts the transaction that holds them."""
        if not self.definition.has_unmatched:
            return self._inner_run(side, events)
        out: list[tuple[TaskScope, Any, Any, int, Event | None]] = []
        append = out.append
        result = self.join.result_of
        set_current = current_event.set
        task: TaskScope | None = None
        process = None
        for event in events:
            set_current(event)
            if event.task is not task:
                task = event.task
                process = self.state(task).process
            assert process is not None
            found = process(
                side,
                None if event.raw_key is None else event.key,
                event.value,
                event.timestamp,
                event.offset,
                event.raw_value if event.reply_to is None else None,
            )
            for key, left, right, timestamp in found:  # JoinResult, unpacked
                append((task, key, result(left, right), timestamp, event))
        return out

    def _inner_run(
        self, side: int, events: list[Event]
    ) -> list[tuple[TaskScope, Any, Any, int, Event | None]]:
        """:meth:`join_run` of an inner join, with :meth:`StreamStreamJoinState.process`
        inlined: an inner join keeps no stream time and no unmatched records, so a record is a
        fetch of the other side's buffer, its own put into its side's, and a result per
        partner (the join's time: the larger of the two). The puts wait for the end of the
        run (of each task's part of it) and go into the buffer together
        (:meth:`~streams_app.state.join_windows.JoinWindowTransaction.put_all`): a fetch
        reads the other side's buffer, which no put of this side changes, so every record
        finds what it would have found one by one, and the buffer ends as it would have."""
        out: list[tuple[TaskScope, Any, Any, int, Event | None]] = []
        append = out.append
        result = self.join.result_of
        set_current = current_event.set
        left = side == LEFT
        task: TaskScope | None = None
        state: Any = None
        fetch: Any = None
        before = after = 0
        #: The puts of the current task's records so far, ``put_all``'s rows, and where in
        #: ``events`` that task's part of the run began.
        puts: list[tuple[Any, int, int, Any, bytes | None]] = []
        begun = 0
        for n, event in enumerate(events):
            set_current(event)
            if event.task is not task:
                if puts:
                    self._put_run(state, side, puts, events, begun)
                    puts = []
                task = event.task
                state = self.state(task)
                fetch = state.buffers[RIGHT - side].fetch
                before, after = state.reach[side]
                begun = n
            value = event.value
            key = None if event.raw_key is None else event.key  # a key may decode to None
            if value is None or key is None:
                state.skipped += 1  # a null key or value joins nothing in an inner join
                continue
            timestamp = event.timestamp
            low = timestamp - before
            high = timestamp + after
            partners = fetch(key, low if low > 0 else 0, high if high > 0 else 0)
            puts.append(
                (
                    key,
                    timestamp,
                    event.offset,
                    value,
                    event.raw_value if event.reply_to is None else None,
                )
            )
            for when, _, partner in partners:  # Buffered, unpacked
                append(
                    (
                        task,
                        key,
                        result(value, partner) if left else result(partner, value),
                        when if when > timestamp else timestamp,
                        event,
                    )
                )
        if puts:
            self._put_run(state, side, puts, events, begun)
        return out

    def _put_run(
        self,
        state: StreamStreamJoinState,
        side: int,
        puts: list[tuple[Any, int, int, Any, bytes | None]],
        events: list[Event],
        begun: int,
    ) -> None:
        """The puts of one task's records of a run (:meth:`_inner_run`). A put that fails
        (a key or value its codec cannot encode) is made again record by record, each record
        current, so that the failure names the record it is of: the failure aborts the
        transaction, and a put made twice stores the same entry."""
        buffer = state.buffers[side]
        try:
            state.too_late += buffer.put_all(puts)
        except Exception:
            task = events[begun].task
            for event in events[begun:]:
                if event.task is not task:
                    break
                key = None if event.raw_key is None else event.key
                if event.value is None or key is None:
                    continue
                current_event.set(event)
                raw = event.raw_value if event.reply_to is None else None
                buffer.put(key, event.timestamp, event.offset, event.value, raw)
            raise

    def join_record(self, side: int, event: Event) -> list[JoinResult]:
        """What :meth:`process` emits for ``event`` (its state changes made)."""
        state: StreamStreamJoinState = self.state(event.task)
        key = None if event.raw_key is None else event.key
        # The record's bytes are what its topic's value codec (the buffer's) decoded the value
        # from, unless it came in a Faust request envelope (reply_to set: the value was inside).
        raw = event.raw_value if event.reply_to is None else None
        return state.process(side, key, event.value, event.timestamp, event.offset, raw)

    async def after_batch(self, task: Task) -> None:
        if self.join.stores["left"].name not in task.tables:
            return  # no record of the join in this task yet: its stores are not open
        state: StreamStreamJoinState = self.state(task)
        state.expire()

    async def on_idle(self, task: Task, now_ms: int) -> bool:
        """Move the join's stream time to ``now_ms`` if that closes a waiting record's window,
        and emit the nulls (nothing for an inner join: it has none)."""
        if not self.definition.has_unmatched:
            return False
        state: StreamStreamJoinState = self.state(task)
        due = state.next_close()
        if due is None or due >= now_ms:
            return False
        await self._emit(task, state.advance_to(now_ms), None)
        return True

    async def _emit(self, task: TaskScope, found: list[JoinResult], trigger: Event | None) -> None:
        rest = self._emit_nowait(task, found, trigger)
        if rest is not None:
            await rest

    def _emit_nowait(
        self, task: TaskScope, found: list[JoinResult], trigger: Event | None
    ) -> Awaitable[None] | None:
        """:meth:`_emit` as far as it goes without an await (every result, almost always):
        None when done, else the rest to await, from the first result the batch path refused
        (each result's joiner is called once)."""
        result = self.join.result
        for i, r in enumerate(found):
            key, value, timestamp = r.key, result(r.left, r.right), r.timestamp
            sent = self.emit_nowait(task, key, value, timestamp, trigger)  # emit(), inlined
            if sent >= 0:
                return self._emit_rest(task, found, i, sent, value, trigger)
        return None

    async def _emit_rest(
        self,
        task: TaskScope,
        found: list[JoinResult],
        i: int,
        sent: int,
        value: Any,
        trigger: Event | None,
    ) -> None:
        """The rest of :meth:`_emit_nowait`: result ``i`` (joined: ``value``) from its sink
        ``sent`` on, then the results after it."""
        r = found[i]
        await self.emit_rest(sent, task, r.key, value, r.timestamp, trigger)
        await self._emit(task, found[i + 1 :], trigger)
