"""Child process of the crash test: writes batches into a RocksDB partition until killed.

Batch n sets every key of a fixed key set to n and the changelog offset to n. Prints the
first batch number once it has been written, then loops. A second argument sets the store's
``flush_interval`` (seconds), so that background flushes run while it is killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from streams_app.state import RocksDBStorePartition
from streams_app.state.rocksdb import RocksDBOptions

KEYS = 2000
VALUE_PAD = b"." * 200


def main(path: str, flush_interval: float | None = None) -> None:
    part = RocksDBStorePartition(Path(path), RocksDBOptions(flush_interval=flush_interval))
    n = (part.changelog_offset or 0) + 1
    keys = [f"key-{i:05}".encode() for i in range(KEYS)]
    first = True
    while True:
        value = str(n).encode() + b"|" + VALUE_PAD
        part.write(dict.fromkeys(keys, value), n)
        if first:
            print(n, flush=True)
            first = False
        n += 1


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else None)
