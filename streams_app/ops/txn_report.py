"""Text of the ``txn`` commands: what an operator reads, in the order they need it."""

from __future__ import annotations

from collections.abc import Sequence

from streams_app.ops.dump import ABORTED, COMMITTED, CONTROL, OPEN, PLAIN, Dump
from streams_app.ops.records import RecordBatch
from streams_app.ops.render import duration, partitions, table, utc
from streams_app.ops.transactions import (
    HANGING,
    OVERDUE,
    PartitionTransaction,
    TransactionDetail,
    TransactionList,
)


def format_list(listing: TransactionList) -> str:
    rows = [
        (
            row.transactional_id,
            row.state,
            row.producer_id,
            row.producer_epoch,
            duration(row.timeout_ms),
            utc(row.start_time_ms) if row.open else "-",
            duration(row.age_ms(listing.at_ms)),
            partitions(row.partitions),
        )
        for row in listing.rows
    ]
    headers = (
        "TRANSACTIONAL ID",
        "STATE",
        "PRODUCER",
        "EPOCH",
        "TIMEOUT",
        "STARTED (UTC)",
        "AGE",
        "PARTITIONS",
    )
    lines = [table(headers, rows)] if rows else ["no transactional ids match"]
    open_count = sum(1 for row in listing.rows if row.open)
    lines.append(f"{len(listing.rows)} transactional id(s), {open_count} with an open transaction")
    if listing.unreachable:
        lines.append(
            "warning: broker(s) "
            + ", ".join(map(str, listing.unreachable))
            + " did not answer: the transactional ids they coordinate are missing"
        )
    return "\n".join(lines)


def format_detail(detail: TransactionDetail) -> str:
    lines = []
    current = detail.current
    if current is None:
        lines.append(
            f"transactional id {detail.transactional_id!r} is unknown to its coordinator "
            "(never used, or expired after transactional.id.expiration.ms)"
        )
    else:
        started = "-"
        if current.open:
            started = f"{utc(current.start_time_ms)} ({duration(current.age_ms(detail.at_ms))} ago)"
        lines.append(
            table(
                ("FIELD", "VALUE"),
                [
                    ("transactional id", current.transactional_id),
                    ("coordinator", f"broker {current.coordinator_id}"),
                    ("state", current.state),
                    ("producer id", current.producer_id),
                    ("producer epoch", current.producer_epoch),
                    ("timeout", duration(current.timeout_ms)),
                    ("open since", started),
                    ("partitions", partitions(current.partitions, limit=50)),
                ],
            )
        )
    lines.append("")
    where = f"__transaction_state[{detail.log_partition}]"
    if not detail.history:
        lines.append(f"history: no records of this id in {where}")
        return "\n".join(lines)
    lines.append(
        f"history from {where}, oldest first (compaction keeps only the latest record of "
        "cleaned segments):"
    )
    rows = [
        (
            entry.offset,
            utc(entry.last_update_ms),
            entry.state or "(removed)",
            entry.producer_id,
            entry.producer_epoch,
            duration(entry.timeout_ms) if entry.timeout_ms >= 0 else "-",
            utc(entry.start_ms) if entry.start_ms >= 0 else "-",
            partitions(entry.partitions),
        )
        for entry in detail.history
    ]
    lines.append(
        table(
            (
                "OFFSET",
                "UPDATED (UTC)",
                "STATE",
                "PRODUCER",
                "EPOCH",
                "TIMEOUT",
                "TXN STARTED (UTC)",
                "PARTITIONS",
            ),
            rows,
        )
    )
    states = [entry.state or "(removed)" for entry in detail.history]
    lines.append("states: " + " -> ".join(states))
    return "\n".join(lines)


def _sequences(batch: RecordBatch) -> str:
    if batch.base_sequence < 0:
        return "-"
    return f"{batch.base_sequence}-{batch.last_sequence}"


def _marker(batch: RecordBatch) -> str:
    marker = batch.marker
    if marker is not None:
        return f"{marker.type} (coordinator epoch {marker.coordinator_epoch})"
    if batch.is_control and batch.records and batch.records[0].control is not None:
        return batch.records[0].control.type
    return "-"


def _record_lines(batch: RecordBatch) -> list[str]:
    """One line per record, as ``kafka-dump-log.sh --deep-iteration`` prints them (no data)."""
    lines = [f"  | {batch.records_error}"] if batch.records_error else []
    for record in batch.records:
        line = (
            f"  | offset: {record.offset} {batch.timestamp_type}: {record.timestamp} "
            f"keySize: {record.key_size} valueSize: {record.value_size} "
            f"sequence: {record.sequence} headerKeys: [{','.join(record.header_keys)}]"
        )
        if record.control is not None and record.control.is_end_txn:
            line += (
                f" endTxnMarker: {record.control.type} "
                f"coordinatorEpoch: {record.control.coordinator_epoch}"
            )
        lines.append(line)
    return lines


