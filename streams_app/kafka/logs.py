"""What aiokafka logs, made safe and readable: secrets redacted, noise rate-limited, outages
reported once by us.

aiokafka logs every request at DEBUG, including ``SaslAuthenticateRequest(sasl_auth_bytes=
b'user\\x00user\\x00<password>')`` for SASL/PLAIN; and while a broker is down it logs an ERROR
for every failed reconnect, metadata refresh and fetch (tens of thousands a minute), yet never
one line saying which broker is down since when. So:

1. **redaction**: one filter on every ``aiokafka.*`` logger replaces SASL authentication
   payloads (request and response structs) and any registered secret (the transports register
   the SASL password) in every record;
2. **rate limit**: the same filter passes the first WARNING/ERROR record of each logger and
   message template, counts the repeats within :data:`WINDOW_S`, and lets the next one after
   the window pass with a summary line of how many were suppressed;
3. **outages**: aiokafka opens every connection through ``aiokafka.client.create_conn``; we
   wrap it, so the first failed connection to a broker that was reachable before logs one
   warning of ours, ``waiting for broker 127.0.0.1:9092 since 12:01:03, retrying``, and the
   first successful one after it logs ``broker 127.0.0.1:9092 is reachable again after 41 s``.
   This works whatever level aiokafka's loggers are set to (many deployments silence them).

Logger-level filters only see records created on that very logger, so the filter is attached
to each ``aiokafka`` logger (they are all created when aiokafka's modules are imported).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiokafka.admin
import aiokafka.client
import aiokafka.conn
import aiokafka.consumer.fetcher
import aiokafka.consumer.group_coordinator
import aiokafka.producer.sender
from aiokafka.errors import KafkaConnectionError

log = logging.getLogger(__name__)

#: Threads whose aiokafka records are dropped and whose failed connections are no outage: the
#: broker readiness probe (``streams_app.broker.probe``) expects refusals while a broker boots.
QUIET_THREAD_PREFIX = "streams-app-broker-probe"
#: Repeats of one client message within this many seconds are counted, not logged.
WINDOW_S = 30.0
REDACTED = "*****"
#: What a connection attempt raises when the broker is not there (as opposed to refusing us).
_UNREACHABLE = (OSError, asyncio.TimeoutError, KafkaConnectionError)


@dataclass
class _Outage:
    since_wall: float
    since: float


@dataclass
class _State:
    secrets: set[str] = field(default_factory=set)
    #: Addresses a connection succeeded to at least once (only those can "become" unreachable).
    reached: set[str] = field(default_factory=set)
    outages: dict[str, _Outage] = field(default_factory=dict)
    #: (logger, template) -> [time the last one passed, repeats suppressed since]
    repeats: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    suppressed_total: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_state = _State()


def register_secret(secret: str | None) -> None:
    """Redact ``secret`` from every aiokafka record from now on."""
    if secret:
        with _state.lock:
            _state.secrets.add(secret)


def register_client(bootstrap: str, security: Mapping[str, Any]) -> None:
    """A transport's clients will use ``security``: its secrets are redacted from now on."""
    register_secret(security.get("sasl_plain_password"))


def _redact(record: logging.LogRecord) -> None:
    args = record.args
    if isinstance(args, tuple) and any(
        type(arg).__name__.startswith("SaslAuthenticate") for arg in args
    ):
        record.args = tuple(
            f"<{type(arg).__name__} (redacted)>"
            if type(arg).__name__.startswith("SaslAuthenticate")
            else arg
            for arg in args
        )
    if _state.secrets:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's business, not ours
            return
        if any(secret in message for secret in _state.secrets):
            for secret in _state.secrets:
                message = message.replace(secret, REDACTED)
            record.msg, record.args = message, ()
        if record.exc_info and record.exc_info[1] is not None:
            text = str(record.exc_info[1])
            if any(secret in text for secret in _state.secrets):
                record.exc_info = None
                record.exc_text = None


# -- outages -------------------------------------------------------------------------------

_original_create_conn = aiokafka.client.create_conn


async def _tracked_create_conn(host: str, port: int, **kwargs: Any) -> Any:
    """aiokafka's ``create_conn``, reporting when a broker stops and starts answering."""
    quiet = threading.current_thread().name.startswith(QUIET_THREAD_PREFIX)
    address = f"{host}:{port}"
    try:
        conn = await _original_create_conn(host, port, **kwargs)
    except _UNREACHABLE:
        if not quiet:
            _unreachable(address)
        raise
    if not quiet:
        _reachable(address)
    return conn


def _unreachable(address: str) -> None:
    with _state.lock:
        if address not in _state.reached or address in _state.outages:
            return
        outage = _state.outages[address] = _Outage(time.time(), time.monotonic())
    since = time.strftime("%H:%M:%S", time.localtime(outage.since_wall))
    log.warning("waiting for broker %s since %s, retrying", address, since)


def _reachable(address: str) -> None:
    with _state.lock:
        _state.reached.add(address)
        outage = _state.outages.pop(address, None)
        if outage is None:
            return
        suppressed, _state.suppressed_total = _state.suppressed_total, 0
    extra = f"; {suppressed} repeated Kafka client messages were suppressed" if suppressed else ""
    log.warning(
        "broker %s is reachable again after %.0f s%s",
        address,
        time.monotonic() - outage.since,
        extra,
    )


def outages() -> dict[str, float]:
    """Brokers currently reported down, with the wall-clock time since when."""
    with _state.lock:
        return {address: o.since_wall for address, o in _state.outages.items()}


def unreachable_since(addresses: Collection[str]) -> float | None:
    """Wall-clock time since when none of ``addresses`` answers: every one of them that was
    ever reached is down (None: one answers, or none was ever reached). A worker's readiness
    asks this about its bootstrap servers."""
    with _state.lock:
        reached = [a for a in addresses if a in _state.reached]
        if not reached or any(a not in _state.outages for a in reached):
            return None
        return max(_state.outages[a].since_wall for a in reached)


# -- rate limit ----------------------------------------------------------------------------


def _allow(record: logging.LogRecord) -> bool:
    if record.levelno < logging.WARNING:
        return True
    key = (record.name, str(record.msg))
    now = time.monotonic()
    with _state.lock:
        entry = _state.repeats.get(key)
        if entry is not None and now - entry[0] < WINDOW_S:
            entry[1] += 1
            _state.suppressed_total += 1
            return False
        suppressed = int(entry[1]) if entry is not None else 0
        _state.repeats[key] = [now, 0]
    if suppressed:
        log.log(
            record.levelno,
            "%d more Kafka client messages like %r (%s) in the last %.0f s were suppressed",
            suppressed,
            str(record.msg)[:120],
            record.name,
            now - entry[0] if entry is not None else 0.0,
        )
    return True


class KafkaLogFilter(logging.Filter):
    """The one filter on every aiokafka logger; see the module docstring."""

    def filter(self, record: logging.LogRecord) -> bool:
        if threading.current_thread().name.startswith(QUIET_THREAD_PREFIX):
            return False
        _redact(record)
        return _allow(record)


_FILTER = KafkaLogFilter()


def install() -> None:
    """Attach the filter to every existing ``aiokafka`` logger and track connections
    (idempotent)."""
    aiokafka.client.create_conn = _tracked_create_conn
    names = [
        name
        for name in list(logging.root.manager.loggerDict)
        if name == "aiokafka" or name.startswith("aiokafka.")
    ]
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def reset_for_tests() -> None:
    """Forget outages and repeat counts (each test that counts log lines starts clean)."""
    with _state.lock:
        _state.outages.clear()
        _state.repeats.clear()
        _state.suppressed_total = 0


install()
