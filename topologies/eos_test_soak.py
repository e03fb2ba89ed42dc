"""The EOS test topology as ``make soak`` runs it: ``topologies.eos_test`` with a small RocksDB
memory budget.

A worker's RocksDB memory is bounded by its options (by default 64 MiB of block cache and
256 MiB of memtables, shared by all its table partitions), but at soak rates the default
memtables take hours to fill and flush: the resident memory of an hour-long run keeps climbing
towards that bound, growth a ±10 % flatness check cannot tell from a leak. With a budget of
``SOAK_ROCKSDB_MB`` (default 8) for each, the memtables fill and flush within the warm-up, and
what the check sees after it is the worker's own steady state.
"""

from __future__ import annotations

import os

from streams_app.state.rocksdb import DEFAULT_OPTIONS

_MB = 1024 * 1024
_budget = int(os.environ.get("SOAK_ROCKSDB_MB", "8")) * _MB
DEFAULT_OPTIONS.block_cache_bytes = _budget
DEFAULT_OPTIONS.total_write_buffer_bytes = _budget
DEFAULT_OPTIONS.write_buffer_bytes = max(_MB, _budget // 8)

from topologies.eos_test import app  # noqa: E402  (after the budget: the stores open later)

__all__ = ["app"]
