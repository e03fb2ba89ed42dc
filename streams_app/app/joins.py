"""Joins, as the app declares them: on topics and tables, with Faust's names and Kafka Streams'
semantics (docs/joins.md). The runtime runs them (:mod:`streams_app.runtime.joins`).

    customers = app.Table("customers", source=customers_topic)     # a table built from a topic
    enriched = orders.left_join(customers)                          # a joined stream

    @app.agent(enriched)
    async def enrich(stream):
        async for order, customer in stream:                        # Joined(left, right)
            ...

    orders.join(customers, joiner=Enriched.of).to(enriched_topic)   # no agent needed

A join is declared at module level (so ``App.describe()`` sees it: it is a node of the
topology), or inside an agent before its first ``async for`` (``stream.join(customers)``),
where it is traced like ``group_by``. Declaring the same join twice gives the same join.

What a join *is* here: a :class:`Join` (its kind, inputs, options, the stores it keeps and the
internal topics it uses), and what the app reads of it, a :class:`JoinedStream` (stream joins,
and a joined table's changes) or a :class:`JoinedTable` (table-table and foreign-key joins).
Everything checkable at declaration is checked here, each error naming the fix; what needs
partition counts (co-partitioning) is the planner's (``streams_app.topology.plan``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from streams_app.app.windows import Duration, duration_ms
from streams_app.codecs import Codec, DecodeError
from streams_app.errors import TopologyError
from streams_app.state.composite import pack_time, unpack_time
from streams_app.state.join_windows import default_segment_ms, join_window_codecs
from streams_app.state.subscriptions import SubscriptionKeyCodec, SubscriptionValueCodec
from streams_app.state.unmatched import unmatched_codecs
from streams_app.topology import names
from streams_app.topology.contract import MISSING
from streams_app.topology.description import (
    FOREIGN_KEY,
    JOIN_STORE,
    STREAM_GLOBAL,
    STREAM_STREAM,
    STREAM_TABLE,
    TABLE_TABLE,
    TIMES_STORE,
)

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.table import Table
    from streams_app.app.topic import Topic
    from streams_app.state.base import PartitionTransaction

INNER, LEFT, OUTER = "inner", "left", "outer"
HOWS = (INNER, LEFT, OUTER)
#: Where a stream-stream join's buffers are changelogged (``changelog=``): topics of their
#: own (Kafka Streams' choice, the default), or their input topics (docs/joins.md, "The
#: input topic as the buffer's changelog").
OWN, INPUT = "own", "input"
CHANGELOGS = (OWN, INPUT)

#: ``joiner(left, right) -> value``: a join result's value (None on a side without a partner).
Joiner = Callable[[Any, Any], Any]


class Joined(NamedTuple):
    """A join result without a joiner: ``async for order, customer in stream``."""

    left: Any
    right: Any


class JoinWindows:
    """A stream-stream join's window, Kafka Streams' ``JoinWindows`` in the window API's units
    (seconds or a ``timedelta``): ``orders.join(payments, JoinWindows(600, grace=60))``.

    A left record at ``t`` pairs with right records of its key at ``t - before .. t + after``
    (both inclusive). ``JoinWindows(d)`` is ``before=after=d`` (Kafka Streams'
    ``ofTimeDifferenceAndGrace``); ``before=``/``after=`` may be asymmetric, one of them
    negative, as long as ``before + after >= 0``. ``grace`` (default 0, as
    ``ofTimeDifferenceWithNoGrace``) is how long after a window's end a left/outer null waits
    for a late partner. The same as ``within=``/``before=``/``after=``/``grace=`` keywords."""

    __slots__ = ("after_ms", "before_ms", "grace_ms")

    def __init__(
        self,
        within: Duration | None = None,
        *,
        before: Duration | None = None,
        after: Duration | None = None,
        grace: Duration | None = None,
    ) -> None:
        self.before_ms, self.after_ms, self.grace_ms = _window(
            "JoinWindows", within, before, after, grace
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JoinWindows) and self.ms == other.ms

    def __hash__(self) -> int:
        return hash(self.ms)

    @property
    def ms(self) -> tuple[int, int, int]:
        """``(before, after, grace)`` in milliseconds."""
        return (self.before_ms, self.after_ms, self.grace_ms)

    def __repr__(self) -> str:
        before, after, grace = (ms / 1000 for ms in self.ms)
        return f"JoinWindows(before={before:g}, after={after:g}, grace={grace:g})"


class TimeCodec:
    """A record time (ms) as 8 bytes, in a table's times store."""

    name = "time"

    def dumps(self, obj: Any) -> bytes:
        return pack_time(int(obj))

    def loads(self, data: bytes) -> Any:
        if len(data) != 8:
            raise DecodeError("not a record time")
        return unpack_time(data)


