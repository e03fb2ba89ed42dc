"""The buffer of one side of a stream-stream join: a window store that keeps duplicates.

A stream-stream join keeps each side's recent records so that a record of the other side can
find its partners: same key, time within the join window. Kafka Streams uses one window store
per side with ``retainDuplicates`` (two records of one key at one time are both kept) and a
retention of ``before + after + grace``. This is that store, as a view over a task's
:class:`~streams_app.state.base.PartitionTransaction` (writes reach the store partition only
after the Kafka transaction commits).

**Layout.** ``u64 segment | u32 length | key | u64 timestamp | u64 seq``
(:class:`JoinWindowKeyCodec`), the value tagged
(:class:`~streams_app.state.composite.TaggedValueCodec`). A buffered record waits in the
transaction as the bytes it will be stored as, under its store key
(:meth:`JoinWindowKeyCodec.entry`) with its value's stored bytes (:class:`BufferValueCodec`):
a join buffers every record of its side until the next commit, and a tuple key, a decoded
value or a wrapper kept that long is an object the cyclic garbage collector walks at every
young collection it survives; bytes are not tracked at all (and their hash is computed once).
The commit then encodes nothing.
``seq`` keeps duplicates apart: the caller passes a number unique within the store partition
for each record it stores, and the runtime passes the record's input offset, which is also the
same number when a record is processed again after an abort (Kafka Streams counts a sequence in
memory from 0 at every start, so after a restart a new record can overwrite a stored duplicate).
``segment = timestamp // segment_ms``: all entries of a time segment sort together, so expiry
deletes whole segments with one range scan, and a fetch seeks once per segment it spans (with
the default segment interval, ``max(retention / 2, 60 s)`` as in Kafka Streams, two or three).

**Time.** The store's observed stream time is the largest timestamp put into it (the entry
under the empty key, :mod:`streams_app.state.composite`), the ``observedStreamTime`` of Kafka
Streams' segmented stores. The view keeps it in memory and writes the entry when the
transaction is prepared for a commit (``PartitionTransaction.before_prepare``), not at every
put that moves it (nearly every put, when times ascend): the entry still commits with the
entries that moved it. An entry is *retained* while ``timestamp > observed - retention``:

- :meth:`put` of a record that is not (older than retention when it arrives) stores nothing and
  returns False; it still advances the observed time, as in Kafka Streams;
- :meth:`fetch` returns retained entries only (``getActualFrom``), whatever is still on disk;
- :meth:`expire` deletes every segment wholly past retention; each deleted entry gets a
  changelog tombstone in the transaction (the changelog stays compacted, as windowed tables'
  changelogs do: docs/windows.md says why not ``compact,delete``).

What is found therefore never depends on when expiry ran. A join fetches the *other* side's
store before it puts a record into *its own*, as Kafka Streams' ``KStreamJoinWindow`` forwards
a record to the join before storing it.

**A buffer restored from its input topic** (a join declared with ``changelog="input"``,
docs/joins.md) has no changelog of its own, so restore writes its input's records as entries
(the runtime's restore filter) but not the observed time: nothing in one record says the
largest time of all. Such a view (``from_input``) reads the observed time as the larger of the
stream time entry and every entry's time from that entry's segment on, once, when it is first
needed: the record with the largest time is always stored (it is never older than retention)
and never expired (its segment is the newest), so that is the time processing had observed. A
record that processing found too late and restore stored anyway is older than retention for
good: no fetch returns it, and expiry deletes it with its segment.

**Fetch cache.** In a one-to-many join (a user's record and that user's many events, an ad
impression and its clicks) every record of the many side fetches the same few records of the
one side: a RocksDB seek and a decode of each partner, again and again. So a fetch that finds
no pending write of its key keeps what it read of that key's committed entries in one segment
(all of them, up to :data:`SCAN_CACHE_ENTRIES`; past that, only that there are more) in the
transaction's scan segment of the worker's read cache (``PartitionTransaction.scans``: counted
in ``state_cache_max_bytes``, evicted with the rest, emptied on abort), and the next fetch of
that key and segment filters it by time instead of seeking. A put or delete of a key forgets
its cached segment at once; while the write is pending the key's fetches merge it from the
transaction without the cache, and the cache is filled again only once the write has
committed (the pending-key hints outlive it until then), so what is cached is always what the
store partition holds. Kafka Streams caches nothing here: in a one-to-one join this costs one
dict lookup per segment and gains nothing; in the benchmark's one-to-many join it saves the
seek and the decode. Partner values are handed out as cached, shared between results, as a
table's read cache hands out its values: a joiner must not change them in place.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from streams_app.codecs import Codec, DecodeError, plain_of
from streams_app.state.base import DELETED, PartitionTransaction, prefix_upper_bound
from streams_app.state.cache import MISS, entry_size
from streams_app.state.composite import (
    META_KEY,
    NO_TIME,
    STREAM_TIME,
    TAG_VALUE,
    TIME_OFFSET,
    PendingKeys,
    TaggedValueCodec,
    key_prefix,
    pack_time,
    read_key,
    read_stream_time,
    unpack_time,
    unpack_u64,
    write_stream_time,
)
from streams_app.state.sizing import shared

_GONE: Any = object()
_VALUE_TAG = bytes((TAG_VALUE,))
#: ``segment | key length`` and ``timestamp | seq`` of an entry's key (the times as pack_time's).
_HEAD = struct.Struct(">QI")
_TAIL = struct.Struct(">QQ")
_TIME = struct.Struct(">Q")
#: Kafka Streams' smallest segment interval for DSL window stores.
MIN_SEGMENT_MS = 60_000
#: A key's committed entries in one segment are kept by the fetch cache up to this many
#: (module doc); past it, the cache keeps :data:`_MANY` and the fetches scan their range.
SCAN_CACHE_ENTRIES = 16
_MANY: Any = shared(object())


def default_segment_ms(retention: int) -> int:
    return max(retention // 2, MIN_SEGMENT_MS)


class Buffered(NamedTuple):
    """One record of one side, as a fetch returns it."""

    timestamp: int
    seq: int
    value: Any


class JoinWindowKeyCodec:
    """``(key, timestamp, seq)`` <-> store and changelog key bytes (module doc)."""

    name = "join-window"
    #: Its :meth:`dumps` returns bytes as they are (store keys: :meth:`entry`):
    #: :func:`~streams_app.codecs.plain_of` lets a commit pass them on without the call.
    bytes_as_is = True

    def __init__(self, key_codec: Codec, segment_ms: int) -> None:
        if segment_ms <= 0:
            raise ValueError("segment_ms must be positive")
        self.key_codec = key_codec
        self.segment_ms = segment_ms
        #: The key codec's plain type and encoder (``plain_of``): every buffered record's
        #: key is encoded at commit.
        self._plain, self._plain_dumps = plain_of(key_codec)

    def segment(self, timestamp: int) -> int:
        return timestamp // self.segment_ms

    def entry(self, key: Any, timestamp: int, seq: int) -> bytes:
        """The store key of ``(key, timestamp, seq)``: what the buffer's transaction is keyed
        by (:class:`JoinWindowTransaction`), so that nothing is encoded at commit."""
        raw = self._plain_dumps(key) if type(key) is self._plain else self.key_codec.dumps(key)
        return (
            _HEAD.pack(timestamp // self.segment_ms + TIME_OFFSET, len(raw))
            + raw
            + _TAIL.pack(timestamp + TIME_OFFSET, seq)
        )

    def dumps(self, obj: Any) -> bytes:
        if type(obj) is bytes:  # a store key already (entry())
            return obj
        if obj is STREAM_TIME:
            return META_KEY
        key, timestamp, seq = obj
        return self.entry(key, timestamp, seq)

    def loads(self, data: bytes) -> Any:
        if data == META_KEY:
            return STREAM_TIME
        key, end = read_key(self.key_codec, data, 8)
        if len(data) != end + 16:
            raise DecodeError("not a join-window key: length does not match")
        return (key, unpack_time(data, end), unpack_u64(data, end + 8))

    def segment_prefix(self, segment: int, key: Any) -> bytes:
        return pack_time(segment) + key_prefix(self.key_codec, key)


def entry_user_key(entry: bytes) -> bytes:
    """The user key part of a store key (``u32 length | key``: ``key_prefix``'s bytes)."""
    return entry[8:-16]


def entry_time(entry: bytes) -> tuple[int, int]:
    """The ``(timestamp, seq)`` of a store key."""
    packed_time, seq = _TAIL.unpack_from(entry, len(entry) - 16)
    return packed_time - TIME_OFFSET, seq


def entry_segment(entry: bytes) -> int:
    """The segment of a store key."""
    return int(_TIME.unpack_from(entry)[0]) - TIME_OFFSET


class BufferValueCodec(TaggedValueCodec):
    """A buffer's values: tagged, as :class:`TaggedValueCodec` stores them, and kept pending in
    the transaction as those stored bytes (:meth:`stored`), which :meth:`dumps` passes on
    (the module doc says why). A record's bytes are at hand (``raw``: what its topic's value
    codec decoded it from), so the store and the changelog get them without the value being
    encoded again; a pending value read back (a fetch of a key written since the last commit)
    is decoded, as a committed one is.
    """

    #: As :attr:`JoinWindowKeyCodec.bytes_as_is`: pending values are stored bytes.
    bytes_as_is = True

    def stored(self, value: Any, raw: bytes | None) -> bytes:
        """What the store will hold for ``value``; ``raw``: its bytes in the inner codec, if
        known."""
        if raw is None:
            return TaggedValueCodec.dumps(self, value)
        return _VALUE_TAG + raw

    def dumps(self, obj: Any) -> bytes:
        if type(obj) is bytes:  # pending values are stored bytes already (stored())
            return obj
        return TaggedValueCodec.dumps(self, obj)


def join_window_codecs(
    key_codec: Codec, value_codec: Codec, segment_ms: int
) -> tuple[JoinWindowKeyCodec, BufferValueCodec]:
    """The store and changelog codecs of one side's buffer."""
    return JoinWindowKeyCodec(key_codec, segment_ms), BufferValueCodec(value_codec)


class JoinWindowTransaction:
    """A task's buffer of one join side in one partition: committed entries plus pending ones.

    In-memory hints (which segments are already expired) are valid while the task's
    transaction is open or commits; like a windowed table's state, the view is made anew after
    an abort (``Task.rewind``).
    """

    __slots__ = (
        "_entry",
        "_expired_below",
        "_observed",
        "_occupied",
        "_pending",
        "_scans",
        "_stored",
        "_written",
        "codec",
        "from_input",
        "retention",
        "tx",
    )

    def __init__(
        self,
        tx: PartitionTransaction,
        codec: JoinWindowKeyCodec,
        retention: int,
        from_input: bool = False,
    ) -> None:
        if retention < 0:
            raise ValueError("retention must not be negative")
        values = tx.value_codec
        if not isinstance(values, BufferValueCodec):
            raise TypeError(f"a join buffer needs a BufferValueCodec value codec, not {values!r}")
        self.tx = tx
        self.codec = codec
        self.retention = retention
        #: Whether the store is restored from its input topic (module doc): the observed time
        #: is then read from the entries too.
        self.from_input = from_input
        self._stored = values.stored
        self._entry = codec.entry
        #: Hints by the user key's bytes (``key_prefix``), as the pending entries are bytes.
        self._pending = PendingKeys(tx, entry_user_key)
        #: Segments below this one hold nothing (None: not looked yet).
        self._expired_below: int | None = None
        #: The observed time as this view last read or wrote it: the store's entry changes
        #: only through this view, and the buffers are not read-cached (the module doc).
        self._observed: int | None = None
        #: The observed time the transaction holds (None: not read yet). A put that moves the
        #: observed time (nearly every put, when times ascend) leaves the entry to the commit:
        #: :meth:`_write_time` writes it when the transaction is prepared.
        self._written: int | None = None
        tx.before_prepare = self._before_prepare
        #: segment -> whether the store partition may hold entries in it (absent: not looked
        #: yet). A fetch seeks only in segments that may: a window of an hour either side spans
        #: three segments, and most of them are empty on one side or the other.
        self._occupied: dict[int, bool] = {}
        #: The fetch cache (module doc): ``(segment, key)`` -> that key's committed entries in
        #: that segment, a tuple of :class:`Buffered`, or :data:`_MANY` (None: no cache).
        self._scans = tx.scans

    @property
    def observed(self) -> int:
        """The largest timestamp put into this store (committed with its entries)."""
        observed = self._observed
        if observed is None:
            observed = self._written = read_stream_time(self.tx)
            if self.from_input:
                observed = self._latest_entry(observed)
            self._observed = observed  # if it moved, written at prepare (_write_time)
        return observed

    def _latest_entry(self, observed: int) -> int:
        """The largest of ``observed`` and the times of the entries from its segment on (the
        observed time of a buffer restored from its input: module doc)."""
        tx = self.tx
        low = b"\x00" if observed == NO_TIME else pack_time(observed // self.codec.segment_ms)
        for entry, _ in tx.partition.iter_range(low, None):
            timestamp = entry_time(entry)[0]
            if timestamp > observed:
                observed = timestamp
        return observed

    def _before_prepare(self) -> None:
        """The transaction is being prepared for a commit (``PartitionTransaction.
        before_prepare``): the observed time into it, and the hints' mark."""
        self._write_time()
        self._pending.mark()

    def _write_time(self) -> None:
        """The observed time into the transaction, if it moved since it was last written
        (the stream time entry commits with the entries that moved it)."""
        observed = self._observed
        if observed is not None and observed != self._written:
            write_stream_time(self.tx, observed)
            self._written = observed

    def retained_from(self) -> int:
        """The oldest timestamp still retained (``observed - retention + 1``)."""
        observed = self.observed
        return NO_TIME if observed == NO_TIME else observed - self.retention + 1

    def put(self, key: Any, timestamp: int, seq: int, value: Any, raw: bytes | None = None) -> bool:
        """Buffer a record; False if it is older than retention (not stored). ``raw``: the
        bytes the record's value was decoded from with this store's value codec, if known: the
        changelog and the store get them as they are instead of the value encoded again (the
        transaction holds the stored bytes either way: :class:`BufferValueCodec`)."""
        observed = self._observed
        if observed is None:
            observed = self.observed
        if timestamp > observed:
            self._observed = observed = timestamp  # written at prepare (_write_time)
        if timestamp <= observed - self.retention:
            return False
        entry = self._entry(key, timestamp, seq)
        # BufferValueCodec.stored, inlined for the usual case: the record's bytes are known.
        self.tx.set(entry, _VALUE_TAG + raw if raw is not None else self._stored(value, None))
        self._pending.touch(entry)
        segment = timestamp // self.codec.segment_ms
        # Committed with the transaction, it will be in the store: the segment may hold it.
        self._occupied[segment] = True
        scans = self._scans
        if scans is not None and (scans.young_sizes or scans.older):  # scans.forget's test
            scans.forget((segment, key))
        return True

    def put_all(self, records: Iterable[tuple[Any, int, int, Any, bytes | None]]) -> int:
        """:meth:`put` of each of ``records``, ``(key, timestamp, seq, value, raw)``, in order;
        returns how many were too late (not stored). An inner join buffers every record of a
        run (``StreamStreamProcessor._inner_run``), and its fetches read the *other* side's
        store, which no put of this one changes: the run's puts can wait for its end and go
        here together, with one write into the transaction and its hints instead of four
        calls a record. What is stored, and the observed time, are what :meth:`put` one by
        one would leave."""
        observed = self._observed
        if observed is None:
            observed = self.observed
        retention = self.retention
        codec = self.codec
        segment_ms = codec.segment_ms
        # JoinWindowKeyCodec.entry and BufferValueCodec.stored, inlined (a call fewer a
        # record); test_put_all_stores_what_puts_one_by_one_store holds the bytes equal.
        plain, plain_dumps, key_dumps = codec._plain, codec._plain_dumps, codec.key_codec.dumps
        head, tail = _HEAD.pack, _TAIL.pack
        stored = self._stored
        occupied = self._occupied
        scans = self._scans
        forget = scans.forget if scans is not None and (scans.young_sizes or scans.older) else None
        written: dict[bytes, bytes] = {}
        late = 0
        for key, timestamp, seq, value, raw in records:
            if timestamp > observed:
                observed = timestamp
            if timestamp <= observed - retention:
                late += 1
                continue
            raw_key = plain_dumps(key) if type(key) is plain else key_dumps(key)
            segment = timestamp // segment_ms
            entry = (
                head(segment + TIME_OFFSET, len(raw_key))
                + raw_key
                + tail(timestamp + TIME_OFFSET, seq)
            )
            written[entry] = _VALUE_TAG + raw if raw is not None else stored(value, None)
            occupied[segment] = True  # as in put: committed, it will be in the store
            if forget is not None:
                forget((segment, key))
        self._observed = observed  # written at prepare (_write_time)
        if written:
            self.tx.set_all(written)
            self._pending.touch_all(written)
        return late

    def observe(self, timestamp: int) -> None:
        """A record of this side at ``timestamp`` that is not stored (a left/outer record
        whose result was final when it came): the observed time moves as a put would move it."""
        if timestamp > self.observed:
            self._observed = timestamp
            self._write_time()  # now: nothing else of this record makes the store dirty

    def delete(self, key: Any, timestamp: int, seq: int) -> None:
        entry = self._entry(key, timestamp, seq)
        if self.tx.get(entry, _GONE) is not _GONE:
            self.tx.delete(entry)
            self._pending.touch(entry)
            self._forget(key, timestamp)

    def _forget(self, key: Any, timestamp: int) -> None:
        """Drop what the fetch cache holds of ``key``'s segment at ``timestamp`` (written)."""
        if self._scans is not None:
            self._scans.forget((timestamp // self.codec.segment_ms, key))

    def fetch(self, key: Any, time_from: int, time_to: int) -> list[Buffered]:
        """The retained records of ``key`` with ``time_from <= timestamp <= time_to``, in
        (timestamp, seq) order."""
        observed = self._observed
        if observed is None:
            observed = self.observed
        if observed == NO_TIME:
            return []
        # Nothing is stored past the observed time, nothing retained before retention: the
        # range shrinks to what may hold entries, and so do the segments it seeks in.
        retained_from = observed - self.retention + 1
        if time_from < retained_from:
            time_from = retained_from
        if time_to > observed:
            time_to = observed
        if time_to < time_from:
            return []
        segment_ms = self.codec.segment_ms
        first, last = time_from // segment_ms, time_to // segment_ms
        # Most fetches fall in one segment (segments are half the retention or more).
        segments = (first,) if first == last else range(first, last + 1)
        user_key = None
        hints = self._pending
        # Whether any entry is hinted (else ``of`` finds nothing for any key): read here, a
        # call fewer a fetch, as ``of`` reads it.
        if hints._log or hints._keys:
            user_key = key_prefix(self.codec.key_codec, key)
            pending = hints.of(user_key)
            if pending:
                return self._fetch_merged(user_key, time_from, time_to, segments, pending)
        # The common case: committed entries only. Segments ascend with time, and within one
        # the keys sort by (timestamp, seq): the scans come in the order returned. The key is
        # encoded only for a read of the store (a segment the fetch cache holds needs none).
        found: list[Buffered] = []
        scans = self._scans
        occupied = self._occupied
        for segment in segments:
            held = occupied.get(segment)
            if not (self._may_hold(segment) if held is None else held):
                continue
            if scans is not None:
                cached = scans.young.get((segment, key), MISS)  # scans.lookup, inlined
                if cached is not MISS:
                    scans.hits += 1
                else:
                    cached = scans.lookup_older((segment, key))
                if cached is MISS:
                    if user_key is None:
                        user_key = key_prefix(self.codec.key_codec, key)
                    cached = self._load(segment, key, user_key)
                if cached is not _MANY:
                    for record in cached:
                        if time_from <= record[0] <= time_to:  # Buffered.timestamp
                            found.append(record)
                    continue
            if user_key is None:
                user_key = key_prefix(self.codec.key_codec, key)
            loads = self.tx.value_codec.loads
            found += [
                Buffered(t, seq, loads(raw))
                for t, seq, raw in self._scan(segment, user_key, time_from, time_to)
            ]
        return found

    def _fetch_merged(
        self,
        user_key: bytes,
        time_from: int,
        time_to: int,
        segments: Iterable[int],
        pending: Iterable[bytes],
    ) -> list[Buffered]:
        """:meth:`fetch` for a key (``user_key``: its bytes, ``key_prefix``'s) with writes
        pending in the transaction: the committed entries merged with them (a pending delete
        removes one)."""
        tx = self.tx
        merged: dict[tuple[int, int], Any] = {}
        for segment in segments:
            if not self._may_hold(segment):
                continue
            for t, seq, raw in self._scan(segment, user_key, time_from, time_to):
                merged[(t, seq)] = raw
        for entry in pending:
            timestamp, seq = entry_time(entry)
            if time_from <= timestamp <= time_to:
                # Written since the last commit, or committed since it was hinted (then the
                # scan has it as committed, and nothing is pending for it).
                value = tx.pending(entry, _GONE)
                if value is DELETED:
                    merged.pop((timestamp, seq), None)
                elif value is not _GONE:
                    merged[(timestamp, seq)] = value  # stored bytes, as committed ones
        loads = tx.value_codec.loads
        return [Buffered(t, s, loads(v)) for (t, s), v in sorted(merged.items())]

    def _scan(
        self, segment: int, user_key: bytes, time_from: int, time_to: int
    ) -> list[tuple[int, int, bytes]]:
        """The committed entries of ``user_key`` in ``segment`` within the times, from the
        store: ``(timestamp, seq, raw value)`` in order. One short scan per segment and
        record, through the reader the store keeps between scans (released at the end of the
        batch, by expire())."""
        pack = _TIME.pack
        prefix = pack(segment + TIME_OFFSET) + user_key
        rows = self.tx.partition.range_items(
            prefix + pack(time_from + TIME_OFFSET), prefix + pack(time_to + 1 + TIME_OFFSET)
        )
        at = 8 + len(user_key)
        unpack = _TAIL.unpack_from  # (timestamp, seq) after the user key
        out = []
        for raw_key, raw_value in rows:
            packed_time, seq = unpack(raw_key, at)
            out.append((packed_time - TIME_OFFSET, seq, raw_value))
        return out

    def _load(self, segment: int, key: Any, user_key: bytes) -> Any:
        """Read ``key``'s committed entries in ``segment`` into the fetch cache (module doc)
        and return what it now holds for them."""
        prefix = _TIME.pack(segment + TIME_OFFSET) + user_key
        high = prefix_upper_bound(prefix)
        assert high is not None  # the prefix ends with the key's bytes after its length
        rows = self.tx.partition.range_items(prefix, high, SCAN_CACHE_ENTRIES + 1)
        held: Any
        if len(rows) > SCAN_CACHE_ENTRIES:
            held = _MANY
        else:
            at = 8 + len(user_key)
            unpack = _TAIL.unpack_from
            loads = self.tx.value_codec.loads
            records = []
            for raw_key, raw_value in rows:
                packed_time, seq = unpack(raw_key, at)
                records.append(Buffered(packed_time - TIME_OFFSET, seq, loads(raw_value)))
            held = tuple(records)
        cached = (segment, key)
        assert self._scans is not None
        self._scans.fill(cached, held, entry_size(cached, held))
        return held

    def _may_hold(self, segment: int) -> bool:
        """Whether the store partition may hold committed entries in ``segment``: looked up
        once per segment (one seek), then kept up to date by :meth:`put` and :meth:`expire`."""
        occupied = self._occupied.get(segment)
        if occupied is None:
            scan = self.tx.partition.iter_range(pack_time(segment), pack_time(segment + 1))
            try:
                occupied = next(scan, None) is not None
            finally:
                close = getattr(scan, "close", None)  # RocksDB's: let its iterator go now
                if close is not None:
                    close()
            self._occupied[segment] = occupied
        return occupied

    def expire(self) -> int:
        """Delete every segment wholly past retention; returns how many entries went. Called
        at the end of every batch: it also lets go of the reader the store kept for this
        batch's fetches (:meth:`~streams_app.state.base.StorePartition.range_items`)."""
        self.tx.partition.release_cursor()
        retained_from = self.retained_from()
        if retained_from == NO_TIME:
            return 0
        # The oldest segment that may hold a retained entry: everything below it goes.
        live = self.codec.segment(retained_from)
        if self._expired_below is not None and live <= self._expired_below:
            return 0
        removed = 0
        # b"\x00" is just above the stream time entry's empty key: every entry is at or above it.
        # The entries are store keys: those in the store are the transaction's keys as they are.
        for entry, _ in list(self.tx.partition.iter_range(b"\x00", pack_time(live))):
            if self.tx.pending(entry, _GONE) is not DELETED:  # not deleted already
                self._expire_entry(entry)
                removed += 1
        for entry in self._pending.all():
            if entry_segment(entry) < live and self.tx.get(entry, _GONE) is not _GONE:
                self._expire_entry(entry)
                removed += 1
        self._expired_below = live
        for segment in [s for s in self._occupied if s < live]:
            del self._occupied[segment]  # never fetched again: below retention
        return removed

    def _expire_entry(self, entry: bytes) -> None:
        self.tx.delete(entry)
        self._pending.touch(entry)
        key, timestamp, _ = self.codec.loads(entry)
        self._forget(key, timestamp)

    def entries(self) -> Iterator[tuple[Any, Buffered]]:
        """Every entry (retained or not yet expired), committed or pending: ``(key, record)``."""
        pending = {entry: None for entry in self._pending.all()}
        loads, key_of = self.tx.value_codec.loads, self.codec.loads
        for raw_key, raw_value in self.tx.partition.items():
            if raw_key == META_KEY or raw_key in pending:
                continue
            key, timestamp, seq = key_of(raw_key)
            yield key, Buffered(timestamp, seq, loads(raw_value))
        for entry in pending:
            key, timestamp, seq = key_of(entry)
            value = self.tx.pending(entry, _GONE)
            if value is _GONE:  # hinted, and committed since: read as committed entries are
                value = self.tx.get(entry, _GONE)
                if value is not _GONE:
                    yield key, Buffered(timestamp, seq, value)
            elif value is not DELETED:
                yield key, Buffered(timestamp, seq, loads(value))
