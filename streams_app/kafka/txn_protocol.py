"""The transaction admin APIs of KIP-664 and WriteTxnMarkers, which aiokafka 0.14 does not define.

- ListTransactions (API 66) v0/v1: the transactional ids a broker coordinates, with state and
  producer id (v1 adds a "running longer than" filter);
- DescribeTransactions (API 65) v0: one coordinator's view of a transactional id: state, producer
  id and epoch, timeout, start time and the partitions of the open transaction;
- DescribeProducers (API 61) v0: a partition leader's view of the producers writing to it, and
  the first offset of each one's open transaction (what holds the last stable offset back);
- WriteTxnMarkers (API 27) v1: normally sent by a transaction coordinator to partition leaders;
  an administrator sends it to abort a *hanging* transaction (one the coordinator no longer
  knows about), as Kafka's ``kafka-transactions.sh abort`` does.

All four are *flexible* versions (KIP-482): compact strings and arrays, a tagged-field section at
the end of every struct, request header v2. As in :mod:`streams_app.kafka.protocol`, we always send
empty tagged fields (aiokafka's ``TaggedFields.encode`` cannot write a non-empty one).

Schemas follow ``clients/src/main/resources/common/message/{ListTransactions,
DescribeTransactions,DescribeProducers,WriteTxnMarkers}{Request,Response}.json`` of Apache Kafka
4.x. The request builders refuse to send a version the broker does not announce instead of
falling back to something that means less.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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

from streams_app.aio import within

LIST_TRANSACTIONS_KEY = 66
DESCRIBE_TRANSACTIONS_KEY = 65
DESCRIBE_PRODUCERS_KEY = 61
WRITE_TXN_MARKERS_KEY = 27

_NO_TAGS: dict[int, bytes] = {}


def _string() -> CompactString:
    return CompactString("utf-8")


def _supported(versions: Mapping[int, tuple[int, int]], key: int, version: int) -> bool:
    low, high = versions.get(key, (-1, -1))
    return low <= version <= high


def _refuse(versions: Mapping[int, tuple[int, int]], key: int, version: int, what: str) -> None:
    low, high = versions.get(key, (-1, -1))
    supported = f"v{low}-v{high}" if high >= 0 else "none"
    raise IncompatibleBrokerVersion(
        f"{what} needs API {key} v{version}, the broker supports {supported}: the transaction "
        "admin APIs (KIP-664) need Kafka 3.0 or newer"
    )


# -- ListTransactions v0/v1 --------------------------------------------------------------------


class ListTransactionsResponse_v0(Response):  # type: ignore[misc]
    API_KEY = LIST_TRANSACTIONS_KEY
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("unknown_state_filters", CompactArray(_string())),
        (
            "transaction_states",
            CompactArray(
                ("transactional_id", _string()),
                ("producer_id", Int64),
                ("transaction_state", _string()),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ListTransactionsResponse_v1(Response):  # type: ignore[misc]
    API_KEY = LIST_TRANSACTIONS_KEY
    API_VERSION = 1
    SCHEMA = ListTransactionsResponse_v0.SCHEMA


class ListTransactionsRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = LIST_TRANSACTIONS_KEY
    API_VERSION = 0
    RESPONSE_TYPE = ListTransactionsResponse_v0
    SCHEMA = Schema(
        ("state_filters", CompactArray(_string())),
        ("producer_id_filters", CompactArray(Int64)),
        ("tags", TaggedFields),
    )


class ListTransactionsRequest_v1(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = LIST_TRANSACTIONS_KEY
    API_VERSION = 1
    RESPONSE_TYPE = ListTransactionsResponse_v1
    SCHEMA = Schema(
        ("state_filters", CompactArray(_string())),
        ("producer_id_filters", CompactArray(Int64)),
        ("duration_filter", Int64),
        ("tags", TaggedFields),
    )


class ListTransactionsRequest(Request[ListTransactionsRequest_v0 | ListTransactionsRequest_v1]):  # type: ignore[misc]
    """ListTransactions, filtered by state, producer id and (v1) minimum running time.

    Against a broker without v1 the duration filter cannot be sent: ``duration_filtered`` then
    says the caller must filter by start time itself.
    """

    API_KEY = LIST_TRANSACTIONS_KEY

    def __init__(
        self,
        states: Collection[str] = (),
        producer_ids: Collection[int] = (),
        running_longer_than_ms: int = -1,
    ) -> None:
        self.states = sorted(states)
        self.producer_ids = sorted(producer_ids)
        self.running_longer_than_ms = running_longer_than_ms
        self.duration_filtered = False

    def prepare(
        self, versions: dict[int, tuple[int, int]]
    ) -> ListTransactionsRequest_v0 | ListTransactionsRequest_v1:
        if _supported(versions, LIST_TRANSACTIONS_KEY, 1):
            return self.build(ListTransactionsRequest_v1)
        if _supported(versions, LIST_TRANSACTIONS_KEY, 0):
            return self.build(ListTransactionsRequest_v0)
        _refuse(versions, LIST_TRANSACTIONS_KEY, 0, "ListTransactions")
        raise AssertionError("unreachable")

    def build(
        self,
        request_struct_class: type[ListTransactionsRequest_v0 | ListTransactionsRequest_v1],
    ) -> ListTransactionsRequest_v0 | ListTransactionsRequest_v1:
        if request_struct_class.API_VERSION >= 1:
            self.duration_filtered = self.running_longer_than_ms >= 0
            return request_struct_class(
                self.states, self.producer_ids, self.running_longer_than_ms, _NO_TAGS
            )
        self.duration_filtered = False
        return request_struct_class(self.states, self.producer_ids, _NO_TAGS)


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


async def list_everywhere(
    send: Callable[[int, ListTransactionsRequest], Awaitable[Any]],
    nodes: Sequence[int],
    *,
    states: Collection[str] = (),
    producer_ids: Collection[int] = (),
    running_longer_than_ms: int = -1,
    timeout: float | None = None,
) -> tuple[list[TransactionListing], dict[int, int | BaseException]]:
    """ListTransactions on every broker at once: the listings, and what each broker that gave
    none answered instead (its error code, or the exception its request raised; a broker that
    did not answer within ``timeout`` raised TimeoutError).

    Each broker coordinates the ids of its own ``__transaction_state`` partitions, so only the
    union of all answers is the cluster's list; asking them together means a broker that is
    down or frozen delays the result by one timeout, not one per broker. The runtime and the
    operators' tools read a missing answer differently (skip it; report it), so they decide.
    """
    answers = await asyncio.gather(
        *(
            within(
                send(node, ListTransactionsRequest(states, producer_ids, running_longer_than_ms)),
                timeout,
            )
            for node in nodes
        ),
        return_exceptions=True,
    )
    listings: list[TransactionListing] = []
    missing: dict[int, int | BaseException] = {}
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, BaseException):
            missing[node] = answer
        elif answer.error_code:
            missing[node] = answer.error_code
        else:
            listings.extend(
                TransactionListing(txn_id, producer_id, state, node)
                for txn_id, producer_id, state, _tags in answer.transaction_states
            )
    return listings, missing


# -- DescribeTransactions v0 -------------------------------------------------------------------


class DescribeTransactionsResponse_v0(Response):  # type: ignore[misc]
    API_KEY = DESCRIBE_TRANSACTIONS_KEY
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "transaction_states",
            CompactArray(
                ("error_code", Int16),
                ("transactional_id", _string()),
                ("transaction_state", _string()),
                ("transaction_timeout_ms", Int32),
                ("transaction_start_time_ms", Int64),
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                (
                    "topics",
                    CompactArray(
                        ("topic", _string()),
                        ("partitions", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = DESCRIBE_TRANSACTIONS_KEY
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(_string())),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest(Request[DescribeTransactionsRequest_v0]):  # type: ignore[misc]
    """DescribeTransactions for ids this broker coordinates (others answer NOT_COORDINATOR)."""

    API_KEY = DESCRIBE_TRANSACTIONS_KEY

    def __init__(self, transactional_ids: Sequence[str]) -> None:
        self.transactional_ids = list(transactional_ids)

    def prepare(self, versions: dict[int, tuple[int, int]]) -> DescribeTransactionsRequest_v0:
        if not _supported(versions, DESCRIBE_TRANSACTIONS_KEY, 0):
            _refuse(versions, DESCRIBE_TRANSACTIONS_KEY, 0, "DescribeTransactions")
        return self.build(DescribeTransactionsRequest_v0)

    def build(
        self, request_struct_class: type[DescribeTransactionsRequest_v0]
    ) -> DescribeTransactionsRequest_v0:
        return request_struct_class(self.transactional_ids, _NO_TAGS)


# -- DescribeProducers v0 ----------------------------------------------------------------------


class DescribeProducersResponse_v0(Response):  # type: ignore[misc]
    API_KEY = DESCRIBE_PRODUCERS_KEY
    API_VERSION = 0
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
                        ("error_message", _string()),  # nullable
                        (
                            "active_producers",
                            CompactArray(
                                ("producer_id", Int64),
                                ("producer_epoch", Int32),
                                ("last_sequence", Int32),
                                ("last_timestamp", Int64),
                                ("coordinator_epoch", Int32),
                                ("current_txn_start_offset", Int64),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeProducersRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = DESCRIBE_PRODUCERS_KEY
    API_VERSION = 0
    RESPONSE_TYPE = DescribeProducersResponse_v0
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("name", _string()),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


def _by_topic(partitions: Collection[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    grouped: defaultdict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(partitions):
        grouped[topic].append(partition)
    return list(grouped.items())


class DescribeProducersRequest(Request[DescribeProducersRequest_v0]):  # type: ignore[misc]
    """DescribeProducers for partitions this broker leads (others answer NOT_LEADER)."""

    API_KEY = DESCRIBE_PRODUCERS_KEY

    def __init__(self, partitions: Collection[tuple[str, int]]) -> None:
        self.partitions = list(partitions)

    def prepare(self, versions: dict[int, tuple[int, int]]) -> DescribeProducersRequest_v0:
        if not _supported(versions, DESCRIBE_PRODUCERS_KEY, 0):
            _refuse(versions, DESCRIBE_PRODUCERS_KEY, 0, "DescribeProducers")
        return self.build(DescribeProducersRequest_v0)

    def build(
        self, request_struct_class: type[DescribeProducersRequest_v0]
    ) -> DescribeProducersRequest_v0:
        topics = [(topic, parts, _NO_TAGS) for topic, parts in _by_topic(self.partitions)]
        return request_struct_class(topics, _NO_TAGS)


# -- WriteTxnMarkers v1 ------------------------------------------------------------------------


class WriteTxnMarkersResponse_v1(Response):  # type: ignore[misc]
    API_KEY = WRITE_TXN_MARKERS_KEY
    API_VERSION = 1
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
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
            ),
        ),
        ("tags", TaggedFields),
    )


class WriteTxnMarkersRequest_v1(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = WRITE_TXN_MARKERS_KEY
    API_VERSION = 1
    RESPONSE_TYPE = WriteTxnMarkersResponse_v1
    SCHEMA = Schema(
        (
            "markers",
            CompactArray(
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                ("transaction_result", Boolean),
                (
                    "topics",
                    CompactArray(
                        ("name", _string()),
                        ("partition_indexes", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("coordinator_epoch", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class AbortMarkerRequest(Request[WriteTxnMarkersRequest_v1]):  # type: ignore[misc]
    """One ABORT marker for one producer on some partitions of the broker that leads them.

    Only ever an abort: writing a COMMIT marker for a transaction its coordinator does not know
    would expose records nobody decided to commit.
    """

    API_KEY = WRITE_TXN_MARKERS_KEY

    def __init__(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        partitions: Collection[tuple[str, int]],
    ) -> None:
        if not partitions:
            raise ValueError("an abort marker needs at least one partition")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        # A hanging transaction begun by a producer id whose first transaction never ended has
        # no coordinator epoch (-1); 0 is at most any real one, as kafka-transactions.sh uses.
        self.coordinator_epoch = max(coordinator_epoch, 0)
        self.partitions = list(partitions)

    def prepare(self, versions: dict[int, tuple[int, int]]) -> WriteTxnMarkersRequest_v1:
        if not _supported(versions, WRITE_TXN_MARKERS_KEY, 1):
            _refuse(versions, WRITE_TXN_MARKERS_KEY, 1, "WriteTxnMarkers")
        return self.build(WriteTxnMarkersRequest_v1)

    def build(
        self, request_struct_class: type[WriteTxnMarkersRequest_v1]
    ) -> WriteTxnMarkersRequest_v1:
        topics = [(topic, parts, _NO_TAGS) for topic, parts in _by_topic(self.partitions)]
        marker = (
            self.producer_id,
            self.producer_epoch,
            False,  # ABORT
            topics,
            self.coordinator_epoch,
            _NO_TAGS,
        )
        return request_struct_class([marker], _NO_TAGS)
