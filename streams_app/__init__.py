"""streams_app: exactly-once stream processing for Python.

Faust-style agents and tables on a runtime that mirrors Kafka Streams' exactly_once_v2: one
transactional producer per worker, every commit one Kafka transaction holding outputs, changelog
records and offsets, zombies fenced by consumer-group generation (KIP-447).

A Faust app runs on streams_app once its imports name streams_app instead of faust
(``import streams_app as faust``, ``from streams_app.cli import option``): the names below are
Faust's (docs/migrating-from-faust.md).
"""

import uuid as _uuid
from typing import Any

from faust.models import Record
from mode import Service, ServiceT

from streams_app.app import Agent, App, Settings, Stream, Table, Topic
from streams_app.app.channel import Channel
from streams_app.app.context import Event, Message, TopicPartitionView, current_task
from streams_app.app.context import current_event as _current_event
from streams_app.app.global_table import GlobalTable
from streams_app.app.set_table import SetTable
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

# Faust's type names, for annotations (``stream: StreamT[Order]``).
AgentT = Agent
ChannelT = Channel
EventT = Event
StreamT = Stream
TableT = Table
TopicT = Topic
TP = TopicPartitionView


def current_event() -> Event | None:
    """The event being processed (Faust's ``faust.current_event()``)."""
    return _current_event.get()


def uuid() -> str:
    """A random UUID as a string (Faust's ``faust.uuid()``)."""
    return str(_uuid.uuid4())


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"module 'streams_app' has no attribute {name!r} (docs/migrating-from-faust.md lists "
        "Faust's names and their status here)"
    )


__all__ = [
    "TP",
    "Agent",
    "AgentT",
    "App",
    "AuthorizationError",
    "BrokerAuthenticationError",
    "BrokerSecurityMismatch",
    "BrokerUnavailable",
    "Channel",
    "ChannelT",
    "ConfigError",
    "Event",
    "EventT",
    "GlobalTable",
    "Message",
    "NullKeyError",
    "Record",
    "RecordError",
    "Service",
    "ServiceT",
    "SetTable",
    "Settings",
    "Stream",
    "StreamT",
    "StreamsAppError",
    "Table",
    "TableT",
    "Topic",
    "TopicT",
    "TopologyError",
    "WindowRange",
    "WorkerStopped",
    "__version__",
    "current_event",
    "current_task",
    "uuid",
]
