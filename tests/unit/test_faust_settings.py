"""Faust's App settings: mapped to ours, honoured, or accepted with one warning; never a hard
error for a valid Faust setting, always one for a name that is neither ours nor Faust's."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streams_app import App, ConfigError
from streams_app.app import faust_settings
from streams_app.settings import EXACTLY_ONCE_V2


def test_faust_names_map_to_ours() -> None:
    app = App(
        "faust-app",
        broker="kafka://somehost",
        broker_commit_interval=0.5,
        broker_session_timeout=30,
        consumer_group_instance_id="worker-1",
        processing_guarantee="exactly_once",
        datadir="/tmp/faust-data",
        version=3,
    )
    conf = app.conf
    assert conf.broker == "somehost:9092"
    assert conf.commit_interval == 0.5
    assert conf.session_timeout == 30
    assert conf.group_instance_id == "worker-1"
    assert conf.processing_guarantee == EXACTLY_ONCE_V2
    assert str(conf.state_dir) == "/tmp/faust-data"
    # Faust's id_format: the consumer group and every internal topic carry the version.
    assert conf.id == "faust-app-v3"
    assert conf.name == "faust-app"


def test_honoured_settings_keep_faust_meaning() -> None:
    conf = App("a", value_serializer="raw", key_serializer="json", web_enabled=False).conf
    assert (conf.value_serializer, conf.key_serializer, conf.web_enabled) == ("raw", "json", False)
    assert App("a", broker="aiokafka://").conf.broker == "localhost:9092"


def test_settings_without_effect_warn_once_naming_why(caplog: pytest.LogCaptureFixture) -> None:
    faust_settings._warned.discard("stream_buffer_maxsize")
    with caplog.at_level(logging.WARNING, logger="streams_app.app.faust_settings"):
        app = App("a", stream_buffer_maxsize=1000)
        App("b", stream_buffer_maxsize=2000)
    warnings = [r.getMessage() for r in caplog.records if "stream_buffer_maxsize" in r.getMessage()]
    assert warnings == [
        "Faust setting 'stream_buffer_maxsize' has no effect on streams_app: the worker fetches "
        "max_poll_records per batch"
    ]
    assert app.conf.stream_buffer_maxsize == 1000


def test_unknown_names_are_errors_in_app_and_in_conf() -> None:
    with pytest.raises(ConfigError) as info:
        App("a", broker_comit_interval=1)
    assert info.value.setting == "broker_comit_interval"
    assert "did you mean 'broker_commit_interval'" in str(info.value)
    app = App("a")
    app.conf.table_cleanup_interval = 1.0  # Faust's, accepted
    app.conf.broker_commit_every = 50  # Faust's name for ours
    assert app.conf.commit_every == 50
    with pytest.raises(ConfigError) as info:
        app.conf.no_such_setting = 1
    assert info.value.setting == "no_such_setting"


#: Faust settings honoured here, with values that must stop the worker at start.
FAUST_WRONG_VALUES: dict[str, list[Any]] = {
    "key_serializer": ["pickle", 3],
    "value_serializer": ["yaml"],
    "version": [0, -1, "2", 1.5],
    "consumer_auto_offset_reset": ["none", "EARLIEST"],
    "reply_expires": [0, -5, "1d", True],
}


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n, values in FAUST_WRONG_VALUES.items() for v in values],
)
def test_wrong_faust_values_name_the_setting(name: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        App("a", **{name: value})
    assert info.value.setting == name
    assert "Fix:" in str(info.value)
