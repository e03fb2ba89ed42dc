"""A transactional producer for exactly-once v2: aiokafka's, rewired for KIP-447.

Five changes to aiokafka 0.14.0 (``aiokafka/producer/``), all private, all here:

1. ``send_offsets_to_transaction(offsets, group)`` takes the consumer group *membership* and sends
   TxnOffsetCommit v3 with generation, member id and instance id, so the group coordinator rejects
   a zombie's offsets (aiokafka sends v0: no fencing at all).
2. The membership errors of that request (22, 25, 27, 82) become an *abortable*
   :class:`OffsetCommitFencedError` instead of killing the sender (aiokafka treats every
   unexpected TxnOffsetCommit error as fatal).
3. An abortable error keeps the partitions already added to the transaction, so the abort that
   follows really sends EndTxn(ABORT). aiokafka's ``TransactionManager.error_transaction`` forgets
   them; the abort then looks "empty", completes locally without telling the broker, and the
   broker's transaction stays open and is *continued* by the next ``begin_transaction()``: the
   next commit would commit the records that were meant to be aborted.
4. A send gate: aiokafka commits a transaction even when one of its sends failed
   (``Sender._do_txn_commit`` sends EndTxn(COMMIT) after ``flush_for_commit``, which never looks
   at batch outcomes). Here every send of the current transaction is tracked and
   ``commit_transaction`` refuses with :class:`TransactionSendFailedError` if any failed.
5. Transaction version 2 (KIP-890 part 2) where the cluster has it (Kafka 4.x does by default):
   Produce v12 and TxnOffsetCommit v5 add partitions and offsets to the transaction themselves
   (no AddPartitionsToTxn, no AddOffsetsToTxn), and EndTxn v5 bumps the epoch and restarts the
   sequence numbers at the end of every transaction (:mod:`streams_app.kafka.txn_v2`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Mapping
from typing import Any

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaProducer
from aiokafka.client import CoordinationType
from aiokafka.producer.sender import (
    BACKOFF_OVERRIDE,
    EndTxnHandler,
    Sender,
    SendProduceReqHandler,
    TxnOffsetCommitHandler,
)
from aiokafka.producer.transaction_manager import PidAndEpoch, TransactionManager, TransactionState
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from aiokafka.util import commit_structure_validate

from streams_app.kafka.errors import (
    GROUP_FENCING_ERRORS,
    OffsetCommitFencedError,
    ProducerUnusableError,
    TransactionSendFailedError,
    is_fencing_error,
)
from streams_app.kafka.protocol import (
    TXN_OFFSET_COMMIT_V2_VERSION,
    TXN_OFFSET_COMMIT_VERSION,
    TxnOffsetCommitRequest,
    check_group_metadata,
)
from streams_app.kafka.txn_v2 import (
    ApiVersionsRequest,
    EndTxnRequestV5,
    ProduceRequestV12,
    ProduceResponseAsV8,
    supports_v2,
)
from streams_app.transport.base import GroupMetadata

log = logging.getLogger(__name__)


class _GroupOffsets(dict[TopicPartition, OffsetAndMetadata]):
    """The offsets of one ``send_offsets_to_transaction`` call, carrying their membership.

    aiokafka queues ``(group_id, offsets, future)`` and hands ``offsets`` to the sender; riding
    on the dict lets the membership reach the request without changing that queue's shape.
    """

    def __init__(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: GroupMetadata):
        super().__init__(offsets)
        self.group = group


class _Kip447TransactionManager(TransactionManager):  # type: ignore[misc]
    #: Transaction version 2 (KIP-890 part 2) in use; decided once, at start.
    transaction_v2 = False

    def maybe_add_partition_to_txn(self, tp: TopicPartition) -> None:
        """Version 2: the Produce request adds the partition itself, so it is "added" (and
        its batches are not held back waiting for an AddPartitionsToTxn) at once."""
        if self.transaction_v2:
            assert self.is_in_transaction()
            self._txn_partitions.add(tp)
            return
        super().maybe_add_partition_to_txn(tp)

    def add_offsets_to_txn(self, offsets: Any, group_id: str) -> asyncio.Future[None]:
        """Version 2: TxnOffsetCommit adds the group's offsets itself: no AddOffsetsToTxn."""
        if self.transaction_v2:
            self._txn_consumer_group = group_id
        fut: asyncio.Future[None] = super().add_offsets_to_txn(offsets, group_id)
        return fut

    def epoch_bumped(self, producer_id: int, producer_epoch: int) -> None:
        """EndTxn v5 ended the transaction under a new epoch (or a new producer id once the
        epoch ran out): sequence numbers start again at 0 for every partition."""
        self._pid_and_epoch = PidAndEpoch(producer_id, producer_epoch)
        self._sequence_numbers.clear()

    def error_transaction(self, exc: BaseException) -> None:
        """Like aiokafka's, but keeps ``_txn_partitions`` and ``_txn_consumer_group``.

        They are what the broker has in the transaction; ``is_empty_transaction()`` looks at
        them to decide whether the abort must send EndTxn(ABORT). (Change 3 of the module doc.)
        """
        self._transition_to(TransactionState.ABORTABLE_ERROR)
        self._pending_txn_partitions.clear()
        for _, _, fut in self._pending_txn_offsets:
            if not fut.done():
                fut.set_exception(exc)
        self._pending_txn_offsets.clear()
        if not self._transaction_waiter.done():
            self._transaction_waiter.set_exception(exc)

    def aborting_transaction(self) -> None:
        """aiokafka's, without the "exception was never retrieved" noise: the abortable error of
        the waiter it replaces has already been raised to the caller."""
        waiter = self._transaction_waiter
        if waiter is not None and waiter.done() and not waiter.cancelled():
            waiter.exception()
        super().aborting_transaction()


