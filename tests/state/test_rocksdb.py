"""RocksDB partitions: persistence across reopen, the offset stored with the data, locking."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from streams_app.state import RocksDBStore, RocksDBStorePartition, StateLockedError
from streams_app.state.rocksdb import FORMAT_KEY, META_CF, OFFSET_KEY, RocksDBOptions


def test_data_and_offset_survive_reopen(tmp_path: Path) -> None:
    store = RocksDBStore("t", tmp_path / "t")
    assert store.persistent
    part = store.partition(0)
    part.write({b"a": b"1", b"b": b"2"}, 10)
    part.write({b"a": None, b"c": b"3"}, 12)
    store.close()

    store = RocksDBStore("t", tmp_path / "t")
    part = store.partition(0)
    assert part.changelog_offset == 12
    assert dict(part.items()) == {b"b": b"2", b"c": b"3"}
    assert store.partition(1).changelog_offset is None  # partitions are separate databases
    store.close()
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["0", "1"]


def test_offset_lives_in_its_own_column_family(tmp_path: Path) -> None:
    path = tmp_path / "p"
    part = RocksDBStorePartition(path)
    part.write({OFFSET_KEY: b"user value"}, 5)
    part.close()
    # Read the raw database: the user key and the bookkeeping never meet.
    db = Rdict(str(path), Options(raw_mode=True), column_families={META_CF: Options(raw_mode=True)})
    try:
        assert db.get(OFFSET_KEY) == b"user value"
        meta = db.get_column_family(META_CF)
        assert meta.get(OFFSET_KEY) == (5).to_bytes(8, "big")
        meta.close()
    finally:
        db.close()
    part = RocksDBStorePartition(path)
    assert part.changelog_offset == 5
    assert dict(part.items()) == {OFFSET_KEY: b"user value"}
    part.close()


def test_wipe_is_durable(tmp_path: Path) -> None:
    part = RocksDBStorePartition(tmp_path / "p")
    part.write({bytes([i]): b"x" for i in range(256)}, 300)
    part.wipe()
    part.close()
    part = RocksDBStorePartition(tmp_path / "p")
    assert part.changelog_offset is None
    assert list(part.items()) == []
    part.close()


def test_a_second_handle_in_this_process_gets_a_clear_error(tmp_path: Path) -> None:
    part = RocksDBStorePartition(tmp_path / "p")
    with pytest.raises(StateLockedError, match="--state-dir") as info:
        RocksDBStorePartition(tmp_path / "p")
    assert str(tmp_path / "p") in str(info.value)
    part.close()
    RocksDBStorePartition(tmp_path / "p").close()


def test_a_partition_held_by_another_process_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "p"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            "from streams_app.state import RocksDBStorePartition;"
            f"p = RocksDBStorePartition(Path({str(path)!r})); print('open', flush=True);"
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        with pytest.raises(StateLockedError, match="Resource temporarily unavailable"):
            RocksDBStorePartition(path)
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock with the process.
    RocksDBStorePartition(path).close()


def test_unfinished_iterator_blocks_reopen_until_dropped(tmp_path: Path) -> None:
    """The documented rocksdict caveat: a live iterator keeps the database open."""
    part = RocksDBStorePartition(tmp_path / "p")
    part.write({b"a": b"1", b"b": b"2"}, 1)
    it = part.items()
    next(it)
    part.close()
    with pytest.raises(StateLockedError):
        RocksDBStorePartition(tmp_path / "p")
    del it  # the last reference: the iterator, and the database with it, are released
    RocksDBStorePartition(tmp_path / "p").close()


def test_leftover_directory_of_an_interrupted_wipe_is_removed(tmp_path: Path) -> None:
    leftover = tmp_path / "t" / "0.wiping-deadbeef"
    leftover.mkdir(parents=True)
    (leftover / "junk").write_bytes(b"x")
    RocksDBStore("t", tmp_path / "t").close()
    assert not leftover.exists()


def _table_files(path: Path, at_least: int, timeout: float = 10.0) -> int:
    """The partition's SST files, polled until there are ``at_least`` (background flushes)."""
    deadline = time.monotonic() + timeout
    while True:
        found = len(list(path.glob("*.sst")))
        if found >= at_least or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_writes_older_than_flush_interval_are_flushed_in_the_background(tmp_path: Path) -> None:
    """Small writes never fill a memtable: without flush_interval they stay in the WAL only
    (replayed at the next open after a crash); with it, both column families reach table files
    and the WAL files before them go."""
    lazy = RocksDBStorePartition(
        tmp_path / "lazy", RocksDBOptions(flush_interval=None, write_behind_interval=0)
    )
    eager = RocksDBStorePartition(
        tmp_path / "eager", RocksDBOptions(flush_interval=0.0, write_behind_interval=0)
    )
    for offset in range(1, 4):
        lazy.write({b"k%d" % offset: b"v"}, offset)
        eager.write({b"k%d" % offset: b"v"}, offset)
    # The second write found the first one old enough: data and bookkeeping families flushed.
    assert _table_files(tmp_path / "eager", at_least=2) >= 2
    assert _table_files(tmp_path / "lazy", at_least=1, timeout=0.5) == 0
    for part in (lazy, eager):
        part.close()
    eager = RocksDBStorePartition(tmp_path / "eager")
    assert eager.changelog_offset == 3
    assert dict(eager.items()) == {b"k1": b"v", b"k2": b"v", b"k3": b"v"}
    eager.close()


