"""TxnOffsetCommit v3 and OffsetFetch v7, the two protocol versions KIP-447 needs.

aiokafka 0.14 defines TxnOffsetCommit v0 and OffsetFetch v0-v3 only. (TxnOffsetCommit v5 has
v3's fields; it is what transaction version 2 sends, see :mod:`streams_app.kafka.txn_v2`.)
Both versions here are *flexible* (KIP-482): compact strings and arrays, a tagged-field section
at the end of every struct, and request header v2 / response header v1 (``FLEXIBLE_VERSION =
True`` makes aiokafka's connection pick those). We always send empty tagged fields: aiokafka's
``TaggedFields.encode`` writes a tag without the size of its value, so only ``{}`` encodes
correctly.

Schemas follow ``clients/src/main/resources/common/message/TxnOffsetCommit{Request,Response}.json``
and ``OffsetFetch{Request,Response}.json`` of Apache Kafka 4.3.

Both request builders **fail closed**. A broker that cannot take the version gets no request at
all (falling back to TxnOffsetCommit v0 would silently drop the fencing, OffsetFetch < 7 would
silently drop ``require_stable``), and a TxnOffsetCommit under generation < 0 or an empty member id
is refused, because the broker skips every membership check for exactly those defaults.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from streams_app.kafka.errors import InvalidGroupMetadataError
from streams_app.transport.base import GroupMetadata

TXN_OFFSET_COMMIT_KEY = 28
TXN_OFFSET_COMMIT_VERSION = 3
TXN_OFFSET_COMMIT_V2_VERSION = 5
OFFSET_FETCH_KEY = 9
OFFSET_FETCH_VERSION = 7

_NO_LEADER_EPOCH = -1
_NO_TAGS: dict[int, bytes] = {}


def _string() -> CompactString:
    return CompactString("utf-8")


def _require_version(
    versions: Mapping[int, tuple[int, int]], key: int, version: int, what: str
) -> None:
    low, high = versions.get(key, (-1, -1))
    if not low <= version <= high:
        supported = f"v{low}-v{high}" if high >= 0 else "none"
        raise IncompatibleBrokerVersion(
            f"{what} needs API {key} v{version}, the broker supports {supported}: "
            "exactly-once v2 (KIP-447) needs Kafka 2.5 or newer"
        )


# -- TxnOffsetCommit v3 ------------------------------------------------------------------------


class TxnOffsetCommitResponse_v3(Response):  # type: ignore[misc]
    API_KEY = TXN_OFFSET_COMMIT_KEY
    API_VERSION = TXN_OFFSET_COMMIT_VERSION
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", _string()),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequest_v3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = TXN_OFFSET_COMMIT_KEY
    API_VERSION = TXN_OFFSET_COMMIT_VERSION
    RESPONSE_TYPE = TxnOffsetCommitResponse_v3
    SCHEMA = Schema(
        ("transactional_id", _string()),
        ("group_id", _string()),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", _string()),
        ("group_instance_id", _string()),  # nullable
        (
            "topics",
            CompactArray(
                ("name", _string()),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", _string()),  # nullable
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitResponse_v5(TxnOffsetCommitResponse_v3):
    API_VERSION = TXN_OFFSET_COMMIT_V2_VERSION


class TxnOffsetCommitRequest_v5(TxnOffsetCommitRequest_v3):
    """v3's fields; under transaction version 2 it also adds the offsets to the transaction
    (no AddOffsetsToTxn: :mod:`streams_app.kafka.txn_v2`)."""

    API_VERSION = TXN_OFFSET_COMMIT_V2_VERSION
    RESPONSE_TYPE = TxnOffsetCommitResponse_v5


class TxnOffsetCommitRequest(
    Request[TxnOffsetCommitRequest_v3 | TxnOffsetCommitRequest_v5]  # type: ignore[misc]
):
    """A TxnOffsetCommit carrying the consumer group membership (KIP-447): v3, or v5 under
    transaction version 2 (``version=5``), or nothing."""

    API_KEY = TXN_OFFSET_COMMIT_KEY

    def __init__(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group: GroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        version: int = TXN_OFFSET_COMMIT_VERSION,
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.group = group
        self.offsets = offsets
        self.version = version

    def prepare(self, versions: dict[int, tuple[int, int]]) -> TxnOffsetCommitRequest_v3:
        _require_version(versions, TXN_OFFSET_COMMIT_KEY, self.version, "TxnOffsetCommit")
        if self.version == TXN_OFFSET_COMMIT_V2_VERSION:
            return self.build(TxnOffsetCommitRequest_v5)
        return self.build(TxnOffsetCommitRequest_v3)

    def build(
        self, request_struct_class: type[TxnOffsetCommitRequest_v3]
    ) -> TxnOffsetCommitRequest_v3:
        check_group_metadata(self.group)
        by_topic: defaultdict[str, list[tuple[int, int, int, str, dict[int, bytes]]]]
        by_topic = defaultdict(list)
        for tp, offset in sorted(self.offsets.items()):
            by_topic[tp.topic].append(
                (tp.partition, offset.offset, _NO_LEADER_EPOCH, offset.metadata, _NO_TAGS)
            )
        return request_struct_class(
            self.transactional_id,
            self.group.group_id,
            self.producer_id,
            self.producer_epoch,
            self.group.generation_id,
            self.group.member_id,
            self.group.group_instance_id,
            [(topic, partitions, _NO_TAGS) for topic, partitions in by_topic.items()],
            _NO_TAGS,
        )


def check_group_metadata(group: GroupMetadata) -> None:
    """Refuse the defaults the broker would accept without any fencing check."""
    if not group.group_id:
        raise InvalidGroupMetadataError("refusing to commit transaction offsets without a group id")
    if group.generation_id < 0 or not group.member_id:
        raise InvalidGroupMetadataError(
            f"refusing to commit offsets for group {group.group_id!r} under generation "
            f"{group.generation_id} and member id {group.member_id!r}: the broker skips KIP-447 "
            "fencing for these defaults (the consumer is not, or no longer, a group member)"
        )


# -- OffsetFetch v7 ----------------------------------------------------------------------------


class OffsetFetchResponse_v7(Response):  # type: ignore[misc]
    API_KEY = OFFSET_FETCH_KEY
    API_VERSION = OFFSET_FETCH_VERSION
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", _string()),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", _string()),  # nullable
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequest_v7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = OFFSET_FETCH_KEY
    API_VERSION = OFFSET_FETCH_VERSION
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", _string()),
        (
            "topics",
            CompactArray(
                ("name", _string()),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class StableOffsetFetchRequest(Request[OffsetFetchRequest_v7]):  # type: ignore[misc]
    """OffsetFetch with ``require_stable=True``, v7 or nothing.

    The broker answers UNSTABLE_OFFSET_COMMIT (88) for a partition whose offsets are part of a
    still-open transaction instead of the last *committed* value, which a new owner must not
    start from while a zombie's transaction may still commit.

    ``require_stable=False`` asks for the last committed values whatever is pending: the
    metadata of those names the worker that committed them, whose open transaction a new
    owner fences before it asks again for stable offsets (:mod:`streams_app.runtime.fencing`).
    """

    API_KEY = OFFSET_FETCH_KEY

    def __init__(
        self,
        group_id: str,
        partitions: Collection[TopicPartition],
        *,
        require_stable: bool = True,
    ) -> None:
        if not partitions:
            # v7 takes null for "every partition of the group"; we never want that by accident.
            raise ValueError("StableOffsetFetchRequest needs at least one partition")
        self.group_id = group_id
        self.partitions = partitions
        self.require_stable = require_stable

    def prepare(self, versions: dict[int, tuple[int, int]]) -> OffsetFetchRequest_v7:
        _require_version(
            versions, OFFSET_FETCH_KEY, OFFSET_FETCH_VERSION, "OffsetFetch(require_stable)"
        )
        return self.build(OffsetFetchRequest_v7)

    def build(self, request_struct_class: type[OffsetFetchRequest_v7]) -> OffsetFetchRequest_v7:
        by_topic: defaultdict[str, list[int]] = defaultdict(list)
        for tp in sorted(self.partitions):
            by_topic[tp.topic].append(tp.partition)
        topics = [(topic, partitions, _NO_TAGS) for topic, partitions in by_topic.items()]
        return request_struct_class(self.group_id, topics, self.require_stable, _NO_TAGS)
