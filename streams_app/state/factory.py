"""Store URLs (the ``store`` setting) to :class:`~streams_app.state.base.Store` instances."""

from __future__ import annotations

from streams_app.errors import ConfigError
from streams_app.settings import Settings
from streams_app.state.base import Store
from streams_app.state.directory import StateDirectory
from streams_app.state.memory import MemoryStore
from streams_app.state.rocksdb import DEFAULT_OPTIONS, RocksDBOptions, RocksDBStore

STORE_SCHEMES = ("rocksdb", "memory")


def store_scheme(url: str) -> str:
    """``"rocksdb"`` or ``"memory"`` for a valid store URL; ConfigError naming ``store``
    otherwise."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.strip().lower()
    if not sep or scheme not in STORE_SCHEMES or rest.strip("/"):
        raise ConfigError(
            "store",
            f"unknown store {url!r}",
            "use 'rocksdb://' (persistent, in the state directory; the default) or "
            "'memory://' (kept in memory, restored from the changelog at every start)",
        )
    return scheme


def rocksdb_options(settings: Settings) -> RocksDBOptions:
    """The RocksDB tuning a worker's settings ask for: one instance per worker, so that every
    table partition it opens shares one block cache and one memtable budget."""
    return RocksDBOptions(
        block_cache_bytes=settings.rocksdb_block_cache_bytes,
        total_write_buffer_bytes=settings.rocksdb_memtable_bytes,
        max_open_files=settings.rocksdb_max_open_files,
        write_behind_interval=settings.rocksdb_write_behind_interval,
        write_behind_max_bytes=settings.rocksdb_write_behind_bytes,
    )


def open_store(
    url: str,
    directory: StateDirectory | None,
    table: str,
    options: RocksDBOptions = DEFAULT_OPTIONS,
) -> Store:
    """The store of ``table`` for a ``store`` setting: ``"rocksdb://"`` or ``"memory://"``.

    RocksDB partitions live in ``directory.table_path(table)/<partition>/``; a rocksdb store
    needs a (locked) state directory.
    """
    scheme = store_scheme(url)
    if scheme == "memory":
        return MemoryStore(table)
    if directory is None or not directory.locked:
        raise ConfigError(
            "state_dir",
            f"table {table!r} uses store {url!r} but no state directory is open",
            "set state_dir (--state-dir), or use store='memory://'",
        )
    return RocksDBStore(table, directory.table_path(table), options)
