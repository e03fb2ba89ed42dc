"""The stream-stream joins of the differential test as a worker process (``-A
tests.joins.ss_crash_app``): inner, left and outer joins of ``<inputs>left`` and
``<inputs>right`` over an asymmetric window with grace (tests/joins/apps.py).

The app id and topic prefixes come from JOIN_TEST_* variables, so that each test has its own;
the broker and timing settings from STREAMS_APP_* variables, as in production.
"""

from __future__ import annotations

import os

from tests.joins.apps import join_app
from tests.joins.data import Params

STREAM_STREAM = ("ss-inner", "ss-left", "ss-outer")

app = join_app(
    os.environ.get("JOIN_TEST_APP", "ss-joins-dev"),
    os.environ.get("JOIN_TEST_INPUTS", "in-dev-"),
    os.environ.get("JOIN_TEST_OUTPUTS", "out-dev-"),
    Params(),
    int(os.environ.get("JOIN_TEST_PARTITIONS", "2")),
    STREAM_STREAM,
)
