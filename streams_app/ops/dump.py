"""``txn dump``: a partition batch by batch, with what a read_committed reader makes of each.

Like ``kafka-dump-log.sh --deep-iteration`` but over the network (Fetch, read_uncommitted), so
no access to the broker's files is needed. Each transactional data batch is followed, later in
the partition, by its producer's control batch: COMMIT makes it visible to read_committed
readers, ABORT hides it for good, and until the marker is written the transaction is *open*
and holds the partition's last stable offset (LSO) at its first offset: read_committed readers
stop there, even for committed and non-transactional records behind it.

To label the batches shown, the dump reads on past the last one shown until every transaction
they belong to has its marker, or the high watermark is reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams_app.kafka.ops_admin import OpsAdmin, OpsAdminError
from streams_app.ops.log import LogPosition, read_batches
from streams_app.ops.records import RecordBatch

#: What a batch is, for a read_committed reader.
COMMITTED = "committed"  # transactional data whose COMMIT marker follows
ABORTED = "aborted"  # transactional data whose ABORT marker follows: never read
OPEN = "open"  # transactional data with no marker yet: not read until one is written
PLAIN = "plain"  # not transactional: read once the LSO is past it
CONTROL = "control"  # a COMMIT/ABORT marker: skipped by every consumer


@dataclass(frozen=True)
class DumpedBatch:
    batch: RecordBatch
    status: str
    #: Whether a read_committed reader returns this batch's records *now* (status and LSO).
    visible_now: bool

    @property
    def read_committed(self) -> str:
        """A short phrase for the dump's read_committed column."""
        if self.status == CONTROL:
            return "skipped (marker)"
        if self.status == ABORTED:
            return "never (aborted)"
        if self.status == OPEN:
            return "not yet (open)"
        if not self.visible_now:
            return "not yet (behind LSO)"
        return "yes"


@dataclass
class OpenTransaction:
    producer_id: int
    producer_epoch: int
    first_offset: int


@dataclass
class DumpSummary:
    topic: str
    partition: int
    first_offset: int | None = None
    last_offset: int | None = None
    batches: int = 0
    #: Offsets (records) by status.
    records: dict[str, int] = field(
        default_factory=lambda: {COMMITTED: 0, ABORTED: 0, OPEN: 0, PLAIN: 0, CONTROL: 0}
    )
    log_start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    open_transactions: list[OpenTransaction] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        return self.last_stable_offset < self.high_watermark


@dataclass
class Dump:
    batches: list[DumpedBatch]
    summary: DumpSummary
    #: Producer id -> the transactional id its coordinators know it by (ListTransactions
    #: filtered by producer id): the ids of the transactional batches shown, where known (an
    #: id that expired, or whose producer id changed since, is not).
    transactional_ids: dict[int, str] = field(default_factory=dict)

    def transactional_id(self, batch: RecordBatch) -> str | None:
        if not (batch.is_transactional or batch.is_control):
            return None
        return self.transactional_ids.get(batch.producer_id)


@dataclass
class _Entry:
    batch: RecordBatch
    status: str


def _status(batch: RecordBatch) -> str:
    if batch.is_control:
        return CONTROL
    return OPEN if batch.is_transactional else PLAIN


async def dump_partition(
    admin: OpsAdmin,
    topic: str,
    partition: int,
    *,
    from_offset: int | None = None,
    count: int | None = None,
) -> Dump:
    """Up to ``count`` batches of ``topic[partition]`` from ``from_offset`` (default: the log
    start), labelled; raises :class:`~streams_app.kafka.ops_admin.OpsAdminError` for an unknown
    topic or partition."""
    partitions = await admin.partitions(topic)
    if partition not in partitions:
        raise OpsAdminError(
            f"topic {topic!r} has partitions {partitions[0]}..{partitions[-1]}, not {partition}"
        )
    position = LogPosition()
    shown: list[_Entry] = []
    waiting: dict[int, list[_Entry]] = {}  # producer id -> its shown batches without a marker
    async for batch in read_batches(admin, topic, partition, start=from_offset, position=position):
        marker = batch.marker
        if marker is not None:
            for entry in waiting.pop(batch.producer_id, []):
                entry.status = COMMITTED if marker.type == "COMMIT" else ABORTED
        if count is None or len(shown) < count:
            entry = _Entry(batch, _status(batch))
            shown.append(entry)
            if entry.status == OPEN:
                waiting.setdefault(batch.producer_id, []).append(entry)
        elif not waiting:
            break  # everything shown is labelled
    lso = position.last_stable_offset
    summary = DumpSummary(
        topic,
        partition,
        log_start_offset=position.log_start_offset,
        high_watermark=position.high_watermark,
        last_stable_offset=lso,
    )
    dumped: list[DumpedBatch] = []
    for entry in shown:
        batch, status = entry.batch, entry.status
        visible = status in (COMMITTED, PLAIN) and batch.last_offset < lso
        dumped.append(DumpedBatch(batch, status, visible))
        summary.batches += 1
        summary.records[status] += batch.last_offset - batch.base_offset + 1
        if summary.first_offset is None:
            summary.first_offset = batch.base_offset
        summary.last_offset = batch.last_offset
    for producer_id, entries in waiting.items():
        first = entries[0].batch
        summary.open_transactions.append(
            OpenTransaction(producer_id, first.producer_epoch, first.base_offset)
        )
    summary.open_transactions.sort(key=lambda t: t.first_offset)
    return Dump(dumped, summary, await _transactional_ids(admin, dumped))


async def _transactional_ids(admin: OpsAdmin, dumped: list[DumpedBatch]) -> dict[int, str]:
    """The transactional ids of the producers of the transactional batches shown."""
    producers = {
        d.batch.producer_id
        for d in dumped
        if (d.batch.is_transactional or d.batch.is_control) and d.batch.producer_id >= 0
    }
    if not producers:
        return {}
    listings, _unreachable = await admin.list_transactions(producer_ids=producers)
    return {t.producer_id: t.transactional_id for t in listings if t.producer_id in producers}
