"""What every join processor has: its declaration, its per-task state, and where results go.

A *join processor* runs one declared join (:class:`~streams_app.app.joins.Join`) in a worker.
The runtime (:mod:`streams_app.runtime.joins.runtime`) builds one per join from the registry
of kinds (:data:`streams_app.runtime.joins.PROCESSORS`) and drives it through four doors, all
inside the worker's transaction:

- **records** (:meth:`JoinProcessor.feeders`): each record of a topic the join reads, as the
  dispatcher hands it over with the agents' (``current_event`` set, in the task's timestamp
  order across its co-partitioned inputs: ``runtime/partition_group.py``);
- **table changes** (:meth:`JoinProcessor.table_listeners`): each update of a table built from
  a topic, after the table applied it, with the old and the new value;
- **the end of each batch** (:meth:`JoinProcessor.after_batch`): release due results, expire;
- **idle close** (:meth:`JoinProcessor.on_idle`, joins declared with ``idle_close=``): the
  task's inputs of the join have been idle that long, with nothing left to fetch.

What a processor writes it writes to its stores (:class:`~streams_app.app.joins.JoinStore`, one
partition per task, opened through the task like any table), so it commits with the input
offsets and the outputs, and a restore after a crash gives the state that committed. Its views
over those stores (with in-memory hints) are per-task state, :meth:`JoinProcessor.state`,
dropped at every abort. Results go out through :meth:`JoinProcessor.emit`: to the join's
topics (``.to()``) through the record collector, in the transaction, and to the agents reading
the join's results, fed in the same task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from streams_app.codecs import reads_raw_text
from streams_app.runtime.scope import in_processing
from streams_app.topology.contract import (
    Event,
    ResultRow,
    Runtime,
    TaskScope,
    TopicLike,
    current_event,
    current_runtime,
    current_task,
)

if TYPE_CHECKING:
    from streams_app.app.joins import Join, JoinStore
    from streams_app.runtime.actor import Feeder
    from streams_app.runtime.task import Task
    from streams_app.state.base import PartitionTransaction
    from streams_app.state.restore import Accept

#: ``listener(event, key, old, new)``: a table built from a topic changed ``key`` (old/new:
#: the values before and after, ``MISSING`` where there was none, None... never: a tombstone
#: is ``MISSING`` after).
TableListener = Callable[[Event, Any, Any, Any], Awaitable[None]]


#: The agents reading a join's results, by the join's name: for each agent, its actors (the
#: runner's ``actor_lists``).
Readers = Callable[[str], list[list[Any]]]


class JoinProcessor:
    """Base of the processors of every join kind (module doc). Subclasses set :attr:`kind`
    and implement what their kind uses of the four doors."""

    #: The JoinDecl kind it runs (``stream-table``, ``stream-stream``, ...).
    kind: ClassVar[str]
    #: Whether every result a run collects (:meth:`run`, :meth:`_run_on`, a processor's own
    #: loop) is of a record of that run, the record's position current when it was made, and
    #: keyed with that record's decoded key: its runs then go out ``sourced``
    #: (:meth:`_send_run`).
    keys_are_triggers: bool = False

    def __init__(self, join: Join, readers: Readers) -> None:
        self.join = join
        self.name = join.name
        self.label = f"join:{join.name}"
        self._readers = readers
        self._left_key = join.left_topic.key_codec.dumps
        #: Sink topic -> whether its results keep their records' key bytes (:meth:`_raw_keys`).
        self._raw_key_sinks: dict[str, bool] = {}
        #: While :meth:`run` goes through a run of records: the results :meth:`emit_nowait`
        #: made, ``(task, key, value, timestamp, trigger)``, sent when the run is done.
        self._collecting: list[tuple[TaskScope, Any, Any, int, Event | None]] | None = None

    # -- the four doors (override what the kind uses) ------------------------------------

    def feeders(self) -> Iterable[tuple[str, Feeder]]:
        """``(topic, feeder)``: the topics whose records the join reads itself."""
        return ()

    def table_listeners(self) -> Iterable[tuple[str, TableListener]]:
        """``(table name, listener)``: the tables whose changes the join follows."""
        return ()

    async def after_batch(self, task: Task) -> None:
        """After every batch, for each running task (release due results, expire)."""

    async def on_idle(self, task: Task, now_ms: int) -> bool:
        """Idle close: the task's inputs of this join have been idle ``idle_close``; move the
        join's stream time up to ``now_ms`` (never back) and emit what closes. True when it
        changed anything (a commit is then requested)."""
        return False

    @property
    def has_after_batch(self) -> bool:
        return type(self).after_batch is not JoinProcessor.after_batch

    # -- state -----------------------------------------------------------------------------

    def restore_filters(self) -> dict[str, Accept]:
        """Input topic -> what restore applies of its records, for the join's stores whose
        changelog is an input topic (none, but for :mod:`.stream_stream`'s)."""
        return {}

    def state(self, task: TaskScope) -> Any:
        """The join's per-task state (:meth:`open` on first use, dropped at every abort)."""
        return task.join_state(self.label, lambda: self.open(task))

    def open(self, task: TaskScope) -> Any:
        """Make the per-task state: views over the join's stores in ``task``."""
        return None

    def store(self, task: TaskScope, role: str) -> PartitionTransaction:
        """The task's open transaction of the join's store ``role``."""
        store: JoinStore = self.join.stores[role]
        tx = task.tables.get(store.name)
        return tx if tx is not None else task.open_table(store)

    # -- results ---------------------------------------------------------------------------

    async def emit(
        self,
        task: TaskScope,
        key: Any,
        value: Any,
        timestamp: int,
        trigger: Event | None = None,
    ) -> None:
        """A result: ``key`` and ``value`` (None: a tombstone) at ``timestamp`` (ms), to the
        join's topics and to the agents reading it. ``trigger``: the record that made it (its
        position is the result's, so an agent failing on it retries or dead-letters that
        record); None for results released by time (end of batch, idle close)."""
        sent = self.emit_nowait(task, key, value, timestamp, trigger)
        if sent >= 0:
            await self.emit_rest(sent, task, key, value, timestamp, trigger)

    def emit_nowait(
        self,
        task: TaskScope,
        key: Any,
        value: Any,
        timestamp: int,
        trigger: Event | None = None,
    ) -> int:
        """:meth:`emit` as far as it goes without an await, which is all the way for almost
        every result (``Topic.send_nowait``): -1 when it is done, else how many of the join's
        topics it sent to; :meth:`emit_rest` from there does the rest. Results are many (one
        or more per record) and a coroutine per result and topic costs more than the send."""
        collecting = self._collecting
        if collecting is not None:  # in a run: sent with the run's others (:meth:`run`)
            collecting.append((task, key, value, timestamp, trigger))
            return -1
        sinks = self.join.sinks
        seconds = timestamp / 1000
        for i, topic in enumerate(sinks):
            if topic.send_nowait(key, value, seconds) is None:
                return i
        self._feed_readers(task, key, value, timestamp, trigger)
        return -1

    async def emit_rest(
        self,
        sent: int,
        task: TaskScope,
        key: Any,
        value: Any,
        timestamp: int,
        trigger: Event | None = None,
    ) -> None:
        """The rest of an :meth:`emit_nowait` that sent to the first ``sent`` topics only."""
        for topic in self.join.sinks[sent:]:
            await topic.send(key=key, value=value, timestamp=timestamp / 1000)
        self._feed_readers(task, key, value, timestamp, trigger)

    # -- a run of records -----------------------------------------------------------------

    def run(
        self, forward_nowait: Callable[[Event], Awaitable[None] | None], events: list[Event]
    ) -> Awaitable[None] | None:
        """A run of one partition's records, each through ``forward_nowait`` (a feeder's,
        with ``current_event`` set to it, as the dispatcher sets it for one record), and their
        results sent together when the run is done: None when all is done, else what is left
        to await.

        The dispatcher hands a run over this way when the join is the only feeder of the
        topic and no agent is busy (``RecordDispatcher.dispatch``). The results go out as
        they would one by one, in the same order, before anything is awaited: a record that
        needs an await (a rare one: no key, no value, a grace buffer) first sends what the
        run made before it. Nothing commits while a run is in the dispatcher: the run's
        results are in the transaction of its records' offsets. A record that fails leaves
        ``current_event`` on itself: the dispatcher names it in the failure."""
        collecting, rest, at = self._collect(forward_nowait, events, 0)
        if rest is None:
            return self._send_run(collecting, self.keys_are_triggers)
        return self._run_on(collecting, rest, forward_nowait, events, at)

    def _collect(
        self,
        forward_nowait: Callable[[Event], Awaitable[None] | None],
        events: list[Event],
        start: int,
    ) -> tuple[list[tuple[TaskScope, Any, Any, int, Event | None]], Awaitable[None] | None, int]:
        """Records from ``start`` on through ``forward_nowait``, their results collected, up
        to the first that needs an await: (results, what it left to await or None, its
        index)."""
        collecting: list[tuple[TaskScope, Any, Any, int, Event | None]] = []
        self._collecting = collecting
        set_current = current_event.set
        rest: Awaitable[None] | None = None
        at = start
        try:
            for at in range(start, len(events)):
                set_current(events[at])
                rest = forward_nowait(events[at])
                if rest is not None:
                    break
        finally:
            self._collecting = None
        return collecting, rest, at

    async def _run_on(
        self,
        collecting: list[tuple[TaskScope, Any, Any, int, Event | None]],
        rest: Awaitable[None] | None,
        forward_nowait: Callable[[Event], Awaitable[None] | None],
        events: list[Event],
        at: int,
    ) -> None:
        """:meth:`run` from record ``at``, whose ``rest`` must be awaited: what the run made
        before it goes out first, then the record's own work, then the run goes on, to the
        next record that needs an await, and so on (a loop: with ``grace=`` every record
        does)."""
        while True:
            sending = self._send_run(collecting, self.keys_are_triggers)
            if sending is not None:
                await sending
            if rest is None:
                return
            current_event.set(events[at])
            await rest
            collecting, rest, at = self._collect(forward_nowait, events, at + 1)

    def _send_run(
        self,
        results: list[tuple[TaskScope, Any, Any, int, Event | None]],
        sourced: bool = False,
    ) -> Awaitable[None] | None:
        """A run's results to the join's topics (``Runtime.send_run_nowait``) and readers,
        as :meth:`emit` would send each: None when done, else the rest to await.

        ``sourced``: the results are a run's of a processor whose :attr:`keys_are_triggers`
        holds (each of a record of the dispatcher's run, of one partition):
        ``Runtime.send_results_nowait`` encodes them and heads them in one pass, with the
        records' own key bytes where the codecs allow (:meth:`_raw_keys`)."""
        if not results:
            return None
        runtime = current_runtime.get()
        for i, topic in enumerate(self.join.sinks):
            sent, rows = self._send_some(runtime, topic, results, sourced)
            if sent < len(results):
                return self._send_run_rest(results, i, sent, rows, sourced)
        self._feed_run(results)
        return None

    def _send_some(
        self,
        runtime: Runtime | None,
        topic: TopicLike,
        results: list[tuple[TaskScope, Any, Any, int, Event | None]],
        sourced: bool,
    ) -> tuple[int, list[ResultRow] | None]:
        """How many of ``results``, from the first, went to ``topic`` without an await
        (``Runtime.send_results_nowait`` for a sourced run, else ``send_run_nowait`` of the
        encoded rows), and the rows if it encoded them here."""
        if runtime is None:
            return 0, None
        if sourced:
            return runtime.send_results_nowait(topic, results, self._raw_keys(topic)), None
        rows = topic.encode_results(results)
        return runtime.send_run_nowait(topic.name, rows), rows

    def _raw_keys(self, topic: TopicLike) -> bool:
        """Whether a result sent to ``topic`` can keep its record's key bytes: each result's
        key is its record's (:attr:`keys_are_triggers`), and both the input topic's key codec
        and ``topic``'s are plain text (decoding UTF-8 and encoding it again gives the same
        bytes)."""
        known = self._raw_key_sinks.get(topic.name)
        if known is None:
            known = self._raw_key_sinks[topic.name] = (
                self.keys_are_triggers
                and reads_raw_text(self.join.left_topic.key_codec)
                and reads_raw_text(topic.key_codec)
            )
        return known

    async def _send_run_rest(
        self,
        results: list[tuple[TaskScope, Any, Any, int, Event | None]],
        sink: int,
        sent: int,
        rows: list[ResultRow] | None,
        sourced: bool,
    ) -> None:
        """The rest of :meth:`_send_run`, from result ``sent`` of topic ``sink`` on: the
        result the batch path refused is sent with its record current (its lineage headers),
        and what that await made ready (the transaction begun, as at the first run after
        every commit; the topic's metadata; room in the queue) takes the rest of the run,
        the way :meth:`_send_run` sent its start (a sourced run's rest is still encoded and
        headed in one pass: nothing is encoded twice)."""
        runtime = current_runtime.get()
        sinks = self.join.sinks
        for i in range(sink, len(sinks)):
            topic = sinks[i]
            if i > sink:
                sent, rows = self._send_some(runtime, topic, results, sourced)
            while sent < len(results):
                _, key, value, timestamp, trigger = results[sent]
                current_event.set(trigger)
                await topic.send(key=key, value=value, timestamp=timestamp / 1000)
                sent += 1
                if runtime is None or sent == len(results):
                    continue
                if sourced:
                    sent += runtime.send_results_nowait(
                        topic, results[sent:], self._raw_keys(topic)
                    )
                else:
                    if rows is None:
                        rows = topic.encode_results(results)
                    sent += runtime.send_run_nowait(topic.name, rows[sent:])
        self._feed_run(results)

    def _feed_run(self, results: list[tuple[TaskScope, Any, Any, int, Event | None]]) -> None:
        """A run's results to the agents reading the join (if any)."""
        if self._readers(self.name):
            feed = self._feed_readers
            for task, key, value, timestamp, trigger in results:
                feed(task, key, value, timestamp, trigger)

    def _feed_readers(
        self, task: TaskScope, key: Any, value: Any, timestamp: int, trigger: Event | None
    ) -> None:
        """The result to the agents reading the join (if any), in the task's transaction."""
        readers = self._readers(self.name)
        if not readers:
            return
        if trigger is not None:
            raw_key = trigger.raw_key if key is trigger.key else _dumps(self._left_key, key)
            event = Event(
                trigger.topic,
                trigger.partition,
                trigger.offset,
                timestamp,
                key,
                value,
                trigger.headers,
                raw_key,
                None,
                task,
            )
        else:
            event = Event(
                self.name,
                task.partition,
                -1,
                timestamp,
                key,
                value,
                (),
                _dumps(self._left_key, key),
                None,
                task,
            )
        partition = task.partition
        for actors in readers:
            actors[partition % len(actors)].input.feed(event)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _dumps(dumps: Callable[[Any], bytes], key: Any) -> bytes | None:
    return None if key is None else dumps(key)


class TaskContext:
    """What the end-of-batch and idle doors run in: the task's transaction (``current_task``
    for tables, ``in_processing`` for sends), as a record's processing would."""

    __slots__ = ("_processing", "_task", "task")

    def __init__(self, task: Task) -> None:
        self.task = task

    def __enter__(self) -> Task:
        self._processing = in_processing.set(True)
        self._task = current_task.set(self.task)
        return self.task

    def __exit__(self, *_: object) -> None:
        current_task.reset(self._task)
        in_processing.reset(self._processing)
