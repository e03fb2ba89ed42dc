"""Fixtures shared by the state tests: every test runs against both store kinds where it can."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streams_app.state import MemoryStore, RocksDBStore, Store


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore("table")
    else:
        s = RocksDBStore("table", tmp_path / "table")
    try:
        yield s
    finally:
        s.close()
