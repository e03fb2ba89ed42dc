"""RocksDB store partitions on rocksdict: one database per (table, partition).

Layout of one partition directory (``<state_dir>/<app_id>/tables/<table>/<partition>/``): a
plain RocksDB database in rocksdict's raw mode (keys and values are the codec's bytes, nothing is
pickled) with two column families:

- ``default``: the table's keys and values, exactly as the changelog carries them;
- ``__streams_app``: bookkeeping. ``changelog-offset`` (8-byte big-endian) is the next changelog
  offset the data does not contain; ``format-version`` guards the layout.

User keys live in a column family of their own, so no user key can ever collide with the
bookkeeping and :meth:`RocksDBStorePartition.items` only has to iterate ``default``.

**Atomicity.** :meth:`RocksDBStorePartition.write` puts the data and the offset into one
``WriteBatch``. RocksDB appends a batch to the write-ahead log as one record, across column
families, and recovery (``point_in_time``) replays whole records only: after a crash at any
moment the partition holds either the batch *and* its offset, or neither. ``atomic_flush`` keeps
the same promise for memtable flushes, so the tiny bookkeeping family is flushed together with the
data (it also lets RocksDB delete old WAL files, which a rarely flushed family would pin).

**Durability, and why the WAL is not fsynced per write.** The WAL is on; each batch is written to
it with ``write(2)`` but not ``fsync``-ed. A batch is then in the kernel's page cache the moment
``write`` returns, so it survives anything that kills the *process* (SIGKILL, OOM killer, a crash
in an extension): this is the failure a worker meets in practice and the crash test checks it. A
power loss or kernel panic can lose the last batches written, but never tear one, and the data
always matches its offset; a restart then restores a few more changelog records than it would
have needed to. The changelog in Kafka is the durable copy, so paying an ``fsync`` (milliseconds
on most disks) on every commit, every 100 ms per partition, would buy nothing.

**Crash recovery time.** After a SIGKILL, opening a partition replays its WAL into a memtable
and flushes that to a table file before ``Rdict(...)`` returns (measured: ~0.1 s per 2 MB of
WAL; rocksdict holds the GIL meanwhile, so nothing else of the worker runs). A table written at
a modest rate never fills its 16 MiB memtable, so its whole history since the last flush sits
in the WAL: a restart on the intact state directory then spent most of a second here. So a
partition with writes older than ``flush_interval`` seconds asks RocksDB for a *background*
flush at its next write, which bounds the replay to about ``flush_interval`` seconds of writes
(measured: 8 partitions of 125,000 keys opened in 0.16 s after a SIGKILL, against 0.55-0.85 s
without it). It changes nothing about what is stored: the WAL stays on and keeps every write
until *both* families have flushed past it, so recovery brings both to the same last complete
batch; and with several column families RocksDB syncs the closed WAL files before it records a
flush (``SyncClosedLogs``), so even after a power loss neither family can come back ahead of
what the WAL still holds for the other (the offset never claims data the store lost).

**The flush request leaves the worker's path.** ``flush(wait=False)`` does not wait for the
flush, but it does switch memtables, open a new WAL file, and wait its turn behind the
database's flush in progress: 10-16 ms a call with eight partitions written every 100 ms. All
of a worker's partitions start their interval at the same commit, so they all came due in the
same later commit, whose store step then took 90-115 ms: the tail of the exactly-once latency
(BENCHMARKS.md). The request now goes to one thread per options instance (rocksdict releases
the GIL while RocksDB works), which serves the partitions one after another; ``write`` only
hands it over, and ``close`` waits for its partition's request before closing the database.

**Write-behind.** A commit's batch need not reach RocksDB at once. Live, a worker commits
every 100 ms and each commit wrote nearly every key it touched (0.8 keys a record at 45,000
records/s over 8 partitions), at 1.3-1.85 us a key inside RocksDB: the store step was the
largest part of the commit that a draining worker does not pay. So :meth:`write` keeps the
batch in a dict (later commits overwrite the same keys) with the changelog offset it reaches,
and writes it as one ``WriteBatch`` once it is due (``write_behind_interval``, 1 s, each
partition between a half and one and a half intervals so that partitions committed together do
not all come due in the same commit), when the writes waiting in all partitions of the options
instance pass ``write_behind_max_bytes``, and before anything reads RocksDB in bulk
(:meth:`items`, :meth:`iter_range`), flushes, wipes or closes. :meth:`get` looks in the dict
first. What waits is committed data only (the commit protocol calls ``write`` after EndTxn),
and its offset goes to RocksDB with it: after a crash the partition is where it was up to a
second earlier, never ahead of its changelog, and restore replays the rest.

**A batch in key order.** :meth:`_write_now` adds a batch's entries to the ``WriteBatch``
sorted by key. RocksDB inserts them into the memtable's skip list one by one; keys that come
in no order (a table's keys as records bring them, a join buffer's ``segment | key | time``)
each walk it from the top, and in a memtable of 100,000 entries most of those steps are cache
misses. Measured with a join buffer's entries (``python -m streams_app.state.bench
--key-order``; BENCHMARKS.md, "Batches in key order"): 1.8 us an entry inside ``Rdict.write``
as they come, 0.6-0.7 sorted; 3.2 us of CPU an entry in all the process's threads as they
come (RocksDB's flushes and compactions included), 2.3-2.4 sorted, the sort's 0.5 included.
The entries of a batch have distinct keys (it is a dict), so their order changes nothing of
what is written: the batch is applied whole either way.

**Handles.** An open partition holds RocksDB's ``LOCK`` file. rocksdict only releases it once
every object that references the database is gone: :meth:`close` drops the column-family handle
it keeps, but an ``items()`` iterator that was neither exhausted nor closed keeps the database
open, and reopening it then fails with :class:`~streams_app.state.errors.StateLockedError`.
"""

