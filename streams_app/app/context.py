"""The run-time contract, under its old name: it lives in :mod:`streams_app.topology.contract`,
below both the app layer and the runtime. Kept so that ``streams_app.app.context`` imports (in
apps and tests) keep working."""

from streams_app.topology.contract import (
    MISSING,
    Event,
    Message,
    Runtime,
    SendFuture,
    TaskScope,
    TopicPartitionView,
    current_event,
    current_runtime,
    current_task,
)

__all__ = [
    "MISSING",
    "Event",
    "Message",
    "Runtime",
    "SendFuture",
    "TaskScope",
    "TopicPartitionView",
    "current_event",
    "current_runtime",
    "current_task",
]
