"""Settings: defaults < keyword arguments < environment; every mistake names the setting."""

from __future__ import annotations

import importlib.util
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from streams_app import App, ConfigError
from streams_app import settings as settings_module
from streams_app.settings import Settings, warn_unknown_environment


def test_environment_overrides_keyword_arguments() -> None:
    env = {
        "STREAMS_APP_BROKER": "kafka://kafka:19092",
        "STREAMS_APP_COMMIT_INTERVAL": "0.5",
        "STREAMS_APP_STATE_DIR": "/var/lib/x",
        "STREAMS_APP_LINEAGE_HEADERS": "false",
        "STREAMS_APP_MAX_RETRIES": "none",
    }
    s = Settings.build("orders", {"broker": "kafka://localhost:9092", "max_retries": 3}, env)
    assert s.bootstrap_servers == "kafka:19092"
    assert s.effective_commit_interval == 0.5
    assert s.state_dir == Path("/var/lib/x")
    assert s.lineage_headers is False
    assert s.max_retries is None


def test_exactly_once_defaults_follow_kafka_streams() -> None:
    s = Settings.build("a", {}, {})
    assert s.processing_guarantee == "exactly_once_v2"
    assert s.effective_commit_interval == 0.1
    assert s.transaction_timeout == 10.0
    assert s.max_request_size == 1_048_576
    alos = Settings.build("a", {"processing_guarantee": "at_least_once"}, {})
    assert alos.effective_commit_interval == 1.0


def test_output_batches_linger_until_the_commit_only_under_exactly_once() -> None:
    # Exactly-once outputs are invisible until the commit, which sends every open batch:
    # they wait for it (at most 100 ms, Kafka Streams' producer linger.ms). Otherwise an
    # output is visible once acknowledged, and a long linger would be latency.
    assert Settings.build("a", {}, {}).effective_producer_linger_ms == 100
    assert Settings.build("a", {"commit_interval": 0.03}, {}).effective_producer_linger_ms == 30
    assert Settings.build("a", {"commit_interval": 2.0}, {}).effective_producer_linger_ms == 100
    for guarantee in ("at_least_once", "at_most_once"):
        settings = Settings.build("a", {"processing_guarantee": guarantee}, {})
        assert settings.effective_producer_linger_ms == 5
    chosen = Settings.build("a", {}, {"STREAMS_APP_PRODUCER_LINGER_MS": "5"})
    assert chosen.effective_producer_linger_ms == 5
    unset = Settings.build(
        "a", {"producer_linger_ms": 7}, {"STREAMS_APP_PRODUCER_LINGER_MS": "none"}
    )
    assert unset.effective_producer_linger_ms == 100


NAN, INF = math.nan, math.inf

