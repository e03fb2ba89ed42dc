"""An inner stream-stream join whose buffers are restored from its input topics
(``changelog="input"``) as one worker process (``-A tests.joins.input_changelog_app``), for
test_input_changelog_kafka.py. The app id and topic prefix come from JOIN_TEST_* variables,
the broker from STREAMS_APP_BROKER."""

from __future__ import annotations

import os

import streams_app
from streams_app import JoinWindows

PREFIX = os.environ.get("JOIN_TEST_INPUTS", "icin-dev-")

app = streams_app.App(os.environ.get("JOIN_TEST_APP", "ic-dev"), topic_partitions=2)
orders = app.topic(PREFIX + "orders", key_type=str, value_type=str)
payments = app.topic(PREFIX + "payments", key_type=str, value_type=str)
paid = app.topic(PREFIX + "paid", key_type=str, value_type=str)
orders.join(
    payments, JoinWindows(600), joiner=lambda o, p: f"{o}+{p}", changelog="input", name="paid"
).to(paid)