class JoinStore:
    """A store a join (or a table built from a topic) keeps for itself: a table of the
    topology, not of the app. It is placed, changelogged, committed and restored like any
    table (:class:`~streams_app.topology.contract.TableLike`); only its owner writes it."""

    is_global = False
    window = None

    def __init__(
        self,
        app: App,
        name: str,
        key_codec: Codec,
        value_codec: Codec,
        *,
        owner: str,
        follows: str,
        kind: str = JOIN_STORE,
        read_cache: bool = True,
        scan_cache: bool = False,
        source: Topic | None = None,
    ) -> None:
        self.app = app
        #: The input topic that serves as this store's changelog (a stream-stream buffer
        #: declared with ``changelog="input"``), or None: a changelog topic of its own.
        self.source = source
        #: False for the stream-stream buffers: they are read by range scans only, which the
        #: read cache never serves, so filling it at every commit (sizing each buffered value
        #: for the memory budget) was pure cost, a third of a stream-stream join's CPU. Kafka
        #: Streams does not cache these stores either.
        self.read_cache = read_cache
        #: True for the stream-stream buffers: a fetch keeps a key's committed entries of one
        #: segment in the read cache (state/join_windows.py, "Fetch cache"), since in a
        #: one-to-many join the same few records are fetched again for every partner.
        self.scan_cache = scan_cache
        self.name = name
        self.key_codec = key_codec
        self.value_codec = value_codec
        self.owner = owner
        self.follows = follows
        self.kind = kind
        #: Set at a worker's start from the plan (``App.resolve_table_partitions``).
        self.partitions: int | None = None

    @property
    def changelog_is_source(self) -> bool:
        return self.source is not None

    @property
    def changelog_topic_name(self) -> str:
        if self.source is not None:
            return self.source.name
        return names.changelog_topic(self.app.conf.id, self.name)

    def open_windowed(self, tx: PartitionTransaction, observed: int) -> Any:
        raise TopologyError(f"store {self.name!r} of {self.owner!r} is not windowed")

    def partition_key_bytes(self, key: Any) -> bytes:
        return self.key_codec.dumps(key)

    def __repr__(self) -> str:
        return f"<JoinStore {self.name} of {self.owner}>"


