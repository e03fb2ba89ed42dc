"""A consumer that reads committed offsets with ``require_stable`` and exposes its membership.

Three things aiokafka 0.14.0 lacks or gets wrong for exactly-once v2:

- Committed offsets are fetched with OffsetFetch v1-v3, which answer the last *committed* value
  even while a transaction holding newer offsets for the partition is still open. A new owner
  that starts there while a zombie's transaction then commits processes those records twice.
  Here every committed-offset fetch (the position of newly assigned partitions, and
  :meth:`StableConsumer.committed_offsets`) is OffsetFetch v7 with ``require_stable``, and the
  broker's UNSTABLE_OFFSET_COMMIT (88) is retried until the transaction completes.
- There is no public way to read the group membership a transaction must carry (KIP-447);
  :meth:`StableConsumer.group_metadata` reads the coordinator's private attributes.
- With more than one assignor (the runtime offers ``streams_app`` then ``range``) it sends one
  JoinGroup *per assignor* at every join, each offering one protocol more than the last, and
  keeps only the last answer: see :class:`_SingleJoinRebalance`. Here a join is one JoinGroup
  offering every protocol.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any, NoReturn

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import (
    CoordinatorGroupRebalance,
    GroupCoordinator,
    NoGroupCoordinator,
)
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.protocol.group import JoinGroupRequest
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from aiokafka.util import get_running_loop

from streams_app.kafka.fetched import lean_records
from streams_app.kafka.protocol import StableOffsetFetchRequest
from streams_app.transport.base import GroupMetadata

log = logging.getLogger(__name__)

_NO_OFFSET = -1


def parse_stable_offsets(
    response: Any, group_id: str, on_coordinator_dead: Callable[[], object] | None = None
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The committed offsets in an OffsetFetch v7 response; raises on any error.

    A group-level error (v2+ top-level error code) is raised too: aiokafka ignores it.
    UNSTABLE_OFFSET_COMMIT raises a *retriable* error, so callers retry it.
    """

    def fail(error_type: type[aerrors.BrokerResponseError]) -> NoReturn:
        coordinator_moved = (
            aerrors.NotCoordinatorForGroupError,
            aerrors.CoordinatorNotAvailableError,
        )
        if error_type in coordinator_moved and on_coordinator_dead is not None:
            on_coordinator_dead()
        if error_type is aerrors.GroupAuthorizationFailedError:
            raise error_type(group_id)
        raise error_type()

    if response.error_code:
        fail(aerrors.for_code(response.error_code))
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic, partitions, _ in response.topics:
        for partition, offset, _epoch, metadata, error_code, _ in partitions:
            if error_code:
                error_type = aerrors.for_code(error_code)
                if error_type is aerrors.UnknownTopicOrPartitionError:
                    log.warning("OffsetFetch: unknown topic %s", topic)
                    continue
                fail(error_type)
            if offset != _NO_OFFSET:
                offsets[TopicPartition(topic, partition)] = OffsetAndMetadata(
                    offset, metadata or ""
                )
    return offsets


