"""Local state: committed table partitions (RocksDB or memory) and per-task pending writes."""

from streams_app.state.base import DELETED, PartitionTransaction, Store, StorePartition
from streams_app.state.budget import StateMemory, UncommittedWrites
from streams_app.state.cache import ReadCache
from streams_app.state.directory import StateDirectory
from streams_app.state.errors import RestoreStalledError, StateLockedError
from streams_app.state.factory import STORE_SCHEMES, open_store, rocksdb_options, store_scheme
from streams_app.state.memory import MemoryStore, MemoryStorePartition
from streams_app.state.restore import RestoreResult, restore_partitions
from streams_app.state.rocksdb import RocksDBOptions, RocksDBStore, RocksDBStorePartition

__all__ = [
    "DELETED",
    "STORE_SCHEMES",
    "MemoryStore",
    "MemoryStorePartition",
    "PartitionTransaction",
    "ReadCache",
    "RestoreResult",
    "RestoreStalledError",
    "RocksDBOptions",
    "RocksDBStore",
    "RocksDBStorePartition",
    "StateDirectory",
    "StateLockedError",
    "StateMemory",
    "Store",
    "StorePartition",
    "UncommittedWrites",
    "open_store",
    "restore_partitions",
    "rocksdb_options",
    "store_scheme",
]
