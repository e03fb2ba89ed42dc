"""StreamsProducer: the worker's one producer, its transaction, and the send gate.

Modelled on Kafka Streams' ``StreamsProducer``. Under exactly-once v2 a worker has exactly one
transactional producer for all its tasks; a transaction begins lazily with the first record and
ends at the next commit. Two rules are enforced here rather than trusted to the client:

- **The send gate.** aiokafka ends a transaction with COMMIT even when a record sent inside it
  failed, silently losing that record. Every send future of the open transaction is kept and
  checked after the flush; one failure turns the commit into an abort.
- **A broken producer is replaced, never reused.** After a fatal error (fenced, sequence gap,
  unknown producer id) a new producer is created with the same transactional.id; its
  InitProducerId bumps the epoch and aborts anything the old one left open.

**Batching.** Sending record by record through aiokafka costs two coroutines, a partitioner
call, a future and a metadata object per record, plus one future per record for the send gate
to check: at tens of thousands of records per second that is most of a worker's time. With a
transport that takes whole batches (:class:`~streams_app.transport.base.BatchingProducerClient`)
records are appended to an in-memory batch per partition instead (a C call: with the Kafka
transport the C builder's own ``append``, not aiokafka's Python method around it; see
:class:`~streams_app.transport.base.DirectBatchingProducerClient`), and a batch is handed
to the client when it is full, when ``linger_ms`` has passed since it was opened (the timer
only fires once the agents yield, i.e. after they worked through their inbox), when the
commit flushes, or, under exactly-once, when the worker has caught up with its input
(:meth:`StreamsProducer.send_lingering`; the linger then lasts until the commit). One task
ships the batches in order, so a partition's records keep their order. The send gate then
checks one future per batch, and a record's send returns a :class:`RecordFuture` that reads
its outcome from its batch's future when asked. Records larger than half a batch take the
record-by-record path (aiokafka checks their size there, and raises to the agent).

**Held sends.** While a commit's last round trips are in flight the worker processes the next
records (:mod:`streams_app.runtime.commit`). What they send must not join the transaction being
committed: its offsets do not cover them. :meth:`StreamsProducer.hold` ships what is open (it
belongs to the commit), and until :meth:`StreamsProducer.release` records are appended to new
open batches as usual, which are not shipped: a batch that fills up waits sealed, and the linger
does not send them. ``release`` (after EndTxn) begins the next transaction and ships the full
ones; the open ones go on taking records. An abort drops them all. Only what cannot take the
batch path (a large value, a topic whose metadata is unknown) is kept as a :class:`HeldSend`,
and from the first of those on every held send is, so that ``release`` re-sends them after the
held batches, in order; it goes on holding until the last is re-sent, so that nothing sent
meanwhile overtakes them. (Re-sending every held record at ``release`` took 7% of a saturated
worker's CPU samples: BENCHMARKS.md, "The hot path".)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from streams_app.aio import cancel_and_wait
from streams_app.runtime.clock import Cancellable, Clock, SystemClock
from streams_app.runtime.left_open_file import LeftOpenFile
from streams_app.runtime.metrics import ProducerStats
from streams_app.runtime.reconnect import Reconnect
from streams_app.runtime.send_futures import HeldSend, OpenBatch, RecordFuture
from streams_app.topology.contract import SendFuture
from streams_app.transport.base import (
    GROUP_OFFSETS,
    BatchingProducerClient,
    DirectBatchingProducerClient,
    GroupMetadata,
    LeftOpen,
    LeftoverAbortingProducerClient,
    ProducerClient,
    ProducerConfig,
    RecordMetadataLike,
    TopicPartition,
    Transport,
)
from streams_app.transport.errors import (
    AbortedByCoordinatorError,
    CommitOutcomeUnknownError,
    CommitTimedOutError,
    ProducerFencedError,
    RecordRejectedError,
    SendFailedError,
    TransactionLeftOpenError,
    TransactionTimedOutError,
    TransportError,
    is_record_rejected,
)

log = logging.getLogger(__name__)


_NO_HEADERS: list[tuple[str, bytes]] = []
#: No bound on queued batches (:meth:`StreamsProducer.send_run_nowait` while holding).
_NO_LIMIT = 1 << 62
#: One record of :meth:`StreamsProducer.send_run_nowait`: key, value, headers, timestamp (ms).
RunRow = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None, int | None]

#: The check of what a transaction given up left open (:meth:`StreamsProducer.recreate`): the
#: shortest overall deadline (a broker's restart fits in it), each request's timeout, backoff.
LEFT_OPEN_DEADLINE_S = 60.0
LEFT_OPEN_REQUEST_TIMEOUT_MS = 5_000
LEFT_OPEN_FIRST_BACKOFF_S = 0.5
LEFT_OPEN_MAX_BACKOFF_S = 5.0


def _named(entries: set[LeftOpen]) -> str:
    return ", ".join(sorted({_name(e) for e in entries}))


def _name(entry: LeftOpen) -> str:
    if entry.group is not None:
        return f"the {entry.tp.topic} partition of group {entry.group!r}"
    return f"{entry.tp.topic}[{entry.tp.partition}]"


class StreamsProducer:
    def __init__(
        self,
        transport: Transport,
        config: ProducerConfig,
        clock: Clock | None = None,
        reconnect: Reconnect | None = None,
        left_open_file: LeftOpenFile | None = None,
    ) -> None:
        self._transport = transport
        self._config = config
        self._clock: Clock = clock or SystemClock()
        #: Restarts after a failure wait out an outage instead of failing (runtime/reconnect.py).
        self._reconnect = reconnect
        #: ``time.monotonic()`` when the open transaction began (None: none open).
        self._began: float | None = None
        self._client: ProducerClient | None = None
        self._eos = config.transactional_id is not None
        self._in_transaction = False
        self._pending: list[asyncio.Future[RecordMetadataLike]] = []
        #: The topic of each pending send (same order), to name it when the broker refuses one.
        self._pending_topics: list[str] = []
        # The batch path (see the module doc); _batcher is None with transports that lack it.
        self._batcher: BatchingProducerClient | None = None
        #: topic -> the batcher's own key -> partition answers (``keyed_partitions``, a
        #: transport's option): a keyed record's partition in two dict lookups, not through
        #: ``choose_partition``'s calls; a miss asks ``choose_partition`` and refreshes the dict.
        self._keyed: dict[str, dict[bytes, int]] = {}
        self._keyed_of: Callable[[str], dict[bytes, int] | None] | None = None
        self._direct: DirectBatchingProducerClient | None = None
        self._open: dict[tuple[str, int], OpenBatch] = {}
        self._queue: deque[OpenBatch] = deque()
        self._shipper: asyncio.Task[None] | None = None
        self._shipping: OpenBatch | None = None
        self._ship_errors: list[BaseException] = []
        self._linger_handle: Cancellable | None = None
        self._linger_s = max(0.0, config.linger_ms / 1000)
        # Larger values take the record-by-record path, where the client checks them against
        # max_request_size (a batch is not checked record by record).
        self._direct_bytes = max(1024, min(config.max_batch_size, config.max_request_size) // 2)
        # Agents and the dispatch loop may send concurrently; only one of them may begin.
        self._begin_lock = asyncio.Lock()
        #: Sends held while a commit is in flight (None: not holding): see :meth:`hold`. Those
        #: that could not take the batch path, re-sent by :meth:`release`.
        self._held: list[tuple[HeldSend, str, Any, Any, Any, Any, Any]] | None = None
        self._set_held(None)
        #: While holding: the batches opened since :meth:`hold` (they belong to the next
        #: transaction), and those of them that filled up, sealed, in order, not shipped.
        self._held_batches: list[OpenBatch] = []
        self._held_full: list[OpenBatch] = []
        #: release() is re-sending the held sends: still holding (what is sent meanwhile
        #: queues behind them), but its own re-sends take the batch path as usual.
        self._draining = False
        #: Partitions that may hold records of the open transaction (a batch or a record was
        #: handed to the client for them): where a transaction given up may be left open.
        self._written: set[TopicPartition] = set()
        #: EndTxn(commit) went out for the open transaction: its outcome is the broker's.
        self._commit_sent = False
        #: The group whose offsets the open transaction sent (TxnOffsetCommit): they may be in
        #: the group's ``__consumer_offsets`` partition, pending, whatever the call answered.
        self._offsets_group: str | None = None
        #: Where transactions given up may have been left open (a skipped ABORT marker), not
        #: answered yet: no transaction begins while one remains (:meth:`recreate`).
        self._unchecked: set[LeftOpen] = set()
        #: Where they are kept across restarts (the worker's state directory), if anywhere:
        #: :meth:`start` checks what a previous process of the same transactional id left.
        self._left_open_file = left_open_file
        #: How long :meth:`recreate` asks about them before it stops the worker: the
        #: transaction timeout, and at least long enough for a broker to restart.
        self.left_open_deadline = max(config.transaction_timeout_ms / 1000, LEFT_OPEN_DEADLINE_S)
        self.transactions_committed = 0
        self.transactions_aborted = 0
        self.recreated = 0
        #: Partitions where a transaction given up was found still open, and aborted.
        self.left_open_aborted = 0
        #: Rounds of that check (DescribeProducers, then WriteTxnMarkers where still open).
        self.left_open_checks = 0
        #: Records sent per topic and records per batch, for /metrics (counted per batch).
        self.stats = ProducerStats()

    @property
    def exactly_once(self) -> bool:
        return self._config.transactional_id is not None

    @property
    def transactional_id(self) -> str | None:
        return self._config.transactional_id

    @property
    def max_request_size(self) -> int:
        """The largest record (with its batch) the producer sends (``max_request_size``)."""
        return self._config.max_request_size

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    @property
    def pending_sends(self) -> int:
        return len(self._pending)

    @property
    def buffered(self) -> bool:
        """Records sent and not acknowledged yet: in batches the client does not have (they
        go on linger), or in flight."""
        shipping = self._shipper is not None and not self._shipper.done()
        if self._open or self._queue or shipping:
            return True
        return not all(future.done() for future in self._pending)

    @property
    def lingering(self) -> bool:
        """Records in open batches, waiting for their linger, a full batch or the commit."""
        return bool(self._open)

    @property
    def client(self) -> ProducerClient:
        if self._client is None:
            raise RuntimeError("the producer is not started")
        return self._client

    async def start(self) -> None:
        """Start the client; before it takes a send, check what the file of entries (see
        :mod:`~streams_app.runtime.left_open_file`) lists: a previous process with this
        transactional id gave those transactions up and stopped (or was killed) before they
        were all answered. InitProducerId has ended them at the coordinator by then, as in
        :meth:`recreate`."""
        if self._left_open_file is not None:
            listed = self._left_open_file.load() - self._unchecked
            if listed:
                log.info(
                    "%s lists %s, where a transaction given up by this worker's previous "
                    "process may still be open: checking before the first transaction",
                    self._left_open_file.path,
                    _named(listed),
                )
                self._unchecked |= listed
        await self._check_then_publish(await self._started_client(first=True))

    async def _started_client(self, *, first: bool = False) -> ProducerClient:
        """A new client, started. The ``first`` of this process asks, before its
        InitProducerId, what the previous process with our transactional id left ongoing."""
        client = self._transport.producer(self._config)
        if first and self.exactly_once and isinstance(client, LeftoverAbortingProducerClient):
            await self._note_left_ongoing(client)
        await client.start()
        return client

    async def _note_left_ongoing(self, client: LeftoverAbortingProducerClient) -> None:
        """A process killed in the middle of a transaction gave nothing up, so nothing was
        listed: the new producer's InitProducerId aborts that transaction, and the coordinator
        skips the marker of a partition without a leader, as after any transaction given up.
        Its coordinator still has it ongoing until then, with its partitions: each becomes an
        entry to check (on disk first: a crash from here on must not forget them)."""
        ongoing = set(
            await client.left_open_before_start(request_timeout_ms=LEFT_OPEN_REQUEST_TIMEOUT_MS)
        )
        if ongoing - self._unchecked:
            log.info(
                "the previous process of this worker left a transaction ongoing on %s: the new "
                "producer aborts it, and those partitions are checked before the first "
                "transaction",
                _named(ongoing),
            )
            self._unchecked |= ongoing
            self._persist()

    def _publish(self, client: ProducerClient) -> None:
        """From here on sends go to ``client``."""
        self._client = client
        self._batcher = client if isinstance(client, BatchingProducerClient) else None
        self._direct = client if isinstance(client, DirectBatchingProducerClient) else None
        self._keyed = {}
        self._keyed_of = getattr(self._batcher, "keyed_partitions", None)

    async def stop(self) -> None:
        self.drop_held()
        await self._drop_batches()
        client, self._client = self._client, None
        self._batcher = self._direct = None
        self._keyed, self._keyed_of = {}, None
        self._clear_pending()
        self._in_transaction = False
        self._began = None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.stop()

    async def recreate(self) -> None:
        """Throw the producer away and start a new one (fencing the old epoch). During an
        outage the new one waits for the cluster (with ``reconnect``) rather than fail.

        A transaction given up before its EndTxn(commit) went out is a known abort, and the
        new producer's InitProducerId has the coordinator end it. But the coordinator skips
        the ABORT marker of a partition that has no leader at that moment (Kafka 4.3, as
        during the restart of the partition's broker), and the records stay an open
        transaction of our producer id there; our next transaction that writes to that
        partition joins it, and its commit marker commits them: the inputs they came from,
        processed again after the rewind, would be in the output twice. So each partition the
        transaction wrote to becomes an entry of ``_unchecked`` (with the producer id and epoch
        it wrote with), and the new producer is published only once every entry has been
        answered, and what was still open aborted (:meth:`_settle_left_open`): no send can
        begin a transaction before. A partition without a leader is asked again, with
        backoff, until ``left_open_deadline``; then :class:`TransactionLeftOpenError` stops the
        worker, the entries kept. A transaction whose EndTxn(commit) was sent may have
        committed: nothing of it is touched."""
        await self._recreate(self._identity())  # the given-up transaction's, read now

    async def _recreate(self, identity: tuple[int, int] | None) -> None:
        """:meth:`recreate`, for a transaction given up that wrote with ``identity``."""
        await self.stop()
        self._give_up(identity)
        self.recreated += 1
        made: list[ProducerClient] = []

        async def start() -> None:
            made.append(await self._started_client())

        if self._reconnect is None:
            await start()
        else:
            await self._reconnect.start("the producer", start)
        await self._check_then_publish(made[-1])

    async def _check_then_publish(self, client: ProducerClient) -> None:
        """Publish ``client`` once every unchecked entry has been answered; if not, stop it."""
        if self._unchecked:
            try:
                await self._settle_left_open(client)
            except BaseException:
                with contextlib.suppress(Exception):
                    await client.stop()
                raise
        self._publish(client)

    def _identity(self) -> tuple[int, int] | None:
        client = self._client
        if not isinstance(client, LeftoverAbortingProducerClient):
            return None
        return client.producer_identity()

    def _give_up(self, identity: tuple[int, int] | None) -> None:
        """The open transaction is given up: when it is a known abort (its EndTxn(commit) never
        went out), each partition it wrote becomes an entry to check, merged with those of
        earlier transactions still unanswered."""
        written, commit_sent, group = self._written, self._commit_sent, self._offsets_group
        self._transaction_ended()
        if commit_sent or identity is None:
            return
        producer_id, epoch = identity
        before = set(self._unchecked)
        self._unchecked.update(LeftOpen(tp, producer_id, epoch) for tp in written)
        if group is not None:
            self._unchecked.add(LeftOpen(GROUP_OFFSETS, producer_id, epoch, group))
        if self._unchecked != before:
            self._persist()  # before anything else: a crash from here on must not forget them

    def _persist(self) -> None:
        """The file of entries lists exactly ``_unchecked`` (none: no file)."""
        if self._left_open_file is not None:
            self._left_open_file.save(self._unchecked, self._config.transactional_id)

    def _transaction_ended(self) -> None:
        """Nothing of the transaction can be left open by us any more (committed, answered
        abort, or handed to :meth:`_give_up`)."""
        self._written = set()
        self._commit_sent = False
        self._offsets_group = None

    async def _settle_left_open(self, client: ProducerClient) -> None:
        """Ask about every unchecked entry until each is answered, backing off between rounds
        (a partition without a leader answers once its broker is back); an entry is dropped
        only once answered. A round cut short by the deadline answers nothing. Past the
        deadline, raise :class:`TransactionLeftOpenError` naming what is still unchecked."""
        if not isinstance(client, LeftoverAbortingProducerClient):
            self._unchecked.clear()  # another transport: nothing it could check
            self._persist()
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.left_open_deadline
        delay = LEFT_OPEN_FIRST_BACKOFF_S
        warned = False
        while True:
            self.left_open_checks += 1
            try:
                async with asyncio.timeout_at(deadline):
                    check = await client.abort_left_open(
                        sorted(self._unchecked), request_timeout_ms=LEFT_OPEN_REQUEST_TIMEOUT_MS
                    )
            except TimeoutError:
                why = {entry: "no answer before the deadline" for entry in self._unchecked}
            else:
                self._aborted_left_open(check.aborted)
                remaining = set(check.unanswered)
                if remaining != self._unchecked:
                    self._unchecked = remaining
                    self._persist()
                why = check.unanswered
            if not self._unchecked:
                return
            if not warned:
                warned = True
                log.warning(
                    "could not yet check %s for records the transaction given up left open "
                    "(%s): asking again for up to %.0f s; no transaction begins meanwhile",
                    _named(self._unchecked),
                    "; ".join(sorted(set(why.values()))),
                    self.left_open_deadline,
                )
            if loop.time() + delay >= deadline:
                raise TransactionLeftOpenError(self._unchecked_message(why))
            await asyncio.sleep(delay)
            delay = min(delay * 2, LEFT_OPEN_MAX_BACKOFF_S)

    def _aborted_left_open(self, aborted: Mapping[LeftOpen, int]) -> None:
        for entry, offset in sorted(aborted.items()):
            self.left_open_aborted += 1
            log.warning(
                "the transaction given up (producer id %d, epoch %d) was still open on %s "
                "from offset %d: the broker wrote no abort marker there (Kafka skips the marker "
                "of a partition without a leader at that moment, as while its broker restarts); "
                "aborted it here, or the next commit would have committed its records",
                entry.producer_id,
                entry.producer_epoch,
                _name(entry),
                offset,
            )

    def _unchecked_message(self, why: Mapping[LeftOpen, str] | None = None) -> str:
        entry = min(self._unchecked)
        reason = (why or {}).get(entry, "not checked yet")
        return (
            f"the transaction this worker gave up (producer id {entry.producer_id}, epoch "
            f"{entry.producer_epoch}) may still be open on {_name(entry)}"
            f" (of {_named(self._unchecked)}): its leader gave no answer ({reason}) within "
            f"{self.left_open_deadline:g} s. If the broker skipped its abort marker, the next "
            "commit to that partition would commit the records given up. Stopping. Fix: once "
            f"the partition has a leader, {self._fix()}"
        )

    def _fix(self) -> str:
        if self._left_open_file is None:
            return "run `streams-app txn hanging --abort`, then restart"
        return (
            f"restart: {self._left_open_file.path} lists it, and the start checks it first "
            "(or run `streams-app txn hanging --abort`)"
        )

    @property
    def unchecked_left_open(self) -> list[LeftOpen]:
        """Partitions a transaction given up may have left open, not answered yet."""
        return sorted(self._unchecked)

    def hold(self) -> None:
        """From now until :meth:`release`, sends are kept back from the transaction in flight.

        What is open now belongs to that transaction: it is shipped now (the commit's flush
        would ship it first thing anyway), so that every open batch from here on is held."""
        self._enqueue_open()
        self._set_held([])

    def _set_held(self, held: list[tuple[HeldSend, str, Any, Any, Any, Any, Any]] | None) -> None:
        """Hold sends (a list) or stop holding (None), and point :meth:`send_nowait` at the
        path it takes from now on. That instance attribute shadows the method: the
        collector's call, on every record sent, lands on the path directly, a call fewer."""
        self._held = held
        vars(self)["send_nowait"] = self._send_unheld_nowait if held is None else self._send_held

    @property
    def holding(self) -> bool:
        return self._held is not None

    async def release(self) -> None:
        """The commit ended: the held sends go into the next transaction, in order (the held
        batches first: every :class:`HeldSend` came after them).

        A held send that cannot take the batch path is re-sent with an ``await``; until the
        last one is, the producer goes on holding, so that a record sent meanwhile (a timer,
        an agent fed from outside processing) queues behind them instead of overtaking them
        in their partition."""
        held = self._held
        if held is None:
            return
        if held or self._held_batches:
            await self.maybe_begin()  # sends meanwhile are still held: nothing ships before it
        full, self._held_full = self._held_full, []
        for batch in self._held_batches:
            batch.held = False
        self._held_batches = []
        for batch in full:
            self._ship_sealed(batch)
        self._draining = True
        try:
            done = 0
            while done < len(held):  # sends made meanwhile join the end of ``held``
                future, topic, key, value, partition, headers, timestamp_ms = held[done]
                sent: SendFuture | None = self._send_unheld_nowait(
                    topic, key, value, partition, headers, timestamp_ms
                )
                if sent is None:
                    sent = await self._send_unheld(
                        topic, key, value, partition, headers, timestamp_ms
                    )
                future._release(sent)
                done += 1
        except BaseException:
            for future, *_ in held[done:]:
                future._drop()
            raise
        finally:
            self._draining = False
            self._set_held(None)
            if self._open and self._linger_handle is None:
                self._linger_handle = self._clock.call_later(self._linger_s, self._lingered)

    def drop_held(self) -> None:
        """The records that made the held sends are undone: so are the sends."""
        held = self._held
        self._set_held(None)
        if held is None:
            return
        for future, *_ in held:
            future._drop()
        # Every batch open while holding is a held one (hold() shipped the others).
        dropped = list(self._open.values()) + self._held_full
        self._open.clear()
        self._held_full = []
        self._held_batches = []
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        for batch in dropped:
            batch.future.cancel()

    def _send_held(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
    ) -> RecordFuture | HeldSend:
        """A send while holding: into a held batch, or, from the first record that cannot
        take the batch path on, a :class:`HeldSend` (see the module doc)."""
        batcher = self._batcher
        if (
            not self._held
            and batcher is not None
            and (value is None or len(value) <= self._direct_bytes)
        ):
            chosen = self._partition_of(batcher, topic, key, partition)
            if chosen is not None:
                return self._append(topic, chosen, key, value, headers, timestamp_ms)
        held = HeldSend()
        assert self._held is not None
        self._held.append((held, topic, key, value, partition, headers, timestamp_ms))
        return held

    async def maybe_begin(self) -> None:
        if not self.exactly_once or self._in_transaction:
            return
        if self._unchecked:  # recreate() raised, and someone went on regardless
            raise TransactionLeftOpenError(self._unchecked_message())
        async with self._begin_lock:
            if not self._in_transaction:
                await self.client.begin_transaction()
                self._in_transaction = True
                self._began = time.monotonic()

    def send_nowait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
    ) -> RecordFuture | HeldSend | None:
        """Append to the open batch without a coroutine; None when :meth:`send` must be
        awaited instead (no transaction begun yet, the topic's metadata unknown, a large
        value, or the queue of closed batches full).

        Almost every record of a transaction takes this path. An ``await`` per layer between
        an agent's ``topic.send`` and the batch costs a coroutine object each; this is the one
        place that knows when none is needed. (Calls on an instance do not come here: they
        find the path :meth:`_set_held` chose.)
        """
        if self._held is not None:
            return self._send_held(topic, key, value, partition, headers, timestamp_ms)
        return self._send_unheld_nowait(topic, key, value, partition, headers, timestamp_ms)

    def send_run_nowait(self, topic: str, rows: Sequence[RunRow]) -> int:
        """:meth:`send_nowait` for a run of keyed records to one topic, ``(key, value,
        headers, timestamp_ms)`` each, partitioned by key: how many of them, from the first,
        it took (the caller sends the rest with :meth:`send`, in order).

        A join's results come a run at a time (``JoinProcessor.run``); the checks
        :meth:`send_nowait` makes on every record are made here once a run, and no record
        future is made (nobody waits on a join result's: the commit waits on its batch).

        While a commit is in flight (holding) the run goes into the held batches the same
        way, as :meth:`_send_held` would put each record, and takes all of it: from the first
        record that cannot take the batch path (or behind a :class:`HeldSend` already
        waiting), each goes as the held path goes, in order."""
        held = self._held
        batcher = self._batcher
        if held is None:
            if batcher is None or (self._eos and not self._in_transaction):
                return 0
            queued_limit = self.MAX_QUEUED_BATCHES
        elif held or batcher is None:
            return self._send_run_held(topic, rows, 0)
        else:
            queued_limit = _NO_LIMIT  # held batches wait for release(), not in the queue
        direct_bytes, queue, opened = self._direct_bytes, self._queue, self._open
        if len(queue) >= queued_limit:  # the queue grows only when a batch fills (below)
            return 0
        keyed = self._keyed.get(topic)
        #: The open batch of each partition this run has appended to, by partition number
        #: (``_open`` is by ``(topic, partition)``: a tuple made and hashed per row).
        batches: dict[int, OpenBatch] = {}
        for n, (key, value, headers, timestamp_ms) in enumerate(rows):
            if value is not None and len(value) > direct_bytes:
                return n if held is None else self._send_run_held(topic, rows, n)
            if key is None or keyed is None or (chosen := keyed.get(key)) is None:
                chosen = self._choose(batcher, topic, key, None)
                if chosen is None:
                    return n if held is None else self._send_run_held(topic, rows, n)
                keyed = self._keyed.get(topic)
            # The unheld path's inline append (:meth:`_send_unheld_nowait`).
            batch = batches.get(chosen)
            if batch is None:
                batch = opened.get((topic, chosen))
                if batch is not None:
                    batches[chosen] = batch
            if batch is not None and (not headers or type(headers) is list):
                appended = batch.append(
                    batch.count, timestamp_ms, key, value, headers or _NO_HEADERS
                )
                if appended is not None:
                    batch.count += 1
                    continue
                self._enqueue(opened.pop((topic, chosen)))  # full: _append starts the next one
            self._append(topic, chosen, key, value, headers, timestamp_ms)
            batches.pop(chosen, None)  # _append opened a batch, or appended to the one open
            if len(queue) >= queued_limit:
                return n + 1 if held is None else self._send_run_held(topic, rows, n + 1)
        return len(rows)

    def _send_run_held(self, topic: str, rows: Sequence[RunRow], start: int) -> int:
        """:meth:`send_run_nowait` while holding, from row ``start`` on: each row as
        :meth:`_send_held` puts it. Takes them all."""
        send_held = self._send_held
        for key, value, headers, timestamp_ms in rows[start:]:
            send_held(topic, key, value, None, headers, timestamp_ms)
        return len(rows)

    def _send_unheld_nowait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
    ) -> RecordFuture | None:
        batcher = self._batcher
        if (
            batcher is None
            or (self._eos and not self._in_transaction)
            or (value is not None and len(value) > self._direct_bytes)
            or len(self._queue) >= self.MAX_QUEUED_BATCHES
        ):
            return None
        if (
            partition is not None
            or key is None
            or (by_key := self._keyed.get(topic)) is None
            or (chosen := by_key.get(key)) is None
        ):
            chosen = self._choose(batcher, topic, key, partition)
            if chosen is None:
                return None
        # :meth:`_append` when the partition's batch is open and takes the record, inline:
        # a call fewer on almost every record sent.
        tp = (topic, chosen)
        batch = self._open.get(tp)
        if batch is not None and (not headers or type(headers) is list):
            appended = batch.append(batch.count, timestamp_ms, key, value, headers or _NO_HEADERS)
            if appended is not None:
                batch.count += 1
                return RecordFuture(batch, appended)
            self._enqueue(self._open.pop(tp))  # full: _append starts the next one
        return self._append(topic, chosen, key, value, headers, timestamp_ms)

    def _partition_of(
        self, batcher: BatchingProducerClient, topic: str, key: bytes | None, partition: int | None
    ) -> int | None:
        """Where a record goes: :attr:`_keyed` first, else :meth:`_choose`. The unheld path
        has these lines inline (a call fewer on nearly every record sent)."""
        if partition is None and key is not None:
            by_key = self._keyed.get(topic)
            if by_key is not None:
                chosen = by_key.get(key)
                if chosen is not None:
                    return chosen
        return self._choose(batcher, topic, key, partition)

    def _choose(
        self, batcher: BatchingProducerClient, topic: str, key: bytes | None, partition: int | None
    ) -> int | None:
        """``choose_partition``, for a record that missed :attr:`_keyed`; a keyed record's
        answer is remembered there (the batcher's dict itself, refreshed)."""
        chosen = batcher.choose_partition(topic, key, partition)
        keyed_of = self._keyed_of
        if chosen is not None and key is not None and partition is None and keyed_of is not None:
            by_key = keyed_of(topic)
            if by_key is not None:
                self._keyed[topic] = by_key
        return chosen

    async def send(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> SendFuture:
        if self._held is not None:
            return self._send_held(topic, key, value, partition, headers, timestamp_ms)
        return await self._send_unheld(topic, key, value, partition, headers, timestamp_ms)

    async def _send_unheld(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
    ) -> SendFuture:
        if self._eos and not self._in_transaction:
            await self.maybe_begin()
        batcher = self._batcher
        if batcher is not None and (value is None or len(value) <= self._direct_bytes):
            chosen = batcher.choose_partition(topic, key, partition)
            if chosen is None:
                await batcher.wait_for_topic(topic)
                chosen = batcher.choose_partition(topic, key, partition)
            if chosen is not None:
                sent = self._append(topic, chosen, key, value, headers, timestamp_ms)
                if len(self._queue) > self.MAX_QUEUED_BATCHES:
                    await self._wait_shipped()  # back-pressure
                return sent
        if self._open or (self._shipper is not None and not self._shipper.done()):
            await self._wait_shipped()  # keep the partition's order: buffered records first
        if self._eos and partition is None and key is None and batcher is not None:
            # Chosen here, so that the partition is known even if the send fails after it was
            # appended (a transaction given up checks every partition it wrote).
            partition = batcher.choose_partition(topic, None, None)
        future = await self.client.send(
            topic,
            key=key,
            value=value,
            partition=partition,
            headers=headers,
            timestamp_ms=timestamp_ms,
        )
        self._pending.append(future)
        self._pending_topics.append(topic)
        self.stats.record(topic)
        if self._eos:
            self._note_written(topic, key, partition, future)
        return future

    def _note_written(
        self,
        topic: str,
        key: bytes | None,
        partition: int | None,
        future: asyncio.Future[RecordMetadataLike],
    ) -> None:
        """Remember the partition a record sent one by one went to (for :meth:`recreate`)."""
        batcher = self._batcher
        chosen = partition
        if chosen is None and key is not None and batcher is not None:
            chosen = batcher.choose_partition(topic, key, None)
        if chosen is not None:
            self._written.add(TopicPartition(topic, chosen))
            return
        written = self._written

        def landed(done: asyncio.Future[RecordMetadataLike]) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            landed_in = getattr(done.result(), "partition", None)
            if landed_in is not None:
                written.add(TopicPartition(topic, landed_in))

        future.add_done_callback(landed)

    async def send_records(
        self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> SendFuture | None:
        """Send keyed records to one partition (the changelog at commit); return the future of
        the last one (None if there were none)."""
        if not records:
            return None
        batcher = self._batcher
        if batcher is None or any(
            v is not None and len(v) > self._direct_bytes for _, v in records
        ):
            future: SendFuture | None = None
            for key, value in records:
                future = await self.send(topic, key=key, value=value, partition=partition)
            return future
        if self.exactly_once and not self._in_transaction:
            await self.maybe_begin()
        if batcher.choose_partition(topic, None, partition) is None:
            await batcher.wait_for_topic(topic)
            batcher.choose_partition(topic, None, partition)  # checks the partition exists
        # :meth:`_append`'s lines, inline: a call and a RecordFuture fewer a record (the
        # caller keeps only the last record's future). A changelog holds about one record for
        # every two a saturated count processes.
        tp = (topic, partition)
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open_batch(topic, partition)
        append, count = batch.append, batch.count
        for key, value in records:
            appended = append(count, None, key, value, _NO_HEADERS)
            if appended is None:  # full: ship it, start the next one
                batch.count = count
                self._enqueue(self._open.pop(tp))
                batch = self._open_batch(topic, partition)
                append, count = batch.append, 0
                appended = append(0, None, key, value, _NO_HEADERS)
                assert appended is not None  # the first record always fits
            count += 1
        batch.count = count
        assert appended is not None  # records is not empty
        if len(self._queue) > self.MAX_QUEUED_BATCHES:
            await self._wait_shipped()
        return RecordFuture(batch, appended)

    # -- the batch path -------------------------------------------------------------------

    #: Closed batches waiting for the shipper beyond which ``send`` waits (back-pressure).
    MAX_QUEUED_BATCHES = 64

    def _append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
    ) -> RecordFuture:
        tp = (topic, partition)
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open_batch(topic, partition)
        # aiokafka's C builder takes a list, and only reads it.
        if not headers:
            headers = _NO_HEADERS
        elif type(headers) is not list:
            headers = list(headers)
        appended = batch.append(batch.count, timestamp_ms, key, value, headers)
        if appended is None:  # full: ship it, start the next one (the first record always fits)
            self._enqueue(self._open.pop(tp))
            batch = self._open_batch(topic, partition)
            appended = batch.append(0, timestamp_ms, key, value, headers)
            assert appended is not None
        batch.count += 1
        return RecordFuture(batch, appended)

    def _open_batch(self, topic: str, partition: int) -> OpenBatch:
        assert self._batcher is not None
        loop = asyncio.get_running_loop()
        builder = self._batcher.create_batch()
        direct = self._direct
        batch = self._open[(topic, partition)] = OpenBatch(
            topic,
            partition,
            builder,
            loop,
            None if direct is None else direct.raw_append(builder),
        )
        if self._held is not None and not self._draining:
            # The next transaction's: not shipped before release().
            batch.held = True
            self._held_batches.append(batch)
        if self._linger_handle is None:
            self._linger_handle = self._clock.call_later(self._linger_s, self._lingered)
        return batch

    def _lingered(self) -> None:
        self._linger_handle = None
        self._enqueue_open()

    def send_lingering(self) -> None:
        """Send the open batches now instead of at the end of their linger (Kafka's
        ``Producer.flush`` without the wait); they stay in the open transaction. Under
        exactly-once the linger lasts until the commit: the worker calls this once it has
        caught up with its input, and the test driver to leave a transaction open with its
        records in the log."""
        self._enqueue_open()

    def _enqueue_open(self) -> None:
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        if self._held is not None and not self._draining:
            return  # what is open is held: release() ships it (and re-arms the linger)
        if self._open:
            for batch in self._open.values():
                self._enqueue(batch)
            self._open.clear()

    def _enqueue(self, batch: OpenBatch) -> None:
        if batch.direct:
            assert self._direct is not None
            self._direct.seal_batch(batch.builder, batch.count)
        else:
            batch.builder.close()
        if batch.held:
            self._held_full.append(batch)  # full while holding: shipped by release()
            return
        self._ship_sealed(batch)

    def _ship_sealed(self, batch: OpenBatch) -> None:
        self.stats.batch(batch.topic, batch.count)
        if self._eos:
            self._written.add(TopicPartition(batch.topic, batch.partition))
        self._queue.append(batch)
        if self._shipper is None or self._shipper.done():
            self._shipper = asyncio.get_running_loop().create_task(self._ship())

    async def _ship(self) -> None:
        """Hand queued batches to the client, in order (one task: per-partition order holds)."""
        queue = self._queue
        while queue:
            batch = self._shipping = queue.popleft()
            assert self._batcher is not None
            try:
                future = await self._batcher.send_batch(batch.builder, batch.topic, batch.partition)
            except Exception as exc:  # the send gate raises it at the commit
                self._ship_errors.append(exc)
                batch.fail(exc)
                continue
            finally:
                self._shipping = None
            self._pending.append(future)
            self._pending_topics.append(batch.topic)
            future.add_done_callback(batch.settle)

    async def _wait_shipped(self) -> None:
        """Ship every open batch and wait until the client has them all."""
        self._enqueue_open()
        while self._shipper is not None and not self._shipper.done():
            await asyncio.wait((self._shipper,))

    async def _drop_batches(self) -> None:
        """Forget buffered and queued records (abort, stop); their futures are cancelled."""
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        dropped = list(self._open.values()) + list(self._queue)
        if self._shipping is not None:
            dropped.append(self._shipping)
        self._open.clear()
        self._queue.clear()
        shipper, self._shipper = self._shipper, None
        if shipper is not None:
            await cancel_and_wait({"producer batch shipper": shipper})
        self._ship_errors.clear()
        for batch in dropped:
            batch.future.cancel()

    async def flush_and_check(self) -> None:
        """Wait until every record of this commit is acknowledged; raise if any failed.

        A record the broker refused for good (too large for the topic, a topic we may not
        write) raises :class:`RecordRejectedError` naming the topic: committing again would
        fail the same way.
        """
        await self._wait_shipped()
        if self._ship_errors:
            errors, self._ship_errors = self._ship_errors, []
            self._clear_pending()
            first = errors[0]
            if isinstance(first, TransportError):
                raise first
            raise SendFailedError(f"a batch could not be sent: {type(first).__name__}: {first}")
        if not self._pending:
            return
        pending, topics = self._pending, self._pending_topics
        try:
            await self.client.flush()
        except SendFailedError as failed:
            self._clear_pending()
            _raise_if_rejected(pending, topics, failed)
            raise
        self._clear_pending()
        if not all(f.done() for f in pending):
            await asyncio.wait(pending)
        _raise_if_rejected(pending, topics, None)
        for future in pending:
            if future.cancelled():
                raise SendFailedError("a record's send was cancelled before it was acknowledged")
            exc = future.exception()
            if exc is not None:
                raise SendFailedError(f"a record could not be sent: {type(exc).__name__}: {exc}")

    def _clear_pending(self) -> None:
        self._pending = []
        self._pending_topics = []

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        group: GroupMetadata | None,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """Exactly-once: the send gate, then the offsets into the transaction, then EndTxn.

        The offsets go out only once every record of the transaction is acknowledged, as in
        Kafka Streams (which flushes before ``sendOffsetsToTransaction``). Sending them while a
        partition's first batch of the transaction is still in flight costs more than it
        overlaps: the broker checks both with the transaction coordinator through one queue
        that holds a single pending check per transactional id, and the later check displaces
        the earlier, which then fails retriably and is retried after ``retry_backoff`` (100 ms):
        NOT_ENOUGH_REPLICAS for the Produce, COORDINATOR_LOAD_IN_PROGRESS for the
        TxnOffsetCommit (Kafka 4.x, ``AddPartitionsToTxnManager``; BENCHMARKS.md).
        """
        if not self.exactly_once:
            return
        if not self._in_transaction:
            if not offsets:
                return
            await self.maybe_begin()
        try:
            await self.flush_and_check()
            if offsets:
                if group is None:
                    raise TransportError("exactly-once commit without consumer group metadata")
                self._offsets_group = group.group_id
                await self.client.send_offsets_to_transaction(offsets, group, metadata)
        except ProducerFencedError as exc:
            # EndTxn not sent yet: a fencing here is a known abort (a timeout) or a zombie.
            timed_out = self._timed_out(exc)
            if timed_out is None:
                raise
            raise timed_out from exc
        self._commit_sent = True
        try:
            await self._end_transaction()
        except AbortedByCoordinatorError as exc:
            # EndTxn went out, but the coordinator had aborted the transaction (see the
            # error): a known abort, whose partitions are checked like any given up.
            self._commit_sent = False
            timed_out = self._timed_out(exc)
            if timed_out is None:
                raise  # another producer of our id fenced it: a fencing, checked all the same
            raise timed_out from exc
        except ProducerFencedError as exc:
            # EndTxn sent: a timeout and a commit completed after an outage look the same.
            timed_out = self._timed_out(exc)
            if timed_out is None:
                raise
            raise CommitTimedOutError(
                f"{timed_out}; the commit was already sent, so whether it committed is known "
                "only to the broker"
            ) from exc
        self._in_transaction = False
        self._began = None
        self._transaction_ended()
        self.transactions_committed += 1

    async def _end_transaction(self) -> None:
        """EndTxn(commit). Once it is sent, a failure other than a fencing leaves the outcome
        unknown (:class:`CommitOutcomeUnknownError`): never a plain abort and rewind."""
        try:
            await self.client.commit_transaction()
        except ProducerFencedError:
            raise
        except Exception as exc:
            raise CommitOutcomeUnknownError(
                f"the commit's outcome is unknown ({type(exc).__name__}: {exc})"
            ) from exc

    def _timed_out(self, fenced: ProducerFencedError) -> TransactionTimedOutError | None:
        """The transaction timeout, when it explains a fencing: the transaction had been open
        longer than ``transaction_timeout`` (the coordinator started its clock after we began
        it, so it cannot have been open longer there). Else None: a newer producer took the id.
        """
        began, timeout = self._began, self._config.transaction_timeout_ms / 1000
        if began is None or time.monotonic() - began < timeout:
            return None
        return TransactionTimedOutError(
            f"transaction timed out: open for {time.monotonic() - began:.1f}s, longer than "
            f"transaction_timeout ({timeout:g}s), so the coordinator aborted it (a commit or "
            "an agent's await took that long: see processing_timeout, or the broker was away)"
        )

    async def abort(self) -> None:
        """Abort the open transaction; if the producer cannot, replace it (which aborts too)."""
        self.drop_held()
        await self._drop_batches()
        self._clear_pending()
        if not self.exactly_once or not self._in_transaction:
            return
        self._began = None
        # Under transaction version 2 the answer carries the next epoch: the records were
        # written with this one.
        identity = self._identity()
        try:
            await self.client.abort_transaction()
        except Exception as exc:  # a fatal producer cannot abort: InitProducerId will
            log.warning("abort failed (%s); recreating the producer", type(exc).__name__)
            self._in_transaction = False
            self.transactions_aborted += 1
            await self.recreate()
            return
        self._in_transaction = False
        self.transactions_aborted += 1
        if await self._markers_may_be_skipped():
            # Given up like a transaction the producer could not end: the new producer's
            # InitProducerId waits until the coordinator has finished this abort (and bumps
            # the epoch, so our check's marker can never land on a newer transaction), then
            # every partition it wrote is checked before anything begins.
            await self._recreate(identity)
            return
        self._transaction_ended()

    async def _markers_may_be_skipped(self) -> bool:
        """After an answered abort: did it write to a partition that has no leader now?

        The coordinator answers EndTxn(abort) once the abort is logged and writes the markers
        after; it skips the marker of a partition without a leader at that moment (see
        :meth:`recreate`), and our next transaction to that partition would join and commit the
        aborted records. A partition that has no leader just after the answer is the one
        whose marker may have been skipped: the abort is then checked like one given up. One
        that had a leader again by then is not caught (the moment cannot be seen from here);
        the warning in ``docs/operations.md`` says so."""
        client = self._client
        if not self._written or not isinstance(client, LeftoverAbortingProducerClient):
            return False
        missing = await client.leaderless(self._written)
        if missing:
            log.warning(
                "the aborted transaction wrote to %s, which has no leader now: the broker may "
                "have skipped its abort marker there; checking before the next transaction",
                ", ".join(f"{t}[{p}]" for t, p in sorted(missing)),
            )
        return bool(missing)


def _raise_if_rejected(
    futures: Sequence[asyncio.Future[RecordMetadataLike]],
    topics: Sequence[str],
    cause: BaseException | None,
) -> None:
    """Raise :class:`RecordRejectedError` naming the topic of the first refused send."""
    for future, topic in zip(futures, topics, strict=False):
        if not future.done() or future.cancelled():
            continue
        exc = future.exception()
        if exc is not None and is_record_rejected(exc):
            raise RecordRejectedError(
                f"topic {topic!r} refused a record for good: {type(exc).__name__}"
            ) from (cause or exc)