class Join:
    """One declared join: its kind, its inputs, its options, what it keeps and where its
    results go. Plain declaration: the runtime's processor for its kind runs it."""

    def __init__(
        self,
        app: App,
        *,
        name: str,
        kind: str,
        how: str,
        left: Topic | Table,
        right: Topic | Table,
        joiner: Joiner | None = None,
        key: Callable[[Any], Any] | None = None,
        key_name: str | None = None,
        before_ms: int | None = None,
        after_ms: int | None = None,
        grace_ms: int | None = None,
        idle_close_ms: int | None = None,
        changelog: str = OWN,
    ) -> None:
        self.app = app
        self.name = name
        self.kind = kind
        self.how = how
        self.left = left
        self.right = right
        self.joiner = joiner
        #: A GlobalTable join's key mapper, a foreign-key join's extractor: ``f(value)``.
        self.key = key
        self.key_name = key_name
        self.before_ms = before_ms
        self.after_ms = after_ms
        self.grace_ms = grace_ms
        self.idle_close_ms = idle_close_ms
        #: A stream-stream join's buffers' changelogs: ``OWN`` or ``INPUT`` (:data:`CHANGELOGS`).
        self.changelog = changelog
        #: Role -> store (``buffer``, ``left``, ``right``, ``unmatched``, ``subscriptions``).
        self.stores: dict[str, JoinStore] = {}
        #: Role -> internal topic (``subscription``, ``response``).
        self.topics: dict[str, Topic] = {}
        #: Topics every result is sent to (``.to()``), inside the transaction.
        self.sinks: list[Topic] = []

    # -- what it reads ------------------------------------------------------------------------

    @property
    def left_topic(self) -> Topic:
        return _topic_of(self.left)

    @property
    def right_topic(self) -> Topic:
        return _topic_of(self.right)

    @property
    def reads(self) -> tuple[str, ...]:
        """The topics the join itself is fed by (a table side is fed by its table)."""
        if self.kind == STREAM_STREAM:
            return (self.left_topic.name, self.right_topic.name)
        if self.kind in (STREAM_TABLE, STREAM_GLOBAL):
            return (self.left_topic.name,)
        if self.kind == FOREIGN_KEY:
            return (self.topics["subscription"].name, self.topics["response"].name)
        return ()

    @property
    def left_table(self) -> Table:
        assert not _is_topic(self.left)
        return self.left  # type: ignore[return-value]

    @property
    def right_table(self) -> Table:
        assert not _is_topic(self.right)
        return self.right  # type: ignore[return-value]

    # -- its results --------------------------------------------------------------------------

    def result(self, left: Any, right: Any) -> Any:
        """A result's value: ``joiner(left, right)``, or ``Joined(left, right)``."""
        joiner = self.joiner
        return Joined(left, right) if joiner is None else joiner(left, right)

    @property
    def result_of(self) -> Callable[[Any, Any], Any]:
        """:meth:`result` as the one callable it calls (the joiner, or ``Joined``): a run of
        records looks it up once, a call fewer per result."""
        return Joined if self.joiner is None else self.joiner

    def to(self, topic: Topic | str) -> None:
        target = self.app.topic(topic) if isinstance(topic, str) else topic
        if all(t is not target for t in self.sinks):
            self.sinks.append(target)

    # -- what it keeps ------------------------------------------------------------------------

    def add_store(
        self,
        role: str,
        key_codec: Codec,
        value_codec: Codec,
        follows: Topic | None = None,
        *,
        read_cache: bool = True,
        scan_cache: bool = False,
        source: Topic | None = None,
    ) -> JoinStore:
        store = JoinStore(
            self.app,
            f"{self.name}-{role}",
            key_codec,
            value_codec,
            owner=self.name,
            follows=(follows or self.left_topic).name,
            read_cache=read_cache,
            scan_cache=scan_cache,
            source=source,
        )
        self.stores[role] = store
        return store

    def add_topic(self, role: str, follows: Topic) -> Topic:
        topic = self.app.topic(
            names.join_topic(self.app.conf.id, self.name, role),
            key_serializer="raw",
            value_serializer="raw",
            internal=True,
        )
        topic.follows = follows.name
        self.topics[role] = topic
        return topic

    def same(self, other: Join) -> bool:
        """The same declaration (declared twice: module level and a trace, two agents)."""
        return (
            self.kind == other.kind
            and self.how == other.how
            and self.left is other.left
            and self.right is other.right
            and _same_function(self.joiner, other.joiner)
            and _same_function(self.key, other.key)
            and (self.before_ms, self.after_ms, self.grace_ms, self.idle_close_ms)
            == (other.before_ms, other.after_ms, other.grace_ms, other.idle_close_ms)
            and self.changelog == other.changelog
        )

    def __repr__(self) -> str:
        return f"<Join {self.name} ({self.kind}, {self.how})>"


