"""A broker with TLS, SASL and ACLs, to prove the clients' security settings against real Kafka.

One node serves three listeners, so one JVM covers every case:

``SSL``
    TLS with client certificates required (the principal is the certificate's subject); also
    the inter-broker listener, where the broker authenticates with its own certificate;
``SASL_SSL``
    TLS plus SASL, mechanisms SCRAM-SHA-512 (users created by ``kafka-storage format
    --add-scram``, i.e. in the cluster metadata from the start) and PLAIN (users in the
    listener's JAAS configuration);
``CONTROLLER``
    KRaft's controller listener, also TLS with client certificates.

ACLs are enforced by ``StandardAuthorizer`` (KRaft's authorizer); the broker's own certificate
principal and the ``admin`` user are super users, and nothing is allowed to anyone else unless an
ACL says so (``allow.everyone.if.no.acl.found=false``).
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams_app.broker.tls import TlsFiles

SCRAM = "SCRAM-SHA-512"
ADMIN_USER = "admin"


class Resource(enum.IntEnum):
    """Kafka's ACL resource types (``org.apache.kafka.common.resource.ResourceType``)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class Operation(enum.IntEnum):
    """Kafka's ACL operations (``org.apache.kafka.common.acl.AclOperation``)."""

    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DESCRIBE = 8
    DESCRIBE_CONFIGS = 10
    IDEMPOTENT_WRITE = 12


class Pattern(enum.IntEnum):
    LITERAL = 3
    PREFIXED = 4


_ALLOW = 3


@dataclass(frozen=True)
class Acl:
    principal: str
    resource: Resource
    name: str
    operation: Operation
    pattern: Pattern = Pattern.LITERAL


@dataclass(frozen=True)
class BrokerSecurity:
    """TLS material, users and the second client port of a secured node."""

    tls: TlsFiles
    sasl_port: int
    #: user name -> password, for both SCRAM-SHA-512 and PLAIN.
    users: Mapping[str, str] = field(default_factory=dict)

    def properties(self, ssl_port: int, controller_port: int) -> dict[str, str]:
        plain_users = " ".join(f'user_{name}="{pw}"' for name, pw in self.users.items())
        return {
            "listeners": f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{self.sasl_port},"
            f"CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SSL://127.0.0.1:{ssl_port},"
            f"SASL_SSL://127.0.0.1:{self.sasl_port}",
            "listener.security.protocol.map": "CONTROLLER:SSL,SSL:SSL,SASL_SSL:SASL_SSL",
            "inter.broker.listener.name": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls.broker_bundle),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca_cert),
            "ssl.client.auth": "required",
            "listener.name.sasl_ssl.ssl.client.auth": "none",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": f"{SCRAM},PLAIN",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"{self.tls.broker_principal};User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments creating the SCRAM users in the metadata."""
        args = []
        for name, password in self.users.items():
            args += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
        return args

    def broker_client(self) -> dict[str, Any]:
        """aiokafka arguments to reach the SSL listener as the broker itself (a super user)."""
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        context.load_cert_chain(str(self.tls.broker_bundle))
        return {"security_protocol": "SSL", "ssl_context": context}


async def create_acls(bootstrap: str, security: Mapping[str, Any], acls: Sequence[Acl]) -> None:
    """CreateAcls through a super user's connection; raises on any refused ACL."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import for_code
    from aiokafka.protocol.admin import CreateAclsRequest

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **security)
    await admin.start()
    try:
        for acl in acls:
            request = CreateAclsRequest(
                acl.resource,
                acl.name,
                acl.pattern,
                acl.principal,
                "*",
                acl.operation,
                _ALLOW,
            )
            response = await admin._send_request(request)
            for code, message in response.creation_responses:
                if code:
                    raise for_code(code)(f"creating {acl} failed: {message}")
    finally:
        await admin.close()
