"""The new protocol structs, byte for byte against the Kafka message specs, and fail-closed."""

from __future__ import annotations

import struct

import aiokafka.errors as aerrors
import pytest
from aiokafka.protocol.api import RequestHeader_v2, ResponseHeader_v1
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from streams_app.kafka import (
    FencedInstanceIdError,
    InvalidGroupMetadataError,
    ProducerFencedResponseError,
    UnstableOffsetCommitError,
)
from streams_app.kafka.consumer import parse_stable_offsets
from streams_app.kafka.protocol import (
    OffsetFetchRequest_v7,
    OffsetFetchResponse_v7,
    StableOffsetFetchRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequest_v3,
    TxnOffsetCommitResponse_v3,
)
from streams_app.transport.base import GroupMetadata

BROKER_VERSIONS = {28: (0, 5), 9: (1, 10)}  # what Kafka 4.3 announces
GROUP = GroupMetadata("g", 3, "m", None)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def txn_request(group: GroupMetadata = GROUP) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest(
        transactional_id="t",
        producer_id=5,
        producer_epoch=1,
        group=group,
        offsets={TopicPartition("x", 0): OffsetAndMetadata(7, "")},
    )


def test_txn_offset_commit_v3_request_bytes_follow_the_spec() -> None:
    struct_ = txn_request().prepare(BROKER_VERSIONS)
    assert type(struct_) is TxnOffsetCommitRequest_v3
    assert struct_.FLEXIBLE_VERSION
    expected = (
        b"\x02t"  # TransactionalId: compact string, length + 1
        + b"\x02g"  # GroupId
        + i64(5)  # ProducerId
        + i16(1)  # ProducerEpoch
        + i32(3)  # GenerationId (v3+)
        + b"\x02m"  # MemberId (v3+)
        + b"\x00"  # GroupInstanceId: compact nullable string, null
        + b"\x02"  # Topics: compact array of 1
        + b"\x02x"  # Name
        + b"\x02"  # Partitions: compact array of 1
        + i32(0)  # PartitionIndex
        + i64(7)  # CommittedOffset
        + i32(-1)  # CommittedLeaderEpoch (v2+)
        + b"\x01"  # CommittedMetadata: ""
        + b"\x00"  # partition tagged fields
        + b"\x00"  # topic tagged fields
        + b"\x00"  # request tagged fields
    )
    assert struct_.encode() == expected
    assert TxnOffsetCommitRequest_v3.decode(expected).to_object() == struct_.to_object()


def test_flexible_versions_use_request_header_v2() -> None:
    struct_ = txn_request().prepare(BROKER_VERSIONS)
    header = struct_.build_request_header(correlation_id=9, client_id="c")
    assert isinstance(header, RequestHeader_v2)
    # api key, version, correlation id, client id (a *non-compact* nullable string), no tags
    assert header.encode() == i16(28) + i16(3) + i32(9) + i16(1) + b"c" + b"\x00"
    response_header = struct_.parse_response_header(i32(9) + b"\x00")
    assert isinstance(response_header, ResponseHeader_v1)
    assert response_header.correlation_id == 9


def test_txn_offset_commit_v3_response_decodes() -> None:
    raw = (
        i32(0)  # ThrottleTimeMs
        + b"\x03"  # 2 topics
        + b"\x02x"
        + b"\x02"
        + i32(0)
        + i16(22)
        + b"\x00"
        + b"\x00"
        + b"\x02y"
        + b"\x03"
        + i32(1)
        + i16(0)
        + b"\x00"
        + i32(2)
        + i16(82)
        + b"\x00"
        + b"\x00"
        + b"\x00"
    )
    response = TxnOffsetCommitResponse_v3.decode(raw)
    assert response.throttle_time_ms == 0
    assert response.topics == [
        ("x", [(0, 22, {})], {}),
        ("y", [(1, 0, {}), (2, 82, {})], {}),
    ]
    assert response.encode() == raw


