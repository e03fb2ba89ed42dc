"""Local state: committed table partitions (RocksDB or memory) and per-task pending writes."""

from streams_app.state.base import DELETED, PartitionTransaction, Store, StorePartition

__all__ = ["DELETED", "PartitionTransaction", "Store", "StorePartition"]
