"""The stream-stream and foreign-key joins of the differential test as one worker process
(``-A tests.joins.ss_crash_app``): inner, left and outer joins of ``<inputs>left`` and
``<inputs>right`` over an asymmetric window with grace (the inner join twice: once with its
buffers restored from the input topics, ``changelog="input"``), and the inner and left foreign-key
joins of the tables built from the same two topics (tests/joins/apps.py). One process runs
both, so that each SIGKILL of the crash test strikes both kinds of join.

The app id and topic prefixes come from JOIN_TEST_* variables, so that each test has its own;
the broker and timing settings from STREAMS_APP_* variables, as in production.
"""

from __future__ import annotations

import os

from tests.joins.apps import join_app
from tests.joins.data import Params

STREAM_STREAM = ("ss-inner", "ss-left", "ss-outer", "ss-inner-input")
FOREIGN_KEY = ("fk-inner", "fk-left")
KINDS = STREAM_STREAM + FOREIGN_KEY

app = join_app(
    os.environ.get("JOIN_TEST_APP", "ss-joins-dev"),
    os.environ.get("JOIN_TEST_INPUTS", "in-dev-"),
    os.environ.get("JOIN_TEST_OUTPUTS", "out-dev-"),
    Params(),
    int(os.environ.get("JOIN_TEST_PARTITIONS", "2")),
    KINDS,
)
