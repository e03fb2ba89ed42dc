"""Transaction protocol version 2 (KIP-890 part 2): the wire formats and when to use them.

With ``transaction.version`` 2 finalized on the cluster (the default of Kafka 4.x), a producer
drops two requests from every transaction and gets a fresh epoch at the end of each:

- **Produce v12** adds the partition to the transaction itself: the partition leader asks the
  transaction coordinator to add it before appending (and retries CONCURRENT_TRANSACTIONS for
  us while the previous transaction's markers are still being written). No AddPartitionsToTxn
  from the client, so no round trip (and no 20 ms CONCURRENT_TRANSACTIONS polling) before the
  first records of a transaction can leave.
- **TxnOffsetCommit v5** adds the group's offsets partition the same way: no AddOffsetsToTxn.
- **EndTxn v5** bumps the producer epoch (or rolls the producer id when the epoch is exhausted)
  and returns the new one; sequence numbers restart at 0. A late EndTxn or Produce of an
  earlier transaction can then never land in a later one (the hole KIP-890 closes).

aiokafka 0.14 speaks none of these (Produce up to v8, EndTxn v0). :func:`supports_v2` decides
from the broker's ApiVersions **v3** answer, which carries the finalized features (aiokafka's
own ApiVersions v0 does not): all three request versions advertised and ``transaction.version``
finalized at 2 or more. Otherwise the producer stays on version 1 (aiokafka's requests).

Schemas follow ``clients/src/main/resources/common/message/{ApiVersions,Produce,EndTxn}
{Request,Response}.json`` of Apache Kafka 4.3. Every struct here is flexible (compact strings
and arrays, tagged fields); we send empty tagged fields only.
"""

from __future__ import annotations

from collections.abc import Mapping
from io import BytesIO
from typing import Any

from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.api import Request, RequestStruct, Response, ResponseHeader_v0
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactBytes,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

PRODUCE_KEY, PRODUCE_VERSION = 0, 12
END_TXN_KEY, END_TXN_VERSION = 26, 5
TXN_OFFSET_COMMIT_V2_VERSION = 5
API_VERSIONS_KEY, API_VERSIONS_VERSION = 18, 3
TRANSACTION_VERSION_FEATURE = "transaction.version"
#: The ApiVersions v3 response's tagged field with the finalized features.
_FINALIZED_FEATURES_TAG = 2
_NO_TAGS: dict[int, bytes] = {}


def _string() -> CompactString:
    return CompactString("utf-8")


# -- ApiVersions v3: the finalized features ------------------------------------------------------


class ApiVersionsResponse_v3(Response):  # type: ignore[misc]
    API_KEY = API_VERSIONS_KEY
    API_VERSION = API_VERSIONS_VERSION
    SCHEMA = Schema(
        ("error_code", Int16),
        (
            "api_keys",
            CompactArray(
                ("api_key", Int16),
                ("min_version", Int16),
                ("max_version", Int16),
                ("tags", TaggedFields),
            ),
        ),
        ("throttle_time_ms", Int32),
        ("tags", TaggedFields),
    )


_FINALIZED_FEATURES = CompactArray(
    ("name", _string()),
    ("max_version_level", Int16),
    ("min_version_level", Int16),
    ("tags", TaggedFields),
)


class ApiVersionsRequest_v3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = API_VERSIONS_KEY
    API_VERSION = API_VERSIONS_VERSION
    RESPONSE_TYPE = ApiVersionsResponse_v3
    SCHEMA = Schema(
        ("client_software_name", _string()),
        ("client_software_version", _string()),
        ("tags", TaggedFields),
    )

    def parse_response_header(self, read_buffer: BytesIO | bytes) -> ResponseHeader_v0:
        # ApiVersions answers with response header v0 at every version (KIP-511), so that a
        # client that does not know the broker yet can always read it.
        return ResponseHeader_v0.decode(read_buffer)


class ApiVersionsRequest(Request[ApiVersionsRequest_v3]):  # type: ignore[misc]
    """ApiVersions v3: what aiokafka's v0 lacks, the cluster's finalized feature levels."""

    API_KEY = API_VERSIONS_KEY
    ALLOW_UNKNOWN_API_VERSION = True

    def prepare(self, versions: dict[int, tuple[int, int]]) -> ApiVersionsRequest_v3:
        _require(versions, API_VERSIONS_KEY, API_VERSIONS_VERSION, "ApiVersions")
        return self.build(ApiVersionsRequest_v3)

    def build(self, request_struct_class: type[ApiVersionsRequest_v3]) -> ApiVersionsRequest_v3:
        return request_struct_class("streams-app", "1", _NO_TAGS)


def finalized_features(response: ApiVersionsResponse_v3) -> dict[str, int]:
    """Feature name -> finalized (max) version level, from an ApiVersions v3 response."""
    raw = response.tags.get(_FINALIZED_FEATURES_TAG)
    if not raw:
        return {}
    features = _FINALIZED_FEATURES.decode(BytesIO(raw)) or []
    return {name: max_level for name, max_level, _min_level, _tags in features}