class _TxnOffsetCommitV3Handler(TxnOffsetCommitHandler):  # type: ignore[misc]
    """TxnOffsetCommit v3 with the membership; fencing errors are abortable, not fatal."""

    def create_request(self) -> TxnOffsetCommitRequest:
        txn_manager = self._sender._txn_manager
        offsets: _GroupOffsets = self._offsets
        return TxnOffsetCommitRequest(
            transactional_id=txn_manager.transactional_id,
            producer_id=txn_manager.producer_id,
            producer_epoch=txn_manager.producer_epoch,
            group=offsets.group,
            offsets=offsets,
            version=(
                TXN_OFFSET_COMMIT_V2_VERSION
                if txn_manager.transaction_v2
                else TXN_OFFSET_COMMIT_VERSION
            ),
        )

    def handle_response(self, resp: Any) -> float | None:
        txn_manager = self._sender._txn_manager
        group_id = self._group_id
        for topic, partitions, _ in resp.topics:
            for partition, error_code, _ in partitions:
                tp = TopicPartition(topic, partition)
                error_type = aerrors.for_code(error_code)
                if error_type is aerrors.NoError:
                    txn_manager.offset_committed(tp, self._offsets[tp].offset, group_id)
                elif error_type in GROUP_FENCING_ERRORS:
                    log.warning(
                        "TxnOffsetCommit for group %s rejected: %s", group_id, error_type.message
                    )
                    txn_manager.error_transaction(OffsetCommitFencedError(group_id, error_type))
                    return None
                elif error_type in (
                    aerrors.CoordinatorNotAvailableError,
                    aerrors.NotCoordinatorError,
                    aerrors.RequestTimedOutError,
                ):
                    self._sender._coordinator_dead(CoordinationType.GROUP)
                    return float(self._default_backoff)
                elif error_type in (
                    aerrors.CoordinatorLoadInProgressError,
                    aerrors.UnknownTopicOrPartitionError,
                    aerrors.ConcurrentTransactions,
                ):
                    return float(self._default_backoff)
                elif error_type is aerrors.InvalidProducerEpoch or issubclass(
                    error_type, aerrors.ProducerFenced
                ):
                    raise aerrors.ProducerFenced()
                elif error_type is aerrors.TransactionalIdAuthorizationFailed:
                    raise error_type(txn_manager.transactional_id)
                elif error_type is aerrors.GroupAuthorizationFailedError:
                    txn_manager.error_transaction(error_type(group_id))
                    return None
                else:
                    log.error("TxnOffsetCommit for %s failed: %s", tp, error_type.message)
                    raise error_type()
        return None


