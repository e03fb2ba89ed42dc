"""One worker's memory budget for what its state keeps in Python: the read cache and the
uncommitted writes (docs/memory.md has the whole formula, RocksDB included).

Kafka Streams' anchors: ``statestore.cache.max.bytes`` (one cache budget for all threads and
stores) and KIP-892's ``statestore.uncommitted.max.bytes`` (commit early rather than let a
transaction's pending writes grow without bound).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streams_app.settings import Settings
from streams_app.state.base import PartitionTransaction
from streams_app.state.cache import ReadCache

MiB = 1024 * 1024
DEFAULT_CACHE_MAX_BYTES = 64 * MiB
DEFAULT_UNCOMMITTED_MAX_BYTES = 64 * MiB

#: A worker's memory before any state: CPython, streams_app and its libraries (aiokafka,
#: rocksdict, faust's models), the event loop, the Kafka clients and RocksDB's background
#: threads. Measured (docs/memory.md): RSS of the state-scale worker with its 32 table
#: partitions opened and nothing cached, minus the per-partition figure below.
BASE_BYTES = 120 * MiB
#: What one open table partition (one RocksDB instance) costs beyond the shared budgets: its
#: column families, table cache and WAL buffers. Measured at 0.35-0.6 MiB; rounded up.
PER_TABLE_PARTITION_BYTES = 1 * MiB
#: The consumer's fetched-but-not-yet-returned records: at most one partition fetch
#: (aiokafka's max_partition_fetch_bytes, 1 MiB) per assigned input partition.
PER_INPUT_PARTITION_BYTES = 1 * MiB


class UncommittedWrites:
    """The budget for pending table writes across every open transaction of a worker.

    The worker asks :meth:`exceeded` at every quiescent point (after each fetched batch is
    fully processed) and commits early when it says so, instead of letting a long
    ``commit_interval`` and a burst of distinct keys grow the transaction without bound. So the
    pending writes can overshoot the budget by at most one batch's writes. ``max_bytes`` None
    means no bound; 0 commits after every batch that wrote anything.
    """

    __slots__ = ("_mean", "_sampled_at", "bytes", "checks", "max_bytes")

    def __init__(self, max_bytes: int | None) -> None:
        if max_bytes is not None and max_bytes < 0:
            raise ValueError("max_bytes must be >= 0 or None")
        self.max_bytes = max_bytes
        #: The estimate the last check found (0 after a commit): a gauge for metrics.
        self.bytes = 0
        self.checks = 0
        #: Mean entry size found by the last sizing, and the pending count it was found at.
        self._mean = 0.0
        self._sampled_at = 0

    def exceeded(self, transactions: Iterable[PartitionTransaction]) -> bool:
        """Whether the pending writes of ``transactions`` cost more than the budget.

        Called once per fetched batch, so it must be cheap: it counts the pending writes
        (one ``len`` per transaction) and multiplies by the mean entry size found last time;
        only when that comes within half of the budget, or the count has doubled since, does
        it ask every transaction to size its new writes again
        (:meth:`~streams_app.state.base.PartitionTransaction.pending_bytes`).
        """
        limit = self.max_bytes
        if limit is None:
            return False
        self.checks += 1
        dirty = [tx for tx in transactions if tx.dirty]
        count = sum(tx.pending_count for tx in dirty)
        if not count:
            self.bytes = 0
            return False
        if self._mean and count < 2 * self._sampled_at and 2 * count * self._mean < limit:
            self.bytes = int(count * self._mean)
            return False
        total = sum(tx.pending_bytes() for tx in dirty)
        self._mean = total / count
        self._sampled_at = count
        self.bytes = total
        return total > limit

    def reset(self) -> None:
        """The transaction ended (commit or abort): nothing is pending."""
        self.bytes = 0
        self._sampled_at = 0


class StateMemory:
    """The read cache and the uncommitted-writes budget of one worker. Its counters are what a
    metrics endpoint reports (:meth:`stats`)."""

    def __init__(
        self,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        uncommitted_max_bytes: int | None = DEFAULT_UNCOMMITTED_MAX_BYTES,
    ) -> None:
        self.cache = ReadCache(cache_max_bytes)
        self.uncommitted = UncommittedWrites(uncommitted_max_bytes)

    def stats(self) -> dict[str, Any]:
        cache = self.cache
        return {
            "cache_max_bytes": cache.max_bytes,
            "cache_bytes": cache.bytes,
            "cache_entries": cache.entries,
            "cache_hits": cache.hits,
            "cache_misses": cache.misses,
            "cache_evictions": cache.evictions,
            "uncommitted_max_bytes": self.uncommitted.max_bytes,
            "uncommitted_bytes": self.uncommitted.bytes,
        }


def worker_memory_estimate(
    settings: Settings, *, table_partitions: int, input_partitions: int | None = None
) -> dict[str, int]:
    """docs/memory.md's formula: what a worker's RSS levels off at, part by part, for
    ``table_partitions`` open table partitions (tables x partitions owned) and
    ``input_partitions`` assigned input partitions (default: as many as table partitions).

    The budgets are upper bounds (the read cache's accounting is conservative, memtables flush
    before their budget is full), so a worker normally sits below the total.
    """
    inputs = table_partitions if input_partitions is None else input_partitions
    parts = {
        "base": BASE_BYTES,
        "read_cache": settings.state_cache_max_bytes,
        "uncommitted": settings.state_uncommitted_max_bytes or 0,
        "block_cache": settings.rocksdb_block_cache_bytes,
        "memtables": settings.rocksdb_memtable_bytes,
        "write_behind": settings.rocksdb_write_behind_bytes,
        "table_partitions": table_partitions * PER_TABLE_PARTITION_BYTES,
        "fetch_buffers": inputs * PER_INPUT_PARTITION_BYTES,
    }
    parts["total"] = sum(parts.values())
    return parts