def supports_v2(response: ApiVersionsResponse_v3) -> bool:
    """Whether transactions may use version 2 with the broker that sent ``response``."""
    versions = {key: (low, high) for key, low, high, _tags in response.api_keys}
    needed = {
        PRODUCE_KEY: PRODUCE_VERSION,
        END_TXN_KEY: END_TXN_VERSION,
        28: TXN_OFFSET_COMMIT_V2_VERSION,  # TxnOffsetCommit
    }
    if any(not _supported(versions, key, v) for key, v in needed.items()):
        return False
    return finalized_features(response).get(TRANSACTION_VERSION_FEATURE, 0) >= 2


def _supported(versions: Mapping[int, tuple[int, int]], key: int, version: int) -> bool:
    low, high = versions.get(key, (-1, -1))
    return low <= version <= high


def _require(versions: Mapping[int, tuple[int, int]], key: int, version: int, what: str) -> None:
    if not _supported(versions, key, version):
        low, high = versions.get(key, (-1, -1))
        raise IncompatibleBrokerVersion(
            f"{what} v{version} is not supported by the broker (v{low}-v{high}): "
            "transaction version 2 needs Kafka 4.0 or newer"
        )


# -- Produce v12 ---------------------------------------------------------------------------------


class ProduceResponse_v12(Response):  # type: ignore[misc]
    API_KEY = PRODUCE_KEY
    API_VERSION = PRODUCE_VERSION
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic", _string()),
                (
                    "partitions",
                    CompactArray(
                        ("partition", Int32),
                        ("error_code", Int16),
                        ("offset", Int64),
                        ("log_append_time_ms", Int64),
                        ("log_start_offset", Int64),
                        (
                            "record_errors",
                            CompactArray(
                                ("batch_index", Int32),
                                ("batch_index_error_message", _string()),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("error_message", _string()),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("throttle_time_ms", Int32),
        ("tags", TaggedFields),
    )


class ProduceRequest_v12(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = PRODUCE_KEY
    API_VERSION = PRODUCE_VERSION
    RESPONSE_TYPE = ProduceResponse_v12
    SCHEMA = Schema(
        ("transactional_id", _string()),  # nullable
        ("required_acks", Int16),
        ("timeout", Int32),
        (
            "topics",
            CompactArray(
                ("topic", _string()),
                (
                    "partitions",
                    CompactArray(
                        ("partition", Int32),
                        ("records", CompactBytes),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ProduceRequestV12(Request[ProduceRequest_v12]):  # type: ignore[misc]
    """A transactional Produce that adds its partitions to the transaction (v12 or nothing)."""

    API_KEY = PRODUCE_KEY

    def __init__(
        self,
        transactional_id: str | None,
        required_acks: int,
        timeout: int,
        topics: list[tuple[str, list[tuple[int, Any]]]],
    ) -> None:
        self.transactional_id = transactional_id
        self._required_acks = required_acks
        self.timeout = timeout
        self.topics = topics

    @property
    def required_acks(self) -> int:  # read by aiokafka's produce handler
        return self._required_acks

    def prepare(self, versions: dict[int, tuple[int, int]]) -> ProduceRequest_v12:
        _require(versions, PRODUCE_KEY, PRODUCE_VERSION, "Produce")
        return self.build(ProduceRequest_v12)

    def build(self, request_struct_class: type[ProduceRequest_v12]) -> ProduceRequest_v12:
        topics = [
            (
                topic,
                [(partition, bytes(records), _NO_TAGS) for partition, records in partitions],
                _NO_TAGS,
            )
            for topic, partitions in self.topics
        ]
        return request_struct_class(
            self.transactional_id, self._required_acks, self.timeout, topics, _NO_TAGS
        )


class ProduceResponseAsV8:
    """A v12 response in the shape aiokafka's produce handler reads (v8: 7-tuples)."""

    API_VERSION = 8

    def __init__(self, response: ProduceResponse_v12) -> None:
        self.topics = [
            (
                topic,
                [
                    (partition, error, offset, timestamp, log_start, errors, message)
                    for partition, error, offset, timestamp, log_start, errors, message, _ in parts
                ],
            )
            for topic, parts, _tags in response.topics
        ]


# -- EndTxn v5 -----------------------------------------------------------------------------------


class EndTxnResponse_v5(Response):  # type: ignore[misc]
    API_KEY = END_TXN_KEY
    API_VERSION = END_TXN_VERSION
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class EndTxnRequest_v5(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = END_TXN_KEY
    API_VERSION = END_TXN_VERSION
    RESPONSE_TYPE = EndTxnResponse_v5
    SCHEMA = Schema(
        ("transactional_id", _string()),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("transaction_result", Boolean),
        ("tags", TaggedFields),
    )


class EndTxnRequestV5(Request[EndTxnRequest_v5]):  # type: ignore[misc]
    """EndTxn that bumps the producer epoch (v5 or nothing)."""

    API_KEY = END_TXN_KEY

    def __init__(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.commit = commit

    def prepare(self, versions: dict[int, tuple[int, int]]) -> EndTxnRequest_v5:
        _require(versions, END_TXN_KEY, END_TXN_VERSION, "EndTxn")
        return self.build(EndTxnRequest_v5)

    def build(self, request_struct_class: type[EndTxnRequest_v5]) -> EndTxnRequest_v5:
        return request_struct_class(
            self.transactional_id, self.producer_id, self.producer_epoch, self.commit, _NO_TAGS
        )
