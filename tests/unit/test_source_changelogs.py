"""The start-up check of input topics that restore a store, on declarations (no broker): what
the broker reports of each topic is given as it would answer DescribeConfigs."""

from __future__ import annotations

import pytest

from streams_app import App, ConfigError, JoinWindows
from streams_app.runtime.source_changelogs import check_source_changelogs, restoring_topics

COMPACT = {"cleanup.policy": "compact"}
DELETE_FOREVER = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


def table_app() -> App:
    app = App("srcchk-table")
    customers = app.topic("customers", key_type=str, config=COMPACT)
    app.topic("orders", key_type=str).join(app.Table("customers", source=customers))
    # Not checked: a table whose source is not declared compacted keeps its own changelog.
    app.Table("prices", source=app.topic("prices", key_type=str))
    return app


def buffer_app() -> App:
    app = App("srcchk-buffer")
    orders = app.topic("orders", key_type=str)
    payments = app.topic("payments", key_type=str)
    orders.join(payments, JoinWindows(60, grace=30), changelog="input")  # retention 150 s
    return app


def test_the_inputs_that_restore_stores_are_the_ones_described() -> None:
    assert restoring_topics(table_app()) == {"customers"}
    assert restoring_topics(buffer_app()) == {"orders", "payments"}


def test_a_table_source_compacted_on_the_broker_passes_and_one_that_is_not_is_named() -> None:
    check_source_changelogs(table_app(), {"customers": {"cleanup.policy": "compact,delete"}})
    check_source_changelogs(table_app(), {})  # not described (no right to): not checked
    with pytest.raises(ConfigError, match=r"cleanup.policy of topic 'customers'.*'delete'"):
        check_source_changelogs(table_app(), {"customers": {"cleanup.policy": "delete"}})


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("cleanup.policy", "compact", r"compacted \(cleanup.policy=compact\)"),
        ("retention.ms", "149999", "keeps records 149999 ms"),
        ("retention.bytes", "1073741824", "has retention.bytes=1073741824"),
    ],
)
def test_a_buffer_input_that_would_lose_records_is_named(
    setting: str, value: str, says: str
) -> None:
    app = buffer_app()
    check_source_changelogs(app, {"orders": DELETE_FOREVER, "payments": DELETE_FOREVER})
    check_source_changelogs(app, {"payments": {**DELETE_FOREVER, "retention.ms": "150000"}})
    with pytest.raises(ConfigError, match=f"join 'orders-join-payments'.*right buffer.*{says}"):
        check_source_changelogs(app, {"payments": {**DELETE_FOREVER, setting: value}})
