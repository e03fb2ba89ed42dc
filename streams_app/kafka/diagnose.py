"""Why a connection to the brokers failed, in the words an operator needs.

aiokafka turns every failed bootstrap into ``KafkaConnectionError("Unable to bootstrap from
...")``: a wrong password, TLS spoken to a PLAINTEXT listener and a broker that is not running
all look the same. When a client cannot start, :func:`diagnose` connects to each bootstrap
address once more, itself, and classifies what happens:

- SASL refused (``SASL_AUTHENTICATION_FAILED``) -> :class:`BrokerAuthenticationError` naming
  the user and the mechanism (never the password);
- SASL handshake refused as illegal, or a mechanism the listener does not offer -> the listener
  does not speak SASL / that mechanism;
- TLS handshake broken, but the port answers plain Kafka requests -> the listener does not
  speak SSL; a plaintext client to a port that completes a TLS handshake -> it expects TLS;
- the broker's certificate not trusted -> names ``ssl_cafile``;
- nothing listening -> ``None`` (the caller raises :class:`BrokerUnavailable`, naming the
  address).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from typing import Any

import aiokafka.errors as aerrors
from aiokafka.conn import create_conn

from streams_app.aio import within
from streams_app.errors import (
    BrokerAuthenticationError,
    BrokerSecurityMismatch,
    StreamsAppError,
)

_TIMEOUT_MS = 5000


async def diagnose(bootstrap: str, security: Mapping[str, Any]) -> StreamsAppError | None:
    """The specific reason no client could connect to ``bootstrap``, or None if unknown."""
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        if not port.isdigit():
            continue
        found = await _diagnose_one(host, int(port), dict(security))
        if found is not None:
            return found
    return None


async def _diagnose_one(host: str, port: int, security: dict[str, Any]) -> StreamsAppError | None:
    address = f"{host}:{port}"
    protocol = security.get("security_protocol", "PLAINTEXT")
    tls = protocol in ("SSL", "SASL_SSL")
    user = security.get("sasl_plain_username")
    mechanism = security.get("sasl_mechanism")
    try:
        conn = await create_conn(host, port, request_timeout_ms=_TIMEOUT_MS, **security)
    except aerrors.SaslAuthenticationFailed as exc:
        return BrokerAuthenticationError(
            f"authentication failed for user {user!r} ({mechanism}) at {address}: the broker "
            f"answered {_reason(exc)}. Fix: check sasl_username and sasl_password "
            "(STREAMS_APP_SASL_USERNAME / STREAMS_APP_SASL_PASSWORD), and that the user exists "
            f"on the broker for {mechanism}"
        )
    except aerrors.UnsupportedSaslMechanismError as exc:
        return BrokerSecurityMismatch(
            f"the broker at {address} does not offer SASL mechanism {mechanism}: {exc}. Fix: "
            "set sasl_mechanism to one the listener enables"
        )
    except aerrors.IllegalSaslStateError:
        return BrokerSecurityMismatch(
            f"the broker at {address} does not speak SASL on this port (it refused the SASL "
            f"handshake: a {'SSL' if tls else 'PLAINTEXT'} listener). Fix: use the broker's "
            f"SASL listener, or security_protocol={'SSL' if tls else 'PLAINTEXT'}"
        )
    except ssl.SSLCertVerificationError as exc:
        return BrokerSecurityMismatch(
            f"the TLS certificate of the broker at {address} was not accepted: "
            f"{exc.verify_message or exc}. Fix: set ssl_cafile to the CA that signed the "
            "broker's certificate, and connect by a host name the certificate names"
        )
    except (TimeoutError, OSError, aerrors.KafkaError) as exc:
        if isinstance(exc, ConnectionRefusedError):
            return None  # nothing listens there: BrokerUnavailable says so
        if tls and await _speaks_plain_kafka(host, port):
            return BrokerSecurityMismatch(
                f"the broker at {address} does not speak SSL: it answered plain Kafka requests "
                f"on this port (a PLAINTEXT listener), so security_protocol={protocol} cannot "
                "work. Fix: use the broker's SSL/SASL_SSL listener, or security_protocol="
                "'PLAINTEXT'"
            )
        if not tls and await _speaks_tls(host, port):
            return BrokerSecurityMismatch(
                f"the broker at {address} expects TLS (an SSL or SASL_SSL listener), but "
                f"security_protocol is {protocol}. Fix: set security_protocol='SSL' or "
                "'SASL_SSL' and ssl_cafile"
            )
        return None
    conn.close()
    return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if text else type(exc).__name__


async def _speaks_plain_kafka(host: str, port: int) -> bool:
    try:
        conn = await create_conn(host, port, request_timeout_ms=_TIMEOUT_MS)
    except Exception:
        return False
    conn.close()
    return True


async def _speaks_tls(host: str, port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await within(
            asyncio.open_connection(host, port, ssl=context), _TIMEOUT_MS / 1000
        )
    except Exception:
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True
