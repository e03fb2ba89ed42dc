"""pytest plugin shipped with streams_app (registered through the ``pytest11`` entry point).

Installing streams_app gives a test suite these fixtures:

- ``kafka_broker``: a real single-node Kafka 4.x broker for the whole session;
- ``kafka_cluster``: a real 3-node cluster (replication 3, ``min.insync.replicas=2``) for fault
  tests; any node a test kills is restarted before the next test gets the cluster;
- ``bootstrap_servers``: the broker's address;
- ``unique``: a short unique suffix for topic and group names, so tests never share state.

Set ``STREAMS_APP_TEST_BOOTSTRAP`` to run against a broker you started yourself (for example the
``docker-compose.yml`` one) instead of the embedded one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from streams_app.broker import EmbeddedKafka

_BROKER_KEY = pytest.StashKey["EmbeddedKafka | ExternalKafka"]()
_CLUSTER_KEY = pytest.StashKey["EmbeddedKafka"]()


class ExternalKafka:
    """Stands in for EmbeddedKafka when the suite is pointed at a broker it does not own."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap_servers = bootstrap

    def log_tails(self, lines: int = 40) -> str:
        return f"(external broker at {self.bootstrap_servers}: no log available)"


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedKafka | ExternalKafka]:
    external = os.environ.get("STREAMS_APP_TEST_BOOTSTRAP")
    if external:
        yield ExternalKafka(external)
        return
    kafka = EmbeddedKafka(1).start()
    request.config.stash[_BROKER_KEY] = kafka
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def _kafka_cluster_session(request: pytest.FixtureRequest) -> Iterator[EmbeddedKafka]:
    kafka = EmbeddedKafka(3).start()
    request.config.stash[_CLUSTER_KEY] = kafka
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture
def kafka_cluster(_kafka_cluster_session: EmbeddedKafka) -> Iterator[EmbeddedKafka]:
    _kafka_cluster_session.ensure_all_running()
    yield _kafka_cluster_session
    _kafka_cluster_session.ensure_all_running()


@pytest.fixture
def bootstrap_servers(kafka_broker: EmbeddedKafka | ExternalKafka) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[Any]:
    """When a test that used a broker fails, put the broker's last log lines in the report."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    fixturenames = getattr(item, "fixturenames", ())
    if "kafka_cluster" in fixturenames:
        cluster = item.config.stash.get(_CLUSTER_KEY, None)
        if cluster is not None:
            report.sections.append(("kafka cluster log", cluster.log_tails(30)))
    elif "kafka_broker" in fixturenames or "bootstrap_servers" in fixturenames:
        broker = item.config.stash.get(_BROKER_KEY, None)
        if broker is not None:
            report.sections.append(("kafka broker log", broker.log_tails(40)))
