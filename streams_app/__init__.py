"""streams_app: exactly-once stream processing for Python.

Faust-style agents and tables on a runtime that mirrors Kafka Streams' exactly_once_v2: one
transactional producer per worker, every commit one Kafka transaction holding outputs, changelog
records and offsets, zombies fenced by consumer-group generation (KIP-447).
"""

from streams_app.app import Agent, App, Settings, Stream, Table, Topic
from streams_app.app.context import Event, current_task
from streams_app.app.windows import WindowRange
from streams_app.errors import (
    AuthorizationError,
    BrokerAuthenticationError,
    BrokerSecurityMismatch,
    BrokerUnavailable,
    ConfigError,
    NullKeyError,
    RecordError,
    StreamsAppError,
    TopologyError,
    WorkerStopped,
)

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "App",
    "AuthorizationError",
    "BrokerAuthenticationError",
    "BrokerSecurityMismatch",
    "BrokerUnavailable",
    "ConfigError",
    "Event",
    "NullKeyError",
    "RecordError",
    "Settings",
    "Stream",
    "StreamsAppError",
    "Table",
    "Topic",
    "TopologyError",
    "WindowRange",
    "WorkerStopped",
    "__version__",
    "current_task",
]
