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


class WorkerStopped(StreamsAppError):
    """The worker stopped because the error policy said so; carries the original error."""


class LateRecord(StreamsAppError):
    """A record arrived after every window it belongs to had closed (dead-letter reason)."""


class InvalidTimestamp(StreamsAppError):
    """A record's timestamp is missing or negative (dead-letter reason)."""
