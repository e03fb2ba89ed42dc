"""``txn list|describe|hanging``: the cluster's transactions as their coordinators and the
partition leaders see them (KIP-664), and the history the coordinators logged.

Two views have to be put together. A transaction *coordinator* knows each transactional id:
its producer id and epoch, its state, its timeout, when its open transaction began and which
partitions it touched (ListTransactions, DescribeTransactions). A partition *leader* knows, for
each producer writing to it, the first offset of its open transaction, which is where the
partition's last stable offset (LSO) is held (DescribeProducers).

A **hanging** transaction is open on a partition while its coordinator does not count that
partition in an open transaction of the same producer: no marker will ever be written, and the
LSO stays where it is until an operator aborts it (read_committed consumers of that partition,
Kafka Streams and our workers included, are stuck). Brokers since 3.6 verify transactional
writes (KIP-890) so this should no longer happen; it did with older clients and brokers, when a
late produce request landed after its transaction had ended. An **overdue** transaction is one
the coordinator knows but has not aborted although its timeout passed (a coordinator that
cannot write its log or markers): not abortable from here, but worth an alert.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from streams_app.kafka.ops_admin import (
    OpsAdmin,
    OpsAdminError,
    ProducerState,
    TransactionDescription,
)
from streams_app.kafka.placement import coordinator_partition
from streams_app.ops.log import read_batches
from streams_app.ops.txnlog import TRANSACTION_STATE_TOPIC, TxnLogEntry, decode_entry

TP = tuple[str, int]

#: Kafka's transaction states, by their lower-case name (what ``--state`` accepts).
STATE_NAMES = {
    name.lower(): name
    for name in (
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    )
}
#: States in which a transaction is open (its partitions may hold the LSO).
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
#: The broker setting bounding every producer's transaction.timeout.ms (default 15 min).
MAX_TIMEOUT_SETTING = "transaction.max.timeout.ms"
DEFAULT_MAX_TIMEOUT_MS = 900_000
#: Slack for the coordinator's abort sweep (transaction.abort.timed.out.transaction.cleanup
#: .interval.ms, 10 s by default) before a timed-out transaction counts as overdue.
OVERDUE_GRACE_MS = 15_000

HANGING = "hanging"
OVERDUE = "overdue"
RUNNING = "open"
TOO_YOUNG = "unconfirmed"


def now_ms() -> int:
    return int(time.time() * 1000)


def state_name(text: str) -> str:
    """Kafka's spelling of a transaction state given in any case (``ongoing`` -> ``Ongoing``)."""
    try:
        return STATE_NAMES[text.strip().lower().replace("_", "")]
    except KeyError:
        raise ValueError(
            f"unknown transaction state {text!r}; use one of {', '.join(STATE_NAMES.values())}"
        ) from None


