"""``--json`` of the ``txn`` commands and of ``status``: the same facts as the text, as plain
data for scripts (docs/operations.md lists every field). Offsets, ids and epochs are integers,
times are epoch milliseconds, durations milliseconds; a missing one is null, never ``-``.
Record keys and values are never included, as in the text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams_app.ops.dump import Dump, DumpedBatch
from streams_app.ops.records import RecordBatch
from streams_app.ops.status import AppStatus
from streams_app.ops.transactions import (
    PartitionTransaction,
    TransactionDetail,
    TransactionList,
    TransactionRow,
)
from streams_app.ops.txnlog import TxnLogEntry

TP = tuple[str, int]


def _partitions(tps: Sequence[TP]) -> list[dict[str, Any]]:
    return [{"topic": topic, "partition": partition} for topic, partition in tps]


def _ms(value: int | None) -> int | None:
    return None if value is None or value < 0 else value


def transaction_json(row: TransactionRow, at_ms: int) -> dict[str, Any]:
    return {
        "transactional_id": row.transactional_id,
        "state": row.state,
        "open": row.open,
        "producer_id": row.producer_id,
        "producer_epoch": row.producer_epoch,
        "timeout_ms": row.timeout_ms,
        "start_time_ms": _ms(row.start_time_ms) if row.open else None,
        "age_ms": row.age_ms(at_ms),
        "partitions": _partitions(row.partitions),
        "coordinator": row.coordinator_id,
    }


def list_json(listing: TransactionList) -> dict[str, Any]:
    """``txn list --json``."""
    return {
        "at_ms": listing.at_ms,
        "transactions": [transaction_json(row, listing.at_ms) for row in listing.rows],
        "unreachable_brokers": list(listing.unreachable),
    }


def _history_json(entry: TxnLogEntry) -> dict[str, Any]:
    return {
        "offset": entry.offset,
        "updated_ms": _ms(entry.last_update_ms),
        "state": entry.state,
        "producer_id": entry.producer_id,
        "producer_epoch": entry.producer_epoch,
        "timeout_ms": _ms(entry.timeout_ms),
        "start_time_ms": _ms(entry.start_ms),
        "partitions": _partitions(entry.partitions),
    }


def detail_json(detail: TransactionDetail) -> dict[str, Any]:
    """``txn describe --json``."""
    current = detail.current
    return {
        "transactional_id": detail.transactional_id,
        "at_ms": detail.at_ms,
        "current": None if current is None else transaction_json(current, detail.at_ms),
        "log_partition": detail.log_partition,
        "history": [_history_json(entry) for entry in detail.history],
    }


def _batch_json(dump: Dump, dumped: DumpedBatch, records: bool) -> dict[str, Any]:
    batch: RecordBatch = dumped.batch
    marker = batch.marker
    out: dict[str, Any] = {
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "count": batch.count,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "transactional_id": dump.transactional_id(batch),
        "base_sequence": batch.base_sequence,
        "last_sequence": batch.last_sequence,
        "transactional": batch.is_transactional,
        "control": batch.is_control,
        "marker": None
        if marker is None
        else {"type": marker.type, "coordinator_epoch": marker.coordinator_epoch},
        "compression": batch.compression,
        "timestamp_type": batch.timestamp_type,
        "max_timestamp": batch.max_timestamp,
        "size": batch.size,
        "crc": batch.crc,
        "crc_valid": batch.crc_valid,
        "status": dumped.status,
        "read_committed_now": dumped.visible_now,
    }
    if records:
        out["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key_size": r.key_size,
                "value_size": r.value_size,
                "sequence": r.sequence,
                "header_keys": list(r.header_keys),
                "control": None if r.control is None else r.control.type,
            }
            for r in batch.records
        ]
    return out


def dump_json(dump: Dump, *, records: bool = False) -> dict[str, Any]:
    """``txn dump --json``."""
    s = dump.summary
    return {
        "topic": s.topic,
        "partition": s.partition,
        "log_start_offset": s.log_start_offset,
        "high_watermark": s.high_watermark,
        "last_stable_offset": s.last_stable_offset,
        "batches": [_batch_json(dump, d, records) for d in dump.batches],
        "summary": {
            "batches": s.batches,
            "first_offset": s.first_offset,
            "last_offset": s.last_offset,
            "records": dict(s.records),
            "open_transactions": [
                {
                    "producer_id": t.producer_id,
                    "producer_epoch": t.producer_epoch,
                    "first_offset": t.first_offset,
                    "transactional_id": dump.transactional_ids.get(t.producer_id),
                }
                for t in s.open_transactions
            ],
        },
    }


def open_json(found: Sequence[PartitionTransaction]) -> list[dict[str, Any]]:
    """``txn hanging --json``: every open transaction on the partitions, judged."""
    return [
        {
            "topic": t.topic,
            "partition": t.partition,
            "start_offset": t.start_offset,
            "producer_id": t.producer.producer_id,
            "producer_epoch": t.producer.producer_epoch,
            "coordinator_epoch": t.producer.coordinator_epoch,
            "transactional_id": t.transactional_id,
            "idle_ms": t.idle_ms,
            "verdict": t.verdict,
            "reason": t.reason,
        }
        for t in found
    ]


def status_json(status: AppStatus) -> dict[str, Any]:
    """``status --json``."""
    group = status.group
    return {
        "app_id": status.app_id,
        "at_ms": status.at_ms,
        "group": {
            "state": group.state,
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "host": m.host.lstrip("/"),
                    "web": m.web,
                    "assignment": _partitions(m.assignment),
                }
                for m in group.members
            ],
        },
        "tasks": [
            {
                "task": t.task,
                "topic": t.progress.topic,
                "partition": t.progress.partition,
                "owner": t.owner.member_id if t.owner else None,
                "committed": t.progress.committed,
                "end": t.progress.end,
                "lag": t.progress.lag,
            }
            for t in status.tasks
        ],
        "lag": status.lag,
        "caught_up": status.caught_up,
        "held": [
            {"topic": topic, "partition": partition, "last_stable_offset": lso, "end": end}
            for (topic, partition), (lso, end) in sorted(status.held.items())
        ],
        "transactions": [transaction_json(row, status.at_ms) for row in status.transactions],
    }
