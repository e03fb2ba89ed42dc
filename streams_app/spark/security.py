"""The Kafka security settings of an app, as options of Spark's Kafka connector.

Spark passes every ``kafka.``-prefixed option to its (Java) Kafka clients, so the same
``security_protocol`` / ``ssl_*`` / ``sasl_*`` settings the workers use (keyword arguments or
``STREAMS_APP_*`` variables) give the pipeline its TLS and SASL set-up:

- TLS: the CA as a PEM trust store; a client certificate and key as an inline PEM key store
  (``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``, Kafka 2.7+, KIP-651), which the
  Java client masks in its logs like a password;
- SASL: the mechanism and a JAAS line for PLAIN or SCRAM with the user and password (Spark
  redacts option values that contain ``password`` from its UI and event logs).
"""

from __future__ import annotations

from pathlib import Path

from streams_app.settings import Settings

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kafka_security_options(settings: Settings) -> dict[str, str]:
    """Connector options for ``settings``' security (empty for PLAINTEXT)."""
    protocol = settings.security_protocol
    if protocol == "PLAINTEXT":
        return {}
    options = {"kafka.security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        if settings.ssl_cafile:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = settings.ssl_cafile
        if settings.ssl_certfile:
            cert = Path(settings.ssl_certfile).read_text()
            key = Path(settings.ssl_keyfile or settings.ssl_certfile).read_text()
            options["kafka.ssl.keystore.type"] = "PEM"
            options["kafka.ssl.keystore.certificate.chain"] = _pem_blocks(cert, "CERTIFICATE")
            options["kafka.ssl.keystore.key"] = _pem_blocks(key, "PRIVATE KEY")
            if settings.ssl_password:
                options["kafka.ssl.key.password"] = settings.ssl_password
    if protocol.startswith("SASL") and settings.sasl_mechanism:
        module = _LOGIN_MODULES[settings.sasl_mechanism]
        options["kafka.sasl.mechanism"] = settings.sasl_mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{module} required username={_quoted(settings.sasl_username or '')} "
            f"password={_quoted(settings.sasl_password or '')};"
        )
    return options


def _pem_blocks(text: str, kind: str) -> str:
    """The PEM blocks of ``kind`` in ``text`` (a bundle may hold a key and certificates)."""
    blocks, inside, current = [], False, []
    for line in text.splitlines():
        if line.startswith("-----BEGIN ") and kind in line:
            inside, current = True, [line]
        elif inside:
            current.append(line)
            if line.startswith("-----END "):
                blocks.append("\n".join(current))
                inside = False
    return "\n".join(blocks)
