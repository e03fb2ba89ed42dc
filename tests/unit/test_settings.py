"""Settings: defaults < keyword arguments < environment; every mistake names the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_app import App, ConfigError
from streams_app.settings import Settings


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
    alos = Settings.build("a", {"processing_guarantee": "at_least_once"}, {})
    assert alos.effective_commit_interval == 1.0


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"processing_guarantee": "exactly_once"}, "processing_guarantee"),
        ({"transaction_timeout": 0.05, "commit_interval": 0.1}, "transaction_timeout"),
        ({"broker": "kafka://nohostport"}, "broker"),
        ({"store": "redis://"}, "store"),
        ({"error_policy": "ignore"}, "error_policy"),
        ({"heartbeat_interval": 10, "session_timeout": 10}, "heartbeat_interval"),
        ({"commit_intervall": 1}, "commit_intervall"),
        ({"security_protocol": "SASL_SSL"}, "sasl_mechanism"),
        ({"transaction_version": 3}, "transaction_version"),
    ],
)
def test_wrong_settings_name_the_setting_and_the_fix(
    kwargs: dict[str, object], setting: str
) -> None:
    with pytest.raises(ConfigError) as info:
        App("app", **kwargs)
    assert info.value.setting == setting
    assert "Fix:" in str(info.value)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.build("a", {}, {"STREAMS_APP_COMMIT_EVERY": "lots"})
    assert "STREAMS_APP_COMMIT_EVERY" in str(info.value)


def test_secrets_are_masked_in_describe() -> None:
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
    assert s.security()["sasl_plain_password"] == "hunter2"
