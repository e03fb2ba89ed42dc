"""Micro-benchmark: ``PartitionTransaction.commit`` throughput with 1,000-key batches.

    python -m streams_app.state.bench [--seconds 3] [--keys 1000] [--key-space 100000]

Each round sets ``--keys`` keys (drawn from ``--key-space``) to JSON values in a transaction and
commits it with an offset, as the runtime does after every Kafka commit. Reported per store:
commits/s and keys/s, for the whole commit (encoding + write) and for ``StorePartition.write``
alone (the pre-encoded batch). Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state.base import PartitionTransaction, StorePartition
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--key-space", type=int, default=100_000)
    args = parser.parse_args()
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
