"""Our KIP-447 extension of aiokafka 0.14.0 (pinned exactly: everything here touches its privates).

- :mod:`~streams_app.kafka.protocol`: TxnOffsetCommit v3/v5 and OffsetFetch v7 (require_stable);
- :mod:`~streams_app.kafka.txn_v2`: transaction version 2 (KIP-890 part 2): ApiVersions v3
  (finalized features), Produce v12, EndTxn v5;
- :mod:`~streams_app.kafka.errors`: error codes 82, 88, 90 registered in aiokafka's table;
- :mod:`~streams_app.kafka.producer`: :class:`TransactionalProducer`;
- :mod:`~streams_app.kafka.consumer`: :class:`StableConsumer`;
- :mod:`~streams_app.kafka.admin`: :class:`KafkaAdmin`;
- :mod:`~streams_app.kafka.logs`: the filter on aiokafka's loggers (secrets redacted, noise
  rate-limited, broker outages reported once), installed on import;
- :mod:`~streams_app.kafka.diagnose`: why a connection failed (authentication, TLS or SASL
  mismatch, nothing listening), for errors that name the cause.

Nothing outside this package may touch aiokafka's private attributes.
"""

from streams_app.kafka import logs
from streams_app.kafka.admin import KafkaAdmin
from streams_app.kafka.consumer import StableConsumer
from streams_app.kafka.errors import (
    FencedInstanceIdError,
    InvalidGroupMetadataError,
    OffsetCommitFencedError,
    ProducerFencedResponseError,
    ProducerUnusableError,
    TransactionSendFailedError,
    UnstableOffsetCommitError,
    is_aborted_by_coordinator,
    is_fencing_error,
    register_error_codes,
)
from streams_app.kafka.producer import TransactionalProducer

__all__ = [
    "FencedInstanceIdError",
    "InvalidGroupMetadataError",
    "KafkaAdmin",
    "OffsetCommitFencedError",
    "ProducerFencedResponseError",
    "ProducerUnusableError",
    "StableConsumer",
    "TransactionSendFailedError",
    "TransactionalProducer",
    "UnstableOffsetCommitError",
    "is_aborted_by_coordinator",
    "is_fencing_error",
    "logs",
    "register_error_codes",
]