class JoinedStream:
    """A stream join's results (or a joined table's changes): read it with an agent
    (``@app.agent(joined)``: each value is the result, keyed like the stream record) or send
    it on with :meth:`to` (inside the transaction, no agent needed)."""

    def __init__(self, join: Join) -> None:
        self.join = join

    @property
    def name(self) -> str:
        return self.join.name

    def to(self, topic: Topic | str) -> JoinedStream:
        """Send every result to ``topic`` (its codecs; key and timestamp as the join gives
        them), in the transaction of the record that made it."""
        self.join.to(topic)
        return self

    def __repr__(self) -> str:
        return f"<JoinedStream {self.name}>"


class JoinedTable:
    """A table-table or foreign-key join's result: a read-only table keyed like its left side.

    ``changes()`` is the stream of its updates (a tombstone, value None, where a result
    disappears), which :meth:`to` sends to a topic. A table-table join's value for a key is
    read from the two tables (``joined[key]``, ``joined.get(key)``), in a record's task as a
    table is; a foreign-key join's right row lives in another partition, so it is read from
    its changes only.
    """

    def __init__(self, join: Join) -> None:
        self.join = join

    @property
    def name(self) -> str:
        return self.join.name

    def changes(self) -> JoinedStream:
        return JoinedStream(self.join)

    def to(self, topic: Topic | str) -> JoinedTable:
        self.join.to(topic)
        return self

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._value(key)
        return default if value is MISSING else value

    def __getitem__(self, key: Any) -> Any:
        value = self._value(key)
        if value is MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self._value(key) is not MISSING

    def _value(self, key: Any) -> Any:
        join = self.join
        if join.kind != TABLE_TABLE:
            raise TopologyError(
                f"join {join.name!r}: a foreign-key join's right rows live in other partitions; "
                "read its results from .changes() (or a topic it is sent to with .to())"
            )
        left = join.left_table.get(key, MISSING)
        right = join.right_table.get(key, MISSING)
        has_left, has_right = left is not MISSING, right is not MISSING
        if join.how == INNER and not (has_left and has_right):
            return MISSING
        if join.how == LEFT and not has_left:
            return MISSING
        if not has_left and not has_right:
            return MISSING
        return join.result(left if has_left else None, right if has_right else None)

    def __repr__(self) -> str:
        return f"<JoinedTable {self.name}>"


# -- declaring ----------------------------------------------------------------------------------


