"""An in-memory Kafka model for broker-free topology tests (see :mod:`.broker` for what it
models and what it does not)."""

from streams_app.testing.memory.broker import MemoryKafka, MemoryRecord
from streams_app.testing.memory.clients import (
    MemoryAdmin,
    MemoryConsumer,
    MemoryProducer,
    MemoryTransport,
)

__all__ = [
    "MemoryAdmin",
    "MemoryConsumer",
    "MemoryKafka",
    "MemoryProducer",
    "MemoryRecord",
    "MemoryTransport",
]