def test_offset_fetch_v7_request_sets_require_stable() -> None:
    request = StableOffsetFetchRequest("g", [TopicPartition("x", 1), TopicPartition("x", 0)])
    struct_ = request.prepare(BROKER_VERSIONS)
    assert type(struct_) is OffsetFetchRequest_v7
    expected = (
        b"\x02g"  # GroupId
        + b"\x02"  # Topics: 1
        + b"\x02x"
        + b"\x03"  # PartitionIndexes: 2
        + i32(0)
        + i32(1)
        + b"\x00"  # topic tags
        + b"\x01"  # RequireStable = true
        + b"\x00"  # tags
    )
    assert struct_.encode() == expected
    assert OffsetFetchRequest_v7.decode(expected).require_stable is True
    # The last committed values at once (who committed them: runtime.fencing).
    latest = StableOffsetFetchRequest("g", [TopicPartition("x", 0)], require_stable=False)
    assert latest.prepare(BROKER_VERSIONS).require_stable is False


def offset_fetch_response(*partitions: tuple[int, int, int], top_error: int = 0) -> bytes:
    body = b"".join(
        i32(p) + i64(offset) + i32(-1) + b"\x01" + i16(error) + b"\x00"
        for p, offset, error in partitions
    )
    return (
        i32(0)
        + b"\x02"
        + b"\x02x"
        + bytes([len(partitions) + 1])
        + body
        + b"\x00"
        + i16(top_error)
        + b"\x00"
    )


def test_offset_fetch_v7_response_parses_offsets_and_missing_commits() -> None:
    response = OffsetFetchResponse_v7.decode(offset_fetch_response((0, 12, 0), (1, -1, 0)))
    offsets = parse_stable_offsets(response, "g")
    assert offsets == {TopicPartition("x", 0): OffsetAndMetadata(12, "")}


def test_unstable_offsets_raise_a_retriable_error() -> None:
    response = OffsetFetchResponse_v7.decode(offset_fetch_response((0, 12, 0), (1, 5, 88)))
    with pytest.raises(UnstableOffsetCommitError) as info:
        parse_stable_offsets(response, "g")
    assert info.value.retriable


def test_group_level_errors_are_not_ignored() -> None:
    dead: list[bool] = []
    response = OffsetFetchResponse_v7.decode(offset_fetch_response(top_error=16))
    with pytest.raises(aerrors.NotCoordinatorForGroupError):
        parse_stable_offsets(response, "g", lambda: dead.append(True))
    assert dead == [True]


@pytest.mark.parametrize("versions", [{28: (0, 2)}, {}, {28: (4, 5)}])
def test_txn_offset_commit_refuses_brokers_without_v3(versions: dict[int, tuple[int, int]]) -> None:
    with pytest.raises(aerrors.IncompatibleBrokerVersion, match="TxnOffsetCommit needs"):
        txn_request().prepare(versions)


@pytest.mark.parametrize(
    "group",
    [
        GroupMetadata("g", -1, "m"),
        GroupMetadata("g", 3, ""),
        GroupMetadata("g", -1, ""),  # what aiokafka resets to on errors
        GroupMetadata("", 3, "m"),
    ],
)
def test_txn_offset_commit_refuses_membership_the_broker_would_not_check(
    group: GroupMetadata,
) -> None:
    with pytest.raises(InvalidGroupMetadataError):
        txn_request(group).prepare(BROKER_VERSIONS)


def test_offset_fetch_refuses_brokers_without_v7() -> None:
    with pytest.raises(aerrors.IncompatibleBrokerVersion, match="require_stable"):
        StableOffsetFetchRequest("g", [TopicPartition("x", 0)]).prepare({9: (1, 6)})
    with pytest.raises(ValueError):
        StableOffsetFetchRequest("g", [])


def test_error_codes_are_registered_in_aiokafka() -> None:
    assert aerrors.for_code(82) is FencedInstanceIdError
    assert aerrors.for_code(88) is UnstableOffsetCommitError
    assert aerrors.for_code(90) is ProducerFencedResponseError
    # 90 must end aiokafka's sender exactly like INVALID_PRODUCER_EPOCH does.
    assert issubclass(ProducerFencedResponseError, aerrors.ProducerFenced)
    assert UnstableOffsetCommitError.retriable
    assert not FencedInstanceIdError.retriable