def stream_join(
    app: App,
    how: str,
    left: Topic,
    right: Any,
    fields: tuple[Any, ...],
    *,
    joiner: Joiner | None = None,
    key: Any = None,
    within: Duration | None = None,
    before: Duration | None = None,
    after: Duration | None = None,
    grace: Duration | None = None,
    idle_close: Duration | None = None,
    windows: JoinWindows | None = None,
    name: str | None = None,
    changelog: str | None = None,
) -> JoinedStream:
    """``topic.join(...)`` and its kin (see :meth:`Topic.join`). A stream-stream join's window
    is a :class:`JoinWindows` (positional, Faust-style, or ``windows=``) or the keywords."""
    from streams_app.app.table import Table

    if fields and all(isinstance(f, JoinWindows) for f in fields):
        if len(fields) > 1 or windows is not None:
            raise TypeError(f"{left.name}.{_verb(how)}(): give one JoinWindows")
        windows, fields = fields[0], ()
    _no_fields(fields, f"{left.name}.{_verb(how)}", "key=")
    where = f"{left.name}.{_verb(how)}({_name_of(right)})"
    idle_ms = _optional_ms(idle_close, "idle_close", where)
    if windows is not None and not isinstance(windows, JoinWindows):
        raise TypeError(f"{where}: windows= takes a JoinWindows, not {windows!r}")
    if windows is not None and not _is_topic(right):
        raise TopologyError(
            f"{where}: JoinWindows are for stream-stream joins; {_name_of(right)!r} is a table"
        )
    if changelog is not None and not _is_topic(right):
        raise TopologyError(
            f"{where}: changelog= is where a stream-stream join's buffers are changelogged; "
            f"{_name_of(right)!r} is a table (a table built from a topic says its changelog "
            "itself): drop changelog="
        )
    if _is_topic(right):
        if windows is not None:
            if any(v is not None for v in (within, before, after, grace)):
                raise TopologyError(
                    f"{where}: the window is given twice: JoinWindows(...) or within=/before=/"
                    "after=/grace=, not both"
                )
            window = windows.ms
        else:
            window = _window(where, within, before, after, grace)
        if key is not None:
            raise TopologyError(f"{where}: key= is for GlobalTable joins; both streams are keyed")
        if idle_ms is not None and how == INNER:
            raise TopologyError(
                f"{where}: idle_close= releases the nulls of records whose window closed "
                "unmatched, and an inner join has none: drop idle_close=, or use left_join/"
                "outer_join"
            )
        join = _declare(
            app,
            name or _join_name(left.name, how, right.name),
            kind=STREAM_STREAM,
            how=how,
            left=left,
            right=right,
            joiner=joiner,
            before_ms=window[0],
            after_ms=window[1],
            grace_ms=window[2],
            idle_close_ms=idle_ms,
            changelog=_buffer_changelog(
                where, how, left, right, changelog, window[0] + window[1] + (window[2] or 0)
            ),
        )
        return JoinedStream(join)
    if not isinstance(right, Table):
        raise TypeError(f"{where}: join a topic (a stream) or a table, not {right!r}")
    if within is not None or before is not None or after is not None:
        raise TopologyError(
            f"{where}: within=/before=/after= are stream-stream windows; a stream-table join "
            "meets the table as it is (or, versioned, as of the record's time: grace=)"
        )
    if how == OUTER:
        raise TopologyError(
            f"{where}: a stream-table join is inner or left (only the stream side triggers, as "
            "in Kafka Streams); use left_join"
        )
    if right.source is None and not right.is_global:
        raise TopologyError(
            f"{where}: table {right.name!r} is written by agents; a stream-table join needs a "
            f"table built from a topic: app.Table({right.name!r}, source=topic)"
        )
    if idle_ms is not None and grace is None:
        raise TopologyError(
            f"{where}: idle_close= releases stream records waiting for grace=, and without "
            "grace= nothing waits: drop idle_close= (or join a versioned table with grace=)"
        )
    if right.is_global:
        if grace is not None:
            raise TopologyError(f"{where}: grace= needs a versioned table, not a GlobalTable")
        mapper, mapper_name = _key_function(key, where) if key is not None else (None, None)
        join = _declare(
            app,
            name or _join_name(left.name, how, right.name, mapper_name),
            kind=STREAM_GLOBAL,
            how=how,
            left=left,
            right=right,
            joiner=joiner,
            key=mapper,
            key_name=mapper_name,
            idle_close_ms=idle_ms,
        )
        return JoinedStream(join)
    if key is not None:
        raise TopologyError(
            f"{where}: key= maps records to a GlobalTable's keys; {right.name!r} is partitioned, "
            "and a partitioned table is joined by the record key (co-partitioned). Use a "
            "GlobalTable, or group_by the stream by that key first"
        )
    grace_ms = None
    if grace is not None:
        grace_ms = duration_ms(grace, f"{where}: grace")
        if right.versioned_ms is None:
            raise TopologyError(
                f"{where}: grace= needs a versioned table (stream records wait for late table "
                f"updates, looked up as of their time): declare {right.name!r} with "
                "versioned=<history>"
            )
        if grace_ms < 0:
            raise TopologyError(f"{where}: grace must not be negative")
        if grace_ms > right.versioned_ms:
            raise TopologyError(
                f"{where}: grace ({grace_ms} ms) is longer than the history of {right.name!r} "
                f"({right.versioned_ms} ms): a record would wait past the versions it needs"
            )
    join = _declare(
        app,
        name or _join_name(left.name, how, right.name),
        kind=STREAM_TABLE,
        how=how,
        left=left,
        right=right,
        joiner=joiner,
        grace_ms=grace_ms,
        idle_close_ms=idle_ms,
    )
    return JoinedStream(join)


