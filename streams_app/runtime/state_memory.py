"""What a worker's state may cost, said once at start (docs/memory.md).

The budgets themselves live in :mod:`streams_app.state.budget` and the RocksDB options; this
only reports them, and warns when RocksDB could need more file descriptors than the process may
open (``rocksdb_max_open_files`` x the table partitions the worker could own).
"""

from __future__ import annotations

import logging
import resource

from streams_app.settings import Settings
from streams_app.state.rocksdb import RocksDBOptions, descriptors_needed
from streams_app.topology.plan import TopologyPlan

log = logging.getLogger(__name__)


def log_state_memory(conf: Settings, plan: TopologyPlan, options: RocksDBOptions) -> None:
    """Say what state may cost (docs/memory.md), and warn when every table partition on this
    worker could need more file descriptors than the process may open."""
    mib = 1024 * 1024
    uncommitted = conf.state_uncommitted_max_bytes
    log.info(
        "state memory: read cache %d MiB, uncommitted writes %s, RocksDB block cache %d MiB, "
        "memtables %d MiB, write-behind %d MiB (%gs), max_open_files %d per table partition",
        conf.state_cache_max_bytes // mib,
        "unbounded" if uncommitted is None else f"{uncommitted // mib} MiB",
        conf.rocksdb_block_cache_bytes // mib,
        conf.rocksdb_memtable_bytes // mib,
        conf.rocksdb_write_behind_bytes // mib,
        conf.rocksdb_write_behind_interval,
        conf.rocksdb_max_open_files,
    )
    if not conf.store.strip().lower().startswith("rocksdb"):
        return
    table_partitions = sum(
        plan.partition_counts[plan.changelog_topics[name]]
        for names in plan.tables_by_group.values()
        for name in names
    )
    needed = descriptors_needed(table_partitions, options)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed is not None and soft != resource.RLIM_INFINITY and needed > soft:
        log.warning(
            "owning all %d table partitions, RocksDB could hold up to %d files open, above this "
            "process's limit of %d: raise it (ulimit -n) or lower rocksdb_max_open_files",
            table_partitions,
            needed,
            soft,
        )
