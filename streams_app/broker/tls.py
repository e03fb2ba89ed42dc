"""Certificates for a TLS test broker, made by the project itself (``cryptography``, from PyPI).

A throw-away CA signs a broker certificate for ``127.0.0.1`` and ``localhost`` (so clients check
the host name as in production) and a client certificate (for listeners that require one). All
files are PEM: the Python clients read them directly, and Kafka (since 2.7, KIP-651) takes PEM
key stores and trust stores, so no JKS or ``keytool`` is needed.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from streams_app.errors import ToolchainError

BROKER_CN = "streams-app-broker"
CLIENT_CN = "streams-app-client"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files; ``*_bundle`` hold the private key followed by the certificate (Kafka's PEM
    key store format)."""

    ca_cert: Path
    broker_bundle: Path
    client_cert: Path
    client_key: Path
    client_bundle: Path

    @property
    def broker_principal(self) -> str:
        return f"User:CN={BROKER_CN}"

    @property
    def client_principal(self) -> str:
        return f"User:CN={CLIENT_CN}"


def make_tls_files(directory: Path, days: int = 30) -> TlsFiles:
    """Generate a CA, a broker and a client certificate under ``directory``."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ToolchainError(
            "the TLS test broker needs the 'cryptography' package: pip install 'streams_app[test]'"
        ) from exc

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def pem_key(k: ec.EllipticCurvePrivateKey) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,  # Kafka's PEM key store reads PKCS#8 only
            serialization.NoEncryption(),
        )

    ca_key = key()
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("streams-app-test-ca"))
        .issuer_name(name("streams-app-test-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, server: bool) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        k = key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca.subject)
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                    if server
                    else [ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        return k, builder.sign(ca_key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    broker_key, broker_cert = leaf(BROKER_CN, server=True)
    client_key, client_cert = leaf(CLIENT_CN, server=False)
    files = TlsFiles(
        ca_cert=directory / "ca.pem",
        broker_bundle=directory / "broker.pem",
        client_cert=directory / "client-cert.pem",
        client_key=directory / "client-key.pem",
        client_bundle=directory / "client.pem",
    )
    files.ca_cert.write_bytes(ca.public_bytes(pem))
    files.broker_bundle.write_bytes(pem_key(broker_key) + broker_cert.public_bytes(pem))
    files.client_cert.write_bytes(client_cert.public_bytes(pem))
    files.client_key.write_bytes(pem_key(client_key))
    files.client_bundle.write_bytes(pem_key(client_key) + client_cert.public_bytes(pem))
    for path in (files.broker_bundle, files.client_key, files.client_bundle):
        path.chmod(0o600)
    return files
