"""Moving partition leadership off chosen brokers (for the faults that need it).

The "zombie that can still write" is a worker cut from its group and transaction coordinators
while it still reaches the leaders of its partitions. With three brokers every broker leads some
partition of every topic, so the coordinators' broker leads some of the worker's partitions
too; before that cut the fault hands those leaderships to the other brokers. Kafka's own tools
do it in two steps, and so does this module: reorder each partition's replicas so that an
in-sync replica on another broker comes first (AlterPartitionReassignments with the same
replicas: no data moves, the controller only records the new order), then a preferred leader
election (ElectLeaders) makes that first replica the leader.

aiokafka 0.14 has AlterPartitionReassignments but no ElectLeaders: its v2 (flexible) is defined
here, after ``clients/src/main/resources/common/message/ElectLeaders{Request,Response}.json``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import AlterPartitionReassignmentsRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

log = logging.getLogger(__name__)

ELECT_LEADERS_KEY = 43
PREFERRED = 0
#: ElectLeaders answers this for a partition whose preferred replica already leads.
ELECTION_NOT_NEEDED = 84
_NO_TAGS: dict[int, bytes] = {}


class ElectLeadersResponse_v2(Response):  # type: ignore[misc]
    API_KEY = ELECT_LEADERS_KEY
    API_VERSION = 2
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "replica_election_results",
            CompactArray(
                ("topic", CompactString("utf-8")),
                (
                    "partition_result",
                    CompactArray(
                        ("partition_id", Int32),
                        ("error_code", Int16),
                        ("error_message", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ElectLeadersRequest_v2(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = ELECT_LEADERS_KEY
    API_VERSION = 2
    RESPONSE_TYPE = ElectLeadersResponse_v2
    SCHEMA = Schema(
        ("election_type", Int8),
        (
            "topic_partitions",
            CompactArray(
                ("topic", CompactString("utf-8")),
                ("partitions", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("timeout_ms", Int32),
        ("tags", TaggedFields),
    )


class ElectLeadersRequest(Request[ElectLeadersRequest_v2]):  # type: ignore[misc]
    API_KEY = ELECT_LEADERS_KEY

    def __init__(self, partitions: dict[str, list[int]], timeout_ms: int) -> None:
        self._partitions = partitions
        self._timeout_ms = timeout_ms

    def build(self, request_struct_class: type[ElectLeadersRequest_v2]) -> ElectLeadersRequest_v2:
        return request_struct_class(
            PREFERRED,
            [(t, sorted(ps), _NO_TAGS) for t, ps in sorted(self._partitions.items())],
            self._timeout_ms,
            _NO_TAGS,
        )


def _leaders(described: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(t["topic"], p["partition"]): p for t in described for p in t["partitions"]}


async def _broker_views(
    admin: AIOKafkaAdminClient, topics: Collection[str]
) -> list[dict[tuple[str, int], dict[str, Any]]] | None:
    """Every broker's view of the partitions of ``topics``; None while some broker does not
    know one of them yet, or names no leader for one of its partitions.

    Each broker holds its own copy of the metadata log and applies the new leaders when it gets
    there, so one broker can answer with the new leader while another still names the old one,
    and a topic created a moment ago can be unknown to a broker (its partitions then missing
    from that answer, not led by anyone in it). A client asks whichever broker it picks: only
    what every broker shows, for every partition, is settled.
    """
    views = []
    wanted = set(topics)
    for broker in admin._client.cluster.brokers():
        response = await admin._send_request(MetadataRequest(sorted(topics)), broker.nodeId)
        described = response.to_object()["topics"]
        known = {t["topic"] for t in described if t["error_code"] == 0 and t["partitions"]}
        view = _leaders(described)
        if known != wanted or any(info["leader"] < 0 for info in view.values()):
            return None
        views.append(view)
    return views


async def _settled_views(
    admin: AIOKafkaAdminClient, topics: Collection[str], deadline: float
) -> list[dict[tuple[str, int], dict[str, Any]]] | None:
    """:func:`_broker_views` once every broker shows every partition with a leader; None if
    that has not happened by ``deadline`` (monotonic)."""
    while True:
        views = await _broker_views(admin, topics)
        if views is not None or time.monotonic() > deadline:
            return views
        await asyncio.sleep(0.5)  # the brokers apply the controller's log; no event to await


def _avoided(views: list[dict[tuple[str, int], dict[str, Any]]], avoid: set[int]) -> int:
    """Partitions that some broker's view shows led by ``avoid``."""
    return len({tp for view in views for tp, info in view.items() if info["leader"] in avoid})


