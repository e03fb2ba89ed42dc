"""A real Apache Kafka 4.x cluster of one or three KRaft nodes, on 127.0.0.1 with free ports
(or, networked, each node in its own network namespace with its own address: broker.netns).

This is how every test, the demo and local development get a broker: no Docker, no mocks, the
same jars a production cluster runs. One node for the functional suite; three nodes (replication
factor 3, ``min.insync.replicas=2``) for fault tests, with the means to kill, pause and restart
any node.
"""

from __future__ import annotations

import base64
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from streams_app.broker.jars import broker_libs, kafka_version, resource_text
from streams_app.broker.netns import Network
from streams_app.broker.node import DEFAULT_JVM_OPTS, KafkaNode, NodeAddress
from streams_app.broker.probe import ClusterView, cluster_view
from streams_app.broker.security import BrokerSecurity
from streams_app.errors import BrokerUnavailable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64.

    Like Kafka's ``Uuid.randomUuid``, never one starting with ``-``: the storage tool would read
    it as an option and refuse to format (one random id in 64 does).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def default_settings(nodes: int) -> dict[str, str]:
    """Broker settings tuned for tests on one small machine.

    Internal topics get few partitions (the defaults of 50 make the first group join and the
    first InitProducerId slow), replication matches the node count (with the default of 3 a
    single node never gets a transaction coordinator), and timed-out transactions are swept
    every second instead of every 10 s so tests that abandon a transaction finish quickly.
    """
    rf = str(min(nodes, 3))
    min_isr = "2" if nodes >= 3 else "1"
    return {
        "num.partitions": "1",
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "60000",
        "auto.create.topics.enable": "false",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "num.recovery.threads.per.data.dir": "1",
        # Notice a dead node within a few seconds, so fault tests see leaders move quickly.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "4000",
        "replica.lag.time.max.ms": "5000",
        "controlled.shutdown.enable": "true",
    }


#: What the brokers started for tests add to :func:`default_settings`: they keep every record
#: whatever its time. A broker deletes a segment whose newest record is older than the topic's
#: ``retention.ms`` (7 days unless the topic says) whenever its retention check runs, every 5
#: minutes, and tests write records with fixed times, often years in the past (the harness takes
#: them as the memory backend does, which has no retention): a test's inputs, outputs or a
#: restore's source would vanish at a random moment of it. So no time limit for topics that
#: declare none, and no periodic check; its one run 30 s after the start (the delay is shared
#: with the broker's checkpoints, which must not wait) can still apply a limit a topic declares.
#: Brokers for users (``streams-app broker``, ``make demo``) keep Kafka's defaults.
TEST_SETTINGS: Mapping[str, str] = {
    "log.retention.ms": "-1",
    "log.retention.check.interval.ms": str(10 * 365 * 86_400_000),
}