def test_the_flush_request_runs_on_the_flusher_thread_and_close_waits_for_it(
    tmp_path: Path,
) -> None:
    """A due partition hands its flush request to the options' flusher thread: the write that
    found it due returns while the request is still running (it took 10-16 ms per partition on
    the commit's path before), and close() waits for it before closing the database."""
    import threading

    options = RocksDBOptions(flush_interval=0.0, write_behind_interval=0)
    part = RocksDBStorePartition(tmp_path / "p", options)
    entered, release = threading.Event(), threading.Event()
    threads: list[str] = []
    real = part._flush_in_background

    def slow_flush(db: object) -> None:
        threads.append(threading.current_thread().name)
        entered.set()
        assert release.wait(10)
        real(db)  # type: ignore[arg-type]

    part._flush_in_background = slow_flush  # type: ignore[method-assign]
    part.write({b"a": b"1"}, 1)
    part.write({b"b": b"2"}, 2)  # the first write is old enough: a flush is requested
    assert entered.wait(10)
    part.write({b"c": b"3"}, 3)  # not blocked by the flush in progress, nor a second request
    assert threads == [next(t.name for t in threading.enumerate() if "rocksdb-flush" in t.name)]
    closer = threading.Thread(target=part.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close() must wait for the flush that holds the database"
    release.set()
    closer.join(10)
    assert not closer.is_alive() and part.closed
    assert len(threads) == 1
    reopened = RocksDBStorePartition(tmp_path / "p")
    assert reopened.changelog_offset == 3
    assert dict(reopened.items()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    reopened.close()


def test_large_batches_across_memtable_flushes(tmp_path: Path) -> None:
    part = RocksDBStorePartition(tmp_path / "p")
    value = b"v" * 1000
    for n in range(1, 41):  # ~40 MB through 16 MB memtables: several (atomic) flushes
        part.write({f"{k:05}".encode(): value + str(n).encode() for k in range(1000)}, n)
    part.close()
    part = RocksDBStorePartition(tmp_path / "p")
    assert part.changelog_offset == 40
    assert {v for _, v in part.items()} == {value + b"40"}
    part.close()


def test_a_corrupt_database_is_wiped_not_fatal(tmp_path: Path) -> None:
    """The changelog holds everything: a database RocksDB refuses to open is started afresh."""
    path = tmp_path / "p"
    part = RocksDBStorePartition(path)
    part.write({b"a": b"1"}, 3)
    part.close()
    (path / "CURRENT").write_bytes(b"garbage without newline")
    part = RocksDBStorePartition(path)
    assert part.changelog_offset is None
    assert list(part.items()) == []
    part.close()


def test_an_unknown_format_version_is_wiped(tmp_path: Path) -> None:
    path = tmp_path / "p"
    part = RocksDBStorePartition(path)
    part.write({b"a": b"1"}, 3)
    part._put_meta(FORMAT_KEY, b"999")
    part.close()
    part = RocksDBStorePartition(path)
    assert part.changelog_offset is None
    assert list(part.items()) == []
    part.close()
    part = RocksDBStorePartition(path)  # and the current version is recorded again
    part.write({b"b": b"2"}, 1)
    part.close()
    part = RocksDBStorePartition(path)
    assert part.changelog_offset == 1
    part.close()


# -- write-behind ---------------------------------------------------------------------------


def _on_disk(part: RocksDBStorePartition, key: bytes) -> bytes | None:
    """What RocksDB itself holds for ``key``, bypassing the writes waiting in memory."""
    value: bytes | None = part._require().get(key)
    return value


def test_written_behind_writes_are_read_before_they_reach_rocksdb(tmp_path: Path) -> None:
    part = RocksDBStorePartition(tmp_path / "p", RocksDBOptions(write_behind_interval=3600))
    part.write({b"a": b"1", b"b": b"2"}, 5)
    part.write({b"a": None, b"c": b"3"}, 7)
    assert _on_disk(part, b"b") is None  # still in memory: one RocksDB write for both commits
    assert (part.get(b"a"), part.get(b"b"), part.get(b"c"), part.get(b"z")) == (
        None,
        b"2",
        b"3",
        None,
    )
    assert part.changelog_offset == 7
    # Iteration sees them too: what waits is written first, with its offset.
    assert dict(part.items()) == {b"b": b"2", b"c": b"3"}
    assert _on_disk(part, b"c") == b"3" and _on_disk(part, b"a") is None
    part.write({b"d": b"4"}, 9)
    assert list(part.iter_range(b"c", None)) == [(b"c", b"3"), (b"d", b"4")]
    part.close()


def test_close_writes_what_waits_and_a_reopen_finds_it(tmp_path: Path) -> None:
    options = RocksDBOptions(write_behind_interval=3600)
    part = RocksDBStorePartition(tmp_path / "p", options)
    part.write({b"a": b"1"}, 3)
    part.write({b"a": b"2", b"b": b"9"}, 4)
    part.close()
    assert options._behind_bytes == 0
    part = RocksDBStorePartition(tmp_path / "p", options)
    assert part.changelog_offset == 4
    assert dict(part.items()) == {b"a": b"2", b"b": b"9"}
    part.close()


def test_what_waits_goes_out_when_due_or_over_the_shared_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streams_app.state import rocksdb

    now = [1000.0]
    monkeypatch.setattr(rocksdb.time, "monotonic", lambda: now[0])
    options = RocksDBOptions(write_behind_interval=1.0, write_behind_max_bytes=100)
    first = RocksDBStorePartition(tmp_path / "1", options)
    second = RocksDBStorePartition(tmp_path / "2", options)
    first.write({b"k": b"v" * 10}, 1)
    now[0] += 0.49  # due between half and one and a half intervals after the first write
    first.write({b"k": b"w" * 10}, 2)
    assert _on_disk(first, b"k") is None
    now[0] += 1.02
    first.write({b"j": b"x"}, 3)
    assert _on_disk(first, b"k") == b"w" * 10 and _on_disk(first, b"j") == b"x"
    assert first.get(b"j") == b"x" and options._behind_bytes == 0
    # The budget is shared: the partition that takes it over writes its own at once.
    first.write({b"a": b"y" * 60}, 4)
    assert _on_disk(first, b"a") is None and options._behind_bytes == 61
    second.write({b"b": b"z" * 60}, 1)
    assert _on_disk(second, b"b") == b"z" * 60 and options._behind_bytes == 61
    first.wipe()  # a wipe drops what waits, and its bytes
    assert options._behind_bytes == 0 and first.get(b"a") is None
    assert first.changelog_offset is None
    first.close()
    second.close()


def test_write_behind_off_writes_every_batch(tmp_path: Path) -> None:
    part = RocksDBStorePartition(tmp_path / "p", RocksDBOptions(write_behind_interval=0))
    part.write({b"a": b"1"}, 1)
    assert _on_disk(part, b"a") == b"1"
    part.close()


def test_an_offset_alone_waits_and_is_written_like_any_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch without keys (a changelog tail of markers) still moves the offset: it waits
    like any other, comes due from its own first write, and reaches RocksDB at close."""
    from streams_app.state import rocksdb

    now = [1000.0]
    monkeypatch.setattr(rocksdb.time, "monotonic", lambda: now[0])
    options = RocksDBOptions(write_behind_interval=1.0)
    part = RocksDBStorePartition(tmp_path / "p", options)
    part.write({}, 5)
    assert part.changelog_offset == 5 and part._offset is None  # not in RocksDB yet
    now[0] += 1.6  # past the latest due time, counted from the first write
    part.write({}, 6)
    assert part._offset == 6
    part.write({}, 7)
    part.close()
    part = RocksDBStorePartition(tmp_path / "p", options)
    assert part.changelog_offset == 7
    part.close()


@pytest.mark.parametrize("behind", [0, 3600])
def test_range_items_keeps_its_reader_and_sees_every_later_write(
    tmp_path: Path, behind: float
) -> None:
    """range_items seeks with one iterator kept between calls: a write (written behind or
    not), a wipe and a release drop it, so a scan never misses what committed before it; and
    closing the partition lets go of it (a reopen works)."""
    part = RocksDBStorePartition(tmp_path / "p", RocksDBOptions(write_behind_interval=behind))
    part.write({b"a1": b"1", b"a3": b"3", b"b1": b"x"}, 1)
    assert part.range_items(b"a", b"b") == [(b"a1", b"1"), (b"a3", b"3")]
    kept = part._cursor
    assert kept is not None and part.range_items(b"a2", b"b") == [(b"a3", b"3")]
    assert part._cursor is kept  # the same reader, sought again
    del kept  # (a reference to it would keep the database open after close, as items()'s)
    part.write({b"a2": b"2", b"a3": None}, 2)
    assert part.range_items(b"a", b"b") == [(b"a1", b"1"), (b"a2", b"2")]
    assert part.range_items(b"a", b"a2") == [(b"a1", b"1")] and part.range_items(b"c", b"d") == []
    part.release_cursor()
    assert part._cursor is None
    assert part.range_items(b"b", b"c") == [(b"b1", b"x")]
    part.wipe()
    assert part.range_items(b"", b"\xff") == []
    part.write({b"z": b"1"}, 3)
    assert part.range_items(b"", b"\xff") == [(b"z", b"1")]
    part.close()
    RocksDBStorePartition(tmp_path / "p").close()