from __future__ import annotations

import logging
import random
import shutil
import struct
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    Cache,
    ColumnFamily,
    DBCompressionType,
    DBRecoveryMode,
    Options,
    Rdict,
    RdictIter,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from streams_app.state.base import Store, StorePartition
from streams_app.state.disk import disk_error
from streams_app.state.errors import StateLockedError

log = logging.getLogger(__name__)

META_CF = "__streams_app"
OFFSET_KEY = b"changelog-offset"
FORMAT_KEY = b"format-version"
FORMAT_VERSION = b"1"
_OFFSET = struct.Struct(">q")
_WIPING = ".wiping-"
_MiB = 1024 * 1024


@dataclass
class RocksDBOptions:
    """Tuning shared by every partition opened with the same instance.

    The block cache and the memtable budget are shared, so RocksDB's memory stays bounded
    however many partitions a worker owns: the default instance gives a whole process 64 MiB of
    block cache (data blocks, and the index and filter blocks, which are cached there rather
    than held per open file) and 256 MiB of memtables (a partition that would exceed the budget
    flushes early). The worker builds one from its settings
    (:func:`~streams_app.state.factory.rocksdb_options`); docs/memory.md has the formula.

    ``max_open_files`` bounds each partition's table cache: the SST files it keeps open. With
    the default target file size (64 MiB) the default 64 keeps every file of a partition of up
    to ~4 GiB open; a bigger partition reopens cold files on demand (an open and an index read
    into the block cache per miss). A worker holds at most about ``tables x partitions x
    (max_open_files + 6)`` descriptors (the 6: WAL, MANIFEST, LOCK, LOG, ...). -1 (RocksDB's
    default) keeps every file open: descriptors then grow with the state.
    """

    block_cache_bytes: int = 64 * _MiB
    total_write_buffer_bytes: int = 256 * _MiB
    write_buffer_bytes: int = 16 * _MiB
    max_write_buffers: int = 3
    max_total_wal_bytes: int = 128 * _MiB
    background_jobs: int = 2
    bloom_bits_per_key: int = 10
    max_open_files: int = 64
    sync_writes: bool = False
    #: Seconds a partition's unflushed writes may age before its next write starts a background
    #: flush (the module doc's "crash recovery time"); None: only when the memtable fills.
    flush_interval: float | None = 5.0
    #: Write-behind (module doc): seconds a partition's committed writes may wait in memory
    #: before they go to RocksDB in one batch; 0 writes every commit's batch at once.
    write_behind_interval: float = 1.0
    #: What the writes waiting in memory may hold, all partitions together (key and value
    #: bytes, counted as written: a key written twice counts twice).
    write_behind_max_bytes: int = 16 * _MiB
    _behind_bytes: int = field(default=0, init=False, repr=False)
    _cache: Cache | None = field(default=None, init=False, repr=False)
    _write_buffers: WriteBufferManager | None = field(default=None, init=False, repr=False)
    _flusher: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)

    def flusher(self) -> ThreadPoolExecutor:
        """The one thread that hands the partitions' background flushes to RocksDB (module doc:
        "the flush request leaves the worker's path"). Idle, it costs a parked thread."""
        if self._flusher is None:
            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="rocksdb-flush")
        return self._flusher

    def _shared(self) -> tuple[Cache, WriteBufferManager]:
        if self._cache is None or self._write_buffers is None:
            self._cache = Cache(self.block_cache_bytes)
            self._write_buffers = WriteBufferManager(self.total_write_buffer_bytes, False)
        return self._cache, self._write_buffers

    def db_options(self) -> Options:
        cache, write_buffers = self._shared()
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        # Replay the WAL up to the last complete record: a torn tail (the batch being written
        # when the process died) is dropped whole, never applied in part.
        opts.set_wal_recovery_mode(DBRecoveryMode.point_in_time())
        opts.set_atomic_flush(True)
        opts.set_max_total_wal_size(self.max_total_wal_bytes)
        opts.set_max_background_jobs(self.background_jobs)
        opts.set_max_open_files(self.max_open_files)
        opts.set_write_buffer_size(self.write_buffer_bytes)
        opts.set_max_write_buffer_number(self.max_write_buffers)
        opts.set_write_buffer_manager(write_buffers)
        opts.set_compression_type(DBCompressionType.lz4())
        opts.set_level_compaction_dynamic_level_bytes(True)
        # RocksDB's own info LOG: keep it from piling up one old file per open.
        opts.set_keep_log_file_num(2)
        opts.set_max_log_file_size(4 * _MiB)
        table = BlockBasedOptions()
        table.set_block_cache(cache)
        table.set_bloom_filter(self.bloom_bits_per_key, False)
        table.set_cache_index_and_filter_blocks(True)
        opts.set_block_based_table_factory(table)
        return opts

    def meta_options(self) -> Options:
        opts = Options(raw_mode=True)
        opts.set_write_buffer_size(1 * _MiB)
        return opts

    def write_options(self) -> WriteOptions:
        opts = WriteOptions()
        opts.sync = self.sync_writes
        return opts


