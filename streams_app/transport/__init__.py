"""The seam between the runtime and Kafka.

The runtime speaks only to the protocols in :mod:`streams_app.transport.base`. Two transports
implement them: :mod:`streams_app.transport.kafka` on our KIP-447 extension of aiokafka (what
workers run), and the in-memory Kafka model of :mod:`streams_app.testing` (what the broker-free
test harness runs). Like httpx's pluggable transports, this is what lets the harness drive the
real runtime code rather than a copy of it.
"""

from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    ConsumerConfig,
    GroupMetadata,
    ProducerClient,
    ProducerConfig,
    RebalanceListener,
    RecordLike,
    RecordMetadataLike,
    TopicPartition,
    TopicSpec,
    Transport,
)
from streams_app.transport.errors import (
    CommitFailedError,
    FatalProducerError,
    ProducerFencedError,
    SendFailedError,
    TransactionAbortableError,
    TransportError,
)

__all__ = [
    "AdminClient",
    "CommitFailedError",
    "ConsumerClient",
    "ConsumerConfig",
    "FatalProducerError",
    "GroupMetadata",
    "ProducerClient",
    "ProducerConfig",
    "ProducerFencedError",
    "RebalanceListener",
    "RecordLike",
    "RecordMetadataLike",
    "SendFailedError",
    "TopicPartition",
    "TopicSpec",
    "TransactionAbortableError",
    "Transport",
    "TransportError",
]
