"""The errors streams_app raises to its users.

Each one is meant to be read by an operator: the message names what is wrong (the setting, the
address, the topic) and what to do about it.
"""

from __future__ import annotations


class StreamsAppError(Exception):
    """Base class of every error streams_app raises on purpose."""


class ConfigError(StreamsAppError):
    """A setting is wrong; raised at start, before anything is consumed."""

    def __init__(self, setting: str, problem: str, fix: str) -> None:
        self.setting = setting
        self.problem = problem
        self.fix = fix
        super().__init__(f"setting {setting!r}: {problem}. Fix: {fix}")


class ToolchainError(StreamsAppError):
    """java, mvn or a jar the embedded broker or Spark needs is missing or too old."""


class BrokerUnavailable(StreamsAppError):
    """No Kafka broker answered at the configured address."""

    def __init__(self, address: str, detail: str = "") -> None:
        self.address = address
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"no Kafka broker answered at {address}{extra}. Start one (`streams-app broker start`) "
            "or point the app at a running broker with broker=... / STREAMS_APP_BROKER."
        )


class TopologyError(StreamsAppError):
    """The topology cannot run as defined: missing topics, co-partitioning, ..."""


class BrokerTooOld(StreamsAppError):
    """The broker lacks an API version exactly-once v2 depends on (KIP-447 needs Kafka 2.5+)."""


class RecordError(StreamsAppError):
    """The record itself cannot be processed as the topology declares it: bytes that do not
    decode into the topic's type, a tombstone where a model is expected, a null key where a
    table needs one. No retry can help, so it goes to the dead-letter topic at once, whatever
    the error policy (see docs/guarantees.md, "Errors and dead letters")."""


class NullKeyError(RecordError):
    """A table was used while processing a record without a key.

    Tables are partitioned like the topics that update them: a record's key decides its
    partition, and so which table partition its task owns. A record without a key landed on a
    partition its key never chose, so reading or writing a table row for it would touch the
    row of some other partition (Kafka Streams' aggregations skip such records for the same
    reason)."""


class WorkerStopped(StreamsAppError):
    """The worker stopped because the error policy said so; carries the original error."""


class BrokerAuthenticationError(StreamsAppError):
    """The broker refused our credentials (SASL) at start."""


class BrokerSecurityMismatch(StreamsAppError):
    """The client and the broker's listener disagree on TLS or SASL (e.g. TLS to a PLAINTEXT
    listener), or the broker's certificate is not trusted."""


class AuthorizationError(StreamsAppError):
    """The broker refused an operation for want of an ACL; names the ACL and the principal.

    Fatal, as in Kafka Streams: retrying cannot help until an operator adds the ACL."""

    def __init__(self, operation: str, resource: str, name: str, principal: str) -> None:
        self.operation = operation
        self.resource = resource
        self.name = name
        self.principal = principal
        option = {
            "topic": "--topic",
            "group": "--group",
            "transactional id": "--transactional-id",
            "cluster": "--cluster",
        }.get(resource, f"--{resource}")
        target = option if resource == "cluster" else f"{option} '{name}'"
        super().__init__(
            f"the broker refused {operation} on {resource} {name!r} for principal {principal}: "
            f"the ACL ({operation} on {resource} {name!r}) is missing. Fix: add it, e.g. "
            f"kafka-acls.sh --bootstrap-server ... --add --allow-principal {principal} "
            f"--operation {operation.title().replace('_', '')} {target}"
        )


class DatabaseUnavailable(StreamsAppError):
    """No PostgreSQL answered at the configured address (named as host:port/db, never the DSN)."""

    def __init__(self, address: str, detail: str = "") -> None:
        self.address = address
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"PostgreSQL at {address} is unavailable{extra}. Start it, or fix the DSN "
            "(--dsn / STREAMS_APP_POSTGRES_DSN)."
        )


class LateRecord(StreamsAppError):
    """A record arrived after every window it belongs to had closed (dead-letter reason)."""


class InvalidTimestamp(StreamsAppError):
    """A record's timestamp is missing or negative (dead-letter reason)."""
