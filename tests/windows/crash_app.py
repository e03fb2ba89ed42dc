"""The windowed-count topology as a worker process (``-A tests.windows.crash_app``).

Topic names and the app id come from WINDOW_TEST_* variables, so that each test has its own; the
broker and timing settings from STREAMS_APP_* variables, as in production.
"""

from __future__ import annotations

import os

from tests.windows.apps import windowed_counts_app
from tests.windows.data import Sizes

app = windowed_counts_app(
    os.environ.get("WINDOW_TEST_APP", "windows-dev"),
    input_topic=os.environ.get("WINDOW_TEST_INPUT", "views-dev"),
    out_prefix=os.environ.get("WINDOW_TEST_PREFIX", "final-dev-"),
    sizes=Sizes(),
)
