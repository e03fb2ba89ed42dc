"""Versioned tables: every value a key had within a history retention, for as-of lookups.

Kafka Streams' versioned key-value store (KIP-889) answers ``get(key, as_of)``: the value the
key had at that time. A stream-table join against a versioned table (KIP-914) looks the table
up as of each stream record's timestamp, so an out-of-order stream record meets the table as it
was then, not as it is now. This module is that store, on the same footing as every table here:
a view over a task's :class:`~streams_app.state.base.PartitionTransaction`, whose writes reach
the store partition only after the Kafka transaction commits.

**Layout.** One entry per version, under ``u32 length | key | u64 valid_from``
(:class:`VersionKeyCodec`): a key's versions share a prefix and sort by time, so one prefix seek
finds them. The value is tagged (:class:`~streams_app.state.composite.TaggedValueCodec`): a
tombstone is a version too (``put(key, None, t)``: the key has no value from ``t`` on), stored as
an entry, not as a deletion. The store's observed stream time (the largest timestamp put) is the
entry under the empty key (:mod:`streams_app.state.composite`). The changelog carries the same
keys and values, and is compacted: a version that leaves the history is deleted, so its
changelog key gets a tombstone in the transaction that deleted it.

**Semantics** (those of ``VersionedKeyValueStore`` and ``RocksDBVersionedStore``):

- the *history horizon* is ``observed - history_retention``;
- ``put`` of a version older than the horizon is refused (returns False), as Kafka Streams
  refuses it (its grace period is the history retention); a version at a time that already has
  one replaces it;
- ``get_as_of(key, t)`` is the version with the largest ``valid_from <= t``, or None if there is
  none or it is a tombstone; for ``t`` older than the horizon, only the latest version can
  answer (if it is ``<= t``): the history there is gone, even if entries remain on disk;
- ``get(key)`` is the latest version (None if it is a tombstone).

**Expiry.** A version is needed while some ``t >= horizon`` can see it: the last version at or
before the horizon stays (it is the value at the horizon), everything older goes, and a
tombstone at or before the horizon goes too (nothing older remains to hide). :meth:`put` cleans
the key it writes; keys that are not written again keep their old versions until
:meth:`purge` sweeps the partition (the runtime calls it every ``history_retention`` of stream
time). Reads never see what is past the horizon either way, so when the sweep runs changes no
answer. Kafka Streams drops whole time segments instead, and keeps tombstones out of its
latest-value store; the answers are the same.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from streams_app.codecs import Codec, DecodeError
from streams_app.state.base import PartitionTransaction
from streams_app.state.composite import (
    META_KEY,
    STREAM_TIME,
    PendingKeys,
    TaggedValueCodec,
    key_prefix,
    pack_time,
    read_key,
    read_stream_time,
    unpack_time,
    write_stream_time,
)

_GONE: Any = object()
_TIME_BYTES = 8


class VersionedRecord(NamedTuple):
    """One version of a key: its value, the time it became valid, and the time the next version
    replaced it (None: it is the latest)."""

    value: Any
    timestamp: int
    valid_to: int | None


class VersionKeyCodec:
    """``(key, valid_from)`` <-> ``u32 length | key | u64 valid_from``; see the module doc."""

    name = "version"

    def __init__(self, key_codec: Codec) -> None:
        self.key_codec = key_codec

    def dumps(self, obj: Any) -> bytes:
        if obj is STREAM_TIME:
            return META_KEY
        key, valid_from = obj
        return key_prefix(self.key_codec, key) + pack_time(valid_from)

    def loads(self, data: bytes) -> Any:
        if data == META_KEY:
            return STREAM_TIME
        key, end = read_key(self.key_codec, data, 0)
        if len(data) != end + _TIME_BYTES:
            raise DecodeError("not a version key: length does not match")
        return (key, unpack_time(data, end))

    def prefix(self, key: Any) -> bytes:
        return key_prefix(self.key_codec, key)


def versioned_codecs(key_codec: Codec, value_codec: Codec) -> tuple[VersionKeyCodec, Codec]:
    """The store and changelog codecs of a versioned table whose users' keys and values use
    ``key_codec`` and ``value_codec``."""
    return VersionKeyCodec(key_codec), TaggedValueCodec(value_codec)


def key_versions(entries: Iterable[tuple[Any, Any]]) -> dict[Any, list[VersionedRecord]]:
    """Decoded store (or changelog) entries ``(key, valid_from) -> value`` grouped by key: each
    key's versions oldest first, ``valid_to`` filled in, a tombstone version's value None; the
    stream time entry is not a version and is left out. What the store holds, horizon or not
    (an inspection aid, as :meth:`VersionedTransaction.versions`): ``tables NAME KEY`` reads a
    changelog partition through this, and answers as the owner's ``/tables`` does."""
    timelines: dict[Any, dict[int, Any]] = {}
    for entry, value in entries:
        if entry is STREAM_TIME:
            continue
        key, valid_from = entry
        timelines.setdefault(key, {})[valid_from] = value
    out: dict[Any, list[VersionedRecord]] = {}
    for key, timeline in timelines.items():
        times = sorted(timeline)
        out[key] = [
            VersionedRecord(timeline[t], t, times[i + 1] if i + 1 < len(times) else None)
            for i, t in enumerate(times)
        ]
    return out


def latest_value(versions: Iterable[VersionedRecord]) -> VersionedRecord | None:
    """The latest of a key's versions, None if it has none or the latest is a tombstone (what
    :meth:`VersionedTransaction.get` answers)."""
    last = max(versions, key=lambda v: v.timestamp, default=None)
    return None if last is None or last.value is None else last


