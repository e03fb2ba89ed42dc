"""A secured real broker for tests: TLS, SASL (SCRAM-SHA-512 and PLAIN) and ACLs on one node.

Started once per test session by the ``secure_kafka`` fixture (one extra JVM). Users:

- ``admin``: super user, used to create ACLs;
- ``alice``: every client right on every topic, group and transactional id (a well-configured
  worker), and the TLS client certificate's principal has the same rights;
- ``carol``: nothing until a test grants it, so a test can leave out exactly one ACL.

Passwords are random per session; tests read them from :attr:`SecureKafka.users`.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from streams_app.broker import TEST_SETTINGS, EmbeddedKafka, free_port
from streams_app.broker.security import (
    ADMIN_USER,
    SCRAM,
    Acl,
    BrokerSecurity,
    Operation,
    Resource,
    create_acls,
)
from streams_app.broker.tls import make_tls_files


def client_rights(principal: str) -> list[Acl]:
    """Everything a worker needs, on everything (topics, groups, transactional ids)."""
    return [
        Acl(principal, Resource.TOPIC, "*", Operation.ALL),
        Acl(principal, Resource.GROUP, "*", Operation.ALL),
        Acl(principal, Resource.TRANSACTIONAL_ID, "*", Operation.ALL),
        Acl(principal, Resource.CLUSTER, "kafka-cluster", Operation.DESCRIBE_CONFIGS),
        Acl(principal, Resource.CLUSTER, "kafka-cluster", Operation.IDEMPOTENT_WRITE),
    ]


class SecureKafka:
    def __init__(self, root: Path | None = None) -> None:
        self._owns_root = root is None
        self.root = root or Path(tempfile.mkdtemp(prefix="streams-secure-kafka-"))
        self.tls = make_tls_files(self.root / "tls")
        self.users = {name: secrets.token_urlsafe(12) for name in (ADMIN_USER, "alice", "carol")}
        self.security = BrokerSecurity(self.tls, free_port(), self.users)
        self.kafka = EmbeddedKafka(
            1, root=self.root / "cluster", security=self.security, settings=TEST_SETTINGS
        )

    def start(self) -> SecureKafka:
        self.kafka.start()
        asyncio.run(
            self.grant(
                client_rights("User:alice") + client_rights(self.tls.client_principal),
            )
        )
        return self

    def stop(self, grace: float = 15.0) -> None:
        self.kafka.stop(grace)
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def ssl_bootstrap(self) -> str:
        """The TLS listener (client certificate required)."""
        return self.kafka.bootstrap_servers

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.security.sasl_port}"

    def sasl_settings(
        self, user: str = "alice", mechanism: str = SCRAM, password: str | None = None
    ) -> dict[str, Any]:
        """App keyword arguments to reach the SASL_SSL listener as ``user``."""
        return {
            "broker": f"kafka://{self.sasl_bootstrap}",
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(self.tls.ca_cert),
            "sasl_mechanism": mechanism,
            "sasl_username": user,
            "sasl_password": self.users[user] if password is None else password,
        }

    def ssl_settings(self) -> dict[str, Any]:
        """App keyword arguments to reach the SSL listener with the client certificate."""
        return {
            "broker": f"kafka://{self.ssl_bootstrap}",
            "security_protocol": "SSL",
            "ssl_cafile": str(self.tls.ca_cert),
            "ssl_certfile": str(self.tls.client_cert),
            "ssl_keyfile": str(self.tls.client_key),
        }

    async def grant(self, acls: list[Acl]) -> None:
        """Create ACLs as the broker's own (super user) principal."""
        await create_acls(self.ssl_bootstrap, self.security.broker_client(), acls)

    def log_tails(self, lines: int = 40) -> str:
        return self.kafka.log_tails(lines)
