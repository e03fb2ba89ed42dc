"""What can go wrong talking to Kafka, classified by what the runtime must do about it.

Transports translate their client's errors into these; the runtime never looks at a client's own
exception types. The classification follows Kafka Streams' ``StreamsProducer``/``TaskManager``:

- :class:`ProducerFencedError`, :class:`CommitFailedError`: this worker no longer owns (some of)
  its tasks. Abort, close the tasks dirty, recreate the producer, rejoin the group.
- :class:`SendFailedError`, :class:`TransactionAbortableError`: the current transaction cannot
  commit. Abort it, rewind to the committed offsets, and retry.
- :class:`FatalProducerError`: the producer is unusable. Recreate it (which aborts whatever it
  left open), rewind and retry.
- :class:`RecordRejectedError`: one record will never be accepted (too large, an invalid
  topic). Retrying the transaction cannot help: the record that caused it goes to the
  dead-letter topic, or the worker stops naming it (Kafka Streams' ``ProductionExceptionHandler``
  decides the same case).
"""

from __future__ import annotations

from streams_app.errors import RecordError, StreamsAppError

#: Kafka protocol error codes that refuse a record, or its topic, for good: CORRUPT_MESSAGE (2),
#: MESSAGE_TOO_LARGE (10), INVALID_TOPIC_EXCEPTION (17), RECORD_LIST_TOO_LARGE (18),
#: POLICY_VIOLATION (44), INVALID_RECORD (87). A broker that is away fails sends with other,
#: retriable codes (or a timeout), which are not a rejection. A missing ACL is not one either:
#: it is the worker's permissions that are wrong, not the record.
RECORD_REJECTED_CODES = frozenset({2, 10, 17, 18, 44, 87})


class TransportError(StreamsAppError):
    """Base class of errors a transport raises to the runtime."""


class ProducerFencedError(TransportError):
    """Another producer took our transactional.id, or the broker timed our transaction out."""


class AbortedByCoordinatorError(ProducerFencedError):
    """EndTxn(commit) was answered INVALID_TXN_STATE: the coordinator had already ended the
    transaction without committing it. Under transaction version 2 that is a transaction it
    aborted (timed out, or fenced by an InitProducerId of our transactional id) and bumped the
    epoch of: our EndTxn, one epoch behind, is taken for a retry, and a commit retried on an
    aborted transaction is refused so. It is never a commit's answer: a committed transaction's
    retried EndTxn(commit) is answered NONE (Kafka 4.3, ``TransactionCoordinator.
    endTransaction``; under version 1 the answer is for a transaction the coordinator has no
    partitions of). So, unlike a fencing answered to EndTxn, it is a known abort: what the
    transaction wrote is checked for records a skipped ABORT marker left open."""


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


class CommitOutcomeUnknownError(TransportError):
    """EndTxn(commit) was sent and then failed without a definite answer (the broker went away
    mid-commit, the request timed out): the coordinator may have committed the transaction all
    the same, and completes it when it comes back. Only the broker knows, so the worker does
    what it does after a fencing: close the tasks, recreate the producer (whose InitProducerId
    completes whatever the coordinator holds), rejoin, and read the committed offsets again.
    Rewinding to the offsets it holds in memory would process committed records a second time.
    """


class FatalProducerError(TransportError):
    """The producer hit an error it cannot recover from; it must be recreated, never reused."""


class TransactionTimedOutError(FatalProducerError):
    """The coordinator aborted our transaction because it outlived ``transaction_timeout``
    (the broker answers as it does to a fenced producer, but no other producer took our id),
    before our EndTxn was sent: nothing of it can have committed. Not a zombie: the worker
    recreates its producer, rewinds to its committed offsets and retries, keeping its tasks."""


class CommitTimedOutError(TransactionTimedOutError, CommitOutcomeUnknownError):
    """Our EndTxn(commit) was answered as a fencing on a transaction older than
    ``transaction_timeout``. Either the coordinator timed the transaction out (an abort) or it
    completed an EndTxn it had accepted before an outage, whose answer we never saw (a
    commit): the broker alone knows which, so the worker rejoins and reads its committed
    offsets again (``runtime.commit.MIGRATED``), as for any unknown outcome."""


class TransactionLeftOpenError(StreamsAppError):
    """A transaction this worker gave up is still open on a partition, and it could not be
    aborted there (no CLUSTER_ACTION permission for WriteTxnMarkers, or the partition's leader
    did not answer), or the file in the state directory that lists where such transactions may
    be open cannot be read. Not a :class:`TransportError`: going on would let the next commit
    commit the records of the transaction given up, so the worker stops, naming the partition
    (or the file)."""


class RecordRejectedError(SendFailedError, RecordError):
    """The client or the broker refused a record for good (see :data:`RECORD_REJECTED_CODES`)."""


def is_record_rejected(exc: BaseException | None) -> bool:
    """Is ``exc`` (or an error it was raised from) a refusal of the record itself?

    Send futures fail with the client's own exceptions; Kafka clients carry the protocol error
    code on them (aiokafka as ``errno``), which is what this looks at.
    """
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, RecordRejectedError):
            return True
        if getattr(exc, "errno", None) in RECORD_REJECTED_CODES:
            return True
        exc = exc.__cause__
        seen += 1
    return False