DEFAULT_OPTIONS = RocksDBOptions()

#: Descriptors one open partition holds besides its table files: the WAL, MANIFEST, LOCK,
#: LOG, and a spare for a file being written by a flush or compaction.
FIXED_FILES_PER_PARTITION = 6


def descriptors_needed(table_partitions: int, options: RocksDBOptions) -> int | None:
    """The most file descriptors ``table_partitions`` open partitions can hold (None: no bound,
    ``max_open_files=-1``)."""
    if options.max_open_files < 0:
        return None
    return table_partitions * (options.max_open_files + FIXED_FILES_PER_PARTITION)


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return "LOCK" in text and ("lock" in text.lower())


class RocksDBStorePartition(StorePartition):
    """One partition of one table in its own RocksDB database."""

    def __init__(self, path: Path, options: RocksDBOptions = DEFAULT_OPTIONS) -> None:
        self.path = path
        self._options = options
        self._write_opts = options.write_options()
        self._db: Rdict | None = None
        self._meta: ColumnFamily | None = None
        self._offset: int | None = None
        #: When the oldest write not yet flushed was made (monotonic); None: nothing unflushed.
        self._unflushed_since: float | None = None
        #: The flush request handed to the flusher thread and not yet done.
        self._flushing: Future[None] | None = None
        #: Write-behind: committed writes not in RocksDB yet (None: a delete), the changelog
        #: offset they reach, when they are due in RocksDB, and the bytes they count.
        self._behind: dict[bytes, bytes | None] = {}
        self._behind_offset: int | None = None
        #: The iterator :meth:`range_items` seeks with (None: none since the last write).
        self._cursor: RdictIter | None = None
        self._behind_due = 0.0
        self._behind_bytes = 0
        self._open()

    # -- lifecycle ---------------------------------------------------------------------------

    def _open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            db = Rdict(
                str(self.path),
                self._options.db_options(),
                column_families={META_CF: self._options.meta_options()},
            )
        except Exception as exc:
            if _is_lock_error(exc):
                raise StateLockedError(self.path, str(exc)) from None
            if "Corruption" not in str(exc):
                raise
            # The changelog holds everything this database did: start over and restore it.
            log.warning("RocksDB state at %s is corrupt (%s): wiping it", self.path, exc)
            self._remove_dir()
            self._open()
            return
        meta = db.get_column_family(META_CF)
        try:
            version = meta.get(FORMAT_KEY)
            raw_offset = meta.get(OFFSET_KEY)
        finally:
            meta.close()
        self._db = db
        self._meta = db.get_column_family_handle(META_CF)
        if version is None:
            self._put_meta(FORMAT_KEY, FORMAT_VERSION)
        elif version != FORMAT_VERSION:
            log.warning(
                "RocksDB state at %s has format %r, expected %r: wiping it",
                self.path,
                version,
                FORMAT_VERSION,
            )
            self.wipe()
            self._put_meta(FORMAT_KEY, FORMAT_VERSION)
            return
        self._offset = None if raw_offset is None else _OFFSET.unpack(raw_offset)[0]

    def _put_meta(self, key: bytes, value: bytes) -> None:
        batch = WriteBatch(raw_mode=True)
        batch.put(key, value, self._meta)
        self._cursor = None
        self._require().write(batch, self._write_opts)

    def _require(self) -> Rdict:
        if self._db is None:
            raise RuntimeError(f"the store partition at {self.path} is closed")
        return self._db

    @property
    def closed(self) -> bool:
        return self._db is None

    def close(self) -> None:
        if self._db is not None:
            self._write_behind()
        self._wait_flushing()
        self._cursor = None  # it references the database (module doc, "Handles")
        db, self._db, self._meta = self._db, None, None
        if db is not None:
            db.close()

    def _wait_flushing(self) -> None:
        """The flusher thread holds the database while it works: let it finish first."""
        flushing, self._flushing = self._flushing, None
        if flushing is not None:
            try:
                flushing.result()
            except Exception as exc:  # a flush is an optimisation: the WAL still has it all
                # A full or read-only disk fails the next write too, which names the state
                # directory (state/disk.py); say it once, there.
                level = logging.INFO if disk_error(exc, self.path) else logging.WARNING
                log.log(level, "background flush of %s failed: %s", self.path, exc)

    def _remove_dir(self) -> None:
        """Remove the directory atomically: rename it aside first, so that a crash halfway
        through deleting leaves no half-deleted database at the partition's path."""
        if not self.path.exists():
            return
        aside = self.path.with_name(f"{self.path.name}{_WIPING}{uuid.uuid4().hex[:8]}")
        self.path.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)

    def wipe(self) -> None:
        """Delete every key and the offset in one atomic batch (a range tombstone).

        Done inside the open database rather than by deleting files, so a crash mid-wipe leaves
        either the old state with its offset or an empty one, and no file handle matters.
        """
        db = self._require()
        self._drop_behind()
        last = next(iter(db.keys(backwards=True)), None)
        wb = WriteBatch(raw_mode=True)
        if isinstance(last, bytes):
            wb.delete_range(b"", last + b"\x00")
        wb.delete(OFFSET_KEY, self._meta)
        self._cursor = None
        db.write(wb, self._write_opts)
        self._offset = None

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        behind = self._behind
        if behind and key in behind:
            return behind[key]
        value: bytes | None = self._require().get(key)
        return value

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed key and value, in key order, from a consistent snapshot.

        Exhaust or ``close()`` the iterator before closing the partition (see the module doc).
        """
        self._write_behind()  # the writes waiting in memory first: then RocksDB has them all
        yield from self._require().items()

    def iter_range(self, low: bytes, high: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """One seek to ``low``; the upper bound makes RocksDB stop at ``high``."""
        self._write_behind()
        opts = ReadOptions()
        if high is not None:
            opts.set_iterate_upper_bound(high)
        # Raw mode: keys and values are bytes.
        yield from self._require().items(from_key=low, read_opt=opts)

    def range_items(
        self, low: bytes, high: bytes, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """:meth:`iter_range`'s entries as a list, read with one iterator the partition keeps
        between calls. Making a RocksDB iterator (its read options, the merged view of the
        memtables and every level) costs about half as much again as the seek and the reads
        themselves, and a stream-stream join makes one short scan per record.

        A kept iterator sees the database as it was when it was made, so every write drops it
        (and so do :meth:`close` and :meth:`wipe`); and it holds that version's memtables and
        files while kept, so its user lets it go with :meth:`release_cursor` at the end of
        each batch."""
        self._write_behind()  # the writes waiting in memory first (this drops the iterator)
        cursor = self._cursor
        if cursor is None:
            cursor = self._cursor = self._require().iter()
        cursor.seek(low)
        found = []
        while cursor.valid():
            key = cursor.key()
            if key >= high:
                break
            found.append((key, cursor.value()))
            if limit is not None and len(found) >= limit:
                break
            cursor.next()
        return found

    def release_cursor(self) -> None:
        self._cursor = None

    @property
    def changelog_offset(self) -> int | None:
        """The changelog offset the partition's data reaches, writes waiting in memory
        included (what RocksDB holds after a crash may be behind it, never ahead)."""
        return self._offset if self._behind_offset is None else self._behind_offset

    # -- writes ------------------------------------------------------------------------------

    def write(self, batch: Mapping[bytes, bytes | None], changelog_offset: int) -> None:
        """Committed writes, up to ``changelog_offset``: kept in memory and written to RocksDB
        with those of later commits (module doc: write-behind), or at once."""
        options = self._options
        if options.write_behind_interval <= 0:
            self._write_now(batch, changelog_offset)
            return
        self._require()
        behind = self._behind
        now = time.monotonic()
        if self._behind_offset is None:  # nothing waits yet (an offset alone counts too)
            # Partitions committed together would all come due in the same later commit:
            # each waits between half and one and a half intervals instead.
            self._behind_due = now + options.write_behind_interval * (0.5 + random.random())
        behind.update(batch)
        self._behind_offset = changelog_offset
        size = sum(map(len, batch)) + sum(map(len, filter(None, batch.values())))
        self._behind_bytes += size
        options._behind_bytes += size
        if now >= self._behind_due or options._behind_bytes > options.write_behind_max_bytes:
            self._write_behind()

    def checkpoint(self) -> None:
        """What waits in memory goes to RocksDB now, with its offset (one atomic batch)."""
        self._write_behind()

    def _write_behind(self) -> None:
        """Write what waits in memory, in one batch with the offset it reaches."""
        if self._behind_offset is None:
            return
        behind, offset = self._behind, self._behind_offset
        self._drop_behind()
        self._write_now(behind, offset)

    def _drop_behind(self) -> None:
        self._options._behind_bytes -= self._behind_bytes
        self._behind = {}
        self._behind_offset = None
        self._behind_bytes = 0

    def _write_now(self, batch: Mapping[bytes, bytes | None], changelog_offset: int) -> None:
        db = self._require()
        wb = WriteBatch(raw_mode=True)
        # In key order (module doc: "a batch in key order"): RocksDB inserts each entry into
        # its memtable's skip list, and keys in order walk it where the last one left off.
        for key in sorted(batch):
            value = batch[key]
            if value is None:
                wb.delete(key)
            else:
                wb.put(key, value)
        wb.put(OFFSET_KEY, _OFFSET.pack(changelog_offset), self._meta)
        self._cursor = None  # it would not see this write
        db.write(wb, self._write_opts)
        self._offset = changelog_offset
        interval = self._options.flush_interval
        if interval is not None:
            now = time.monotonic()
            if self._unflushed_since is None:
                self._unflushed_since = now
            elif now - self._unflushed_since >= interval and (
                self._flushing is None or self._flushing.done()
            ):
                self._wait_flushing()  # done: collects a failure to log
                self._flushing = self._options.flusher().submit(self._flush_in_background, db)
                self._unflushed_since = None

    def _flush_in_background(self, db: Rdict) -> None:
        """Schedule a flush of both column families (no wait). ``Rdict.flush`` flushes only
        ``default``; the bookkeeping family, left in its memtable, would pin every WAL file
        since its last flush (RocksDB deletes a WAL once no family needs it)."""
        db.flush(False)
        meta = db.get_column_family(META_CF)
        try:
            meta.flush(False)
        finally:
            meta.close()

    def flush(self) -> None:
        """Flush memtables to SST files (tests and clean shutdowns; never needed for safety)."""
        self._write_behind()
        self._require().flush(True)


class RocksDBStore(Store):
    """All partitions of one table, each in ``<path>/<partition>/``."""

    def __init__(self, name: str, path: Path, options: RocksDBOptions = DEFAULT_OPTIONS) -> None:
        self.name = name
        self.path = path
        self.options = options
        self._partitions: dict[int, RocksDBStorePartition] = {}
        path.mkdir(parents=True, exist_ok=True)
        # A wipe that a crash interrupted leaves a renamed directory behind: finish deleting it.
        for leftover in path.glob(f"*{_WIPING}*"):
            shutil.rmtree(leftover, ignore_errors=True)

    @property
    def persistent(self) -> bool:
        return True

    def partition_path(self, partition: int) -> Path:
        return self.path / str(partition)

    def partition(self, partition: int) -> RocksDBStorePartition:
        part = self._partitions.get(partition)
        if part is None:
            part = RocksDBStorePartition(self.partition_path(partition), self.options)
            self._partitions[partition] = part
        return part

    def close_partition(self, partition: int) -> None:
        part = self._partitions.pop(partition, None)
        if part is not None:
            part.close()

    def local_partitions(self) -> set[int]:
        found = set(self._partitions)
        if self.path.is_dir():
            found.update(int(entry.name) for entry in self.path.iterdir() if entry.name.isdigit())
        return found

    def close(self) -> None:
        for partition in list(self._partitions):
            self.close_partition(partition)

    def __repr__(self) -> str:
        return f"RocksDBStore({self.name!r}, {str(self.path)!r})"
