"""Fixtures of the Spark tests: one SparkSession per test session, a real PostgreSQL server.

The SparkSession is local[2] on 127.0.0.1 with the Kafka connector from the per-user cache
(fetched from Maven Central by the first run). PostgreSQL is the Debian package's server
(installed by streams_app.spark.postgres_server when missing), started in a temporary
directory on 127.0.0.1 and a free port; each test gets a database of its own.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from streams_app.spark.postgres_server import PostgresServer
from streams_app.spark.session import spark_session
from tests.spark.support import TEST_CONF

_TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    started = time.monotonic()
    session = spark_session("streams_app-tests", "local[2]", conf=TEST_CONF)
    _TIMINGS["SparkSession start (incl. connector jars)"] = time.monotonic() - started
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    # Not below pytest's tmp_path: that is 0700 root's, and the server runs as 'postgres'.
    root = Path(tempfile.mkdtemp(prefix="streams-app-pg-"))
    started = time.monotonic()
    server = PostgresServer(root, durable=False).start()
    _TIMINGS["PostgreSQL initdb + start"] = time.monotonic() - started
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer, unique: str) -> str:
    """A fresh database for one test on the session's server."""
    name = f"test_{unique}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _TIMINGS:
        terminalreporter.section("spark test timings")
        for name, seconds in _TIMINGS.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f}s")
