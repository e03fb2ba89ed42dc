"""Table: a dict-like, partitioned, changelog-backed state store.

Inside an agent, ``table[key]`` reads and writes the partition of the task that owns the record
being processed (tables are co-partitioned with the topics that update them). A record without a
key says nothing about which partition holds a row, so using a table while processing one raises
:class:`~streams_app.errors.NullKeyError` (the record goes to the dead-letter topic). Reads see the
task's own uncommitted writes; writes become durable in RocksDB only after the Kafka
transaction that carries their changelog records commits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, TypeAlias

from streams_app.app.context import TaskScope, current_event, current_runtime, current_task
from streams_app.app.windowed import WindowedTableState, WindowWrapper
from streams_app.app.windows import (
    Duration,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Windows,
)
from streams_app.codecs import Codec, CodecSpec, JsonCodec, resolve_codec
from streams_app.errors import NullKeyError, TopologyError
from streams_app.state.base import DELETED, PartitionTransaction
from streams_app.state.windowed import SlidingValueCodec, WindowedTransaction, WindowKeyCodec

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.topic import Topic

#: ``on_window_close(key, value)``: ``key`` is ``(key, WindowRange)``; may be async.
WindowCloseCallback: TypeAlias = Callable[[Any, Any], "Awaitable[Any] | Any"]
LATE_RECORDS = ("drop", "dlq")

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
        on_window_close: WindowCloseCallback | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.default = default
        self.partitions = partitions
        #: The codecs of the store and changelog (windowed tables: of (key, window) entries).
        self.key_codec: Codec = resolve_codec(key_type, default="json")
        self.value_codec: Codec = resolve_codec(value_type, default="json")
        #: The codecs of the user's keys and values (the same unless windowed).
        self.user_key_codec = self.key_codec
        self.user_value_codec = self.value_codec
        self._changelog_topic = changelog_topic
        #: Windowed tables: the kind of window, and what happens to windows that close.
        self.window: Windows | None = None
        self.on_window_close = on_window_close
        self.emit_final_topic: Topic | None = None
        self.late_records = "drop"

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
    ) -> WindowWrapper:
        """Tumbling windows of ``size`` seconds: ``[start, start + size)``, aligned to the epoch.

        ``grace``: how long after its end a window still takes late records (default 0, as
        Kafka Streams' ``ofSizeWithNoGrace``). ``expires``: how long windows stay in the store
        after they start (default and minimum ``size + grace``). ``late_records``: ``"drop"``
        (counted) or ``"dlq"`` (also sent to the source topic's dead-letter topic).
        ``emit_final``: a topic that gets each window's final value once, when it closes.
        ``key_index`` is accepted for Faust compatibility (keys are always iterable here).
        """
        return self.using_window(
            TimeWindows(size, grace=grace, expires=expires),
            late_records=late_records,
            emit_final=emit_final,
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
    ) -> WindowWrapper:
        """Hopping windows of ``size`` seconds every ``step`` seconds; see :meth:`tumbling`."""
        return self.using_window(
            TimeWindows(size, step, grace=grace, expires=expires),
            late_records=late_records,
            emit_final=emit_final,
        )

    def sliding(
        self,
        size: Duration,
        *,
        grace: Duration = 0,
        expires: Duration | None = None,
        late_records: str = "drop",
        emit_final: Topic | str | None = None,
    ) -> WindowWrapper:
        """Kafka Streams' sliding windows (``SlidingWindows.ofSizeAndGrace``): one window
        ``[t - size, t]`` per distinct set of records at most ``size`` apart; see
        :meth:`tumbling`. (Faust's ``SlidingWindow(before, after)`` is a different thing.)"""
        return self.using_window(
            SlidingWindows(size, grace=grace, expires=expires),
            late_records=late_records,
            emit_final=emit_final,
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
    ) -> WindowWrapper:
        """Session windows: a key's records at most ``gap`` seconds apart form one session;
        ``merge(a, b)`` combines two sessions a record bridges (default ``a + b``). A session
        closes ``gap + grace`` after its last record; see :meth:`tumbling`."""
        return self.using_window(
            SessionWindows(gap, grace=grace, expires=expires, merge=merge),
            late_records=late_records,
            emit_final=emit_final,
        )

    def using_window(
        self,
        window: Windows,
        *,
        late_records: str = "drop",
        emit_final: Topic | str | None = None,
    ) -> WindowWrapper:
        if self.window is not None and self.window is not window:
            raise TopologyError(f"table {self.name!r} is already windowed ({self.window!r})")
        if late_records not in LATE_RECORDS:
            raise ValueError(f"late_records must be one of {LATE_RECORDS}, not {late_records!r}")
        self.window = window
        self.late_records = late_records
        self.key_codec = WindowKeyCodec(self.user_key_codec)
        if isinstance(window, SlidingWindows):
            self.value_codec = SlidingValueCodec(self.user_value_codec)
        if emit_final is not None:
            self.emit_final_topic = self._final_topic(emit_final)
        return WindowWrapper(self)

    def _final_topic(self, emit_final: Topic | str) -> Topic:
        if isinstance(emit_final, str):
            return self.app.topic(
                emit_final, key_serializer="json", value_serializer=self.user_value_codec
            )
        if not isinstance(emit_final.key_codec, JsonCodec):
            raise TopologyError(
                f"topic {emit_final.name!r} gets the final results of table {self.name!r}, "
                "whose keys are JSON objects {key, start, end}: declare it with "
                "key_serializer='json' (or pass its name and let the table declare it)"
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

    @property
    def changelog_topic(self) -> str:
        return self._changelog_topic or f"{self.app.conf.id}-{self.name}-changelog"

    # -- the task's view ------------------------------------------------------------------

    def _transaction(self) -> PartitionTransaction:
        event = current_event.get()
        if event is None:
            scope = current_task.get()
            if scope is None:
                return self._transaction_outside_event()
            task = scope
        else:
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