#: Every setting with values that must be refused at start. Each value is tried alone.
WRONG_VALUES: dict[str, list[Any]] = {
    # (Faust's spellings are valid here: "exactly_once", a URL without a port.)
    "broker": ["", "kafka://host:port", "host:notaport", "host:70000", 9092],
    "processing_guarantee": ["exactly_twice", None, 1],
    "store": ["redis://", "rocksdb", None],
    "state_dir": [None, 3],
    "commit_interval": [NAN, INF, -1, 0, "abc", True],
    "commit_every": [0, -5, 1.5, "10", True],
    "transaction_timeout": [NAN, -10, 0, "10", 0.05, 3_000_000],
    "session_timeout": [NAN, INF, -1, 0, "10"],
    "heartbeat_interval": [-3, 0, NAN, 10, 11],
    "group_instance_id": ["", "a b", "w/1", "x" * 250, 7, True],
    "max_poll_interval": [-1, 0, INF, "300", 0.01],
    "max_poll_records": [0, -1, 2.5, None],
    "topic_partitions": [0, -1, "8", 1.0],
    "topic_replication_factor": [0, -1, 40000, "3"],
    "error_policy": ["ignore", "", None],
    "lineage_format": ["binary", "", None],
    "retry_backoff": [-0.1, 0, NAN, "0.1", 20],
    "retry_backoff_max": [-1, 0, INF, 0.01],
    "max_retries": [-1, 2.5, "3", True],
    "dead_letter_topic": ["", "__consumer_offsets", "__{topic}", "bad name", "a/b", None],
    "lineage_headers": ["no", "false", 0, None],
    "process_during_commit": ["yes", 1, None],
    "transaction_headers": ["yes", 1, None],
    "gc_young_threshold": [-1, 2.5, "10000", None, True, 20_000_000],
    "restore_timeout": [0, -1, NAN, 5, "300"],
    "producer_linger_ms": [-1, 2.5, "5", True],
    "producer_max_batch_size": [0, -1, "big", 2_000_000],
    "max_request_size": [0, -1, 1.5, "1MB", 2**31],
    "compression_type": ["brotli", "LZ4", 1],
    "security_protocol": ["TLS", "ssl", None],
    "ssl_cafile": ["/nonexistent/ca.pem"],
    "ssl_certfile": ["/nonexistent/cert.pem"],
    "ssl_keyfile": ["/nonexistent/key.pem"],
    "ssl_password": ["secret"],
    "sasl_mechanism": ["FOO", "GSSAPI", "plain"],
    "sasl_username": ["alice", ""],
    "sasl_password": ["hunter2", ""],
    "postgres_dsn": ["", "   ", 7, "mysql://host/db"],
    "transaction_version": [3, 0, "2", 1.5],
    "table_standby_replicas": [-1, 1.5, "1", None, True, 33],
    "acceptable_recovery_lag": [-1, 2.5, "10000", None],
    "max_warmup_replicas": [0, -2, 1.5, "2", None],
    "probing_rebalance_interval": [0, -1, NAN, INF, "600", None, 3_000_000],
    "web_enabled": ["yes", 1, None],
    "web_bind": ["", "local host", None, 127],
    "web_port": [-1, 65536, "6066", 1.5, True],
    "web_host": ["", "http://x", "a b", 5],
    "progress_interval": [0, -1, NAN, "5"],
    "max_task_idle": [-2, NAN, INF, "1", True],
    "state_cache_max_bytes": [-1, 1.5, "64MB", True, None],
    "state_uncommitted_max_bytes": [-1, 2.5, "1GB", False],
    "rocksdb_block_cache_bytes": [0, 1024, 1.5e8, "64MiB", None],
    "rocksdb_memtable_bytes": [0, -1, 4096, "256MiB", None],
    "rocksdb_max_open_files": [0, 10, -2, 64.0, "64", None],
    "rocksdb_write_behind_interval": [-0.5, 61, float("nan"), True, "1", None],
    "rocksdb_write_behind_bytes": [-1, 1.5, "16", True, None],
    # 9 s plus the commit interval does not fit in 90% of the 10 s transaction timeout.
    "processing_timeout": [0, -1, NAN, INF, "5", True, 9],
    "stall_intervals": [0, -1, 1.5, "30", None, True],
    # 5 s is not above the 8 s processing timeout a 10 s transaction timeout leaves.
    "liveness_timeout": [0, -1, NAN, "60", True, 5],
    "missing_topic_timeout": [0, -1, NAN, INF, "60", None],
    "shutdown_timeout": [0, -1, NAN, INF, "10", None],
}

#: Settings whose wrong values only make sense next to others (TLS or SASL on).
CONTEXT: dict[str, dict[str, Any]] = {
    "ssl_cafile": {"security_protocol": "SSL"},
    "ssl_certfile": {"security_protocol": "SSL"},
    "ssl_keyfile": {"security_protocol": "SSL"},
    "sasl_mechanism": {
        "security_protocol": "SASL_SSL",
        "sasl_username": "u",
        "sasl_password": "p",
    },
    "heartbeat_interval": {"session_timeout": 10},
    "max_poll_interval": {"commit_interval": 0.5, "processing_guarantee": "at_least_once"},
    "retry_backoff": {"retry_backoff_max": 10},
    "retry_backoff_max": {"retry_backoff": 0.1},
}
#: The setting an error names when the wrong value is wrong only relative to another one.
NAMED: dict[tuple[str, Any], str] = {
    ("sasl_username", ""): "sasl_username",
    ("sasl_password", ""): "sasl_password",
    ("retry_backoff_max", 0.01): "retry_backoff",  # "retry_backoff ... above retry_backoff_max"
}


def test_every_setting_is_covered() -> None:
    assert set(WRONG_VALUES) == set(Settings.names()) - {"extra"}


CASES = [
    pytest.param(name, value, id=f"{name}={value!r}")
    for name, values in WRONG_VALUES.items()
    for value in values
]


