"""Micro-benchmarks of the stores: commit throughput, and what a batch's key order costs.

    python -m streams_app.state.bench [--seconds 3] [--keys 1000] [--key-space 100000]
    python -m streams_app.state.bench --key-order [--entries 1000000] [--batch 30000]
    python -m streams_app.state.bench --put-all [--entries 1000000] [--batch 500]

The first: each round sets ``--keys`` keys (drawn from ``--key-space``) to JSON values in a
transaction and commits it with an offset, as the runtime does after every Kafka commit.
Reported per store: commits/s and keys/s, for the whole commit (encoding + write) and for
``StorePartition.write`` alone (the pre-encoded batch).

``--key-order``: RocksDB with the worker's options, written a join buffer's entries (``segment
| key | timestamp | seq`` of 10,000 keys, records in time order, ``--batch`` entries a write)
as they come and sorted by key, interleaved; reported in us an entry, inside ``Rdict.write``
and in CPU of all the process's threads (RocksDB's flushes and compactions included). This is
why ``RocksDBStorePartition`` writes a batch in key order (state/rocksdb.py).

``--put-all``: a join buffer (``JoinWindowTransaction`` over an in-memory partition) given
``--entries`` records of 10,000 keys in time order, as an inner join's run buffers them: one
``put`` a record, or a ``put_all`` of each ``--batch`` records (a run); committed every 5,000
records, interleaved rounds, us of CPU a record. This is why ``_inner_run`` buffers a run's
records together (runtime/joins/stream_stream.py).

Not tests: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state.base import PartitionTransaction, StorePartition
from streams_app.state.join_windows import (
    JoinWindowKeyCodec,
    JoinWindowTransaction,
    join_window_codecs,
)
from streams_app.state.memory import MemoryStorePartition
from streams_app.state.rocksdb import RocksDBOptions, RocksDBStorePartition


def _run(part: StorePartition, seconds: float, keys: int, key_space: int) -> tuple[float, float]:
    rng = random.Random(1)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec())
    offset = 0
    commits = 0
    write_time = 0.0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for k in rng.sample(range(key_space), keys):
            tx.set(f"key-{k}", {"count": offset, "item": k, "note": "x" * 40})
        tx.prepare()  # encoding, timed in the full figure only
        offset += keys + 1
        t0 = time.perf_counter()
        tx.commit(offset)  # prepare() already ran: this is the store write
        write_time += time.perf_counter() - t0
        tx._cache.clear()  # measure writes, not the read cache
        commits += 1
    elapsed = time.perf_counter() - started
    return commits / elapsed, commits / write_time


def _buffer_batches(entries: int, batch: int) -> list[dict[bytes, bytes]]:
    """A join buffer's writes (module doc), ``batch`` entries a batch."""
    rng = random.Random(1)
    codec = JoinWindowKeyCodec(StrCodec(), 3_600_000)
    value = b"\x01" + b'{"key": "key-000042", "seq": 1234567, "note": "' + b"x" * 64 + b'"}'
    start = 1_700_000_000_000
    return [
        {
            codec.entry(f"key-{rng.randrange(10_000):06d}", start + seq // 20, seq): value
            for seq in range(first, min(first + batch, entries))
        }
        for first in range(0, entries, batch)
    ]


def _write_in_order(
    tmp: str, batches: list[dict[bytes, bytes]], ordered: bool
) -> tuple[float, float]:
    """us an entry inside ``Rdict.write``, and in CPU of all threads, until the database closed."""
    db = Rdict(str(Path(tmp) / ("sorted" if ordered else "as-come")), RocksDBOptions().db_options())
    entries = sum(map(len, batches))
    writing = 0.0
    cpu = time.process_time()
    for batch in batches:
        wb = WriteBatch(raw_mode=True)
        for key in sorted(batch) if ordered else batch:
            wb.put(key, batch[key])
        started = time.thread_time()
        db.write(wb)
        writing += time.thread_time() - started
    db.close()
    return writing / entries * 1e6, (time.process_time() - cpu) / entries * 1e6


def key_order(entries: int, batch: int, rounds: int) -> None:
    batches = _buffer_batches(entries, batch)
    print(f"{entries:,} join-buffer entries, {batch:,} a write, {rounds} interleaved rounds")
    for _ in range(rounds):
        for ordered in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                inside, cpu = _write_in_order(tmp, batches, ordered)
            label = "sorted by key" if ordered else "as they come"
            print(f"  {label:14} {inside:5.2f} us an entry in Rdict.write, {cpu:5.2f} us of CPU")


def _buffer_records(entries: int) -> list[tuple[str, int, int, object, bytes]]:
    """An input's records as a join buffers them: ``(key, timestamp, seq, value, raw)``."""
    rng = random.Random(1)
    codec = JsonCodec()
    records: list[tuple[str, int, int, object, bytes]] = []
    for seq in range(entries):
        key = f"key-{rng.randrange(10_000):06d}"
        value = {"key": key, "seq": seq, "note": "x" * 64}
        records.append((key, 1_700_000_000_000 + seq // 20, seq, value, codec.dumps(value)))
    return records


def _buffer_time(records: list[tuple[str, int, int, object, bytes]], run: int) -> float:
    """us of CPU a record: buffered one ``put`` at a time (``run`` 0) or ``run`` at a time."""
    keys, values = join_window_codecs(StrCodec(), JsonCodec(), 1_800_000)
    buffer = JoinWindowTransaction(
        PartitionTransaction(MemoryStorePartition(), keys, values), keys, 3_600_000
    )
    started = time.process_time()
    for first in range(0, len(records), 5_000):
        chunk = records[first : first + 5_000]
        if run:
            for at in range(0, len(chunk), run):
                buffer.put_all(chunk[at : at + run])
        else:
            put = buffer.put
            for key, timestamp, seq, value, raw in chunk:
                put(key, timestamp, seq, value, raw)
        buffer.tx.commit(first + len(chunk))
    return (time.process_time() - started) / len(records) * 1e6


def put_all(entries: int, run: int, rounds: int) -> None:
    records = _buffer_records(entries)
    print(f"{entries:,} records buffered, runs of {run:,}, {rounds} interleaved rounds")
    for _ in range(rounds):
        for size in (0, run):
            label = f"put_all of {run}" if size else "put one by one"
            print(f"  {label:16} {_buffer_time(records, size):5.2f} us of CPU a record")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--key-space", type=int, default=100_000)
    parser.add_argument("--key-order", action="store_true", help="the key-order benchmark")
    parser.add_argument("--put-all", action="store_true", help="a join buffer's puts, run at once")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=None, help="30,000; --put-all: 500")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.put_all:
        put_all(args.entries, args.batch or 500, args.rounds)
        return
    if args.key_order:
        key_order(args.entries, args.batch or 30_000, args.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        cases: list[tuple[str, Callable[[], StorePartition]]] = [
            ("memory", MemoryStorePartition),
            ("rocksdb (WAL, no fsync: default)", lambda: RocksDBStorePartition(Path(tmp) / "a")),
            (
                "rocksdb (WAL fsync per write)",
                lambda: RocksDBStorePartition(Path(tmp) / "b", RocksDBOptions(sync_writes=True)),
            ),
        ]
        print(f"{args.keys}-key batches, {args.seconds:g}s each")
        for name, make in cases:
            part = make()
            try:
                full, write_only = _run(part, args.seconds, args.keys, args.key_space)
            finally:
                part.close()
            print(
                f"{name:34} commit: {full:8.1f}/s ({full * args.keys:>11,.0f} keys/s)   "
                f"write only: {write_only:8.1f}/s ({write_only * args.keys:>11,.0f} keys/s)"
            )


if __name__ == "__main__":
    main()
