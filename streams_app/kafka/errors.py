"""Error codes aiokafka 0.14 does not know, and the errors our extension adds.

aiokafka's table (``aiokafka.errors.kafka_errors``) stops at code 79, so the codes KIP-447 relies on
come back as ``UnknownError`` and every handler treats them as unexpected (fatal). Registering
them here gives them names and the right behaviour:

- 82 FENCED_INSTANCE_ID: a static member (group.instance.id) was replaced by a newer instance.
- 88 UNSTABLE_OFFSET_COMMIT: OffsetFetch(require_stable) found offsets still pending in an open
  transaction; *retriable*, so aiokafka's refresh loops retry it instead of failing.
- 90 PRODUCER_FENCED: a newer producer took the transactional.id. It subclasses aiokafka's own
  ``ProducerFenced`` so that every aiokafka handler that ``raise error_type()`` on an unknown code
  ends the sender exactly as for INVALID_PRODUCER_EPOCH (the sender re-raises ``ProducerFenced``
  unwrapped).

Registration happens on import of :mod:`streams_app.kafka` (the package imports this module).
"""

from __future__ import annotations

from collections.abc import Sequence

import aiokafka.errors as aerrors


class FencedInstanceIdError(aerrors.BrokerResponseError):  # type: ignore[misc]
    errno = 82
    message = "FENCED_INSTANCE_ID"
    description = "A newer consumer with the same group.instance.id replaced this one."


class UnstableOffsetCommitError(aerrors.BrokerResponseError):  # type: ignore[misc]
    errno = 88
    message = "UNSTABLE_OFFSET_COMMIT"
    description = "Offsets are pending in an open transaction; retry once it completes."
    retriable = True


class ProducerFencedResponseError(aerrors.ProducerFenced, aerrors.BrokerResponseError):  # type: ignore[misc]
    errno = 90
    message = "PRODUCER_FENCED"
    description = "A newer producer with the same transactional.id fenced this one."


def register_error_codes() -> None:
    """Add codes 82, 88 and 90 to aiokafka's table; codes aiokafka already knows are kept."""
    for error in (FencedInstanceIdError, UnstableOffsetCommitError, ProducerFencedResponseError):
        aerrors.kafka_errors.setdefault(error.errno, error)


register_error_codes()


# The member/generation errors a TxnOffsetCommit v3 gets when the group moved on (KIP-447).
GROUP_FENCING_ERRORS: tuple[type[aerrors.BrokerResponseError], ...] = (
    aerrors.IllegalGenerationError,  # 22
    aerrors.UnknownMemberIdError,  # 25
    aerrors.RebalanceInProgressError,  # 27
    FencedInstanceIdError,  # 82
)


class OffsetCommitFencedError(aerrors.KafkaError):  # type: ignore[misc]
    """The group coordinator rejected the transaction's offsets: the membership they were sent
    under is stale (KIP-447 fencing). The transaction is *abortable* with the same producer."""

    def __init__(self, group_id: str, error: type[aerrors.BrokerResponseError]) -> None:
        self.group_id = group_id
        self.error = error
        super().__init__(
            f"group {group_id!r} rejected the transaction's offsets with {error.message}: "
            "this member no longer owns its partitions in the current generation"
        )


class InvalidGroupMetadataError(aerrors.KafkaError):  # type: ignore[misc]
    """Refused to send offsets under generation < 0 or an empty member id: the broker would
    accept them *without* any fencing check (aiokafka resets to those defaults on errors)."""


class TransactionSendFailedError(aerrors.KafkaError):  # type: ignore[misc]
    """A send of the current transaction failed, so the transaction must not commit.

    aiokafka would commit anyway and the failed records would be silently missing.
    """

    def __init__(self, failures: Sequence[BaseException]) -> None:
        self.failures = tuple(failures)
        first = self.failures[0] if self.failures else None
        super().__init__(
            f"{len(self.failures)} send(s) of the current transaction failed "
            f"(first: {first!r}); abort the transaction"
        )


class ProducerUnusableError(aerrors.KafkaError):  # type: ignore[misc]
    """The producer's transaction manager is FATAL (its sender task died); recreate it.

    ``__cause__`` is the error that killed it.
    """


def is_fencing_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` or anything in its cause/context chain says "a newer producer took over"."""
    return _in_chain(exc, (aerrors.ProducerFenced, aerrors.InvalidProducerEpoch))


def is_aborted_by_coordinator(exc: BaseException | None) -> bool:
    """Whether an EndTxn(COMMIT) failed because the coordinator had already aborted the transaction.

    Under transaction version 2 (KIP-890) the coordinator bumps the epoch when it aborts a timed-out
    transaction and then treats the old epoch's EndTxn as a retry: a COMMIT finds the state
    CompleteAbort and is answered INVALID_TXN_STATE, not PRODUCER_FENCED as under version 1. For a
    producer that only commits transactions it began, both mean the same thing: it was fenced by
    ``transaction.timeout.ms``. Unlike a fencing, INVALID_TXN_STATE is never the answer to a
    committed transaction's retried EndTxn (Kafka 4.3 answers that NONE): the transport raises
    it as a known abort (``AbortedByCoordinatorError``).
    """
    return _in_chain(exc, (aerrors.InvalidTxnState,))


def _in_chain(exc: BaseException | None, types: tuple[type[BaseException], ...]) -> bool:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, types):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
