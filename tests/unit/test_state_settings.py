"""The state memory settings: defaults, the environment, and a clear error for each mistake."""

from __future__ import annotations

import pytest

from streams_app import App, ConfigError
from streams_app.settings import Settings
from streams_app.state import rocksdb_options
from streams_app.state.budget import worker_memory_estimate

MiB = 1024 * 1024


def test_defaults_and_environment() -> None:
    s = Settings.build("a", {}, {})
    assert s.state_cache_max_bytes == 64 * MiB
    assert s.state_uncommitted_max_bytes == 64 * MiB
    assert s.rocksdb_block_cache_bytes == 64 * MiB
    assert s.rocksdb_memtable_bytes == 256 * MiB
    assert s.rocksdb_max_open_files == 64
    assert s.rocksdb_write_behind_interval == 1.0
    assert s.rocksdb_write_behind_bytes == 16 * MiB
    env = {
        "STREAMS_APP_ROCKSDB_WRITE_BEHIND_INTERVAL": "0",
        "STREAMS_APP_ROCKSDB_WRITE_BEHIND_BYTES": str(4 * MiB),
        "STREAMS_APP_STATE_CACHE_MAX_BYTES": "0",
        "STREAMS_APP_STATE_UNCOMMITTED_MAX_BYTES": "none",
        "STREAMS_APP_ROCKSDB_MAX_OPEN_FILES": "-1",
        "STREAMS_APP_ROCKSDB_MEMTABLE_BYTES": str(32 * MiB),
    }
    s = Settings.build("a", {}, env)
    assert s.state_cache_max_bytes == 0
    assert s.state_uncommitted_max_bytes is None
    assert s.rocksdb_max_open_files == -1
    options = rocksdb_options(s)
    assert options.max_open_files == -1
    assert options.total_write_buffer_bytes == 32 * MiB
    assert options.block_cache_bytes == 64 * MiB
    assert options.write_behind_interval == 0
    assert options.write_behind_max_bytes == 4 * MiB


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"state_cache_max_bytes": -1}, "state_cache_max_bytes"),
        ({"state_cache_max_bytes": 1.5}, "state_cache_max_bytes"),
        ({"state_uncommitted_max_bytes": -5}, "state_uncommitted_max_bytes"),
        ({"rocksdb_block_cache_bytes": 1000}, "rocksdb_block_cache_bytes"),
        ({"rocksdb_memtable_bytes": 0}, "rocksdb_memtable_bytes"),
        ({"rocksdb_max_open_files": 5}, "rocksdb_max_open_files"),
        ({"rocksdb_max_open_files": True}, "rocksdb_max_open_files"),
        ({"rocksdb_write_behind_interval": -1}, "rocksdb_write_behind_interval"),
        ({"rocksdb_write_behind_interval": 3600}, "rocksdb_write_behind_interval"),
        ({"rocksdb_write_behind_interval": "1s"}, "rocksdb_write_behind_interval"),
        ({"rocksdb_write_behind_bytes": -1}, "rocksdb_write_behind_bytes"),
        ({"rocksdb_write_behind_bytes": 0.5}, "rocksdb_write_behind_bytes"),
    ],
)
def test_wrong_state_settings_name_the_setting_and_the_fix(
    kwargs: dict[str, object], setting: str
) -> None:
    with pytest.raises(ConfigError) as info:
        App("app", **kwargs)
    assert info.value.setting == setting
    assert "Fix:" in str(info.value)


def test_the_memory_formula_adds_the_budgets() -> None:
    s = Settings.build("a", {}, {})
    estimate = worker_memory_estimate(s, table_partitions=32, input_partitions=16)
    assert estimate["total"] == sum(v for k, v in estimate.items() if k != "total")
    assert estimate["read_cache"] == 64 * MiB
    assert estimate["write_behind"] == 16 * MiB
    assert estimate["total"] == 632 * MiB  # docs/memory.md's example: 16 + 32 partitions
    smaller = Settings.build("a", {"state_cache_max_bytes": 0, "rocksdb_memtable_bytes": MiB}, {})
    assert (
        worker_memory_estimate(smaller, table_partitions=32)["total"]
        < estimate["total"] - 300 * MiB
    )
