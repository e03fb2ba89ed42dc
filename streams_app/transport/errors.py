"""What can go wrong talking to Kafka, classified by what the runtime must do about it.

Transports translate their client's errors into these; the runtime never looks at a client's own
exception types. The classification follows Kafka Streams' ``StreamsProducer``/``TaskManager``:

- :class:`ProducerFencedError`, :class:`CommitFailedError`: this worker no longer owns (some of)
  its tasks. Abort, close the tasks dirty, recreate the producer, rejoin the group.
- :class:`SendFailedError`, :class:`TransactionAbortableError`: the current transaction cannot
  commit. Abort it, rewind to the committed offsets, and retry.
- :class:`FatalProducerError`: the producer is unusable. Recreate it (which aborts whatever it
  left open), rewind and retry.
"""

from __future__ import annotations

from streams_app.errors import StreamsAppError


class TransportError(StreamsAppError):
    """Base class of errors a transport raises to the runtime."""


class ProducerFencedError(TransportError):
    """Another producer took our transactional.id, or the broker timed our transaction out."""


class CommitFailedError(TransportError):
    """The group moved to a new generation: the offsets (and the transaction) cannot commit.

    Raised for ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and FENCED_INSTANCE_ID on TxnOffsetCommit
    (KIP-447 fencing) and on a plain OffsetCommit. The transaction is still abortable.
    """


class GroupProtocolMismatchError(TransportError):
    """The consumer group has live members that use another assignment protocol (the workers
    of another framework, e.g. faust-streaming, not yet stopped or not yet expired)."""


class SendFailedError(TransportError):
    """A record sent in the current transaction failed; committing would silently lose it."""


class TransactionAbortableError(TransportError):
    """The transaction hit an error it can recover from by aborting."""


class FatalProducerError(TransportError):
    """The producer hit an error it cannot recover from; it must be recreated, never reused."""
