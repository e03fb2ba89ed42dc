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