# -- list --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransactionRow:
    """One transactional id as ``txn list`` shows it."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[TP, ...]
    coordinator_id: int

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def age_ms(self, at_ms: int) -> int | None:
        """How long the open transaction has been running; None when none is open."""
        if not self.open or self.start_time_ms < 0:
            return None
        return max(0, at_ms - self.start_time_ms)


@dataclass
class TransactionList:
    rows: list[TransactionRow]
    #: Brokers that did not answer (their transactional ids are missing from ``rows``).
    unreachable: list[int]
    at_ms: int


async def list_transactions(
    admin: OpsAdmin,
    *,
    states: Collection[str] = (),
    older_than_ms: int | None = None,
    prefix: str | None = None,
) -> TransactionList:
    """Every transactional id with its coordinator's description.

    ``older_than_ms`` keeps open transactions that began longer ago than that; ``prefix`` keeps
    ids that start with it (an app's workers use ``<app id>-<process id>``).
    """
    wanted = {state_name(s) for s in states}
    listings, unreachable = await admin.list_transactions(
        states=wanted, running_longer_than_ms=-1 if older_than_ms is None else older_than_ms
    )
    ids = [
        listing.transactional_id
        for listing in listings
        if prefix is None or listing.transactional_id.startswith(prefix)
    ]
    described = await admin.describe_transactions(ids) if ids else {}
    at = now_ms()
    rows = []
    for txn_id in sorted(described):
        found = described[txn_id]
        if found is None:
            continue  # expired between the two calls
        row = _row(found)
        if wanted and row.state not in wanted:
            continue
        if older_than_ms is not None:
            age = row.age_ms(at)
            if age is None or age <= older_than_ms:
                continue
        rows.append(row)
    return TransactionList(rows, unreachable, at)


def _row(found: TransactionDescription) -> TransactionRow:
    return TransactionRow(
        found.transactional_id,
        found.state,
        found.producer_id,
        found.producer_epoch,
        found.timeout_ms,
        found.start_time_ms,
        found.partitions,
        found.coordinator_id,
    )


# -- describe ----------------------------------------------------------------------------------


@dataclass
class TransactionDetail:
    transactional_id: str
    current: TransactionRow | None
    #: The coordinator's log records for this id, oldest first (what compaction left).
    history: list[TxnLogEntry]
    log_partition: int
    at_ms: int


async def describe_transaction(
    admin: OpsAdmin, transactional_id: str, *, history: bool = True
) -> TransactionDetail:
    """The coordinator's current view of one id and its logged history."""
    found = (await admin.describe_transactions([transactional_id])).get(transactional_id)
    partitions = await admin.partitions(TRANSACTION_STATE_TOPIC)
    log_partition = coordinator_partition(transactional_id, len(partitions))
    entries: list[TxnLogEntry] = []
    if history:
        async for batch in read_batches(admin, TRANSACTION_STATE_TOPIC, log_partition):
            if batch.is_control:
                continue
            for record in batch.records:
                if record.key is None:
                    continue
                entry = decode_entry(record.key, record.value, record.offset)
                if entry is not None and entry.transactional_id == transactional_id:
                    entries.append(entry)
    return TransactionDetail(
        transactional_id,
        None if found is None else _row(found),
        entries,
        log_partition,
        now_ms(),
    )


# -- open transactions on partitions, hanging ones ---------------------------------------------


@dataclass(frozen=True)
class PartitionTransaction:
    """An open transaction on one partition (DescribeProducers) and what its coordinator says."""

    topic: str
    partition: int
    producer: ProducerState
    transactional_id: str | None
    coordinator: TransactionRow | None
    #: ``hanging``, ``overdue``, ``open`` (healthy) or ``unconfirmed`` (not counted by its
    #: coordinator, but too recent to call hanging).
    verdict: str
    reason: str
    #: Since the producer's last write to the partition (ms).
    idle_ms: int

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)

    @property
    def start_offset(self) -> int:
        return self.producer.current_txn_start_offset


async def max_transaction_timeout_ms(admin: OpsAdmin) -> int:
    """The brokers' ``transaction.max.timeout.ms``: no legitimate transaction lives longer."""
    value = await admin.broker_config(MAX_TIMEOUT_SETTING)
    try:
        return int(value) if value is not None else DEFAULT_MAX_TIMEOUT_MS
    except ValueError:
        return DEFAULT_MAX_TIMEOUT_MS


async def open_transactions(
    admin: OpsAdmin,
    *,
    topics: Collection[str] | None = None,
    max_timeout_ms: int | None = None,
) -> list[PartitionTransaction]:
    """Every open transaction on the partitions of ``topics`` (default: all), judged.

    Kafka's ``kafka-transactions.sh find-hanging`` rule: an open transaction the coordinator
    does not count is hanging once it is older than the longest timeout it could have. Here the
    bound is the producer's own timeout when its coordinator still knows its transactional id,
    else the brokers' ``transaction.max.timeout.ms`` (read from them unless ``max_timeout_ms``
    overrides it).
    """
    names = sorted(topics) if topics is not None else await admin.list_topics()
    partitions: list[TP] = []
    for name in names:
        partitions.extend((name, p) for p in await admin.partitions(name))
    producers = await admin.describe_producers(partitions) if partitions else {}
    candidates = [
        (tp, state)
        for tp, states in sorted(producers.items())
        for state in states
        if state.has_open_transaction
    ]
    if not candidates:
        return []
    if max_timeout_ms is None:
        max_timeout_ms = await max_transaction_timeout_ms(admin)
    producer_ids = {state.producer_id for _tp, state in candidates}
    listings, _unreachable = await admin.list_transactions(producer_ids=producer_ids)
    id_of = {
        listing.producer_id: listing.transactional_id
        for listing in listings
        if listing.producer_id in producer_ids
    }
    described = await admin.describe_transactions(set(id_of.values())) if id_of else {}
    at = now_ms()
    out = []
    for tp, state in candidates:
        txn_id = id_of.get(state.producer_id)
        found = described.get(txn_id) if txn_id is not None else None
        row = None if found is None else _row(found)
        out.append(_judge(tp, state, txn_id, row, at, max_timeout_ms))
    return await _confirm_hanging(admin, out)


