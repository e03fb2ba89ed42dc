"""State abstractions: a table's committed state, per partition, and a task's pending writes.

The rule that makes local state exactly-once: **a store partition only ever holds what Kafka
committed.** While a transaction is open, a task's writes live in a :class:`PartitionTransaction`
(reads see them first). After the Kafka transaction commits, they are written to the
:class:`StorePartition` in one atomic batch *together with* the changelog offset they correspond
to. So a crash at any moment leaves a store whose data and offset agree, and a restart restores
only the changelog tail after that offset instead of wiping and replaying everything.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, KeysView, Mapping
from itertools import compress, islice, repeat
from operator import is_not
from typing import Any

from streams_app.codecs import Codec, plain_of
from streams_app.state.cache import MISS, CacheSegment, ReadCache, entry_size, entry_sizes
from streams_app.state.sizing import shared


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


#: Marks a key deleted in a pending transaction (distinct from "not written"), and a key the
#: store does not hold in the read cache. One shared object: it costs its entries nothing.
DELETED: Any = shared(object())
_MISSING: Any = object()


class StorePartition(ABC):
    """The committed state of one partition of one table."""

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed key and value (never the offset bookkeeping)."""

    def iter_range(self, low: bytes, high: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Committed keys ``low <= key < high`` (no upper bound: None), in key order.

        Windowed tables keep a key's windows under one prefix, ordered by window start (see
        ``state.windowed``), so this finds them without reading the rest of the partition.
        Stores override it with a seek; this default filters a full scan.
        """
        for key, value in self.items():
            if key >= low and (high is None or key < high):
                yield key, value

    def range_items(
        self, low: bytes, high: bytes, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """:meth:`iter_range`'s entries (the first ``limit`` of them, if given), as a list:
        for many short scans, which a store may serve from a reader it keeps between calls
        until :meth:`release_cursor`."""
        return list(islice(self.iter_range(low, high), limit))

    def release_cursor(self) -> None:
        """Let go of what :meth:`range_items` kept between calls (nothing by default)."""
        return

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Committed keys starting with ``prefix``, in key order, with their values."""
        return self.iter_range(prefix, prefix_upper_bound(prefix))

    @property
    @abstractmethod
    def changelog_offset(self) -> int | None:
        """The next changelog offset this state does not yet contain; None if never written."""

    @abstractmethod
    def write(self, batch: Mapping[bytes, bytes | None], changelog_offset: int) -> None:
        """Apply committed writes (None deletes) and the changelog offset atomically."""

    def checkpoint(self) -> None:
        """Make every :meth:`write` so far reach the store now, each batch still with its
        offset (a RocksDB partition otherwise keeps recent ones in memory for a while, see
        ``state.rocksdb``'s write-behind): restore calls it so that its progress survives a
        kill. Nothing to do for stores that apply writes at once."""
        return

    @abstractmethod
    def wipe(self) -> None:
        """Drop everything, offset included (the state can no longer be trusted)."""

    @abstractmethod
    def close(self) -> None: ...


class Store(ABC):
    """All partitions of one table on this worker."""

    name: str

    @abstractmethod
    def partition(self, partition: int) -> StorePartition:
        """Open (or return the open) partition."""

    @abstractmethod
    def close_partition(self, partition: int) -> None:
        """Release a partition this worker no longer owns; its data stays for a later return."""

    @abstractmethod
    def close(self) -> None: ...

    @property
    @abstractmethod
    def persistent(self) -> bool:
        """Whether state survives a process restart (rocksdb yes, memory no)."""

    def local_partitions(self) -> set[int]:
        """Partitions this worker holds state for, open or not (a RocksDB partition left on
        disk by an earlier run counts): the assignor reports their offsets, so tasks go back
        where their state is."""
        return set()


