"""StateDirectory: one worker per directory, a stable process id, and where tables live."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streams_app.errors import ConfigError
from streams_app.state import StateDirectory, open_store


def test_creates_app_dir_and_a_stable_process_id(tmp_path: Path) -> None:
    with StateDirectory(tmp_path, "orders") as d:
        first = d.process_id
        assert d.path == tmp_path / "orders"
        assert (d.path / "process-id").read_text().strip() == first
        assert len(first) == 32 and int(first, 16) >= 0
        assert d.transactional_id() == f"orders-{first}"
    with StateDirectory(tmp_path, "orders") as d:
        assert d.process_id == first
    with StateDirectory(tmp_path / "other", "orders") as other:
        assert other.process_id != first
    with StateDirectory(tmp_path, "payments") as other_app:
        assert other_app.process_id != first


def test_a_second_worker_on_the_same_dir_fails_with_config_error(tmp_path: Path) -> None:
    with StateDirectory(tmp_path, "orders"):
        with pytest.raises(ConfigError) as info:
            StateDirectory(tmp_path, "orders")
        assert info.value.setting == "state_dir"
        assert "--state-dir" in str(info.value)
        assert str(tmp_path / "orders") in str(info.value)
    # Released on close: the next worker gets it.
    StateDirectory(tmp_path, "orders").close()


def test_lock_held_by_another_process_names_its_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from streams_app.state import StateDirectory;"
            f"d = StateDirectory({str(tmp_path)!r}, 'orders'); print(d.process_id, flush=True);"
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        process_id = holder.stdout.readline().strip()
        with pytest.raises(ConfigError, match=f"pid {holder.pid}") as info:
            StateDirectory(tmp_path, "orders")
        assert info.value.setting == "state_dir"
    finally:
        holder.kill()  # SIGKILL: the kernel releases the flock, no stale lock remains
        holder.wait()
    with StateDirectory(tmp_path, "orders") as d:
        assert d.process_id == process_id


def test_a_damaged_process_id_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "process-id").write_text("")
    with StateDirectory(tmp_path, "orders") as d:
        assert len(d.process_id) == 32
        assert (d.path / "process-id").read_text().strip() == d.process_id


def test_table_paths(tmp_path: Path) -> None:
    with StateDirectory(tmp_path, "orders") as d:
        assert d.table_path("stock") == tmp_path / "orders" / "tables" / "stock"
        assert d.partition_path("stock", 3) == tmp_path / "orders" / "tables" / "stock" / "3"
        for bad in ("", "..", "a/b"):
            with pytest.raises(ConfigError):
                d.table_path(bad)


def test_unwritable_root_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError) as info:
        StateDirectory(blocker, "orders")
    assert info.value.setting == "state_dir"


def test_open_store_by_url(tmp_path: Path) -> None:
    with StateDirectory(tmp_path, "orders") as d:
        rocks = open_store("rocksdb://", d, "stock")
        assert rocks.persistent and rocks.name == "stock"
        rocks.partition(2).write({b"k": b"v"}, 1)
        rocks.close()
        assert (d.partition_path("stock", 2) / "CURRENT").exists()
        memory = open_store("memory://", None, "stock")
        assert not memory.persistent
        memory.close()


@pytest.mark.parametrize("url", ["redis://", "rocksdb", "memory://x", "", "aerospike://host"])
def test_unknown_store_url_names_the_setting_and_the_valid_values(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_store(url, None, "stock")
    assert info.value.setting == "store"
    assert "rocksdb://" in str(info.value) and "memory://" in str(info.value)


def test_rocksdb_store_needs_a_state_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        open_store("rocksdb://", None, "stock")
    assert info.value.setting == "state_dir"
    d = StateDirectory(tmp_path, "orders")
    d.close()
    with pytest.raises(ConfigError):
        open_store("rocksdb://", d, "stock")
