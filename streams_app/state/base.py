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
from collections.abc import Iterator, Mapping
from typing import Any

from streams_app.codecs import Codec


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


#: Marks a key deleted in a pending transaction (distinct from "not written").
DELETED: Any = object()
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
    """

    __slots__ = ("_cache", "_dirty", "_prepared", "key_codec", "partition", "value_codec")

    def __init__(self, partition: StorePartition, key_codec: Codec, value_codec: Codec) -> None:
        self.partition = partition
        self.key_codec = key_codec
        self.value_codec = value_codec
        # key object -> value object or DELETED; holds dirty entries and decoded reads.
        self._cache: dict[Any, Any] = {}
        self._dirty: set[Any] = set()
        self._prepared: dict[bytes, bytes | None] | None = None

    def get(self, key: Any, default: Any = _MISSING) -> Any:
        value = self._cache.get(key, _MISSING)
        if value is _MISSING:
            raw = self.partition.get(self.key_codec.dumps(key))
            value = DELETED if raw is None else self.value_codec.loads(raw)
            self._cache[key] = value
        if value is DELETED:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return value

    def set(self, key: Any, value: Any) -> None:
        self._cache[key] = value
        self._dirty.add(key)
        self._prepared = None

    def delete(self, key: Any) -> None:
        self._cache[key] = DELETED
        self._dirty.add(key)
        self._prepared = None

    def contains(self, key: Any) -> bool:
        return self.get(key, DELETED) is not DELETED

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def dirty_items(self) -> Iterator[tuple[Any, Any]]:
        """Pending writes as (key, value or DELETED)."""
        for key in self._dirty:
            yield key, self._cache[key]

    def prepare(self) -> dict[bytes, bytes | None]:
        """Encode the pending writes once: the changelog records and the store batch."""
        if self._prepared is None:
            encode_key, encode_value = self.key_codec.dumps, self.value_codec.dumps
            self._prepared = {
                encode_key(k): (None if (v := self._cache[k]) is DELETED else encode_value(v))
                for k in self._dirty
            }
        return self._prepared

    def commit(self, changelog_offset: int) -> None:
        """The Kafka transaction committed: make the writes durable with their offset."""
        self.partition.write(self.prepare(), changelog_offset)
        self._dirty.clear()
        self._prepared = None
        # Keep decoded values as a read cache: they now equal the committed state.
        if len(self._cache) > 100_000:
            self._cache.clear()

    def discard(self) -> None:
        """The transaction aborted: forget every pending write and cached read."""
        self._cache.clear()
        self._dirty.clear()
        self._prepared = None