def format_dump(dump: Dump, *, records: bool = False) -> str:
    s = dump.summary
    lines = [
        f"{s.topic}[{s.partition}]: log start offset {s.log_start_offset}, high watermark "
        f"{s.high_watermark}, last stable offset {s.last_stable_offset}"
    ]
    headers = (
        "OFFSETS",
        "RECORDS",
        "PRODUCER",
        "EPOCH",
        "TRANSACTIONAL ID",
        "SEQUENCE",
        "TRANSACTIONAL",
        "CONTROL",
        "MARKER",
        "CODEC",
        "MAX TIMESTAMP (UTC)",
        "BYTES",
        "READ_COMMITTED",
    )
    if not dump.batches:
        lines.append("no batches in that range")
    elif not records:
        lines.append(
            table(
                headers,
                [
                    (
                        f"{d.batch.base_offset}..{d.batch.last_offset}",
                        d.batch.count,
                        d.batch.producer_id,
                        d.batch.producer_epoch,
                        dump.transactional_id(d.batch) or "-",
                        _sequences(d.batch),
                        "yes" if d.batch.is_transactional else "no",
                        "yes" if d.batch.is_control else "no",
                        _marker(d.batch),
                        d.batch.compression,
                        utc(d.batch.max_timestamp),
                        d.batch.size,
                        d.read_committed,
                    )
                    for d in dump.batches
                ],
            )
        )
    else:
        for d in dump.batches:
            b = d.batch
            lines.append(
                f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.count} "
                f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} "
                f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
                f"isTransactional: {str(b.is_transactional).lower()} "
                f"isControl: {str(b.is_control).lower()} "
                f"{b.timestamp_type}: {b.max_timestamp} size: {b.size} "
                f"compresscodec: {b.compression} crc: {b.crc} "
                f"isvalid: {str(b.crc_valid).lower()}  -> read_committed: {d.read_committed}"
            )
            lines.extend(_record_lines(b))
    if s.batches:
        r = s.records
        lines.append(
            f"{s.batches} batch(es), offsets {s.first_offset}..{s.last_offset}: "
            f"{r[COMMITTED]} committed, {r[ABORTED]} aborted, {r[OPEN]} in open transactions, "
            f"{r[PLAIN]} non-transactional, {r[CONTROL]} control (markers)"
        )
    if s.blocked:
        holders = ", ".join(
            f"producer {t.producer_id} (epoch {t.producer_epoch}) from offset {t.first_offset}"
            + (
                f" [{dump.transactional_ids[t.producer_id]}]"
                if t.producer_id in dump.transactional_ids
                else ""
            )
            for t in s.open_transactions
        )
        lines.append(
            f"LSO {s.last_stable_offset} < high watermark {s.high_watermark}: read_committed "
            f"readers stop at offset {s.last_stable_offset}"
            + (f"; open transaction(s): {holders}" if holders else "")
        )
    else:
        lines.append(
            f"LSO {s.last_stable_offset} = high watermark {s.high_watermark}: no open "
            "transaction holds read_committed readers back"
        )
    return "\n".join(lines)


def format_open(found: Sequence[PartitionTransaction]) -> str:
    if not found:
        return "no open transactions on these partitions"
    rows = [
        (
            f"{t.topic}[{t.partition}]",
            t.start_offset,
            t.producer.producer_id,
            t.producer.producer_epoch,
            t.producer.coordinator_epoch,
            t.transactional_id or "-",
            duration(t.idle_ms),
            t.verdict.upper() if t.verdict in (HANGING, OVERDUE) else t.verdict,
            t.reason,
        )
        for t in found
    ]
    text = table(
        (
            "PARTITION",
            "START OFFSET",
            "PRODUCER",
            "EPOCH",
            "COORD EPOCH",
            "TRANSACTIONAL ID",
            "LAST WRITE",
            "VERDICT",
            "WHY",
        ),
        rows,
    )
    hanging = [t for t in found if t.verdict == HANGING]
    overdue = [t for t in found if t.verdict == OVERDUE]
    notes = []
    if hanging:
        notes.append(
            f"{len(hanging)} hanging transaction(s): their partitions' LSO will not move until "
            "they are aborted (`streams-app txn hanging --abort`)"
        )
    if overdue:
        notes.append(
            f"{len(overdue)} overdue transaction(s): past their timeout and not yet aborted by "
            "their coordinator; check the coordinator broker's log"
        )
    return "\n".join([text, *notes])