def table_join(
    app: App,
    how: str,
    left: Table,
    right: Any,
    fields: tuple[Any, ...],
    *,
    joiner: Joiner | None = None,
    foreign_key: Any = None,
    name: str | None = None,
) -> JoinedTable:
    """``table.join(...)`` and its kin (see :meth:`Table.join`)."""
    from streams_app.app.table import Table

    _no_fields(fields, f"{left.name}.{_verb(how)}", "foreign_key=")
    where = f"{left.name}.{_verb(how)}({_name_of(right)})"
    if not isinstance(right, Table):
        raise TypeError(
            f"{where}: a table joins a table; to join a stream to a table, join from the "
            "stream's topic (topic.join(table))"
        )
    for table in (left, right):
        if table.source is None or table.is_global or table.window is not None:
            raise TopologyError(
                f"{where}: table {table.name!r} must be built from a topic (app.Table(name, "
                "source=topic)), not global, not windowed: a table join follows its tables' "
                "updates"
            )
    if foreign_key is None:
        join = _declare(
            app,
            name or _join_name(left.name, how, right.name),
            kind=TABLE_TABLE,
            how=how,
            left=left,
            right=right,
            joiner=joiner,
        )
        return JoinedTable(join)
    if how == OUTER:
        raise TopologyError(
            f"{where}: a foreign-key join is inner or left (as in Kafka Streams); use left_join"
        )
    extractor, extractor_name = _key_function(foreign_key, where)
    join = _declare(
        app,
        name or _join_name(left.name, how, right.name, extractor_name),
        kind=FOREIGN_KEY,
        how=how,
        left=left,
        right=right,
        joiner=joiner,
        key=extractor,
        key_name=extractor_name,
    )
    return JoinedTable(join)


def _buffer_changelog(
    where: str, how: str, left: Topic, right: Topic, changelog: str | None, retention_ms: int
) -> str:
    """``changelog=`` of a stream-stream join, checked (docs/joins.md, "The input topic as the
    buffer's changelog"): refused where no buffer's input can restore it, naming why."""
    if changelog is None or changelog == OWN:
        return OWN
    if changelog != INPUT:
        raise TopologyError(f"{where}: changelog= is one of {CHANGELOGS}, not {changelog!r}")
    reasons = [
        why_not_input(how, role, topic, other, retention_ms)
        for role, topic, other in (("left", left, right), ("right", right, left))
    ]
    if all(reasons):
        raise TopologyError(
            f"{where}: changelog='input' restores no buffer of this join (left: {reasons[0]}; "
            f"right: {reasons[1]}): drop changelog="
        )
    return INPUT