class VersionedTransaction:
    """A task's versioned view of one table partition: committed versions plus pending ones.

    ``tx`` must encode keys with a :class:`VersionKeyCodec` and values with a
    :class:`~streams_app.state.composite.TaggedValueCodec` (:func:`versioned_codecs`).
    """

    __slots__ = ("_pending", "codec", "history_retention", "tx")

    def __init__(
        self, tx: PartitionTransaction, codec: VersionKeyCodec, history_retention: int
    ) -> None:
        if history_retention < 0:
            raise ValueError("history_retention must not be negative")
        self.tx = tx
        self.codec = codec
        self.history_retention = history_retention
        self._pending = PendingKeys(tx)

    # -- time ---------------------------------------------------------------------------------

    @property
    def observed(self) -> int:
        """The largest timestamp put so far (committed with the versions it governs)."""
        return read_stream_time(self.tx)

    @property
    def horizon(self) -> int:
        return self.observed - self.history_retention

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: Any, value: Any, timestamp: int) -> bool:
        """Add the version ``value`` (None: a tombstone) valid from ``timestamp``; False if it
        is older than the history horizon (then nothing changed)."""
        observed = self.observed
        if timestamp < observed - self.history_retention:
            return False
        if timestamp > observed:
            write_stream_time(self.tx, timestamp)
            observed = timestamp
        entry = (key, timestamp)
        self.tx.set(entry, value)
        self._pending.touch(entry)
        self._expire_key(key, observed - self.history_retention)
        return True

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        """A tombstone at ``timestamp``; returns the version it ends (None if there was none,
        or the delete was refused as older than the horizon)."""
        if timestamp < self.horizon:
            return None
        before = self.get_as_of(key, timestamp)
        self.put(key, None, timestamp)
        return before

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: Any) -> VersionedRecord | None:
        """The latest version (None if there is none or it is a tombstone)."""
        timeline = self._timeline(key)
        if not timeline:
            return None
        valid_from, entry = timeline[-1]
        value = self._value(entry)
        return None if value is None else VersionedRecord(value, valid_from, None)

    def get_as_of(self, key: Any, as_of: int) -> VersionedRecord | None:
        """The version valid at ``as_of`` (inclusive), as the module doc defines it."""
        timeline = self._timeline(key)
        if not timeline:
            return None
        if as_of < self.horizon:
            # The history there is gone; only the latest version, which never expires, may
            # still answer (Kafka Streams: "return null for predictability").
            valid_from, entry = timeline[-1]
            if valid_from > as_of:
                return None
            value = self._value(entry)
            return None if value is None else VersionedRecord(value, valid_from, None)
        times = [t for t, _ in timeline]
        i = bisect_right(times, as_of) - 1
        if i < 0:
            return None
        value = self._value(timeline[i][1])
        if value is None:
            return None
        valid_to = times[i + 1] if i + 1 < len(times) else None
        return VersionedRecord(value, times[i], valid_to)

    def versions(self, key: Any) -> list[VersionedRecord]:
        """Every stored version of ``key``, oldest first, tombstones included (value None),
        whether or not it is past the horizon (an inspection aid, not a query)."""
        timeline = self._timeline(key)
        out = []
        for i, (valid_from, entry) in enumerate(timeline):
            valid_to = timeline[i + 1][0] if i + 1 < len(timeline) else None
            out.append(VersionedRecord(self._value(entry), valid_from, valid_to))
        return out

    def keys(self) -> Iterator[Any]:
        """Keys with a latest version that is not a tombstone."""
        for key in self._all_keys():
            if self.get(key) is not None:
                yield key

    # -- expiry -------------------------------------------------------------------------------

    def purge(self) -> int:
        """Delete every version no query can see any more (module doc: expiry); returns how
        many were deleted (their changelog tombstones go out at commit)."""
        horizon = self.horizon
        return sum(self._expire_key(key, horizon) for key in list(self._all_keys()))

    def _expire_key(self, key: Any, horizon: int) -> int:
        timeline = self._timeline(key)
        times = [t for t, _ in timeline]
        keep_from = bisect_right(times, horizon) - 1  # the version valid at the horizon
        if keep_from < 0:
            return 0
        if self._value(timeline[keep_from][1]) is None:
            keep_from += 1  # a tombstone at the horizon hides nothing older: it goes too
        for valid_from in times[:keep_from]:
            entry = (key, valid_from)
            self.tx.delete(entry)
            self._pending.touch(entry)
        return keep_from

    # -- merging the store with the pending writes ---------------------------------------------

    def _timeline(self, key: Any) -> list[tuple[int, Any]]:
        """``(valid_from, entry)`` of ``key``, oldest first; an entry is the committed value's
        bytes, or the pending value wrapped in a 1-tuple (see :meth:`_value`)."""
        prefix = self.codec.prefix(key)
        at = len(prefix)
        found: dict[int, Any] = {
            unpack_time(raw_key, at): raw_value
            for raw_key, raw_value in self.tx.partition.iter_prefix(prefix)
        }
        for entry in self._pending.of(key):
            value = self.tx.get(entry, _GONE)
            if value is _GONE:
                found.pop(entry[1], None)
            else:
                found[entry[1]] = (value,)
        return sorted(found.items())

    def _value(self, entry: Any) -> Any:
        if type(entry) is tuple:
            return entry[0]
        return self.tx.value_codec.loads(entry)

    def _all_keys(self) -> Iterator[Any]:
        seen: dict[Any, None] = {}
        for raw_key, _ in self.tx.partition.items():
            if raw_key != META_KEY:
                seen.setdefault(self.codec.loads(raw_key)[0], None)
        for entry in self._pending.all():
            seen.setdefault(entry[0], None)
        yield from seen