async def _confirm_hanging(
    admin: OpsAdmin, found: list[PartitionTransaction]
) -> list[PartitionTransaction]:
    """Keep a ``hanging`` verdict only where the partition's leader still holds it open.

    The verdict joins two reads that are not atomic: the partitions' producer state first, the
    coordinators' view after. A transaction whose markers were still being written at the first
    read (its coordinator in PrepareCommit, the partition's leader just killed and replaced)
    is open there and CompleteCommit at the second: "hanging", while its marker is already in
    the log. And DescribeProducers is answered by whichever replica it reaches (Kafka answers
    from its local log, follower or not), so a stale leader in the client's metadata shows a
    replica that is behind. Kafka's ``find-hanging`` only looks at writes older than 15 minutes,
    which hides both; this judge uses the producer's own timeout, seconds. Both were seen in the
    networked chaos run (CHAOS.md, "What the partitions found").

    So each hanging one is read again, after the coordinator was: it must still be open on the
    partition at the same start offset, and the leader's last stable offset (ListOffsets
    read_committed, which only the leader answers) must not be past that start offset. The LSO
    is where the leader's earliest open transaction begins: past it, the leader has ended it.
    """
    suspects = sorted({t.tp for t in found if t.verdict == HANGING})
    if not suspects:
        return found
    stable = await admin.end_offsets(suspects, committed=True)
    again = await admin.describe_producers(suspects)

    def still_open(t: PartitionTransaction) -> bool:
        held = stable.get(t.tp, t.start_offset) <= t.start_offset
        return held and any(
            p.producer_id == t.producer.producer_id and p.current_txn_start_offset == t.start_offset
            for p in again.get(t.tp, [])
        )

    return [t for t in found if t.verdict != HANGING or still_open(t)]


def _judge(
    tp: TP,
    state: ProducerState,
    txn_id: str | None,
    row: TransactionRow | None,
    at: int,
    max_timeout_ms: int,
) -> PartitionTransaction:
    idle = max(0, at - state.last_timestamp_ms)
    counted = (
        row is not None
        and row.open
        and row.producer_id == state.producer_id
        and tp in row.partitions
    )
    if counted:
        assert row is not None
        age = row.age_ms(at) or 0
        if age > row.timeout_ms + OVERDUE_GRACE_MS:
            verdict, reason = (
                OVERDUE,
                (
                    f"{row.state} for {age / 1000:.0f}s, past its {row.timeout_ms / 1000:g}s "
                    "timeout: the coordinator has not aborted it"
                ),
            )
        else:
            verdict, reason = RUNNING, f"{row.state}; its coordinator will end it"
        return PartitionTransaction(*tp, state, txn_id, row, verdict, reason, idle)
    if row is None:
        bound = max_timeout_ms
        why = (
            "no transactional id has this producer id"
            if txn_id is None
            else f"{txn_id!r} is unknown to its coordinator"
        )
    else:
        bound = row.timeout_ms
        if row.producer_id != state.producer_id:
            why = f"{txn_id!r} now runs producer id {row.producer_id}"
        elif not row.open:
            why = f"{txn_id!r} is {row.state}"
        else:
            why = f"the open transaction of {txn_id!r} does not include {tp[0]}[{tp[1]}]"
    if idle > bound:
        verdict = HANGING
        reason = f"{why}; no marker will come (last write {idle / 1000:.0f}s ago)"
    else:
        verdict = TOO_YOUNG
        reason = f"{why}; younger than the {bound / 1000:g}s bound, check again later"
    return PartitionTransaction(*tp, state, txn_id, row, verdict, reason, idle)


async def abort_hanging(admin: OpsAdmin, hanging: PartitionTransaction) -> None:
    """Abort one hanging transaction: an ABORT marker for its producer on its partition.

    The partition's producer state is checked again first, so an abort is never written for a
    transaction that ended (or became a new one) since it was found.
    """
    if hanging.verdict != HANGING:
        raise OpsAdminError(
            f"the transaction on {hanging.topic}[{hanging.partition}] at offset "
            f"{hanging.start_offset} is {hanging.verdict}, not hanging: refusing to abort it"
        )
    current = (await admin.describe_producers([hanging.tp])).get(hanging.tp, [])
    same = [
        p
        for p in current
        if p.producer_id == hanging.producer.producer_id
        and p.current_txn_start_offset == hanging.start_offset
    ]
    if not same:
        raise OpsAdminError(
            f"the transaction on {hanging.topic}[{hanging.partition}] at offset "
            f"{hanging.start_offset} is no longer open; nothing to abort"
        )
    producer = same[0]
    await admin.abort_transaction(
        hanging.tp,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        coordinator_epoch=producer.coordinator_epoch,
    )