def why_not_input(
    how: str,
    role: str,
    topic: Topic,
    other: Topic,
    retention_ms: int,
    broker_config: Mapping[str, str] | None = None,
) -> str | None:
    """Why the input ``topic`` cannot restore the buffer of side ``role`` (``other``: the other
    side's input; ``retention_ms``: how long the buffer keeps a record), or None if it can: it
    must hold what the buffer holds, for as long as the buffer keeps it (docs/joins.md).
    Judged on what the app declares of the topic, or on ``broker_config``: the topic's
    settings as the broker has them (``runtime/source_changelogs.py``, at a worker's start)."""
    if how == OUTER or (how == LEFT and role == "left"):
        return (
            "its records get nulls, and a record whose null is released leaves its buffer, "
            "which the input cannot say"
        )
    if topic is other:
        return "one topic joined with itself cannot be the changelog of both buffers"
    config = topic.config if broker_config is None else broker_config
    declared = broker_config is None
    policy = str(config.get("cleanup.policy", ""))
    if "compact" in policy:
        how_so = "declared compacted" if declared else f"compacted (cleanup.policy={policy})"
        return f"topic {topic.name!r} is {how_so}, and compaction drops records"
    kept = config.get("retention.ms")
    if kept is not None and 0 <= int(kept) < retention_ms:
        return (
            f"topic {topic.name!r} keeps records {int(kept)} ms (retention.ms), less than "
            f"the buffer keeps them ({retention_ms} ms: before + after + grace)"
        )
    size = config.get("retention.bytes")
    if size is not None and int(size) >= 0:
        has = "declares" if declared else "has"
        return f"topic {topic.name!r} {has} retention.bytes={size}, which may delete records"
    if topic.on_invalid_timestamp == "partition_time":
        return (
            f"topic {topic.name!r} gives a record without a valid time its partition's time "
            "(on_invalid_timestamp), which a restore from part-way cannot know"
        )
    return None


def _declare(app: App, name: str, **spec: Any) -> Join:
    join = Join(app, name=name, **spec)
    existing = app.joins.get(name)
    if existing is not None:
        if not existing.same(join):
            raise TopologyError(
                f"join {name!r} is declared twice, differently: give each join its own name="
            )
        return existing
    _add_state(join)
    app.joins[name] = join
    return join


def _add_state(join: Join) -> None:
    """The stores and internal topics each kind keeps (docs/joins.md, "State")."""
    key: Codec
    value: Codec
    if join.kind == STREAM_TABLE and join.grace_ms is not None:
        # The versioned join's grace buffer: stream records by release time (KIP-923).
        stream = join.left_topic
        key, value = unmatched_codecs(stream.key_codec, stream.value_codec, stream.value_codec)
        join.add_store("buffer", key, value)
    elif join.kind == STREAM_STREAM:
        assert join.before_ms is not None and join.after_ms is not None
        retention = join.before_ms + join.after_ms + (join.grace_ms or 0)
        segment = default_segment_ms(retention)
        for role, topic in (("left", join.left_topic), ("right", join.right_topic)):
            key, value = join_window_codecs(topic.key_codec, topic.value_codec, segment)
            # An input restores its buffer where it holds what the buffer holds, as long as
            # the buffer keeps it (docs/joins.md); elsewhere the buffer keeps a changelog.
            other = join.right_topic if role == "left" else join.left_topic
            own = join.changelog == OWN or bool(
                why_not_input(join.how, role, topic, other, retention)
            )
            join.add_store(
                role,
                key,
                value,
                None if own else topic,
                read_cache=False,
                scan_cache=True,
                source=None if own else topic,
            )
        if join.how != INNER:
            stream = join.left_topic
            key, value = unmatched_codecs(
                stream.key_codec, stream.value_codec, join.right_topic.value_codec
            )
            join.add_store("unmatched", key, value)
    elif join.kind == TABLE_TABLE:
        join.left_table.keep_times()
        join.right_table.keep_times()
    elif join.kind == FOREIGN_KEY:
        left, right = join.left_table, join.right_table
        left.keep_times()
        right.keep_times()
        join.add_store(
            "subscriptions",
            SubscriptionKeyCodec(right.key_codec, left.key_codec),
            SubscriptionValueCodec(),
            follows=join.right_topic,
        )
        join.add_topic("subscription", follows=join.right_topic)
        join.add_topic("response", follows=join.left_topic)


def times_store(table: Table) -> JoinStore:
    """The record time of each row of a table built from a topic (table-table and
    foreign-key results carry the larger of their rows' times)."""
    assert table.source is not None
    return JoinStore(
        table.app,
        f"{table.name}-times",
        table.key_codec,
        TimeCodec(),
        owner=table.name,
        follows=table.source.name,
        kind=TIMES_STORE,
    )


