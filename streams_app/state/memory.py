"""In-memory store partitions (``store="memory://"``): the same semantics as RocksDB, minus
persistence.

Nothing survives the process, so every start restores each partition from the beginning of its
changelog. Within one process a partition's data and offset are kept when it is released
(``close_partition``) and found again if it comes back, exactly as a RocksDB partition's would be;
:meth:`MemoryStore.close` drops everything.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping

from streams_app.state.base import Store, StorePartition


class MemoryStorePartition(StorePartition):
    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._offset: int | None = None
        self._closed = False
        #: The keys in order, made on the first prefix scan after a write (scans of windowed
        #: tables happen per record, writes once per commit).
        self._sorted: list[bytes] | None = None

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("the store partition is closed")

    def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._data.get(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """In key order, like RocksDB, from a snapshot taken when iteration starts."""
        self._check()
        yield from sorted(self._data.items())

    def iter_range(self, low: bytes, high: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        self._check()
        keys = self._sorted
        if keys is None:
            keys = self._sorted = sorted(self._data)
        data = self._data
        for i in range(bisect_left(keys, low), len(keys)):
            key = keys[i]
            if high is not None and key >= high:
                return
            value = data.get(key)
            if value is not None:
                yield key, value

    @property
    def changelog_offset(self) -> int | None:
        return self._offset

    def write(self, batch: Mapping[bytes, bytes | None], changelog_offset: int) -> None:
        self._check()
        data = self._data
        if batch:
            self._sorted = None
        for key, value in batch.items():
            if value is None:
                data.pop(key, None)
            else:
                data[bytes(key)] = bytes(value)
        self._offset = changelog_offset

    def wipe(self) -> None:
        self._check()
        self._data.clear()
        self._sorted = None
        self._offset = None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def __len__(self) -> int:
        return len(self._data)


class MemoryStore(Store):
    def __init__(self, name: str) -> None:
        self.name = name
        self._partitions: dict[int, MemoryStorePartition] = {}
        # Released partitions, kept for a later return within this process.
        self._released: dict[int, MemoryStorePartition] = {}

    @property
    def persistent(self) -> bool:
        return False

    def partition(self, partition: int) -> MemoryStorePartition:
        part = self._partitions.get(partition)
        if part is None:
            part = self._released.pop(partition, None)
            if part is None:
                part = MemoryStorePartition()
            part._closed = False
            self._partitions[partition] = part
        return part

    def close_partition(self, partition: int) -> None:
        part = self._partitions.pop(partition, None)
        if part is not None:
            part.close()
            self._released[partition] = part

    def local_partitions(self) -> set[int]:
        return set(self._partitions) | set(self._released)

    def close(self) -> None:
        for part in self._partitions.values():
            part.close()
        self._partitions.clear()
        self._released.clear()

    def __repr__(self) -> str:
        return f"MemoryStore({self.name!r})"