class PartitionTransaction:
    """One task's uncommitted writes to one store partition, as decoded Python objects.

    Values stay decoded while the transaction is open (``counts[k] += 1`` a thousand times
    costs no serialisation); :meth:`prepare` encodes each dirty key once, producing both the
    changelog records and the store batch.

    Reads look in this transaction's pending writes, then in the worker's read cache (committed
    values only, :mod:`streams_app.state.cache`), then in the store. A commit moves the written
    values into the read cache; a discard drops them and empties this transaction's cache
    segment (the cache's module docstring says why an abort must).

    **Sealed writes.** While a commit is in flight the worker goes on processing
    (:mod:`streams_app.runtime.commit`, "Processing while the commit is in flight"). The writes
    the commit carries are *sealed* (:meth:`seal`): their encoding is kept for the store, and
    they stay among the pending writes, so every read, range scan and iteration still sees
    them without a second layer to merge. Writes made meanwhile overwrite them there and are
    remembered as rewritten. When the commit succeeds, :meth:`commit_sealed` writes the sealed
    batch to the store and drops from the pending writes every sealed key that was not
    rewritten; the rest stay pending for the next commit. When it fails, :meth:`discard` drops
    all of it, as for any abort.

    What the pending writes cost is estimated by :meth:`pending_bytes` for the worker's
    uncommitted-writes budget (:class:`~streams_app.state.budget.UncommittedWrites`): nothing is
    sized on :meth:`set` itself, which stays as cheap as a dict store.
    """

    __slots__ = (
        "_cache",
        "_counted",
        "_dirty",
        "_prepared",
        "_rewritten",
        "_sampled_bytes",
        "_sampled_entries",
        "_sealed",
        "_sealed_batch",
        "_segment",
        "before_prepare",
        "commits",
        "key_codec",
        "partition",
        "pending_get",
        "scans",
        "value_codec",
    )

    def __init__(
        self,
        partition: StorePartition,
        key_codec: Codec,
        value_codec: Codec,
        cache: ReadCache | None = None,
        *,
        scan_cache: ReadCache | None = None,
    ) -> None:
        self.partition = partition
        self.key_codec = key_codec
        self.value_codec = value_codec
        self._cache = cache if cache is not None else ReadCache(0)
        self._segment = self._cache.segment()
        #: Where a view over this transaction may keep what its range scans read of the
        #: committed state (None: nowhere). The view decides what it keeps and must forget an
        #: entry when it writes under it; a discard empties it with the rest.
        self.scans: CacheSegment | None = (
            scan_cache.segment() if scan_cache is not None and scan_cache.enabled else None
        )
        #: key object -> value object or DELETED: the pending writes, in first-write order.
        self._dirty: dict[Any, Any] = {}
        #: ``dict.get`` of the pending writes (a value, DELETED, or the default): a table's
        #: accessor tries it before :meth:`get`, and a key written by this transaction, as
        #: every key is by the time it is read again, is found without a Python call.
        self.pending_get: Callable[[Any, Any], Any] = self._dirty.get
        self._prepared: dict[bytes, bytes | None] | None = None
        #: Called first by every :meth:`prepare` (None: nothing): a view over this transaction
        #: that keeps a write back while it changes on every record (a store's observed stream
        #: time) makes it here, once a commit. Dropped by :meth:`discard`, as the view is.
        self.before_prepare: Callable[[], None] | None = None
        #: Commits of this transaction's writes so far (:meth:`commit`, :meth:`commit_sealed`):
        #: a view that noted it at :meth:`prepare` knows, once it has grown, that what it had
        #: written by then is in the store.
        self.commits = 0
        #: While a commit is in flight: the writes it carries (decoded, and encoded for the
        #: store), and the keys written again since (None: nothing sealed).
        self._sealed: dict[Any, Any] | None = None
        self._sealed_batch: dict[bytes, bytes | None] | None = None
        self._rewritten: set[Any] | None = None
        #: For pending_bytes(): how many pending writes were seen by the last estimate, and the
        #: entries sized so far (a running mean of what one entry costs).
        self._counted = 0
        self._sampled_bytes = 0
        self._sampled_entries = 0

    def get(self, key: Any, default: Any = _MISSING) -> Any:
        value = self._dirty.get(key, _MISSING)
        if value is _MISSING:
            segment = self._segment
            value = segment.young.get(key, _MISSING)
            if value is _MISSING:
                value = self._read(key)
            else:  # the hot path: one more dict lookup than a plain dict
                segment.hits += 1
        if value is DELETED:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return value

    def _read(self, key: Any) -> Any:
        segment = self._segment
        value = segment.lookup_older(key)
        if value is MISS:
            raw = self.partition.get(self.key_codec.dumps(key))
            if raw is None:
                # Not cached, as in Kafka Streams' caching store: a key read while absent is
                # usually written next, and its commit caches it; RocksDB's bloom filters
                # answer "absent" without a disk read.
                return DELETED
            value = self.value_codec.loads(raw)
            if self._cache.enabled:
                segment.fill(key, value, entry_size(key, value))
        return value

    def set(self, key: Any, value: Any) -> None:
        self._dirty[key] = value
        self._prepared = None
        if self._rewritten is not None:
            self._rewritten.add(key)

    def set_all(self, writes: Mapping[Any, Any]) -> None:
        """:meth:`set` of each of ``writes`` (key -> value), in their order."""
        self._dirty.update(writes)
        self._prepared = None
        if self._rewritten is not None:
            self._rewritten.update(writes)

    def delete(self, key: Any) -> None:
        self._dirty[key] = DELETED
        self._prepared = None
        if self._rewritten is not None:
            self._rewritten.add(key)

    def pending(self, key: Any, default: Any = _MISSING) -> Any:
        """The uncommitted write of ``key`` (a value or DELETED), or ``default``."""
        if key in self._dirty:
            return self._dirty[key]
        return default

    def pending_keys(self) -> KeysView[Any]:
        """The keys this transaction has written or deleted (a live view of them)."""
        return self._dirty.keys()

    def contains(self, key: Any) -> bool:
        return self.get(key, DELETED) is not DELETED

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    @property
    def pending_count(self) -> int:
        """How many keys this transaction has written."""
        return len(self._dirty)

    def pending_bytes(self, sample: int = 32) -> int:
        """What the pending writes cost in memory, estimated: their number times the mean
        size of an entry (:func:`~streams_app.state.cache.entry_size`).

        The mean comes from the exact sizes of the last commit's writes and from up to
        ``sample`` of the writes added since the previous estimate (the newest: a dict keeps
        first-write order). Sizing every write on :meth:`set` would be exact but would double
        the cost of the hot path; the worker asks for this once per fetched batch.
        """
        dirty = self._dirty
        count = len(dirty)
        if not count:
            return 0
        added = count - self._counted
        if added > 0:
            for key in islice(reversed(dirty), min(added, sample)):
                self._sampled_bytes += entry_size(key, dirty[key])
                self._sampled_entries += 1
            self._counted = count
        if not self._sampled_entries:
            return 0
        return count * self._sampled_bytes // self._sampled_entries

    def dirty_items(self) -> Iterator[tuple[Any, Any]]:
        """Pending writes as (key, value or DELETED)."""
        yield from self._dirty.items()

    def prepare(self) -> dict[bytes, bytes | None]:
        """Encode the pending writes once: the changelog records and the store batch."""
        if self.before_prepare is not None:
            self.before_prepare()
        if self._prepared is None:
            # The codecs' plain types (a text key, a count) are checked here: calls fewer.
            key_plain, plain_key = plain_of(self.key_codec)
            value_plain, plain_value = plain_of(self.value_codec)
            if key_plain is bytes and value_plain is bytes:
                self._prepared = self._prepare_as_is()
            else:
                encode_key, encode_value = self.key_codec.dumps, self.value_codec.dumps
                self._prepared = {
                    (plain_key(k) if type(k) is key_plain else encode_key(k)): (
                        None
                        if v is DELETED
                        else plain_value(v)
                        if type(v) is value_plain
                        else encode_value(v)
                    )
                    for k, v in self._dirty.items()
                }
        return self._prepared

    def _prepare_as_is(self) -> dict[bytes, bytes | None]:
        """:meth:`prepare` of a store whose codecs pass bytes on as they are (``plain_of``
        answers ``bytes`` for both: a join buffer's, whose pending entries are their stored
        bytes). The comprehension would take each entry through a Python step to find it
        unchanged; here the writes are copied in one C call, and only the entries that are
        not bytes to bytes (a deletion, the stream time entry) are encoded, found by C-level
        scans of the types. About 215 ns an entry against 87 (BENCHMARKS.md, "A join
        buffer's commit copies its writes"). The result equals the comprehension's as a
        mapping; an entry encoded here comes after the others (every key is written once:
        the order is not part of what a commit means)."""
        prepared: dict[Any, Any] = dict(self._dirty)
        odd = list(compress(prepared, map(is_not, map(type, prepared), repeat(bytes))))
        odd += compress(prepared, map(is_not, map(type, prepared.values()), repeat(bytes)))
        if odd:
            encode_key, encode_value = self.key_codec.dumps, self.value_codec.dumps
            for key in dict.fromkeys(odd):  # a key may be odd twice (key and value)
                value = prepared[key]
                value = (
                    None
                    if value is DELETED
                    else value
                    if type(value) is bytes
                    else encode_value(value)
                )
                if type(key) is bytes:
                    prepared[key] = value
                else:
                    del prepared[key]
                    prepared[encode_key(key)] = value
        return prepared

    def commit(self, changelog_offset: int) -> None:
        """The Kafka transaction committed: make the writes durable with their offset."""
        self.partition.write(self.prepare(), changelog_offset)
        self.commits += 1
        dirty = self._dirty
        if dirty:
            if self._cache.enabled:
                # They now equal the committed state: later transactions read them from here.
                sizes = entry_sizes(dirty)
                self._segment.fill_committed(dirty, sizes)
                self._sampled_bytes = sum(sizes)
                self._sampled_entries = len(sizes)
            self._dirty = {}
            self.pending_get = self._dirty.get
        self._counted = 0
        self._prepared = None

    def seal(self) -> None:
        """The pending writes go into the commit now in flight (their changelog records are
        sent): keep them and their encoding for :meth:`commit_sealed`, and remember what is
        written from now on."""
        self._sealed_batch = self.prepare()
        self._sealed = dict(self._dirty)
        self._rewritten = set()

    @property
    def sealed(self) -> bool:
        return self._sealed_batch is not None

    def commit_sealed(self, changelog_offset: int) -> None:
        """The commit that carried the sealed writes succeeded: make them durable with their
        changelog offset; what was written since stays pending."""
        sealed, batch, rewritten = self._sealed, self._sealed_batch, self._rewritten
        assert sealed is not None and batch is not None and rewritten is not None
        self._sealed = self._sealed_batch = self._rewritten = None
        self.partition.write(batch, changelog_offset)
        self.commits += 1
        dirty = self._dirty
        if rewritten:
            for key in sealed:
                if key not in rewritten:
                    del dirty[key]
        else:
            dirty.clear()
        if self._cache.enabled:
            # Committed now; a key rewritten since is read from the pending writes first.
            sizes = entry_sizes(sealed)
            self._segment.fill_committed(sealed, sizes)
            self._sampled_bytes = sum(sizes)
            self._sampled_entries = len(sizes)
        self._counted = 0
        self._prepared = None

    def discard(self) -> None:
        """The transaction aborted: forget every pending write and every cached read."""
        self._sealed = self._sealed_batch = self._rewritten = None
        self.before_prepare = None
        self._dirty = {}
        self.pending_get = self._dirty.get
        self._counted = 0
        self._prepared = None
        self._segment.clear()
        if self.scans is not None:
            self.scans.clear()
