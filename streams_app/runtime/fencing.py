"""Fencing the transactional ids of workers that left the group, before taking their tasks.

A worker that dies (SIGKILL, OOM, a lost machine) leaves its last transaction open. Until the
broker aborts it (``transaction.timeout.ms`` after it began, swept every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``) that transaction holds back:

- the changelog tail a new owner must restore (a read_committed reader cannot pass it);
- the committed offsets, if it died between TxnOffsetCommit and EndTxn (``require_stable``);
- every record written after it to the same output partitions: the last stable offset stops
  at its first record, so downstream read_committed readers see nothing new, even what the
  new owner has committed.

A restart on the same state directory ends it at once: the same transactional id's
InitProducerId fences the old epoch and aborts the open transaction. A *different* worker taking
over can do exactly the same, because under exactly-once v2 each worker's transactional id is
``<app id>-<process id>`` and the assignor tells the group which process ids left since the
last generation (:mod:`streams_app.runtime.assignor`). The new owner opens a producer with
each departed id, which aborts whatever it left open, and closes it.

Why this is safe: a member absent from a completed generation no longer owns anything; if it
is a zombie rather than dead, its generation is stale and KIP-447 would reject its offsets
anyway, and now its producer is fenced too (it sees ProducerFenced, closes its tasks and
rejoins, as after any fencing). If that process comes back on its state directory, its own
InitProducerId bumps the epoch again and it goes on. The one race, a departed process restarting
in the milliseconds between the generation forming and the fence, costs that process one extra
rejoin, never a duplicate.

**Markers the abort missed.** The coordinator skips the ABORT marker of a partition that has
no leader at that moment (Kafka 4.3; see
:class:`~streams_app.transport.base.LeftoverAbortingProducerClient`). So the fence first asks the
coordinator which partitions the departed worker's transaction was ongoing on (after the
InitProducerId it has forgotten them), and once fenced asks those partitions whether the
transaction is still open there, and aborts it where it is (:func:`_check_markers`).

Kafka Streams does not do this (its new owners wait for the transaction timeout); it is what
makes failover to a standby complete in about a second of the rebalance instead of waiting out
``transaction_timeout``.

**A worker nobody in the group remembers.** The assignor knows departed members only from the
members of earlier generations. A lone worker that dies and comes back on an *empty* state
directory has a new process id, and no member ever saw the old one. So a new owner, before it
reads its stable offsets, looks for such predecessors in two places (:func:`fence_predecessors`)
and fences every one that is not a member of this generation:

- **who last committed its new partitions.** Every exactly-once commit writes the committing
  transactional id into each offset's metadata (:mod:`streams_app.runtime.stream_time`); the
  last *committed* offsets (OffsetFetch without ``require_stable``) answer at once;
- **who has a transaction open now** under one of this app's ids (``<app id>-<process id>``,
  matched exactly: not an app whose id merely starts with ours), from KIP-664's
  ListTransactions on every broker. This covers a worker that died before it ever committed:
  its metadata names it nowhere, but its first Produce opened a transaction that holds the
  last stable offset of every output and changelog partition it wrote.

Both are best effort: a failed read is logged and skipped, and the broker still aborts the
transaction at its timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection

from streams_app.runtime import guarantees
from streams_app.runtime.stream_time import decode_metadata
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    LeftOpen,
    LeftOpenCheck,
    LeftoverAbortingProducerClient,
    ProducerConfig,
    TopicPartition,
    Transport,
)
from streams_app.transport.errors import TransportError

log = logging.getLogger(__name__)

#: Per id: bootstrap, InitProducerId (waits for the abort markers to be written), close.
FENCE_TIMEOUT = 30.0
#: Each request of the marker check after a fence.
CHECK_REQUEST_TIMEOUT_MS = 5_000


async def fence_transactional_ids(
    transport: Transport, transactional_ids: Collection[str], *, client_id: str
) -> list[str]:
    """Open and close a producer with each id (concurrently); returns the ids fenced.

    Failures are logged and skipped: the broker still aborts the transaction at its timeout,
    so a failed fence costs time, never correctness.
    """
    if not transactional_ids:
        return []
    started = time.monotonic()
    results = await asyncio.gather(
        *(_fence(transport, tid, client_id) for tid in sorted(set(transactional_ids)))
    )
    fenced = [tid for tid, ok in results if ok]
    log.info(
        "fenced %d departed worker(s)' transactional id(s) in %.2fs: their open transactions "
        "are aborted",
        len(fenced),
        time.monotonic() - started,
    )
    return fenced


async def fence_predecessors(
    consumer: ConsumerClient,
    admin: AdminClient,
    transport: Transport,
    partitions: Collection[TopicPartition],
    *,
    app_id: str,
    members: Collection[str],
    client_id: str,
) -> list[str]:
    """Fence this app's transactional ids that are not among ``members`` (this generation's,
    ours included) and either last committed one of ``partitions`` or have a transaction open
    now; returns the ids fenced."""
    keep = set(members)
    # Both reads at once: they stand between the assignment and the first fetch.
    committers, open_ids = await asyncio.gather(
        _last_committers(consumer, partitions, keep), _open_transactions(admin, app_id, keep)
    )
    if committers:
        log.info(
            "%s last committed partitions taken over here and are not in the group: fencing them",
            ", ".join(sorted(committers)),
        )
    hanging = open_ids - committers
    if hanging:
        log.info(
            "%s hold an open transaction and are not in the group: fencing them",
            ", ".join(sorted(hanging)),
        )
    return await fence_transactional_ids(transport, committers | hanging, client_id=client_id)


async def _last_committers(
    consumer: ConsumerClient, partitions: Collection[TopicPartition], keep: set[str]
) -> set[str]:
    try:
        found = await consumer.committed_offsets_with_metadata(partitions, stable=False)
    except TransportError as exc:
        log.warning("reading who last committed the new partitions failed: %s", exc)
        return set()
    return {
        committer
        for offset in found.values()
        if offset is not None
        and (committer := decode_metadata(offset.metadata).committer) is not None
        and committer not in keep
    }


async def _open_transactions(admin: AdminClient, app_id: str, keep: set[str]) -> set[str]:
    try:
        found = await admin.open_transactions(f"{app_id}-")
    except TransportError as exc:
        log.warning(
            "listing open transactions failed (%s): a predecessor that never "
            "committed is left to its transaction timeout",
            exc,
        )
        return set()
    return {
        tid
        for tid in found
        if tid not in keep and guarantees.is_worker_transactional_id(app_id, tid)
    }


async def _fence(transport: Transport, transactional_id: str, client_id: str) -> tuple[str, bool]:
    producer = transport.producer(
        ProducerConfig(transactional_id=transactional_id, client_id=client_id, linger_ms=0)
    )
    checking = producer if isinstance(producer, LeftoverAbortingProducerClient) else None
    try:
        async with asyncio.timeout(FENCE_TIMEOUT):
            ongoing = (
                []
                if checking is None
                else await checking.left_open_before_start(
                    request_timeout_ms=CHECK_REQUEST_TIMEOUT_MS
                )
            )
            await producer.start()  # InitProducerId: bumps the epoch, aborts the open txn
        if checking is not None and ongoing:
            await _check_markers(checking, transactional_id, ongoing)
        return transactional_id, True
    except Exception as exc:
        log.warning(
            "could not fence the transactional id %s of a departed worker (%s): its open "
            "transaction, if any, ends at the broker's transaction timeout",
            transactional_id,
            type(exc).__name__,
        )
        return transactional_id, False
    finally:
        try:
            await producer.stop()
        except Exception as exc:
            log.debug("closing a fencing producer failed: %s", type(exc).__name__)


async def _check_markers(
    producer: LeftoverAbortingProducerClient, transactional_id: str, ongoing: list[LeftOpen]
) -> None:
    """The departed worker's transaction the fence just aborted was ongoing on ``ongoing``;
    the coordinator skips the ABORT marker of a partition without a leader at that moment (see
    :class:`~streams_app.transport.base.LeftoverAbortingProducerClient`), and those records
    would hold the partition's last stable offset for good: the new owner's restore of a
    changelog would stall on them, downstream readers too, and the departed process, back on
    its state directory, would commit them with its next transaction there. So each is asked
    once and what is still open aborted. Best effort: a partition that cannot answer now is
    named, and ``txn hanging --abort`` ends it."""
    try:
        async with asyncio.timeout(FENCE_TIMEOUT):
            check = await producer.abort_left_open(
                ongoing, request_timeout_ms=CHECK_REQUEST_TIMEOUT_MS
            )
    except Exception as exc:
        check = LeftOpenCheck(unanswered={entry: type(exc).__name__ for entry in ongoing})
    for entry, offset in sorted(check.aborted.items()):
        log.warning(
            "the transaction of departed worker %s (producer id %d, epoch %d) was still open on "
            "%s[%d] from offset %d after its fence: the broker wrote no abort marker there (a "
            "partition without a leader at that moment); aborted it here",
            transactional_id,
            entry.producer_id,
            entry.producer_epoch,
            *entry.tp,
            offset,
        )
    if check.unanswered:
        log.warning(
            "could not check %s for the transaction of departed worker %s its fence aborted "
            "(%s): if the broker skipped a marker there, `streams-app txn hanging --abort` "
            "ends it once the partition has a leader",
            ", ".join(f"{t}[{p}]" for t, p in sorted(e.tp for e in check.unanswered)),
            transactional_id,
            "; ".join(sorted(set(check.unanswered.values()))),
        )