class _ProduceV2Handler(SendProduceReqHandler):  # type: ignore[misc]
    """Produce v12: the broker adds each partition to the transaction before appending."""

    def create_request(self) -> ProduceRequestV12:
        topics: defaultdict[str, list[tuple[int, Any]]] = defaultdict(list)
        for tp, batch in self._batches.items():
            topics[tp.topic].append((tp.partition, batch.get_data_buffer()))
        return ProduceRequestV12(
            transactional_id=self._sender._txn_manager.transactional_id,
            required_acks=self._sender._acks,
            timeout=self._sender._request_timeout_ms,
            topics=list(topics.items()),
        )

    def handle_response(self, response: Any) -> None:
        super().handle_response(ProduceResponseAsV8(response))

    def _can_retry(self, error: Any, batch: Any) -> bool:
        # The leader retries CONCURRENT_TRANSACTIONS itself for a while (the previous
        # transaction's markers being written); should it still answer so, try again soon.
        if isinstance(error, aerrors.ConcurrentTransactions):
            self._default_backoff = BACKOFF_OVERRIDE
            return True
        return bool(super()._can_retry(error, batch))


class _EndTxnV2Handler(EndTxnHandler):  # type: ignore[misc]
    """EndTxn v5: the answer carries the producer id and epoch of the next transaction."""

    def create_request(self) -> EndTxnRequestV5:
        txn_manager = self._sender._txn_manager
        return EndTxnRequestV5(
            txn_manager.transactional_id,
            txn_manager.producer_id,
            txn_manager.producer_epoch,
            commit=bool(self._commit_result),
        )

    def handle_response(self, resp: Any) -> float | None:
        if aerrors.for_code(resp.error_code) is aerrors.NoError and resp.producer_id >= 0:
            self._sender._txn_manager.epoch_bumped(resp.producer_id, resp.producer_epoch)
        backoff: float | None = super().handle_response(resp)
        return backoff


class _Kip447Sender(Sender):  # type: ignore[misc]
    async def _send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        """aiokafka's, with Produce v12 under transaction version 2."""
        if not self._txn_manager.transaction_v2:
            await super()._send_produce_req(node_id, batches)
            return
        await _ProduceV2Handler(self, batches).do(node_id)
        self._in_flight.remove(node_id)
        for tp in batches:
            self._muted_partitions.remove(tp)

    async def _do_txn_commit(self, commit_result: Any) -> None:
        """aiokafka's, with EndTxn v5 under transaction version 2."""
        if not self._txn_manager.transaction_v2:
            await super()._do_txn_commit(commit_result)
            return
        await self._message_accumulator.flush_for_commit()
        txn_manager = self._txn_manager
        if txn_manager.is_empty_transaction():
            txn_manager.complete_transaction()
            return
        node_id = await self._find_coordinator(
            CoordinationType.TRANSACTION, txn_manager.transactional_id
        )
        await _EndTxnV2Handler(self, commit_result).do(node_id)

    async def _do_txn_offset_commit(self, offsets: _GroupOffsets, group_id: str) -> None:
        """aiokafka's ``Sender._do_txn_offset_commit`` with the v3 handler."""
        if not offsets:
            return
        try:
            node_id = await self._find_coordinator(CoordinationType.GROUP, group_id)
        except aerrors.GroupAuthorizationFailedError as exc:
            self._txn_manager.error_transaction(exc)
            return
        await _TxnOffsetCommitV3Handler(self, offsets, group_id).do(node_id)