# -- helpers ------------------------------------------------------------------------------------


def _same_function(a: Callable[..., Any] | None, b: Callable[..., Any] | None) -> bool:
    """The same function, or the same code over the same values: a lambda (or a model field's
    getter) written inside an agent is made anew each time the agent is traced or restarted,
    and is still the same declaration."""
    if a is b:
        return True
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if code_a is None or code_a is not code_b:
        return False
    cells_a, cells_b = getattr(a, "__closure__", None) or (), getattr(b, "__closure__", None) or ()
    return len(cells_a) == len(cells_b) and all(
        x.cell_contents is y.cell_contents for x, y in zip(cells_a, cells_b, strict=True)
    )


def _window(
    where: str,
    within: Duration | None,
    before: Duration | None,
    after: Duration | None,
    grace: Duration | None,
) -> tuple[int, int, int]:
    """``(before, after, grace)`` in ms from ``within=`` or ``before=``/``after=``."""
    if within is not None:
        if before is not None or after is not None:
            raise TopologyError(
                f"{where}: within= is before= and after= at once; give within= alone, or "
                "before= and after="
            )
        before_ms = after_ms = duration_ms(within, f"{where}: within")
    elif before is None and after is None:
        raise TopologyError(
            f"{where}: a stream-stream join needs a window: within=<duration> (or before= and "
            "after=), how far apart in time two records may be to pair"
        )
    else:
        before_ms = duration_ms(before or 0, f"{where}: before")
        after_ms = duration_ms(after or 0, f"{where}: after")
    if before_ms + after_ms < 0:
        raise TopologyError(
            f"{where}: before + after must not be negative ({before_ms} + {after_ms} ms): the "
            "window would hold no time at all"
        )
    grace_ms = 0 if grace is None else duration_ms(grace, f"{where}: grace")
    if grace_ms < 0:
        raise TopologyError(f"{where}: grace must not be negative")
    return before_ms, after_ms, grace_ms


def _optional_ms(value: Duration | None, what: str, where: str) -> int | None:
    if value is None:
        return None
    ms = duration_ms(value, f"{where}: {what}")
    if ms <= 0:
        raise TopologyError(f"{where}: {what} must be positive")
    return ms


def _key_function(key: Any, where: str) -> tuple[Callable[[Any], Any], str]:
    """A function of the value, or a model field (``Order.customer_id``), and its name."""
    if hasattr(key, "ident") and hasattr(key, "getattr"):  # a model field descriptor
        descriptor = key

        def of_field(value: Any) -> Any:
            return descriptor.getattr(value)

        return of_field, str(descriptor.ident)
    if not callable(key):
        raise TypeError(f"{where}: the key must be a function of the value or a model field")
    return key, getattr(key, "__name__", type(key).__name__)


def _join_name(left: str, how: str, right: str, key_name: str | None = None) -> str:
    verb = "join" if how == INNER else f"{how}-join"
    on = "" if key_name is None else f"-on-{'key' if key_name == '<lambda>' else key_name}"
    return f"{left}-{verb}-{right}{on}"


def _verb(how: str) -> str:
    return "join" if how == INNER else f"{how}_join"


def _name_of(other: Any) -> str:
    return str(getattr(other, "name", other))


def _no_fields(fields: tuple[Any, ...], where: str, instead: str) -> None:
    if fields:
        raise TypeError(
            f"{where}() takes the other side as its only positional argument; Faust's fields "
            f"(stream.join(Order.customer_id, ...)) are {instead} here"
        )


def _is_topic(side: Any) -> bool:
    from streams_app.app.topic import Topic

    return isinstance(side, Topic)


def _topic_of(side: Any) -> Topic:
    if _is_topic(side):
        return side  # type: ignore[no-any-return]
    source = side.source
    if source is None:
        raise TopologyError(f"table {side.name!r} is not built from a topic")
    return source  # type: ignore[no-any-return]
