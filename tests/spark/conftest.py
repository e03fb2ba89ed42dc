"""Fixtures of the Spark tests: one SparkSession per test session, a real PostgreSQL server.

The SparkSession is local[2] on 127.0.0.1 with the Kafka connector from the per-user cache
(fetched from Maven Central by the first run). PostgreSQL comes from streams_app's pytest plugin
(``postgres_server`` / ``postgres_dsn``: the Debian package's server, started in a temporary
directory on 127.0.0.1 and a free port; each test gets a database of its own).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streams_app.spark.session import spark_session
from tests import figures
from tests.spark.support import TEST_CONF

_TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    started = time.monotonic()
    session = spark_session("streams_app-tests", "local[2]", conf=TEST_CONF)
    seconds = time.monotonic() - started
    _TIMINGS["SparkSession start (incl. connector jars)"] = seconds
    figures.record_startup(request.config, "Spark", start=seconds)
    try:
        yield session
    finally:
        session.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _TIMINGS:
        terminalreporter.section("spark test timings")
        for name, seconds in _TIMINGS.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f}s")