class TransactionalProducer(AIOKafkaProducer):  # type: ignore[misc]
    """``AIOKafkaProducer`` with KIP-447 offsets, abortable fencing errors and a send gate.

    Takes the keyword arguments of ``AIOKafkaProducer``, and ``transaction_version``: ``None``
    (version 2 when the cluster has it, else 1), ``1`` (aiokafka's requests) or ``2`` (refuse
    to start without it). Without ``transactional_id`` it is a plain aiokafka producer
    (idempotent or not) and the transactional methods raise ``IllegalOperation`` as aiokafka's
    do.

    Errors, by what the caller must do:

    - :class:`OffsetCommitFencedError`, :class:`TransactionSendFailedError`, or any other error
      while the producer is usable: abort the transaction (this producer can);
    - ``aiokafka.errors.ProducerFenced``: a newer producer (or a transaction timeout) fenced us;
    - :class:`ProducerUnusableError`: the sender died; create a new producer.
    """

    _txn_manager: Any
    _sender: Any
    _message_accumulator: Any
    _metadata: Any
    _partitioner: Any

    def __init__(self, *, transaction_version: int | None = None, **kwargs: Any) -> None:
        if transaction_version not in (None, 1, 2):
            raise ValueError(f"transaction_version must be 1, 2 or None: {transaction_version!r}")
        super().__init__(**kwargs)
        self._wanted_transaction_version = transaction_version
        self._txn_futures: list[asyncio.Future[Any]] = []
        self._txn_send_errors: list[BaseException] = []
        self._sequence_gap: BaseException | None = None
        self._fenced: BaseException | None = None
        self._sends_in_progress = 0
        self._sends_idle = asyncio.Event()
        self._sends_idle.set()
        # topic -> (its partitions, sorted; key -> partition): see choose_partition.
        self._topic_partitions: dict[str, tuple[frozenset[int], list[int], dict[bytes, int]]] = {}
        self._metadata.add_listener(self._metadata_updated)
        old = self._txn_manager
        if old is None or old.transactional_id is None:
            return
        # Re-wire the manager and the sender before start(): nothing has used them yet.
        txn_manager = _Kip447TransactionManager(old.transactional_id, old.transaction_timeout_ms)
        self._txn_manager = txn_manager
        self._message_accumulator._txn_manager = txn_manager
        sender = self._sender
        self._sender = _Kip447Sender(
            self.client,
            acks=sender._acks,
            txn_manager=txn_manager,
            message_accumulator=self._message_accumulator,
            retry_backoff_ms=sender._retry_backoff * 1000,
            request_timeout_ms=sender._request_timeout_ms,
        )

    async def start(self) -> None:
        await super().start()
        if not self.transactional or self._wanted_transaction_version == 1:
            return
        v2 = await self._cluster_supports_transaction_v2()
        if self._wanted_transaction_version == 2 and not v2:
            raise aerrors.IncompatibleBrokerVersion(
                "transaction version 2 was asked for, but the cluster does not have "
                "transaction.version >= 2 finalized (or lacks Produce v12 / EndTxn v5)"
            )
        self._txn_manager.transaction_v2 = v2

    async def _cluster_supports_transaction_v2(self) -> bool:
        """Ask the transaction coordinator for ApiVersions v3 (finalized features)."""
        node_id = self._sender._coordinators.get(CoordinationType.TRANSACTION)
        if node_id is None:
            node_id = self.client.get_random_node()
        try:
            response = await self.client.send(node_id, ApiVersionsRequest())
        except aerrors.KafkaError as exc:
            log.info("reading the cluster's features failed (%r): transaction version 1", exc)
            return False
        return supports_v2(response)

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """(producer id, epoch) the next request will carry; under transaction version 2 the
        epoch moves on at the end of every transaction."""
        return self._txn_manager.producer_id, self._txn_manager.producer_epoch

    @property
    def transaction_version(self) -> int | None:
        """1 or 2 once started (None without a transactional id)."""
        if not self.transactional:
            return None
        return 2 if self._txn_manager.transaction_v2 else 1

    # -- state -------------------------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        return self._txn_manager is not None and self._txn_manager.transactional_id is not None

    @property
    def fatal_error(self) -> BaseException | None:
        """Why the producer is unusable (its sender task died), or None while it is usable."""
        cause: BaseException | None = None
        if self._txn_manager is not None and self._txn_manager.is_fatal_error():
            cause = ProducerUnusableError("the transaction manager is FATAL")
            waiter = self._txn_manager.wait_for_transaction_end()
            if waiter is not None and waiter.done() and not waiter.cancelled():
                cause = waiter.exception() or cause  # also marks it retrieved
        task = self._sender.sender_task
        if task is not None and task.done() and not task.cancelled():
            cause = task.exception() or cause
        return cause

    @property
    def sequence_gap(self) -> BaseException | None:
        """A send of an earlier transaction failed *at the broker*, or None.

        Its batch had taken sequence numbers the broker never accepted. aiokafka has no KIP-360
        epoch bump to reset them, so every later batch to that partition fails with
        OUT_OF_ORDER_SEQUENCE_NUMBER (verified on Kafka 4.3): the producer must be recreated
        (InitProducerId starts a new sequence). :meth:`begin_transaction` refuses meanwhile.
        """
        return self._sequence_gap

    @property
    def in_transaction(self) -> bool:
        return self.transactional and self._txn_manager.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
        )

    def _raise_if_unusable(self) -> None:
        if self._fenced is None:
            # A batch refused for a stale epoch fails only its own futures in aiokafka; the
            # producer is dead all the same.
            for fut in self._txn_futures:
                if fut.done() and not fut.cancelled() and is_fencing_error(fut.exception()):
                    self._fenced = fut.exception()
                    break
        cause = self.fatal_error or self._fenced
        if cause is None:
            return
        if is_fencing_error(cause):
            raise aerrors.ProducerFenced() from cause
        raise ProducerUnusableError(f"the producer is unusable: {cause!r}") from cause

    # -- partitioning --------------------------------------------------------------------------

    #: Keys remembered per topic by :meth:`choose_partition` (murmur2 is pure Python in aiokafka).
    KEY_CACHE_SIZE = 100_000

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        """Where a record goes, as ``send`` would decide; None while the topic's metadata is
        unknown. An explicit ``partition`` is checked (ValueError if the topic lacks it); a
        keyed record goes where aiokafka's default partitioner (Java's murmur2) puts it, and
        the answer is remembered until the next metadata update."""
        entry = self._topic_partitions.get(topic)
        if entry is None:
            partitions = self._metadata.partitions_for_topic(topic)
            if not partitions:
                return None
            entry = (frozenset(partitions), sorted(partitions), {})
            self._topic_partitions[topic] = entry
        valid, ordered, by_key = entry
        if partition is not None:
            if partition not in valid:
                raise ValueError(f"topic {topic!r} has no partition {partition}")
            return partition
        if key is None:
            available = list(self._metadata.available_partitions_for_topic(topic))
            return int(self._partitioner(None, ordered, available))
        chosen = by_key.get(key)
        if chosen is None:
            chosen = int(self._partitioner(key, ordered, ordered))
            if len(by_key) >= self.KEY_CACHE_SIZE:
                by_key.clear()
            by_key[key] = chosen
        return chosen

    def keyed_partitions(self, topic: str) -> dict[bytes, int] | None:
        """The live key -> partition answers of :meth:`choose_partition` for ``topic`` (None:
        its metadata is not known yet). A hot caller may look a key up here first and call
        :meth:`choose_partition` on a miss; a metadata update empties the dict, so a caller
        holding it misses from then on and fetches the new one."""
        entry = self._topic_partitions.get(topic)
        return None if entry is None else entry[2]

    def _metadata_updated(self, _cluster: Any) -> None:
        for _valid, _ordered, by_key in self._topic_partitions.values():
            by_key.clear()  # holders of keyed_partitions miss from now on
        self._topic_partitions.clear()  # partition counts may have changed

    # -- sends -------------------------------------------------------------------------------

    async def send(self, topic: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        return await self._tracked(super().send(topic, *args, **kwargs))

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        return await self._tracked(super().send_batch(batch, topic, partition=partition))

    async def _tracked(self, send: Awaitable[asyncio.Future[Any]]) -> asyncio.Future[Any]:
        """Run one of aiokafka's sends, remembering its outcome for the current transaction."""
        tracking = self.transactional and self._txn_manager.is_in_transaction()
        if not tracking:
            return await send
        self._sends_in_progress += 1
        self._sends_idle.clear()
        try:
            fut: asyncio.Future[Any] = await send
        except BaseException as exc:
            # The record is not in the transaction: a commit would lose it (fail closed even
            # if the caller swallows this, or was cancelled).
            self._txn_send_errors.append(exc)
            raise
        finally:
            self._sends_in_progress -= 1
            if not self._sends_in_progress:
                self._sends_idle.set()
        self._txn_futures.append(fut)
        return fut

    async def wait_for_sends(self) -> list[BaseException]:
        """Wait for every send of the current transaction (including ``send`` calls still
        queueing their record in other tasks); return the failures (none: [])."""
        while True:
            await self._sends_idle.wait()
            pending = [f for f in self._txn_futures if not f.done()]
            if not pending and not self._sends_in_progress:
                break
            if pending:
                await asyncio.wait(pending)
        failures = list(self._txn_send_errors)
        for fut in self._txn_futures:
            if fut.cancelled():
                failures.append(asyncio.CancelledError("a send future was cancelled"))
            elif (exc := fut.exception()) is not None:
                failures.append(exc)
        return failures

    def _end_tracking(self) -> None:
        """Forget the finished transaction's sends, remembering a broker-side send failure."""
        for fut in self._txn_futures:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                self._sequence_gap = self._sequence_gap or fut.exception()
        self._txn_futures = []
        self._txn_send_errors = []

    # -- transactions ------------------------------------------------------------------------

    async def begin_transaction(self) -> None:
        self._ensure_transactional()
        self._raise_if_unusable()
        if self._sequence_gap is not None:
            raise ProducerUnusableError(
                "a send of an earlier transaction failed at the broker, leaving a gap in this "
                "producer's sequence numbers; recreate the producer"
            ) from self._sequence_gap
        state = self._txn_manager.state
        if state is not TransactionState.READY:
            raise aerrors.IllegalOperation(f"cannot begin a transaction in state {state.name}")
        self._end_tracking()
        await super().begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group: GroupMetadata,
    ) -> None:
        """TxnOffsetCommit v3 of ``offsets`` (the next offsets to read) under ``group``.

        ``group`` must be the membership the offsets were consumed under, snapshotted when the
        partitions were assigned: a live read could already be the *next* generation's.
        Raises :class:`InvalidGroupMetadataError` before anything is sent if it carries
        generation < 0 or no member id, and :class:`OffsetCommitFencedError` if the coordinator
        rejects it as stale; either way the transaction can still be aborted.
        """
        self._ensure_transactional()
        self._raise_if_unusable()
        if not self._txn_manager.is_in_transaction():
            raise aerrors.IllegalOperation("send_offsets_to_transaction outside a transaction")
        check_group_metadata(group)
        formatted = commit_structure_validate(
            {TopicPartition(tp.topic, tp.partition): o for tp, o in offsets.items()}
        )
        fut = self._txn_manager.add_offsets_to_txn(_GroupOffsets(formatted, group), group.group_id)
        try:
            await asyncio.shield(fut)
        except aerrors.ProducerFenced:
            raise
        except Exception:
            self._raise_if_unusable()
            raise

    async def commit_transaction(self) -> None:
        """Commit, unless a send of this transaction failed (then: abort).

        Waits for every send first. The check and aiokafka's switch to COMMITTING happen with no
        await in between, so no send can slip in after the check.
        """
        self._ensure_transactional()
        self._raise_if_unusable()
        failures = await self.wait_for_sends()  # no await from here to COMMITTING
        self._raise_if_unusable()
        if failures:
            for exc in failures:
                if is_fencing_error(exc):
                    self._fenced = exc
                    raise aerrors.ProducerFenced() from exc
            raise TransactionSendFailedError(failures) from failures[0]
        state = self._txn_manager.state
        if state not in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
            raise aerrors.IllegalOperation(f"cannot commit a transaction in state {state.name}")
        try:
            await super().commit_transaction()
        except aerrors.ProducerFenced:
            raise
        except Exception:
            self._raise_if_unusable()
            raise
        finally:
            if self._txn_manager.state is TransactionState.READY:
                self._end_tracking()

    async def abort_transaction(self) -> None:
        """Abort the current transaction; a no-op when none is open (safe in error paths)."""
        self._ensure_transactional()
        self._raise_if_unusable()
        if self._txn_manager.state is TransactionState.READY:
            return
        try:
            await super().abort_transaction()
        except aerrors.ProducerFenced:
            raise
        except Exception:
            self._raise_if_unusable()
            raise
        self._end_tracking()
