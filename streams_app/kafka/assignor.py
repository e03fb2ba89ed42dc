"""Range assignment that also tells every member where every other member's web server is.

Interactive queries need to know which worker owns a key's partition, and where to reach it.
We do what Kafka Streams does with ``application.server``: each member puts its address in the
*user data* of its JoinGroup subscription; the group leader, which sees every subscription,
computes the assignment and puts the whole map ``address -> partitions`` in the user data of
every member's assignment (Kafka Streams' ``AssignmentInfo.partitionsByHost``). Every member
then learns the same map, for the same generation, in SyncGroup: no extra topic, no extra
round trip, and never a stale owner once a rebalance completes.

The assignment itself is aiokafka's range assignment, unchanged, under the same protocol name
(``range``): a group can mix workers that publish an address with workers that do not (older
versions), and an older leader simply distributes no map (queries for keys owned elsewhere are
then answered "owner unknown" instead of redirected). A worker offers it second, after the
runtime's own ``streams_app`` protocol (standbys, KIP-441), whose adapter in
``streams_app.transport.kafka`` carries the same address data and fills the same ``hosts``
map; range is what a group falls back to while it has members of an older version.

aiokafka calls an assignor's ``metadata``, ``assign`` and ``on_assignment`` through whatever
object is in ``partition_assignment_strategy``; an instance (one per consumer) keeps the
address and the map per worker, which the class-level assignors of aiokafka cannot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

log = logging.getLogger(__name__)

#: First byte of our user data, so that foreign bytes (another client's assignor) are ignored.
_MAGIC = b"S1"


def frame_user_data(ours: bytes, addresses: bytes) -> bytes:
    """The ``streams_app`` protocol's user data: its assignor's part and the web-address part
    in one field, a 4-byte length then each part (only members of that protocol read it)."""
    return len(ours).to_bytes(4, "big") + ours + addresses


def unframe_user_data(data: bytes) -> tuple[bytes, bytes]:
    if len(data) < 4:
        return data, b""
    size = int.from_bytes(data[:4], "big")
    if size > len(data) - 4:
        return data, b""
    return data[4 : 4 + size], data[4 + size :]


def encode_subscription(address: str | None) -> bytes:
    if not address:
        return b""
    return _MAGIC + json.dumps({"address": address}).encode()


def decode_subscription(data: bytes | None) -> str | None:
    """A member's web address from its subscription's user data, under either protocol
    (``range``: the address part alone; ``streams_app``: framed after the assignor's part)."""
    payload = _decode(data)
    if payload is None and data:
        payload = _decode(unframe_user_data(bytes(data))[1])
    address = payload.get("address") if payload else None
    return address if isinstance(address, str) and address else None


def encode_assignment(hosts: Mapping[str, Mapping[str, list[int]]]) -> bytes:
    if not hosts:
        return b""
    return _MAGIC + json.dumps({"hosts": hosts}, sort_keys=True).encode()


def decode_assignment(data: bytes | None) -> dict[tuple[str, int], str]:
    """``(topic, partition) -> address`` from an assignment's user data ({} if it has none)."""
    payload = _decode(data)
    hosts = payload.get("hosts") if payload else None
    out: dict[tuple[str, int], str] = {}
    if not isinstance(hosts, dict):
        return out
    for address, topics in hosts.items():
        if not isinstance(address, str) or not isinstance(topics, dict):
            continue
        for topic, partitions in topics.items():
            if isinstance(topic, str) and isinstance(partitions, list):
                for partition in partitions:
                    if isinstance(partition, int):
                        out[(topic, partition)] = address
    return out


def _decode(data: bytes | None) -> dict[str, object] | None:
    if not data or not data.startswith(_MAGIC):
        return None
    try:
        payload = json.loads(data[len(_MAGIC) :])
    except ValueError:
        log.warning("ignoring undecodable assignor user data (%d bytes)", len(data))
        return None
    return payload if isinstance(payload, dict) else None


class AddressRangeAssignor:
    """aiokafka's range assignor plus members' addresses (see the module docstring)."""

    name = RangePartitionAssignor.name
    version = RangePartitionAssignor.version

    def __init__(self, address: str | None) -> None:
        #: This member's address (``http://host:port``); None: publish nothing.
        self.address = address
        #: ``(topic, partition) -> address`` as of the last assignment (empty before one).
        self.hosts: dict[tuple[str, int], str] = {}

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(
            self.version, list(topics), encode_subscription(self.address)
        )

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        assignments = RangePartitionAssignor.assign(cluster, members)
        hosts: dict[str, dict[str, list[int]]] = {}
        for member_id, assignment in assignments.items():
            address = decode_subscription(members[member_id].user_data)
            if address is None:
                continue
            topics = hosts.setdefault(address, {})
            for topic, partitions in assignment.assignment:
                topics.setdefault(topic, []).extend(partitions)
        user_data = encode_assignment(hosts)
        return {
            member_id: ConsumerProtocolMemberAssignment(
                assignment.version, assignment.assignment, user_data
            )
            for member_id, assignment in assignments.items()
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.hosts = decode_assignment(assignment.user_data)
