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

Kafka Streams does not do this (its new owners wait for the transaction timeout); it is what
makes failover to a standby complete in about a second of the rebalance instead of waiting out
``transaction_timeout``.

**A worker nobody in the group remembers.** The assignor knows departed members only from the
members of earlier generations. A lone worker that dies and comes back on an *empty* state
directory has a new process id, and no member ever saw the old one. So every exactly-once
commit also writes the committing transactional id into each offset's metadata
(:mod:`streams_app.runtime.stream_time`). Before a new owner reads its stable offsets, it reads
the last *committed* ones (OffsetFetch without ``require_stable``, which answers at once), and
fences every id it finds there that is not a member of this generation
(:func:`fence_last_committers`). It does not help when the dead worker never committed one of
those partitions before it died. Then its transaction still ends at the broker's timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection

from streams_app.runtime.stream_time import decode_metadata
from streams_app.transport.base import (
    ConsumerClient,
    ProducerConfig,
    TopicPartition,
    Transport,
)
from streams_app.transport.errors import TransportError

log = logging.getLogger(__name__)

#: Per id: bootstrap, InitProducerId (waits for the abort markers to be written), close.
FENCE_TIMEOUT = 30.0


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


async def fence_last_committers(
    consumer: ConsumerClient,
    transport: Transport,
    partitions: Collection[TopicPartition],
    *,
    members: Collection[str],
    client_id: str,
) -> list[str]:
    """Fence the transactional ids that last committed ``partitions`` and are not among
    ``members`` (this generation's, ours included); returns the ids fenced.

    A failed read is logged and skipped, like a failed fence: it costs time, never correctness.
    """
    try:
        found = await consumer.committed_offsets_with_metadata(partitions, stable=False)
    except TransportError as exc:
        log.warning("reading who last committed the new partitions failed: %s", exc)
        return []
    keep = set(members)
    committers = {
        committer
        for offset in found.values()
        if offset is not None
        and (committer := decode_metadata(offset.metadata).committer) is not None
        and committer not in keep
    }
    if not committers:
        return []
    log.info(
        "%s last committed partitions taken over here and are not in the group: fencing them",
        ", ".join(sorted(committers)),
    )
    return await fence_transactional_ids(transport, committers, client_id=client_id)


async def _fence(transport: Transport, transactional_id: str, client_id: str) -> tuple[str, bool]:
    producer = transport.producer(
        ProducerConfig(transactional_id=transactional_id, client_id=client_id, linger_ms=0)
    )
    try:
        async with asyncio.timeout(FENCE_TIMEOUT):
            await producer.start()  # InitProducerId: bumps the epoch, aborts the open txn
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