class _SingleJoinRebalance(CoordinatorGroupRebalance):  # type: ignore[misc]
    """A join that sends one JoinGroup (two with KIP-394's member-id round) offering every
    protocol, in preference order.

    aiokafka 0.14.0's ``perform_group_join`` sends its JoinGroup inside the loop over the
    assignors (aio-libs/aiokafka PR #1168, open): with ``streams_app`` and ``range`` a member
    joins twice, first offering ``streams_app`` alone, then both, and keeps the second answer.
    Each JoinGroup completes a round of its own (two generations per rebalance), and since a
    member's two JoinGroups carry different protocol metadata, the broker starts a new round
    whenever the second one finds the group past its join phase (CompletingRebalance or
    Stable with changed metadata). Once one member's first JoinGroup shares a round with
    another's second (a member joining between someone's two requests is enough), the group
    never settles: in every round the members that sent their second JoinGroup go on to
    SyncGroup while the others send theirs, which restarts the round; the SyncGroups fail with
    REBALANCE_IN_PROGRESS, those members begin again with their first JoinGroup, and the group
    alternates generations every few hundred milliseconds (observed for minutes under load).
    The range assignor alone was immune: one assignor, one JoinGroup.

    The answer is handled as aiokafka handles it (same errors, same log lines).
    """

    async def perform_group_join(self) -> tuple[str, bytes] | None:
        coordinator = self._coordinator
        log.info("(Re-)joining group %s", self.group_id)
        topics = self._subscription.topics
        protocols: list[tuple[str, bytes]] = []
        for assignor in self._assignors:
            metadata = assignor.metadata(topics)
            protocols.append(
                (assignor.name, metadata if isinstance(metadata, bytes) else metadata.encode())
            )
        while True:
            request = JoinGroupRequest(
                self.group_id,
                self._session_timeout_ms,
                self._rebalance_timeout_ms,
                coordinator.member_id,
                coordinator._group_instance_id,
                ConsumerProtocol.PROTOCOL_TYPE,
                protocols,
            )
            try:
                response = await coordinator._send_req(request)
            except aerrors.KafkaError:
                return None  # connection lost: the coordinator lookup backs off
            if not self._subscription.active:
                return None  # the subscription changed meanwhile: join again for the new one
            error_type = aerrors.for_code(response.error_code)
            if error_type is not aerrors.MemberIdRequired:
                break
            coordinator.member_id = response.member_id  # KIP-394: again, with the id given
        return await self._joined(response, error_type)

    async def _joined(
        self, response: Any, error_type: type[aerrors.KafkaError]
    ) -> tuple[str, bytes] | None:
        coordinator = self._coordinator
        if error_type is aerrors.NoError:
            coordinator.member_id = response.member_id
            coordinator.generation = response.generation_id
            log.info(
                "Joined group '%s' (generation %s) with member_id %s",
                self.group_id,
                response.generation_id,
                response.member_id,
            )
            if response.leader_id == response.member_id:
                log.info(
                    "Elected group leader -- performing partition assignments using %s",
                    response.group_protocol,
                )
                assignment = await self._on_join_leader(response)
            else:
                assignment = await self._on_join_follower()
            return None if assignment is None else (response.group_protocol, assignment)
        if error_type is aerrors.GroupLoadInProgressError:
            await asyncio.sleep(self._retry_backoff_ms / 1000)
        elif error_type is aerrors.UnknownMemberIdError:
            coordinator.reset_generation()
        elif error_type in (
            aerrors.GroupCoordinatorNotAvailableError,
            aerrors.NotCoordinatorForGroupError,
        ):
            coordinator.coordinator_dead()
        elif error_type in (
            aerrors.InconsistentGroupProtocolError,
            aerrors.InvalidSessionTimeoutError,
            aerrors.InvalidGroupIdError,
        ):
            log.error("Attempt to join group failed due to fatal error: %s", error_type())
            raise error_type()
        elif error_type is aerrors.GroupAuthorizationFailedError:
            raise error_type(self.group_id)
        else:
            error = error_type()
            log.error("Unexpected error in join group '%s' response: %s", self.group_id, error)
            raise aerrors.KafkaError(repr(error))
        return None


