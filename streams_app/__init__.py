"""streams_app: exactly-once stream processing for Python.

Faust-style agents and tables on a runtime that mirrors Kafka Streams' exactly_once_v2: one
transactional producer per worker, every commit one Kafka transaction holding outputs, changelog
records and offsets, zombies fenced by consumer-group generation (KIP-447).

A Faust app runs on streams_app once its imports name streams_app instead of faust
(``import streams_app as faust``, ``from streams_app.cli import option``): the names below are
Faust's (docs/migrating-from-faust.md).

The names are loaded on first use (PEP 562): importing a lower layer
(``streams_app.transport.base``, ``streams_app.topology.plan``) runs this module first, and it
must not pull the app layer, faust and mode in with it.
"""

from __future__ import annotations

import importlib
import uuid as _uuid
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from faust.models import Record
    from mode import Service, ServiceT

    from streams_app.app import Agent, App, Settings, Stream, Table, Topic
    from streams_app.app.channel import Channel
    from streams_app.app.global_table import GlobalTable
    from streams_app.app.set_table import SetTable
    from streams_app.app.windows import WindowRange
    from streams_app.topology.contract import Event, Message, TopicPartitionView, current_task

    # Faust's type names, for annotations (``stream: StreamT[Order]``).
    AgentT = Agent
    ChannelT = Channel
    EventT = Event
    StreamT = Stream
    TableT = Table
    TopicT = Topic
    TP = TopicPartitionView

__version__ = "0.1.0"

#: Public name -> (module, attribute), imported when first asked for.
_LAZY: dict[str, tuple[str, str]] = {
    "Agent": ("streams_app.app", "Agent"),
    "App": ("streams_app.app", "App"),
    "Settings": ("streams_app.app", "Settings"),
    "Stream": ("streams_app.app", "Stream"),
    "Table": ("streams_app.app", "Table"),
    "Topic": ("streams_app.app", "Topic"),
    "Channel": ("streams_app.app.channel", "Channel"),
    "GlobalTable": ("streams_app.app.global_table", "GlobalTable"),
    "SetTable": ("streams_app.app.set_table", "SetTable"),
    "WindowRange": ("streams_app.app.windows", "WindowRange"),
    "Event": ("streams_app.topology.contract", "Event"),
    "Message": ("streams_app.topology.contract", "Message"),
    "current_task": ("streams_app.topology.contract", "current_task"),
    "Record": ("faust.models", "Record"),
    "Service": ("mode", "Service"),
    "ServiceT": ("mode", "ServiceT"),
    # Faust's type names, for annotations (``stream: StreamT[Order]``).
    "AgentT": ("streams_app.app", "Agent"),
    "ChannelT": ("streams_app.app.channel", "Channel"),
    "EventT": ("streams_app.topology.contract", "Event"),
    "StreamT": ("streams_app.app", "Stream"),
    "TableT": ("streams_app.app", "Table"),
    "TopicT": ("streams_app.app", "Topic"),
    "TP": ("streams_app.topology.contract", "TopicPartitionView"),
}


def current_event() -> Event | None:
    """The event being processed (Faust's ``faust.current_event()``)."""
    from streams_app.topology.contract import current_event as event

    return event.get()


def uuid() -> str:
    """A random UUID as a string (Faust's ``faust.uuid()``)."""
    return str(_uuid.uuid4())


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(
            f"module 'streams_app' has no attribute {name!r} (docs/migrating-from-faust.md lists "
            "Faust's names and their status here)"
        )
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