async def _avoided_now(admin: AIOKafkaAdminClient, topics: Collection[str], avoid: set[int]) -> int:
    """Partitions of ``topics`` led by ``avoid`` as one broker describes them (what is left to
    report when the brokers have not all settled in time)."""
    described = _leaders(await admin.describe_topics(sorted(topics)))
    return sum(1 for info in described.values() if info["leader"] in avoid)


async def leaders(bootstrap: str, topics: Collection[str]) -> dict[tuple[str, int], int]:
    """Each partition of ``topics`` and the broker leading it now."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="chaos-leadership")
    await admin.start()
    try:
        described = _leaders(await admin.describe_topics(sorted(topics)))
    finally:
        await admin.close()
    return {tp: int(info["leader"]) for tp, info in described.items()}


async def move_leaders_off(
    bootstrap: str,
    topics: Collection[str],
    avoid: Collection[int],
    *,
    timeout: float = 30.0,
) -> tuple[int, int]:
    """Make brokers other than ``avoid`` lead every partition of ``topics`` they can lead.

    Returns (partitions moved, partitions still led by an avoided broker when ``timeout`` ran
    out: no in-sync replica elsewhere, or the election did not finish).
    """
    avoid = set(avoid)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="chaos-leadership")
    await admin.start()
    deadline = time.monotonic() + timeout
    try:
        # Decided on what every broker shows: a partition of a topic created a moment ago that
        # some broker does not know yet would otherwise be left where it is, unseen.
        views = await _settled_views(admin, topics, deadline)
        if views is None:
            return 0, await _avoided_now(admin, topics, avoid)
        described = views[0]
        reorder: dict[str, list[tuple[int, list[int]]]] = {}
        for (topic, partition), info in described.items():
            if info["leader"] not in avoid:
                continue
            replicas, isr = list(info["replicas"]), set(info["isr"])
            first = [r for r in replicas if r not in avoid and r in isr]
            if not first:
                continue
            order = [first[0]] + [r for r in replicas if r != first[0]]
            reorder.setdefault(topic, []).append((partition, order))
        if not reorder:
            return 0, _avoided(views, avoid)
        request = AlterPartitionReassignmentsRequest(
            timeout_ms=int(timeout * 1000),
            topics=[
                (topic, [(p, order, _NO_TAGS) for p, order in parts], _NO_TAGS)
                for topic, parts in reorder.items()
            ],
            tags=_NO_TAGS,
        )
        response = await admin._send_to_controller(request)
        for topic_result in response.responses:
            for part in topic_result[1]:
                if part[1] != 0:
                    log.warning("reordering %s[%d]: error %d %s", topic_result[0], *part[:3])
        wanted = {t: [p for p, _ in parts] for t, parts in reorder.items()}
        while True:
            elect = await admin._send_to_controller(
                ElectLeadersRequest(wanted, int(timeout * 1000))
            )
            for topic_result in elect.replica_election_results:
                for part in topic_result[1]:
                    if part[1] not in (0, ELECTION_NOT_NEEDED):
                        log.debug("electing %s[%d]: error %d %s", topic_result[0], *part[:3])
            views = await _broker_views(admin, topics)
            still = None if views is None else _avoided(views, avoid)
            if still == 0 or time.monotonic() > deadline:
                if still is None:
                    still = await _avoided_now(admin, topics, avoid)
                return sum(len(ps) for ps in wanted.values()), still
            await asyncio.sleep(0.5)  # the controller propagates the new leaders; no event
    finally:
        await admin.close()