class _StableGroupCoordinator(GroupCoordinator):  # type: ignore[misc]
    async def _do_rejoin_group(self, subscription: Any) -> bool:
        """aiokafka's rejoin, with one JoinGroup per join (:class:`_SingleJoinRebalance`)."""
        rebalance = _SingleJoinRebalance(
            self,
            self.group_id,
            self.coordinator_id,
            subscription,
            self._assignors,
            self._session_timeout_ms,
            self._retry_backoff_ms,
        )
        joined = await rebalance.perform_group_join()
        if not subscription.active:
            return False  # subscribed to other topics meanwhile: the routine joins again
        if joined is None:
            await asyncio.sleep(self._retry_backoff_ms / 1000)
            return False
        protocol, assignment = joined
        await self._on_join_complete(self.generation, self.member_id, protocol, assignment)
        return True

    async def _on_join_complete(
        self, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
    ) -> None:
        """Start heartbeating *before* ``on_partitions_assigned`` runs.

        aiokafka starts the heartbeat only after this method (and so the callback) returns: a
        callback that takes longer than the session timeout (reading committed offsets that
        wait out a zombie's transaction, say) gets the member removed, and the next
        assignment's callback again, in a loop (observed on Kafka 4.3). Java heartbeats
        during the callback; so do we. ``ensure_active_group`` later finds the task running.
        """
        self._start_heartbeat_task()
        await super()._on_join_complete(generation, member_id, protocol, member_assignment_bytes)

    async def _perform_assignment(self, response: Any) -> Any:
        """Let the chosen assignor prepare asynchronously before aiokafka's synchronous
        ``assign``: an assignor with a ``prepare_assignment`` coroutine (the runtime's, which
        reads the changelogs' end offsets to measure every member's lag) is awaited first, as
        Kafka Streams' leader lists offsets inside its assignor."""
        assignor = self._lookup_assignor(response.group_protocol)
        prepare = getattr(assignor, "prepare_assignment", None)
        if prepare is not None:
            await prepare()
        return await super()._perform_assignment(response)

    async def _do_fetch_commit_offsets(
        self, partitions: Collection[TopicPartition], *, stable: bool = True
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """aiokafka's committed-offset fetch, as OffsetFetch v7 with ``require_stable``.

        Both of aiokafka's callers retry retriable errors: the refresh of newly assigned
        partitions (``_maybe_refresh_commit_offsets``: position stays unknown meanwhile, so
        nothing is fetched from a stale offset) and ``fetch_committed_offsets``.
        """
        if not partitions:
            return {}
        request = StableOffsetFetchRequest(self.group_id, partitions, require_stable=stable)
        response = await self._send_req(request)
        return parse_stable_offsets(response, self.group_id, self.coordinator_dead)


class StableConsumer(AIOKafkaConsumer):  # type: ignore[misc]
    """``AIOKafkaConsumer`` with require_stable committed offsets and ``group_metadata()``;
    without deserializers its records are :class:`~streams_app.kafka.fetched.FetchedRecord`.

    Takes the keyword arguments of ``AIOKafkaConsumer``; the partition assignor defaults to
    range, so that co-partitioned topics (same partition count) are assigned together.
    """

    _fetcher: Any
    _coordinator: Any

    def __init__(self, *topics: str, **kwargs: Any) -> None:
        kwargs.setdefault("partition_assignment_strategy", (RangePartitionAssignor,))
        super().__init__(*topics, **kwargs)

    async def start(self) -> None:
        """``AIOKafkaConsumer.start`` (aiokafka 0.14.0, consumer/consumer.py:364-437), building
        :class:`_StableGroupCoordinator` instead of ``GroupCoordinator``, and with
        :func:`~streams_app.kafka.fetched.lean_records` on its fetcher.

        Copied rather than patched: aiokafka builds the coordinator inside ``start`` by its module
        name, and patching that name would change every other consumer in the process.
        """
        assert self._loop is get_running_loop(), "create the consumer inside the running loop"
        assert self._fetcher is None, "start() called twice"
        await self._client.bootstrap()
        await self._wait_topics()
        self._fetcher = Fetcher(
            self._client,
            self._subscription,
            key_deserializer=self._key_deserializer,
            value_deserializer=self._value_deserializer,
            fetch_min_bytes=self._fetch_min_bytes,
            fetch_max_bytes=self._fetch_max_bytes,
            fetch_max_wait_ms=self._fetch_max_wait_ms,
            max_partition_fetch_bytes=self._max_partition_fetch_bytes,
            check_crcs=self._check_crcs,
            fetcher_timeout=self._consumer_timeout,
            retry_backoff_ms=self._retry_backoff_ms,
            auto_offset_reset=self._auto_offset_reset,
            isolation_level=self._isolation_level,
            client_rack=self._client_rack,
        )
        lean_records(self._fetcher)
        if self._group_id is None:
            self._coordinator = NoGroupCoordinator(
                self._client,
                self._subscription,
                exclude_internal_topics=self._exclude_internal_topics,
            )
            if (
                self._subscription.subscription is not None
                and self._subscription.partitions_auto_assigned()
            ):
                await self._client.force_metadata_update()
                self._coordinator.assign_all_partitions(check_unknown=True)
            return
        self._coordinator = _StableGroupCoordinator(
            self._client,
            self._subscription,
            group_id=self._group_id,
            group_instance_id=self._group_instance_id,
            heartbeat_interval_ms=self._heartbeat_interval_ms,
            session_timeout_ms=self._session_timeout_ms,
            retry_backoff_ms=self._retry_backoff_ms,
            enable_auto_commit=self._enable_auto_commit,
            auto_commit_interval_ms=self._auto_commit_interval_ms,
            assignors=self._partition_assignment_strategy,
            exclude_internal_topics=self._exclude_internal_topics,
            rebalance_timeout_ms=self._rebalance_timeout_ms,
            max_poll_interval_ms=self._max_poll_interval_ms,
        )
        if self._subscription.subscription is not None:
            if self._subscription.partitions_auto_assigned():
                await self._subscription.wait_for_assignment()
            else:
                self._coordinator.start_commit_offsets_refresh_task(
                    self._subscription.subscription.assignment
                )

    def unsubscribe(self) -> asyncio.Task[None] | None:
        """aiokafka's ``unsubscribe``, returning its LeaveGroup task (None without a group).

        aiokafka sends LeaveGroup in a background task and only then resets member id and
        generation; a ``subscribe`` made before that task ends may send JoinGroup with the old
        member id, and the leave (and reset) then lands in the middle of the new join. aiokafka
        recovers by rejoining, at the cost of extra rebalances. Await the task, or subscribe
        from its done-callback, to join once, as a new member.
        """
        self._subscription.unsubscribe()
        task: asyncio.Task[None] | None = None
        if self._group_id is not None and self._coordinator is not None:
            task = self._coordinator.maybe_leave_group()
        self._client.set_topics([])
        return task

    def request_rejoin(self) -> None:
        """Rejoin the group at the next poll (Java's ``enforceRebalance``): the group rebalances
        and every member's assignor runs again. No-op without a group or before ``start``."""
        coordinator = self._coordinator
        if isinstance(coordinator, GroupCoordinator):
            coordinator.request_rejoin()

    def group_metadata(self) -> GroupMetadata:
        """The membership as of now: generation -1 and member id "" while not (or no longer) a
        member. aiokafka sets the new generation from the JoinGroup response, *before*
        SyncGroup completes, and resets both on heartbeat/commit errors: snapshot it in
        ``on_partitions_assigned``, never read it at commit time."""
        if self._group_id is None:
            raise aerrors.IllegalOperation("group_metadata() needs a group_id")
        coordinator = self._coordinator
        if not isinstance(coordinator, GroupCoordinator):
            return GroupMetadata(self._group_id, -1, "", self._group_instance_id)
        return GroupMetadata(
            self._group_id,
            int(coordinator.generation),
            str(coordinator.member_id),
            coordinator._group_instance_id,
        )

    async def committed_offsets(
        self, partitions: Collection[tuple[str, int]], *, timeout: float = 60.0
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed), waiting out open transactions.

        Raises ``KafkaTimeoutError`` if they are still unstable (or the coordinator unreachable)
        after ``timeout`` seconds. The partitions need not be assigned to this consumer.
        """
        found = await self.committed_offsets_and_metadata(partitions, timeout=timeout)
        return {tp: None if om is None else om.offset for tp, om in found.items()}

    async def committed_offsets_and_metadata(
        self,
        partitions: Collection[tuple[str, int]],
        *,
        timeout: float = 60.0,
        stable: bool = True,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """:meth:`committed_offsets` with the metadata committed alongside each offset;
        ``stable=False``: the last committed values at once, even while a transaction holds
        newer ones pending."""
        if self._group_id is None:
            raise aerrors.IllegalOperation("committed_offsets() needs a group_id")
        if not isinstance(self._coordinator, _StableGroupCoordinator):
            raise aerrors.IllegalOperation("committed_offsets() needs a started consumer")
        tps = [TopicPartition(topic, partition) for topic, partition in partitions]
        if not tps:
            return {}
        coordinator = self._coordinator
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last_error: BaseException | None = None
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    await coordinator.ensure_coordinator_known()
                    offsets = await coordinator._do_fetch_commit_offsets(tps, stable=stable)
                return {tp: offsets.get(tp) for tp in tps}
            except TimeoutError:
                pass
            except aerrors.KafkaError as err:
                if not err.retriable:
                    raise
                last_error = err
            if loop.time() >= deadline:
                raise aerrors.KafkaTimeoutError(
                    f"committed offsets of group {self._group_id!r} for {len(tps)} partition(s) "
                    f"not available within {timeout:g} s (last error: {last_error!r}); an open "
                    "transaction may still hold them"
                ) from last_error
            await asyncio.sleep(self._retry_backoff_ms / 1000)