@pytest.mark.parametrize(("name", "value"), CASES)
def test_wrong_value_names_the_setting_the_value_and_the_fix(
    name: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test plugin sets STREAMS_APP_WEB_PORT=0 for every worker; the environment would win.
    monkeypatch.delenv("STREAMS_APP_WEB_PORT", raising=False)
    kwargs = dict(CONTEXT.get(name, {}))
    if name in ("sasl_username", "sasl_password") and value == "":
        kwargs.update(security_protocol="SASL_SSL", sasl_mechanism="PLAIN")
        kwargs.update(sasl_username="u", sasl_password="p")
        kwargs["security_protocol"] = "SASL_PLAINTEXT"
    kwargs[name] = value
    with pytest.raises(ConfigError) as info:
        App("app", **kwargs)
    error = info.value
    assert error.setting == NAMED.get((name, value), name), str(error)
    assert "Fix:" in str(error)
    assert name in str(error)
    if name in ("sasl_password", "ssl_password", "postgres_dsn"):
        assert str(value) not in str(error) or value == ""
    elif value not in ("", None) and name != "sasl_username":
        shown = repr(value) if not isinstance(value, float) else str(value)
        assert shown in str(error) or str(value) in str(error), str(error)


def test_unknown_keyword_suggests_the_closest_setting() -> None:
    with pytest.raises(ConfigError) as info:
        App("app", commit_intervall=1)
    assert info.value.setting == "commit_intervall"
    assert "did you mean 'commit_interval'" in str(info.value)


def test_sasl_protocol_requires_a_mechanism_and_lists_them() -> None:
    with pytest.raises(ConfigError) as info:
        App("app", security_protocol="SASL_SSL")
    assert info.value.setting == "sasl_mechanism"
    assert "SCRAM-SHA-512" in str(info.value)


def test_relations_between_settings() -> None:
    with pytest.raises(ConfigError, match="below commit_interval") as info:
        App("app", transaction_timeout=0.05, commit_interval=0.1)
    assert info.value.setting == "transaction_timeout"
    with pytest.raises(ConfigError, match="not above transaction_timeout") as info:
        App("app", restore_timeout=10, transaction_timeout=10)
    assert info.value.setting == "restore_timeout"
    # Under at-least-once there is no transaction to wait for.
    App("app", restore_timeout=5, processing_guarantee="at_least_once")
    # A transaction lasts a commit interval plus the batch in progress: room must be left.
    with pytest.raises(ConfigError, match="leaves no time for processing") as info:
        App("app", commit_interval=9.5, transaction_timeout=10)
    assert info.value.setting == "commit_interval"


def test_processing_timeout_is_derived_from_what_it_must_fit_in() -> None:
    eos = App("app").conf
    # 90% of what fits: 0.9 * (0.9 * 10 s - 0.1 s).
    assert eos.effective_processing_timeout == pytest.approx(8.01)
    assert eos.effective_processing_timeout + 0.1 < 0.9 * eos.transaction_timeout
    assert eos.effective_liveness_timeout == 60.0
    alos = App("app", processing_guarantee="at_least_once").conf
    assert alos.effective_processing_timeout + 1.0 < 0.9 * alos.max_poll_interval
    assert App("app", processing_timeout=2.5).conf.effective_processing_timeout == 2.5


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("STREAMS_APP_COMMIT_EVERY", "lots"),
        ("STREAMS_APP_COMMIT_EVERY", "1.5"),
        ("STREAMS_APP_COMMIT_INTERVAL", "nan"),
        ("STREAMS_APP_COMMIT_INTERVAL", "inf"),
        ("STREAMS_APP_COMMIT_INTERVAL", "abc"),
        ("STREAMS_APP_LINEAGE_HEADERS", "nope"),
        ("STREAMS_APP_LINEAGE_HEADERS", "2"),
        ("STREAMS_APP_TRANSACTION_HEADERS", ""),
        ("STREAMS_APP_SESSION_TIMEOUT", "-1"),
        ("STREAMS_APP_MAX_RETRIES", "-1"),
    ],
)
def test_bad_environment_value_names_the_variable(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.build("a", {}, {variable: raw})
    name = variable.removeprefix("STREAMS_APP_").lower()
    assert info.value.setting == name
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("On", True),
        ("false", False),
        ("0", False),
        ("no", False),
        ("OFF", False),
    ],
)
def test_environment_booleans_are_strict(raw: str, expected: bool) -> None:
    s = Settings.build("a", {}, {"STREAMS_APP_LINEAGE_HEADERS": raw})
    assert s.lineage_headers is expected


