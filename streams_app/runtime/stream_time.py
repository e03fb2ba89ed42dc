"""Stream time: what a task's time is, and how it is committed with the offsets.

**What.** Every record has a timestamp (ms): Kafka's, or what its topic's ``timestamp_fn`` takes
from the value. A task keeps, per input partition, the *partition time* (the largest timestamp
processed from it); the task's *stream time* is the largest of them (Kafka Streams'
``PartitionGroup.streamTime``). Each windowed table partition also keeps its *observed* stream
time, the largest timestamp that updated it (``observedStreamTime`` of Kafka Streams' windowed
aggregations), which decides lateness and when windows close.

**Where it is committed: with the offsets.** Each partition's committed offset carries a metadata
string (TxnOffsetCommit v3 has a ``committed_metadata`` field per partition; a plain OffsetCommit
has it too) holding the partition time and the observed times of the task's windowed tables.
Kafka Streams does the same (``TopicPartitionMetadata``: partition time and processor metadata,
such as a windowed aggregation's last emit time). Why there and not in a changelog:

- it commits in the very transaction that moves the offset, so stream time can never run ahead
  of or behind the records it summarises, whichever way a crash falls;
- every task has offsets, not every task has a table;
- the new owner reads it in the same ``OffsetFetch(require_stable)`` that gives it the offsets,
  with no extra topic, no extra restore, and no foreign records in a changelog that Faust
  deployments (issue 11) may read.

The string is ``sa1:`` followed by compact JSON, ``{"p": partition time, "w": {table: observed
time}, "x": transactional id}``; ``x``, under exactly-once, names the worker whose transaction
committed it, so that a new owner that has never heard of that worker (a restart on an empty
state directory) can still fence its open transaction (:mod:`streams_app.runtime.fencing`).
Metadata in any other format (Faust's empty string, Kafka Streams' base64) reads as
"unknown" (-1), like a partition never processed.

**Stages.** A task here holds every input partition with its partition number, so the records of
a topic and of the repartition topic its ``group_by`` writes meet in one task; Kafka Streams puts
them in two tasks of two sub-topologies. Each *stage* (0 for the topics the app reads, one more
for each ``group_by`` hop) is therefore ordered and timed on its own: a repartition topic
trails its source by a commit interval, and merging it with the source by timestamp would only
make its records look late.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

# Stages are the planner's now; the name stays importable from here.
from streams_app.topology.plan import topic_stages as topic_stages

log = logging.getLogger(__name__)

UNKNOWN = -1
#: The broker refuses longer offset metadata (``offset.metadata.max.bytes``, 4096 by default).
METADATA_LIMIT = 4096
_PREFIX = "sa1:"


@dataclass
class PartitionMetadata:
    """What a committed offset's metadata says about stream time."""

    partition_time: int = UNKNOWN
    #: Windowed table name -> its observed stream time in this task.
    tables: dict[str, int] = field(default_factory=dict)
    #: The transactional id that committed it (exactly-once only).
    committer: str | None = None


def encode_metadata(
    partition_time: int, tables: Mapping[str, int], committer: str | None = None
) -> str:
    payload: dict[str, object] = {"p": partition_time}
    if tables:
        payload["w"] = dict(tables)
    if committer:
        payload["x"] = committer
        named = _PREFIX + json.dumps(payload, separators=(",", ":"), sort_keys=True)
        if len(named.encode()) <= METADATA_LIMIT:
            return named
        del payload["x"]  # an optimisation (fencing sooner) is not worth a refused commit
    return _PREFIX + json.dumps(payload, separators=(",", ":"), sort_keys=True)


def decode_metadata(text: str | None) -> PartitionMetadata:
    """Never raises: metadata we cannot read means the time is unknown."""
    if not text or not text.startswith(_PREFIX):
        return PartitionMetadata()
    try:
        payload = json.loads(text[len(_PREFIX) :])
        partition_time = int(payload.get("p", UNKNOWN))
        tables = {str(k): int(v) for k, v in dict(payload.get("w", {})).items()}
        committer = payload.get("x")
    except (ValueError, TypeError, AttributeError):
        log.warning("unreadable stream-time metadata in a committed offset: ignoring it")
        return PartitionMetadata()
    return PartitionMetadata(
        partition_time, tables, committer if isinstance(committer, str) and committer else None
    )
