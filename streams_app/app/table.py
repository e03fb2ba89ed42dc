"""Table: a dict-like, partitioned, changelog-backed state store.

Inside an agent, ``table[key]`` reads and writes the partition of the task that owns the record
being processed (tables are co-partitioned with the topics that update them). A record without a
key says nothing about which partition holds a row, so using a table while processing one raises
:class:`~streams_app.errors.NullKeyError` (the record goes to the dead-letter topic). Reads see the
task's own uncommitted writes; writes become durable in RocksDB only after the Kafka
transaction that carries their changelog records commits.

A key that is not the key of the record being processed (``table["totals"] += 1`` in every
partition) is stored once per partition: each task owns its partition's value, which keeps
every write exactly-once. Faust kept one value per worker instead (whatever the last write in
any partition was). The first such write logs a warning, once per table.

Outside of any record (an ``@app.page``, an ``@app.task``, a timer, a command) there is no
task's transaction to read through: ``table[key]``, ``get``, ``in``, iteration and ``len`` read
the **committed** state of the partitions this worker holds, the key's own partition first
(runtime/local_reads.py). What the open transaction wrote is not seen until it commits (within
one ``commit_interval``), and nothing an abort takes back is ever seen. A command holds no
partition and sees the default. Writes there are refused: a write belongs to a record's
transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, TypeAlias

from streams_app.app import joins
from streams_app.app.options import FAUST_TABLE, refuse_unknown
from streams_app.app.topic import Topic
from streams_app.app.windowed import WindowedTableState, WindowWrapper
from streams_app.app.windows import (
    Duration,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Windows,
    duration_ms,
    idle_close_seconds,
)
from streams_app.codecs import Codec, CodecSpec, JsonCodec, TypedCodec, codec_for, json_dumps
from streams_app.errors import NullKeyError, TopologyError
from streams_app.state.base import DELETED, PartitionTransaction
from streams_app.state.windowed import SlidingValueCodec, WindowedTransaction, WindowKeyCodec
from streams_app.topology import names
from streams_app.topology.contract import (
    MISSING,
    Event,
    TaskScope,
    current_event,
    current_runtime,
    current_task,
)

if TYPE_CHECKING:
    from streams_app.app.app import App

#: ``on_window_close(key, value)``: ``key`` is ``(key, WindowRange)``; may be async.
WindowCloseCallback: TypeAlias = Callable[[Any, Any], "Awaitable[Any] | Any"]
LATE_RECORDS = ("drop", "dlq")

log = logging.getLogger(__name__)

_MISSING: Any = MISSING


class Table(MutableMapping[Any, Any]):
    #: Every worker holds every partition (GlobalTable).
    is_global = False
    #: Committed values go through the worker's read cache (state/cache.py).
    read_cache = True
    #: Its range scans keep nothing in the read cache (only join buffers do).
    scan_cache = False

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
        on_window_close: WindowCloseCallback | None = None,
        schema: Any = None,
        window: Any = None,
        source: Topic | str | None = None,
        versioned: Duration | None = None,
        **faust_options: Any,
    ) -> None:
        refuse_unknown(
            f"app.{type(self).__name__}({name!r})",
            faust_options,
            Table.__init__,
            ignored=FAUST_TABLE,
        )
        if window is not None:
            raise TopologyError(
                f"table {name!r}: window=... is Faust's internal form; make a windowed table "
                "with .tumbling(), .hopping(), .sliding() or .session() on it"
            )
        if schema is not None:  # Faust's faust.Schema: the types not given here
            key_type = key_type if key_type is not None else schema.key_type
            value_type = value_type if value_type is not None else schema.value_type
        self.app = app
        self.name = name
        self.default = default
        self.partitions = partitions
        self.key_type = key_type
        self.value_type = value_type
        # Faust: a table's keys and values are JSON unless their model names a serializer.
        #: The codecs of the store and changelog (windowed tables: of (key, window) entries).
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
        #: The last record this table was used for, and its task's transaction: ``t[k] += 1``
        #: finds the transaction twice, and an agent that emits the new value a third time.
        #: A task's transaction of a table never changes once opened, nor an event's task.
        self._event: Event | None = None
        self._event_tx: PartitionTransaction | None = None
        #: The codecs of the user's keys and values (the same unless windowed).
        self.user_key_codec = self.key_codec
        self.user_value_codec = self.value_codec
        #: Windowed tables: the kind of window, and what happens to windows that close.
        self.window: Windows | None = None
        self.on_window_close = on_window_close
        self.emit_final_topic: Topic | None = None
        self.late_records = "drop"
        #: Seconds of quiet input after which stream time follows the wall clock (None: off).
        self.idle_close: float | None = None
        #: The topic this table is built from (None: agents write it).
        self.source: Topic | None = None
        #: A versioned table's history retention in ms (None: not versioned).
        self.versioned_ms: int | None = None
        #: The record time of each row (kept only when a join needs it: keep_times()).
        self.times: joins.JoinStore | None = None
        if source is not None:
            self._from_topic(source, key_type, value_type, changelog_topic, versioned)
        elif versioned is not None:
            raise TopologyError(
                f"table {name!r}: versioned= keeps the history of a table built from a topic; "
                "pass source=topic too"
            )

    def _from_topic(
        self,
        source: Topic | str,
        key_type: CodecSpec,
        value_type: CodecSpec,
        changelog_topic: str | None,
        versioned: Duration | None,
    ) -> None:
        """A table built from a topic (Kafka Streams' ``builder.table``): its keys and values
        are the topic's, written only by the topic's records (docs/joins.md)."""
        topic = self.app.topic(source) if isinstance(source, str) else source
        for what, given, topics in (
            ("key_type", key_type, topic.key_type),
            ("value_type", value_type, topic.value_type),
        ):
            if given is not None and given != topics:
                raise TopologyError(
                    f"table {self.name!r} is built from topic {topic.name!r}, whose {what} is "
                    f"{topics!r}: its records are the table's, so it has the topic's types. "
                    f"Drop {what}= (or declare the topic with {what}={given!r})"
                )
        if changelog_topic is not None:
            raise TopologyError(
                f"table {self.name!r} is built from topic {topic.name!r}: its changelog is that "
                "topic (or one of its own, named by the app); drop changelog_topic="
            )
        self.source = topic
        topic.feeds_tables = True
        self.key_type, self.value_type = topic.key_type, topic.value_type
        self.key_codec = self.user_key_codec = topic.key_codec
        self.value_codec = self.user_value_codec = topic.value_codec
        if versioned is not None:
            self.versioned_ms = duration_ms(versioned, f"table {self.name!r}: versioned")
            if self.versioned_ms <= 0:
                raise TopologyError(f"table {self.name!r}: versioned= must be positive")

    @property
    def changelog_is_source(self) -> bool:
        """Whether the source topic is the changelog (docs/joins.md, "Tables built from
        topics"): for a compacted source (a second copy could only say the same), and for a
        GlobalTable's (every worker reads it whole); not for a versioned table, whose store
        holds versions, not the topic's records."""
        source = self.source
        if source is None or self.versioned_ms is not None:
            return False
        return self.is_global or "compact" in source.config.get("cleanup.policy", "")

    def keep_times(self) -> joins.JoinStore:
        """Keep each row's record time beside it (for table-table and foreign-key joins,
        whose results carry the larger of their rows' times)."""
        if self.times is None:
            self.times = joins.times_store(self)
        return self.times

    # -- joins (docs/joins.md) ------------------------------------------------------------

    def join(
        self,
        other: Any,
        *fields: Any,
        joiner: joins.Joiner | None = None,
        foreign_key: Any = None,
        name: str | None = None,
    ) -> joins.JoinedTable:
        """Inner table-table join: a read-only table of ``joiner(left, right)`` (default
        ``Joined(left, right)``) for the keys both tables have, following both tables'
        updates (``.changes()``, ``.to(topic)``). ``foreign_key=`` (a function of this table's
        value, or a model field) joins each row with ``other``'s row of that key instead
        (KIP-213). Both tables must be built from topics."""
        return joins.table_join(
            self.app,
            joins.INNER,
            self,
            other,
            fields,
            joiner=joiner,
            foreign_key=foreign_key,
            name=name,
        )

    inner_join = join

    def left_join(
        self,
        other: Any,
        *fields: Any,
        joiner: joins.Joiner | None = None,
        foreign_key: Any = None,
        name: str | None = None,
    ) -> joins.JoinedTable:
        """Left table-table (or foreign-key) join: every row of this table, with ``None``
        where ``other`` has no partner."""
        return joins.table_join(
            self.app,
            joins.LEFT,
            self,
            other,
            fields,
            joiner=joiner,
            foreign_key=foreign_key,
            name=name,
        )

    def outer_join(
        self,
        other: Any,
        *fields: Any,
        joiner: joins.Joiner | None = None,
        name: str | None = None,
    ) -> joins.JoinedTable:
        """Outer table-table join: every key of either table, ``None`` on a missing side."""
        return joins.table_join(
            self.app, joins.OUTER, self, other, fields, joiner=joiner, name=name
        )

    # -- windows (Faust's spelling; Kafka Streams' semantics) -----------------------------

    def tumbling(
        self,
        size: Duration,
        expires: Duration | None = None,
        key_index: bool = False,
        *,
        grace: Duration = 0,
        late_records: str = "drop",
        emit_final: Topic | str | None = None,
        idle_close: Duration | None = None,
    ) -> WindowWrapper:
        """Tumbling windows of ``size`` seconds: ``[start, start + size)``, aligned to the epoch.

        ``grace``: how long after its end a window still takes late records (default 0, as
        Kafka Streams' ``ofSizeWithNoGrace``). ``expires``: how long windows stay in the store
        after they start (default and minimum ``size + grace``). ``late_records``: ``"drop"``
        (counted) or ``"dlq"`` (also sent to the source topic's dead-letter topic).
        ``emit_final``: a topic that gets each window's final value once, when it closes.
        ``idle_close``: opt in to closing windows by the wall clock when input goes quiet: once
        a task's inputs have had no record for that long, its stream time follows the wall
        clock, so a key whose input stopped still gets its final window (docs/joins.md, off
        by default as in Kafka Streams).
        ``key_index`` is accepted for Faust compatibility (keys are always iterable here).
        """
        return self.using_window(
            TimeWindows(size, grace=grace, expires=expires),
            late_records=late_records,
            emit_final=emit_final,
            idle_close=idle_close,
        )

    def hopping(
        self,
        size: Duration,
        step: Duration,
        expires: Duration | None = None,
        key_index: bool = False,
        *,
        grace: Duration = 0,
        late_records: str = "drop",
        emit_final: Topic | str | None = None,
        idle_close: Duration | None = None,
    ) -> WindowWrapper:
        """Hopping windows of ``size`` seconds every ``step`` seconds; see :meth:`tumbling`."""
        return self.using_window(
            TimeWindows(size, step, grace=grace, expires=expires),
            late_records=late_records,
            emit_final=emit_final,
            idle_close=idle_close,
        )

    def sliding(
        self,
        size: Duration,
        *,
        grace: Duration = 0,
        expires: Duration | None = None,
        late_records: str = "drop",
        emit_final: Topic | str | None = None,
        idle_close: Duration | None = None,
    ) -> WindowWrapper:
        """Kafka Streams' sliding windows (``SlidingWindows.ofSizeAndGrace``): one window
        ``[t - size, t]`` per distinct set of records at most ``size`` apart; see
        :meth:`tumbling`. (Faust's ``SlidingWindow(before, after)`` is a different thing.)"""
        return self.using_window(
            SlidingWindows(size, grace=grace, expires=expires),
            late_records=late_records,
            emit_final=emit_final,
            idle_close=idle_close,
        )

    def session(
        self,
        gap: Duration,
        *,
        grace: Duration = 0,
        expires: Duration | None = None,
        merge: Callable[[Any, Any], Any] | None = None,
        late_records: str = "drop",
        emit_final: Topic | str | None = None,
        idle_close: Duration | None = None,
    ) -> WindowWrapper:
        """Session windows: a key's records at most ``gap`` seconds apart form one session;
        ``merge(a, b)`` combines two sessions a record bridges (default ``a + b``). A session
        closes ``gap + grace`` after its last record; see :meth:`tumbling`."""
        return self.using_window(
            SessionWindows(gap, grace=grace, expires=expires, merge=merge),
            late_records=late_records,
            emit_final=emit_final,
            idle_close=idle_close,
        )

    def using_window(
        self,
        window: Windows,
        *,
        late_records: str = "drop",
        emit_final: Topic | str | None = None,
        idle_close: Duration | None = None,
    ) -> WindowWrapper:
        if self.window is not None and self.window is not window:
            raise TopologyError(f"table {self.name!r} is already windowed ({self.window!r})")
        if self.source is not None:
            raise TopologyError(
                f"table {self.name!r} is built from topic {self.source.name!r}: it holds the "
                "topic's latest value per key and cannot be windowed; window a table an agent "
                "writes"
            )
        if late_records not in LATE_RECORDS:
            raise ValueError(f"late_records must be one of {LATE_RECORDS}, not {late_records!r}")
        self.window = window
        self.late_records = late_records
        if idle_close is not None:
            self.idle_close = idle_close_seconds(idle_close)
        self.key_codec = WindowKeyCodec(self.user_key_codec)
        if isinstance(window, SlidingWindows):
            self.value_codec = SlidingValueCodec(self.user_value_codec)
        if emit_final is not None:
            self.emit_final_topic = self._final_topic(emit_final)
        return WindowWrapper(self)

    def _final_topic(self, emit_final: Topic | str) -> Topic:
        if isinstance(emit_final, str):
            declared = self.app.topics.get(emit_final)
            if declared is None:
                return self.app.topic(
                    emit_final, key_serializer="json", value_serializer=self.user_value_codec
                )
            emit_final = declared
        # A topic declared without a key (or value) format, e.g. only for its retention
        # (app.topic("views-final", retention=...)), takes the final results' own.
        if emit_final.key_type is None and emit_final.key_serializer is None:
            emit_final.key_serializer = "json"
            emit_final.key_codec = codec_for(None, "json", "json", checked=True)
        if emit_final.value_type is None and emit_final.value_serializer is None:
            emit_final.value_serializer = emit_final.value_codec = self.user_value_codec
        codec = emit_final.key_codec
        serializer = codec.serializer if isinstance(codec, TypedCodec) else codec
        if not isinstance(serializer, JsonCodec) or getattr(codec, "typ", None) not in (None, dict):
            raise TopologyError(
                f"topic {emit_final.name!r} gets the final results of table {self.name!r}, "
                "whose keys are JSON objects {key, start, end}: declare it with "
                "key_serializer='json' and no key_type, or without a key format at all (the "
                "table gives it JSON keys), or pass its name and let the table declare it"
            )
        return emit_final

    def initial(self) -> Any:
        """A new aggregate (``default()``); raises KeyError without a default (as Faust)."""
        if self.default is None:
            raise KeyError(f"table {self.name!r} has no default for a new window")
        return self.default()

    def open_windowed(self, tx: PartitionTransaction, observed: int) -> WindowedTableState:
        """The runtime opens a task's windows through this (the app layer knows windows)."""
        assert isinstance(self.key_codec, WindowKeyCodec) and self.window is not None
        indexed = self.window.kind != "time"  # per-key scans only for sliding and sessions
        view = WindowedTransaction(tx, self.key_codec, indexed=indexed)
        return WindowedTableState(self, view, observed)

    def partition_key_bytes(self, key: Any) -> bytes:
        """The bytes Kafka's partitioner hashes for records carrying ``key``: the key as a
        topic of the table's key type encodes it (Faust's default ``key_serializer``, raw for
        text), which is how the records that wrote it were partitioned, whatever the table's
        own (JSON) key codec."""
        codec = codec_for(self.key_type, None, getattr(self.app.conf, "key_serializer", "raw"))
        try:
            return codec.dumps(key)
        except Exception:
            return self.user_key_codec.dumps(key)

    @property
    def changelog_topic_name(self) -> str:
        if self.source is not None and self.changelog_is_source:
            return self.source.name
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

    def _transaction(self) -> PartitionTransaction | None:
        """The open transaction of the task that owns the record being processed (or that a
        stream-time timer, ``on_leader`` timer or window-close callback runs for); None when
        there is none (a page, a task, a timer, a command, a channel value one of those sent):
        reads then see the committed state
        (:meth:`_committed`), and writes are refused (:meth:`_writable`)."""
        event = current_event.get()
        if event is self._event and event is not None:
            return self._event_tx
        if event is None:
            scope = current_task.get()
            if scope is None:
                return None
            task = scope
        else:
            if event.task.outside_processing:
                return None
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
        if event is not None:
            self._event, self._event_tx = event, tx
        return tx

    def _writable(self) -> PartitionTransaction:
        if self.source is not None:
            raise TopologyError(
                f"table {self.name!r} is built from topic {self.source.name!r}: only its records "
                f"write it. Send the update to {self.source.name!r} instead"
            )
        tx = self._transaction()
        if tx is None:
            raise TopologyError(
                f"table {self.name!r} was written outside of processing a record: a write "
                "belongs to the transaction of the record being processed (its task owns the "
                "table partition). From a page, task or timer, send a record to a topic whose "
                "agent writes the table (reads outside a record see the committed state)"
            )
        return tx

    def _committed(self, key: Any) -> Any:
        """Outside of any record: ``key``'s committed value in the partitions this worker
        holds (runtime/local_reads.py), or ``_MISSING``. What the open transaction wrote is not
        seen until it commits; a command, or code with no worker, holds no partition."""
        runtime = current_runtime.get()
        return _MISSING if runtime is None else runtime.table_lookup(self, key)

    # The accessors below look for the record's transaction inline (the first lines of
    # :meth:`_transaction`) before calling it: ``t[k] += 1`` then ``t[k]`` is three accesses
    # a record, and each saves a call (BENCHMARKS.md, "Calls fewer on every record").

    def __getitem__(self, key: Any) -> Any:
        event = current_event.get()
        tx = self._event_tx if event is self._event and event is not None else self._transaction()
        if tx is None:
            value = self._committed(key)
        else:
            # The record's own pending write first (a dict lookup in C): ``counts[key] += 1``
            # reads a key the transaction has written, as the next read of it does.
            value = tx.pending_get(key, _MISSING)
            if value is _MISSING:
                value = tx.get(key, _MISSING)
            elif value is DELETED:
                value = _MISSING
        if value is _MISSING:
            if self.default is None:
                raise KeyError(key)
            return self.default()
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        event = current_event.get()
        if not self._warned_key and event is not None and key != event.key:
            self._check_key(key)
        if event is self._event and event is not None and self.source is None:
            tx = self._event_tx
            assert tx is not None
        else:
            tx = self._writable()
        tx.set(key, value)

    def __delitem__(self, key: Any) -> None:
        tx = self._writable()
        if not tx.contains(key):
            raise KeyError(key)
        tx.delete(key)

    def __contains__(self, key: object) -> bool:
        tx = self._transaction()
        return tx.contains(key) if tx is not None else self._committed(key) is not _MISSING

    def get(self, key: Any, default: Any = None) -> Any:
        event = current_event.get()
        tx = self._event_tx if event is self._event and event is not None else self._transaction()
        value = tx.get(key, _MISSING) if tx is not None else self._committed(key)
        return default if value is _MISSING else value

    def __iter__(self) -> Iterator[Any]:
        """Keys of the current task's partition (committed and pending); outside of any record,
        the committed keys of every partition this worker holds."""
        tx = self._transaction()
        if tx is None:
            return iter(dict(self.local_items()))
        return iter(dict(self._partition_items(tx)))

    def __len__(self) -> int:
        tx = self._transaction()
        if tx is None:
            return len(dict(self.local_items()))
        return len(dict(self._partition_items(tx)))

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