class EmbeddedKafka:
    """Start, inspect, fault and stop a real Kafka cluster.

    >>> with EmbeddedKafka() as kafka:            # doctest: +SKIP
    ...     print(kafka.bootstrap_servers)
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        root: Path | None = None,
        version: str | None = None,
        heap: str = "512m",
        settings: Mapping[str, str] | None = None,
        jvm_opts: tuple[str, ...] = DEFAULT_JVM_OPTS,
        die_with_parent: bool = True,
        broker_port: int | None = None,
        controller_port: int | None = None,
        cluster_id: str | None = None,
        security: BrokerSecurity | None = None,
        network: Network | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        if security is not None and nodes != 1:
            raise ValueError("a secured broker (TLS/SASL/ACLs) is supported for one node only")
        self.security = security
        if broker_port is not None and nodes != 1:
            raise ValueError("a fixed broker_port is only supported for a single node")
        if network is not None and (security is not None or broker_port or controller_port):
            raise ValueError("a networked cluster takes no security settings and no fixed ports")
        #: The networked mode: each node in its own network namespace of ``network`` (created
        #: by the caller, who also destroys it), host ``b<id>`` at ``<subnet>.<10 + id>``,
        #: listening on 9092 (clients and brokers) and 9093 (controllers).
        self.network = network
        self.version = version or kafka_version()
        self._owns_root = root is None
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="streams-kafka-"))
        self.cluster_id = cluster_id or new_cluster_id()
        self._heap = heap
        self._jvm_opts = jvm_opts
        self._die_with_parent = die_with_parent
        merged = default_settings(nodes)
        merged.update(settings or {})
        self._settings = merged
        if network is not None:
            self.addresses = tuple(
                NodeAddress(
                    i + 1, 9092, 9093, host=network.add_host(self.host_name(i + 1), 11 + i).address
                )
                for i in range(nodes)
            )
        else:
            self.addresses = tuple(
                NodeAddress(
                    i + 1,
                    broker_port if broker_port is not None else free_port(),
                    controller_port if controller_port is not None else free_port(),
                )
                for i in range(nodes)
            )
        self.nodes: dict[int, KafkaNode] = {}
        self.started_at: float | None = None
        self.ready_seconds: float | None = None
        self.format_seconds: float | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> EmbeddedKafka:
        libs = broker_libs(self.version)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "log4j2.properties").write_text(resource_text("log4j2.properties"))
        for address in self.addresses:
            node = KafkaNode(
                address=address,
                voters=self.addresses,
                root=self.root / f"node-{address.node_id}",
                libs=libs,
                cluster_id=self.cluster_id,
                settings=self._settings,
                heap=self._heap,
                jvm_opts=self._jvm_opts,
                die_with_parent=self._die_with_parent,
                security=self.security,
                command_prefix=tuple(self.network.command_prefix(self.host_name(address.node_id)))
                if self.network is not None
                else (),
            )
            self.nodes[address.node_id] = node
        t0 = time.monotonic()
        for node in self.nodes.values():
            node.format()
        self.started_at = time.monotonic()
        for node in self.nodes.values():
            node.start()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - self.started_at
        self.format_seconds = self.started_at - t0
        return self

    def wait_ready(self, timeout: float = 90.0, expect: set[int] | None = None) -> ClusterView:
        """Wait until every expected node answers metadata requests itself and sees all the others.

        Asking each node (not just any one) matters after a restart: the survivors keep listing a
        killed node until its session expires, long before the new JVM serves anything.
        """
        if expect is None:
            expect = {n.node_id for n in self.nodes.values() if n.running}
        deadline = time.monotonic() + timeout
        last: ClusterView | None = None
        pending = set(expect)
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                exited = node.exit_description()
                if exited and node.node_id in expect:
                    raise BrokerUnavailable(
                        node.address.bootstrap,
                        f"{exited}; last lines of {node.log_path}:\n{node.log_tail()}",
                    )
            probe_security = self.security.broker_client() if self.security else None
            for node_id in sorted(pending):
                view = cluster_view(
                    self.nodes[node_id].address.bootstrap, timeout=2.0, security=probe_security
                )
                if view and expect <= view.broker_ids and view.controller_id >= 0:
                    pending.discard(node_id)
                    last = view
            if not pending and last is not None:
                return last
            time.sleep(0.2)
        tails = "\n".join(
            f"--- node {n.node_id} ({n.log_path}) ---\n{n.log_tail(30)}"
            for n in self.nodes.values()
        )
        raise BrokerUnavailable(
            self.bootstrap_servers,
            f"not ready after {timeout:.0f}s (last view: {last}).\n{tails}",
        )

    def stop(self, grace: float = 15.0) -> None:
        """Stop every node at once (SIGTERM, then SIGKILL after ``grace``).

        All at once, because one by one the last nodes lose their controller quorum and hang in
        controlled shutdown until they are killed anyway.
        """
        for node in self.nodes.values():
            node.terminate()
        deadline = time.monotonic() + grace
        for node in self.nodes.values():
            node.wait_exit(max(0.0, deadline - time.monotonic()))
            node.kill()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def discard(self) -> None:
        """SIGKILL every node and delete the data: for a broker nobody reads again (a test
        session's). A controlled shutdown of a broker that hundreds of tests left topics on
        takes seconds to minutes of closing logs and writing checkpoints, all thrown away."""
        self.stop(grace=0.0)

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(a.bootstrap for a in self.addresses)

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id]

    @staticmethod
    def host_name(node_id: int) -> str:
        """A node's host in the networked mode's :class:`Network` (``b<id>``)."""
        return f"b{node_id}"

    def running_nodes(self) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.running]

    # -- faults ------------------------------------------------------------------------------

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node (broker and controller at once)."""
        self.nodes[node_id].kill()

    def stop_node(self, node_id: int, grace: float = 20.0) -> None:
        """A clean shutdown of one node (SIGTERM: controlled shutdown moves its leaders first)."""
        self.nodes[node_id].stop(grace)

    def start_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Restart a stopped or killed node on its old data directory and ports."""
        self.nodes[node_id].start()
        self.wait_ready(timeout, expect=set(self.running_nodes()))

    def restart_node(self, node_id: int, *, hard: bool = True, timeout: float = 90.0) -> None:
        if hard:
            self.kill_node(node_id)
        else:
            self.stop_node(node_id)
        self.start_node(node_id, timeout)

    def ensure_all_running(self, timeout: float = 90.0) -> None:
        """Bring back any node a test left down, so the next test starts from a whole cluster."""
        down = [n.node_id for n in self.nodes.values() if not n.running]
        for node_id in down:
            self.nodes[node_id].start()
        if down:
            self.wait_ready(timeout, expect=set(self.nodes))

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(
            f"--- node {n.node_id} ({n.log_path}) ---\n{n.log_tail(lines)}"
            for n in self.nodes.values()
        )
