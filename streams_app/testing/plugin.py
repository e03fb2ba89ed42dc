"""pytest plugin shipped with streams_app (registered through the ``pytest11`` entry point).

Installing streams_app gives a test suite these fixtures:

- ``kafka_broker``: a real single-node Kafka 4.x broker for the whole session;
- ``kafka_cluster``: a real 3-node cluster (replication 3, ``min.insync.replicas=2``) for fault
  tests; any node a test kills is restarted before the next test gets the cluster;
- ``networked_kafka_cluster``: the same, networked: each node in a network namespace of its own
  on a private bridge (``cluster.network``, :class:`~streams_app.broker.netns.Network`), so a
  test can cut links between nodes and the workers it places on the network; every cut is
  healed and every node restarted before the next test. Needs root; skipped, with the reason,
  where network namespaces cannot be made;
- ``bootstrap_servers``: the broker's address;
- ``unique``: a short unique suffix for topic and group names, so tests never share state;
- ``secure_kafka``: a real single-node broker with TLS, SASL (SCRAM-SHA-512, PLAIN) and ACLs
  for the whole session (:class:`~streams_app.testing.secure.SecureKafka`).
- ``postgres_server``: a real PostgreSQL (Debian's server binaries, installed when missing and
  we are root) on 127.0.0.1 and a free port for the whole session, fsync off;
- ``postgres_dsn``: a fresh database on it for one test (needs the ``postgres`` extra).

Workers started while the plugin is active serve their web server on any free port
(``STREAMS_APP_WEB_PORT=0`` unless set): ``worker.web_url`` says where.

Set ``STREAMS_APP_TEST_BOOTSTRAP`` to run against a broker you started yourself (for example the
``docker-compose.yml`` one) instead of the embedded one.

And the topology test harness (see docs/testing.md):

- ``topology_driver``: a factory, ``topology_driver(app, **settings)``, of
  :class:`~streams_app.testing.driver.TopologyDriver` (use it with ``async with``). A test that
  uses it runs once per backend: ``[memory]`` on the in-memory Kafka model, ``[kafka]`` on the
  real embedded broker, so a unit test doubles as an integration test;
- ``streams_backend``: the backend of the current run, ``"memory"`` or ``"kafka"``;
- ``@pytest.mark.streams_backends("memory")``: run a test on some backends only;
- ``--streams-backend=memory|kafka|both`` (or ``STREAMS_APP_TEST_BACKEND``): which backends
  to run (default: both).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from streams_app.broker import TEST_SETTINGS, EmbeddedKafka

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.testing.driver import TopologyDriver
    from streams_app.testing.secure import SecureKafka

BACKENDS = ("memory", "kafka")

_BROKER_KEY = pytest.StashKey["EmbeddedKafka | ExternalKafka"]()
_CLUSTER_KEY = pytest.StashKey["EmbeddedKafka"]()
_NETWORKED_KEY = pytest.StashKey["EmbeddedKafka"]()
_SECURE_KEY = pytest.StashKey["SecureKafka"]()
_POSTGRES_START_KEY = pytest.StashKey[float]()


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
    kafka = EmbeddedKafka(1, settings=TEST_SETTINGS).start()
    request.config.stash[_BROKER_KEY] = kafka
    try:
        yield kafka
    finally:
        kafka.discard()  # the session's data: nothing to shut down cleanly for


@pytest.fixture(scope="session")
def _kafka_cluster_session(request: pytest.FixtureRequest) -> Iterator[EmbeddedKafka]:
    kafka = EmbeddedKafka(3, settings=TEST_SETTINGS).start()
    request.config.stash[_CLUSTER_KEY] = kafka
    try:
        yield kafka
    finally:
        kafka.discard()


@pytest.fixture(scope="session")
def _networked_cluster_session(request: pytest.FixtureRequest) -> Iterator[EmbeddedKafka]:
    from streams_app.broker.netns import Network, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"the networked cluster mode needs network namespaces: {reason}")
    network = Network().create()
    try:
        kafka = EmbeddedKafka(3, network=network, settings=TEST_SETTINGS).start()
        request.config.stash[_NETWORKED_KEY] = kafka
        try:
            yield kafka
        finally:
            # As the other session brokers: nobody reads this data again, and a controlled
            # shutdown of three nodes chaos tests ran on took 7 s of the run's last teardown.
            kafka.discard()
    finally:
        network.destroy()


@pytest.fixture
def networked_kafka_cluster(_networked_cluster_session: EmbeddedKafka) -> Iterator[EmbeddedKafka]:
    network = _networked_cluster_session.network
    assert network is not None
    network.heal()
    _networked_cluster_session.ensure_all_running()
    yield _networked_cluster_session
    network.heal()
    _networked_cluster_session.ensure_all_running()


@pytest.fixture(scope="session")
def secure_kafka(request: pytest.FixtureRequest) -> Iterator[SecureKafka]:
    from streams_app.testing.secure import SecureKafka

    kafka = SecureKafka().start()
    request.config.stash[_SECURE_KEY] = kafka
    try:
        yield kafka
    finally:
        kafka.stop(grace=0.0)


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


@pytest.fixture(scope="session")
def postgres_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    import shutil
    import tempfile
    import time

    from streams_app.postgres.server import PostgresServer

    # Not below pytest's tmp_path: that is 0700 root's, and the server runs as 'postgres'.
    root = Path(tempfile.mkdtemp(prefix="streams-app-pg-"))
    started = time.monotonic()
    server = PostgresServer(root, durable=False).start()
    request.config.stash[_POSTGRES_START_KEY] = time.monotonic() - started
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: Any, unique: str) -> str:
    """A fresh database for one test on the session's server."""
    import psycopg

    name = f"test_{unique}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return str(postgres_server.dsn).rsplit("/", 1)[0] + f"/{name}"


