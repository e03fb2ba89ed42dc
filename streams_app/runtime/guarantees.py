"""The exact Kafka client settings of each processing guarantee.

exactly_once_v2
    producer: transactional (``transactional.id = <app id>-<process id>``), idempotent,
    acks=all, ``transaction.timeout.ms`` = ``transaction_timeout`` (10 s); consumer:
    read_committed, auto-commit off; offsets committed inside the transaction (TxnOffsetCommit
    v3 with the group generation, KIP-447); commit interval 100 ms; on error: abort, rewind to
    the committed offsets, retry.
at_least_once
    producer: idempotent, acks=all, retried until delivered; consumer: read_committed,
    auto-commit off; offsets committed after every output of the batch is acknowledged; commit
    interval 1 s; on error: rewind, retry (outputs may repeat, nothing is lost).
at_most_once
    producer: acks=0, not idempotent, no retries; consumer: read_committed, auto-commit off;
    offsets committed right after fetching, before processing; commit interval 1 s; on error:
    the record is skipped (its offset is already committed).

Consumers read committed data under every guarantee: there is no reason to process records of
transactions that will abort.
"""

from __future__ import annotations

import re

from streams_app.settings import AT_MOST_ONCE, EXACTLY_ONCE_V2, Settings
from streams_app.transport.base import ConsumerConfig, ProducerConfig


def consumer_config(settings: Settings) -> ConsumerConfig:
    return ConsumerConfig(
        group_id=settings.id,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset=getattr(settings, "consumer_auto_offset_reset", "earliest"),
        session_timeout_ms=int(settings.session_timeout * 1000),
        heartbeat_interval_ms=int(settings.heartbeat_interval * 1000),
        max_poll_interval_ms=int(settings.max_poll_interval * 1000),
        max_poll_records=settings.max_poll_records,
        fetch_max_wait_ms=max(10, min(100, int(settings.effective_commit_interval * 500))),
        client_id=f"{settings.id}-consumer",
        group_instance_id=settings.group_instance_id,
    )


def restore_consumer_config(settings: Settings) -> ConsumerConfig:
    """Changelogs are read committed, without a group, from explicit offsets."""
    return ConsumerConfig(
        group_id=None,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=10_000,
        fetch_max_wait_ms=50,
        client_id=f"{settings.id}-restore",
    )


def standby_consumer_config(settings: Settings) -> ConsumerConfig:
    """Standby tasks tail changelogs read committed, without a group, from their stores'
    offsets: they never see a record of an open or aborted transaction."""
    return ConsumerConfig(
        group_id=None,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=10_000,
        fetch_max_wait_ms=100,
        client_id=f"{settings.id}-standby",
    )


def producer_config(settings: Settings, process_id: str) -> ProducerConfig:
    common = {
        "linger_ms": settings.effective_producer_linger_ms,
        "max_batch_size": settings.producer_max_batch_size,
        "max_request_size": settings.max_request_size,
        "compression_type": settings.compression_type,
        "client_id": f"{settings.id}-producer",
    }
    if settings.processing_guarantee == EXACTLY_ONCE_V2:
        return ProducerConfig(
            transactional_id=transactional_id(settings, process_id),
            acks="all",
            enable_idempotence=True,
            transaction_timeout_ms=int(settings.transaction_timeout * 1000),
            transaction_version=settings.transaction_version,
            **common,  # type: ignore[arg-type]
        )
    if settings.processing_guarantee == AT_MOST_ONCE:
        return ProducerConfig(
            transactional_id=None,
            acks=0,
            enable_idempotence=False,
            **common,  # type: ignore[arg-type]
        )
    return ProducerConfig(
        transactional_id=None,
        acks="all",
        enable_idempotence=True,
        **common,  # type: ignore[arg-type]
    )


def transactional_id(settings: Settings, process_id: str) -> str:
    """One per worker process (EOS v2), stable across restarts on the same state dir.

    Stable so that a restarted worker's InitProducerId fences its previous incarnation and aborts
    the transaction it left open at once, instead of waiting for the transaction timeout.
    """
    return f"{settings.id}-{process_id}"


#: A process id as the state directory makes one (``uuid4().hex``).
_PROCESS_ID = "[0-9a-f]{32}"


def is_worker_transactional_id(app_id: str, candidate: str) -> bool:
    """Is ``candidate`` the transactional id of some worker of the app ``app_id``? Exactly
    :func:`transactional_id`'s shape, so that app ``count`` never takes ``count-v2``'s ids for
    its own."""
    return re.fullmatch(re.escape(app_id) + "-" + _PROCESS_ID, candidate) is not None