def test_secret_in_a_bad_environment_value_is_not_echoed() -> None:
    # sasl_password is a plain string, so any value parses; a secret never shows in errors.
    with pytest.raises(ConfigError) as info:
        Settings.build(
            "a", {}, {"STREAMS_APP_SASL_PASSWORD": "hunter2", "STREAMS_APP_SASL_USERNAME": "u"}
        )
    assert "hunter2" not in str(info.value)


def test_unknown_environment_variable_is_warned_once_with_the_closest_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {"STREAMS_APP_COMIT_INTERVAL": "1", "STREAMS_APP_TEST_BOOTSTRAP": "x:1"}
    settings_module._warned_env.discard("STREAMS_APP_COMIT_INTERVAL")
    with caplog.at_level(logging.WARNING, logger="streams_app.settings"):
        Settings.build("a", {}, env)
        Settings.build("a", {}, env)
    warnings = [r.getMessage() for r in caplog.records if "COMIT" in r.getMessage()]
    assert len(warnings) == 1
    assert "did you mean STREAMS_APP_COMMIT_INTERVAL" in warnings[0]
    assert warn_unknown_environment(env) == []  # already reported


def test_secrets_are_masked_in_describe_and_repr() -> None:
    s = Settings.build(
        "a",
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "u",
            "sasl_password": "hunter2",
        },
        {},
    )
    assert "hunter2" not in repr(s.describe())
    assert "hunter2" not in repr(s)
    assert "hunter2" not in str(s)
    assert "sasl_password='*****'" in repr(s)
    assert s.security()["sasl_plain_password"] == "hunter2"
    app = App(
        "a",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u",
        sasl_password="hunter2",
    )
    assert "hunter2" not in repr(app.conf)


def test_missing_compression_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_cramjam(name: str, *args: Any) -> Any:
        return None if name == "cramjam" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_cramjam)
    for codec in ("lz4", "snappy", "zstd"):
        with pytest.raises(ConfigError, match=r"streams_app\[compression\]") as info:
            App("a", compression_type=codec)
        assert info.value.setting == "compression_type"
    App("a", compression_type="gzip")  # stdlib


def test_compression_codecs_are_installed_with_the_extra() -> None:
    # make setup installs streams_app[compression]; aiokafka must then accept every codec.
    from aiokafka import codec

    assert codec.has_lz4() and codec.has_snappy() and codec.has_zstd()
    for name in ("lz4", "snappy", "zstd", "gzip"):
        App("a", compression_type=name)


def test_unreadable_tls_files_are_named(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError) as info:
        App("a", security_protocol="SSL", ssl_cafile=str(garbage))
    assert info.value.setting == "ssl_cafile"
    assert str(garbage) in str(info.value)


def test_tls_settings_without_tls_are_refused(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(ConfigError) as info:
        App("a", ssl_cafile=str(ca))
    assert info.value.setting == "ssl_cafile"
    assert "security_protocol" in str(info.value)


def test_worker_overrides_are_validated() -> None:
    s = Settings.build("a", {}, {})
    with pytest.raises(ConfigError) as info:
        s.replace(commit_interval=-1)
    assert info.value.setting == "commit_interval"
    with pytest.raises(ConfigError, match="did you mean 'state_dir'"):
        s.replace(state_dirr="x")
    assert s.replace(state_dir="x").state_dir == Path("x")


def test_group_instance_id_reaches_the_group_consumer_only() -> None:
    """Static membership is for the worker's group consumer; the restore and standby
    consumers have no group and must not carry an instance id."""
    from streams_app.runtime import guarantees

    conf = Settings.build("a", {}, {"STREAMS_APP_GROUP_INSTANCE_ID": "pod-3"})
    assert conf.group_instance_id == "pod-3"
    assert guarantees.consumer_config(conf).group_instance_id == "pod-3"
    assert guarantees.restore_consumer_config(conf).group_instance_id is None
    assert guarantees.standby_consumer_config(conf).group_instance_id is None
    assert guarantees.consumer_config(Settings.build("a", {}, {})).group_instance_id is None