# -- the topology test harness -------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("streams_app")
    group.addoption(
        "--streams-backend",
        choices=("memory", "kafka", "both"),
        default=None,
        help="backends topology_driver tests run on (default: both; env STREAMS_APP_TEST_BACKEND)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Every worker a test starts (in this process or as a child process) serves its web
    # server on a free port: several run at once, and 6066 may be taken by a developer's own.
    os.environ.setdefault("STREAMS_APP_WEB_PORT", "0")
    config.addinivalue_line(
        "markers",
        "streams_backends(*names): run this topology_driver test on these backends only "
        "('memory', 'kafka')",
    )


def _selected_backends(config: pytest.Config) -> tuple[str, ...]:
    choice = config.getoption("--streams-backend", None) or os.environ.get(
        "STREAMS_APP_TEST_BACKEND", "both"
    )
    if choice not in ("memory", "kafka", "both"):
        raise pytest.UsageError(f"STREAMS_APP_TEST_BACKEND={choice!r}: use memory, kafka or both")
    return BACKENDS if choice == "both" else (choice,)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that uses ``streams_backend`` (``topology_driver`` does) per backend."""
    if "streams_backend" not in metafunc.fixturenames:
        return
    backends = _selected_backends(metafunc.config)
    marker = metafunc.definition.get_closest_marker("streams_backends")
    if marker is not None:
        unknown = set(marker.args) - set(BACKENDS)
        if unknown:
            raise pytest.UsageError(f"streams_backends: unknown backend(s) {sorted(unknown)}")
        backends = tuple(b for b in backends if b in marker.args)
    params = [
        pytest.param(b, marks=(pytest.mark.kafka,) if b == "kafka" else (), id=b) for b in backends
    ]
    if not params:
        params = [pytest.param("none", marks=pytest.mark.skip(reason="backend not selected"))]
    metafunc.parametrize("streams_backend", params)


class DriverFactory:
    """``topology_driver(app, **settings)``: a driver on this run's backend."""

    def __init__(self, backend: str, bootstrap: str | None, state_root: Path) -> None:
        self.backend = backend
        self.bootstrap_servers = bootstrap
        self._state_root = state_root
        self._made = 0

    def __call__(self, app: App, *, workers: int = 1, **settings: Any) -> TopologyDriver:
        from streams_app.testing.driver import TopologyDriver

        self._made += 1
        state_dir = self._state_root / f"driver-{self._made}"
        if self.backend == "memory":
            return TopologyDriver.memory(app, workers=workers, state_dir=state_dir, **settings)
        assert self.bootstrap_servers is not None
        return TopologyDriver.kafka(
            app, self.bootstrap_servers, workers=workers, state_dir=state_dir, **settings
        )


@pytest.fixture
def topology_driver(
    streams_backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> DriverFactory:
    bootstrap = None
    if streams_backend == "kafka":
        bootstrap = request.getfixturevalue("bootstrap_servers")
    return DriverFactory(streams_backend, bootstrap, tmp_path)


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
    elif "networked_kafka_cluster" in fixturenames:
        cluster = item.config.stash.get(_NETWORKED_KEY, None)
        if cluster is not None:
            report.sections.append(("networked kafka cluster log", cluster.log_tails(30)))
    elif "secure_kafka" in fixturenames:
        secure = item.config.stash.get(_SECURE_KEY, None)
        if secure is not None:
            report.sections.append(("secure kafka log", secure.log_tails(40)))
    elif "kafka_broker" in fixturenames or "bootstrap_servers" in fixturenames:
        broker = item.config.stash.get(_BROKER_KEY, None)
        if broker is not None:
            report.sections.append(("kafka broker log", broker.log_tails(40)))


def startup_timings(config: pytest.Config) -> dict[str, dict[str, float]]:
    """How long the session's real components took to start, in seconds, for those this run
    started: ``{"single broker": {"format": 1.0, "ready": 2.7}, "PostgreSQL": {"start": 0.8},
    ...}`` (printed at the end of the run; a suite can write them down with its figures)."""
    out: dict[str, dict[str, float]] = {}
    started = (
        ("single broker", config.stash.get(_BROKER_KEY, None)),
        ("3-node cluster", config.stash.get(_CLUSTER_KEY, None)),
        ("networked 3-node cluster", config.stash.get(_NETWORKED_KEY, None)),
        ("TLS/SASL/ACL broker", getattr(config.stash.get(_SECURE_KEY, None), "kafka", None)),
    )
    for label, kafka in started:
        if isinstance(kafka, EmbeddedKafka) and kafka.ready_seconds is not None:
            assert kafka.format_seconds is not None
            out[label] = {"format": kafka.format_seconds, "ready": kafka.ready_seconds}
    postgres = config.stash.get(_POSTGRES_START_KEY, None)
    if postgres is not None:
        out["PostgreSQL"] = {"start": postgres}
    return out


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Report how long the embedded brokers took to start, the figures the README quotes."""
    lines = []
    for label, seconds in startup_timings(config).items():
        if label == "PostgreSQL":
            lines.append(f"PostgreSQL initdb + start: {seconds['start']:.1f}s")
        else:
            lines.append(
                f"{label}: format {seconds['format']:.1f}s + start-to-ready {seconds['ready']:.1f}s"
            )
    if lines:
        terminalreporter.section("embedded kafka timings")
        for line in lines:
            terminalreporter.write_line(line)
