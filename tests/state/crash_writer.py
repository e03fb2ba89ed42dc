"""Child process of the crash test: writes batches into a RocksDB partition until killed.

Batch n sets every key of a fixed key set to n and the changelog offset to n. Prints the
first batch number once it has been written, then loops. A second argument sets the store's
``flush_interval`` (seconds, or "none"), so that background flushes run while it is killed; a
third its ``write_behind_interval`` (default 0: every batch goes to RocksDB at once).
"""

from __future__ import annotations

import sys
from pathlib import Path

from streams_app.state import RocksDBStorePartition
from streams_app.state.rocksdb import RocksDBOptions

KEYS = 2000
VALUE_PAD = b"." * 200


def main(path: str, flush_interval: float | None = None, write_behind: float = 0.0) -> None:
    options = RocksDBOptions(flush_interval=flush_interval, write_behind_interval=write_behind)
    part = RocksDBStorePartition(Path(path), options)
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
    args = sys.argv[1:] + ["none", "0"][len(sys.argv) - 2 :]
    main(args[0], None if args[1] == "none" else float(args[1]), float(args[2]))
