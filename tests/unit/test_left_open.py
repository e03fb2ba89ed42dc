"""Which transactions ``StreamsProducer.recreate`` checks for records the broker left open.

Unit test of our own bookkeeping, on the recording fake of test_commit_order: a transaction
given up before its EndTxn(commit) went out is a known abort, so its partitions are checked
(and what is open there aborted) before the new producer takes sends; one whose EndTxn went out
may have committed and is left alone. A partition that gives no answer (no leader: the very
case in which the broker skips the marker) stays unchecked, with the producer id and epoch that
wrote it, and is asked again until it answers; past the deadline the worker stops, and no
transaction begins while it is unchecked. That the broker really leaves such records open, and
that the abort keeps them out of the next commit, is tested on the real cluster in
tests/runtime/test_skipped_marker.py.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Collection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import errors as aerrors

from streams_app.errors import StateDirectoryError
from streams_app.runtime import producer as producer_module
from streams_app.runtime.commit import Committer
from streams_app.runtime.left_open_file import LEFT_OPEN_FILE, LeftOpenFile
from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.worker.rebalance import RebalanceListener
from streams_app.transport.base import (
    GROUP_OFFSETS,
    GroupMetadata,
    LeftOpen,
    LeftOpenCheck,
    ProducerConfig,
    TopicPartition,
)
from streams_app.transport.errors import (
    AbortedByCoordinatorError,
    CommitFailedError,
    CommitOutcomeUnknownError,
    ProducerFencedError,
    SendFailedError,
    TransactionLeftOpenError,
    TransactionTimedOutError,
    TransportError,
)
from streams_app.transport.kafka import KafkaProducerClient, _where
from tests.unit.test_commit_order import RecordingClient, RecordingTransport

GROUP = GroupMetadata("g", 3, "member-1")
OUT1, OUT2 = TopicPartition("out", 1), TopicPartition("out", 2)


class _Client(RecordingClient):
    """Also a LeftoverAbortingProducerClient: each start is the next epoch of producer id 7.

    ``answer`` decides each round: by default every entry answers, and out[1] was open."""

    epochs = 0
    checked: list[list[LeftOpen]] = []
    fail_end_txn = False
    aborted_at_end_txn = False
    fail_offsets = False
    answer: Callable[[list[LeftOpen]], Any] | None = None
    #: The partitions the (fresh) metadata shows without a leader.
    no_leader: set[TopicPartition] = set()
    #: What the coordinator has ongoing for our transactional id before the first start.
    ongoing: list[LeftOpen] = []

    async def start(self) -> None:
        await super().start()
        _Client.epochs += 1
        self.epoch = _Client.epochs

    def producer_identity(self) -> tuple[int, int] | None:
        return 7, self.epoch

    async def abort_transaction(self) -> None:
        await super().abort_transaction()
        # Transaction version 2: the answer to EndTxn carries the next epoch.
        _Client.epochs += 1
        self.epoch = _Client.epochs

    async def leaderless(self, partitions: Collection[TopicPartition]) -> set[TopicPartition]:
        return set(partitions) & _Client.no_leader

    async def left_open_before_start(self, *, request_timeout_ms: int) -> list[LeftOpen]:
        return list(_Client.ongoing)

    async def abort_left_open(
        self, left: Collection[LeftOpen], *, request_timeout_ms: int
    ) -> LeftOpenCheck:
        entries = sorted(left)
        _Client.checked.append(entries)
        if _Client.answer is not None:
            answered = _Client.answer(entries)
            return await answered if asyncio.iscoroutine(answered) else answered
        return LeftOpenCheck(aborted={e: 40 for e in entries if e.tp == OUT1})

    async def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
        await super().send_offsets_to_transaction(*args, **kwargs)
        if _Client.fail_offsets:
            raise TransportError("no answer to TxnOffsetCommit (injected)")

    async def commit_transaction(self) -> None:
        await super().commit_transaction()
        if _Client.fail_end_txn:
            raise TransportError("no answer to EndTxn (injected)")
        if _Client.aborted_at_end_txn:
            raise AbortedByCoordinatorError("INVALID_TXN_STATE on EndTxn (injected)")


class _Transport(RecordingTransport):
    def producer(self, config: ProducerConfig) -> _Client:
        return _Client(self.calls)


def _reset(monkeypatch: pytest.MonkeyPatch) -> None:
    _Client.epochs, _Client.checked, _Client.answer = 0, [], None
    _Client.no_leader, _Client.ongoing = set(), []
    _Client.fail_end_txn = _Client.fail_offsets = _Client.aborted_at_end_txn = False
    monkeypatch.setattr(producer_module, "LEFT_OPEN_FIRST_BACKOFF_S", 0.01)
    monkeypatch.setattr(producer_module, "LEFT_OPEN_MAX_BACKOFF_S", 0.02)


def _published(producer: StreamsProducer) -> bool:
    """Does the producer take sends yet?"""
    try:
        producer.client  # noqa: B018
    except RuntimeError:
        return False
    return True


@pytest.fixture
async def producer(monkeypatch: pytest.MonkeyPatch) -> StreamsProducer:
    _reset(monkeypatch)
    made = StreamsProducer(_Transport(), ProducerConfig(transactional_id="tx"))  # type: ignore[arg-type]
    await made.start()
    return made


async def _write(producer: StreamsProducer) -> None:
    await producer.send("out", key=b"k", value=b"1", partition=1)
    await producer.send("out", key=b"k", value=b"2", partition=2)
    await producer.flush_and_check()


async def test_a_transaction_given_up_before_its_end_txn_is_checked_where_it_wrote(
    producer: StreamsProducer,
) -> None:
    await _write(producer)
    await producer.recreate()  # a send or the offsets failed: the transaction is given up
    # The partitions it wrote, under the producer id and epoch it wrote them with (epoch 1),
    # asked once the new producer (epoch 2) has started.
    assert _Client.checked == [[LeftOpen(OUT1, 7, 1), LeftOpen(OUT2, 7, 1)]]
    assert producer.left_open_aborted == 1
    assert producer.unchecked_left_open == []
    await producer.recreate()  # nothing written since: nothing to check
    assert len(_Client.checked) == 1


async def test_a_transaction_whose_end_txn_went_out_is_left_alone(
    producer: StreamsProducer,
) -> None:
    await _write(producer)
    _Client.fail_end_txn = True
    with pytest.raises(CommitOutcomeUnknownError):
        await producer.commit({TopicPartition("in", 0): 5}, GROUP)
    await producer.recreate()  # it may have committed: aborting its records would lose them
    assert _Client.checked == []


async def test_committed_or_aborted_transactions_leave_nothing_to_check(
    producer: StreamsProducer,
) -> None:
    await _write(producer)
    await producer.commit({TopicPartition("in", 0): 5}, GROUP)
    await _write(producer)
    await producer.abort()  # answered: the coordinator ends it
    await producer.recreate()
    assert _Client.checked == []


async def test_an_answered_abort_that_wrote_to_a_leaderless_partition_is_checked_first(
    producer: StreamsProducer,
) -> None:
    """The coordinator answered the abort, but out[2] has no leader now: its marker may have
    been skipped. The abort is given up like one the producer could not end: a new producer
    (whose InitProducerId waits for the abort to finish, at a new epoch), and every partition
    the transaction wrote checked, with the epoch that wrote them, before anything begins."""
    published_during_check: list[bool] = []

    def answer(entries: list[LeftOpen]) -> LeftOpenCheck:
        published_during_check.append(_published(producer))
        return LeftOpenCheck(aborted={e: 40 for e in entries if e.tp == OUT2})

    _Client.answer, _Client.no_leader = answer, {OUT2}
    await _write(producer)
    await producer.abort()
    assert _Client.checked == [[LeftOpen(OUT1, 7, 1), LeftOpen(OUT2, 7, 1)]]
    assert published_during_check == [False]
    assert producer.recreated == 1 and producer.left_open_aborted == 1
    assert producer.transactions_aborted == 1
    await producer.maybe_begin()
    # Written with epoch 1; the abort's answer brought epoch 2, the new producer epoch 3.
    assert producer.client.producer_identity() == (7, 3)  # type: ignore[attr-defined]


async def test_an_answered_abort_whose_partitions_all_have_leaders_keeps_its_producer(
    producer: StreamsProducer,
) -> None:
    _Client.no_leader = {TopicPartition("elsewhere", 0)}
    await _write(producer)
    await producer.abort()
    assert _Client.checked == [] and producer.recreated == 0
    await producer.abort()  # nothing open: nothing asked
    assert producer.transactions_aborted == 1


class _Batching(_Client):
    """With the batch path's partition choice: a keyless record goes to out[2]."""

    def create_batch(self) -> Any:
        raise AssertionError("a record larger than half a batch goes on its own")

    async def send_batch(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a record larger than half a batch goes on its own")

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        return 2 if partition is None else partition

    async def wait_for_topic(self, topic: str) -> None:
        return None


class _BatchingTransport(RecordingTransport):
    def producer(self, config: ProducerConfig) -> _Batching:
        return _Batching(self.calls)


async def test_a_keyless_large_record_whose_send_failed_is_checked_where_it_went(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large record goes to the client one by one; keyless, its partition was learnt only
    from a send that succeeded, so a transaction given up after it failed did not check it.
    Now the partition is chosen before the send."""
    _reset(monkeypatch)
    producer = StreamsProducer(_BatchingTransport(), ProducerConfig(transactional_id="tx"))  # type: ignore[arg-type]
    await producer.start()
    large = b"x" * (producer._direct_bytes + 1)
    future = await producer.send("out", key=None, value=large)
    assert isinstance(future, asyncio.Future)
    future.set_exception(aerrors.KafkaTimeoutError())  # appended, then failed
    await producer.recreate()
    assert _Client.checked == [[LeftOpen(OUT2, 7, 1)]]


async def test_a_transaction_left_ongoing_by_a_killed_process_is_checked_before_the_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The previous process was killed in the middle of a transaction (nothing given up,
    nothing listed): what its coordinator has ongoing is listed on disk before the new
    producer's InitProducerId aborts it, and checked before anything is published."""
    _reset(monkeypatch)
    left = LeftOpen(OUT2, 7, 41)
    _Client.ongoing = [left]
    on_disk: list[set[LeftOpen]] = []

    def answer(entries: list[LeftOpen]) -> LeftOpenCheck:
        on_disk.append(file.load())
        return LeftOpenCheck(aborted={e: 40 for e in entries})

    _Client.answer = answer
    file = LeftOpenFile(tmp_path / LEFT_OPEN_FILE)
    producer = StreamsProducer(
        _Transport(),
        ProducerConfig(transactional_id="tx"),
        left_open_file=file,  # type: ignore[arg-type]
    )
    await producer.start()
    assert _Client.checked == [[left]] and on_disk == [{left}]
    assert producer.left_open_aborted == 1 and not file.path.exists()
    await producer.recreate()  # later producers of the same process do not ask again
    assert len(_Client.checked) == 1


async def test_a_partition_without_an_answer_is_asked_again_and_the_others_count(
    producer: StreamsProducer,
) -> None:
    """out[1] has no leader for two rounds; out[2]'s answer (nothing open) is kept meanwhile,
    and the new producer takes no send until out[1] answered (it was open: aborted)."""
    published_during_check: list[bool] = []

    def answer(entries: list[LeftOpen]) -> LeftOpenCheck:
        published_during_check.append(_published(producer))
        if len(_Client.checked) <= 2:
            return LeftOpenCheck(unanswered={e: "no leader" for e in entries if e.tp == OUT1})
        return LeftOpenCheck(aborted={e: 40 for e in entries})

    _Client.answer = answer
    await _write(producer)
    await producer.recreate()
    assert _Client.checked == [
        [LeftOpen(OUT1, 7, 1), LeftOpen(OUT2, 7, 1)],
        [LeftOpen(OUT1, 7, 1)],
        [LeftOpen(OUT1, 7, 1)],
    ]
    assert producer.left_open_aborted == 1
    assert published_during_check == [False, False, False]
    await producer.maybe_begin()  # everything answered: transactions begin again
    assert producer.in_transaction


async def test_past_the_deadline_the_worker_stops_and_nothing_begins_until_answered(
    producer: StreamsProducer,
) -> None:
    _Client.answer = lambda entries: LeftOpenCheck(
        unanswered={e: "no leader" for e in entries if e.tp == OUT1}
    )
    producer.left_open_deadline = 0.2
    await _write(producer)
    with pytest.raises(TransactionLeftOpenError, match=r"out\[1\].*txn hanging --abort"):
        await producer.recreate()
    assert producer.unchecked_left_open == [LeftOpen(OUT1, 7, 1)]
    with pytest.raises(TransactionLeftOpenError):  # whoever goes on regardless
        await producer.maybe_begin()

    # A later recreate asks again, the entry kept with the epoch that wrote it (1), merged
    # with what a transaction given up since left (none here: it could not begin).
    _Client.answer = None
    await producer.recreate()
    assert _Client.checked[-1] == [LeftOpen(OUT1, 7, 1)]
    assert producer.unchecked_left_open == []
    await producer.maybe_begin()


async def test_a_round_cut_short_by_the_deadline_is_not_an_answer(
    producer: StreamsProducer,
) -> None:
    async def never(entries: list[LeftOpen]) -> LeftOpenCheck:
        await asyncio.Event().wait()  # a leader that is set but does not answer
        raise AssertionError

    _Client.answer = never
    producer.left_open_deadline = 0.2
    await _write(producer)
    with pytest.raises(TransactionLeftOpenError, match="no answer before the deadline"):
        await producer.recreate()
    assert producer.unchecked_left_open == [LeftOpen(OUT1, 7, 1), LeftOpen(OUT2, 7, 1)]


async def test_the_offsets_of_a_transaction_given_up_are_checked_in_its_groups_partition(
    producer: StreamsProducer,
) -> None:
    """The TxnOffsetCommit may be in the log though the call failed (a lost answer): its
    group's ``__consumer_offsets`` partition is checked too (review 2.3)."""
    await _write(producer)
    _Client.fail_offsets = True
    with pytest.raises(TransportError):
        await producer.commit({TopicPartition("in", 0): 5}, GROUP)
    await producer.recreate()
    assert _Client.checked[0] == [
        LeftOpen(GROUP_OFFSETS, 7, 1, "g"),
        LeftOpen(OUT1, 7, 1),
        LeftOpen(OUT2, 7, 1),
    ]


async def test_a_groups_offsets_partition_is_where_its_coordinator_logs_it() -> None:
    class _Admin:
        async def partitions(self, topic: str) -> list[int]:
            assert topic == "__consumer_offsets"
            return list(range(50))

    entries = [LeftOpen(OUT1, 7, 1), LeftOpen(GROUP_OFFSETS, 7, 1, "hello")]
    where = await _where(_Admin(), entries, LeftOpenCheck())  # type: ignore[arg-type]
    # Kafka's Utils.abs("hello".hashCode()) % 50 (test_ops_decoding has the hash itself).
    assert where == {entries[0]: ("out", 1), entries[1]: ("__consumer_offsets", 99162322 % 50)}


# -- the generic handlers let TransactionLeftOpenError through ----------------------------


class _LeftOpenProducer:
    """A producer whose abort and recreate raise what recreate's check raises."""

    def __init__(self) -> None:
        self.recreates = 0

    async def abort(self) -> None:
        raise TransactionLeftOpenError("out[1] may still be open (injected)")

    async def recreate(self) -> None:
        self.recreates += 1


async def test_task_migrated_does_not_swallow_a_transaction_left_open() -> None:
    producer = _LeftOpenProducer()
    tasks = SimpleNamespace(close_all=lambda: None, tasks={})
    committer = Committer(
        "exactly_once",
        producer,  # type: ignore[arg-type]
        SimpleNamespace(),  # type: ignore[arg-type]
        tasks,  # type: ignore[arg-type]
        lambda name: name,
        lambda: None,
        SimpleNamespace(monotonic=lambda: 0.0),  # type: ignore[arg-type]
    )
    with pytest.raises(TransactionLeftOpenError):
        await committer.task_migrated(CommitFailedError("the commit failed (injected)"))
    assert producer.recreates == 0  # a second recreate would have gone on regardless


async def test_revocation_does_not_swallow_a_transaction_left_open() -> None:
    producer = _LeftOpenProducer()

    async def commit() -> None:
        raise SendFailedError("a send failed (injected)")

    async def abort(*, recreate_producer: bool = False) -> None:
        await producer.abort()

    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    signal = SimpleNamespace(send=nothing)
    worker = SimpleNamespace(
        rebalancing=False,
        app=SimpleNamespace(on_rebalance_start=signal, on_partitions_revoked=signal),
        lock=asyncio.Lock(),
        runner=SimpleNamespace(all_idle=lambda: True, restart=nothing),
        timers=SimpleNamespace(busy=False),
        collector=SimpleNamespace(flush_soon=nothing),
    )
    parts = SimpleNamespace(
        committer=SimpleNamespace(commit=commit, abort=abort, group=GROUP),
        failures=SimpleNamespace(stop_processing=nothing),
        producer=producer,
        tasks=SimpleNamespace(close_all=lambda: None),
        dead_letters=SimpleNamespace(aborted=lambda: None),
    )
    listener = RebalanceListener(worker, parts)  # type: ignore[arg-type]
    with pytest.raises(TransactionLeftOpenError):
        await listener.on_partitions_revoked({TopicPartition("in", 0)})
    assert producer.recreates == 0


# -- the entries outlive the process (review 2.2c) ----------------------------------------


async def test_entries_are_kept_on_disk_and_a_new_process_checks_them_before_its_first_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker stops on TransactionLeftOpenError (or is killed after giving up): the entries
    are in the state directory from the moment they were added, and the next process with the
    same state directory (same transactional id) checks them before it takes a send. Once
    answered, the file is gone."""
    file = LeftOpenFile(tmp_path / LEFT_OPEN_FILE)
    _reset(monkeypatch)
    config = ProducerConfig(transactional_id="tx")
    first = StreamsProducer(_Transport(), config, left_open_file=file)  # type: ignore[arg-type]
    await first.start()
    assert not file.path.exists()

    on_disk_during_check: list[set[LeftOpen]] = []

    def unanswered(entries: list[LeftOpen]) -> LeftOpenCheck:
        on_disk_during_check.append(file.load())
        return LeftOpenCheck(unanswered={e: "no leader" for e in entries if e.tp == OUT1})

    _Client.answer = unanswered
    first.left_open_deadline = 0.2
    await _write(first)
    with pytest.raises(TransactionLeftOpenError, match=str(file.path)):
        await first.recreate()
    # Written before the first round (a crash then would not forget them), then rewritten to
    # what is still unanswered (out[2] answered: nothing open there).
    assert on_disk_during_check[0] == {LeftOpen(OUT1, 7, 1), LeftOpen(OUT2, 7, 1)}
    assert file.load() == {LeftOpen(OUT1, 7, 1)}
    assert json.loads(file.path.read_text())["transactional_id"] == "tx"
    await first.stop()

    # The restart: a new producer, the same state directory. Its InitProducerId is epoch 3;
    # the entry keeps the epoch that wrote the records (1), and is checked before publishing.
    published_during_check: list[bool] = []

    def answer(entries: list[LeftOpen]) -> LeftOpenCheck:
        published_during_check.append(_published(second))
        return LeftOpenCheck(aborted={e: 40 for e in entries})

    _Client.answer = answer
    second = StreamsProducer(_Transport(), config, left_open_file=file)  # type: ignore[arg-type]
    await second.start()
    assert _Client.checked[-1] == [LeftOpen(OUT1, 7, 1)]
    assert published_during_check == [False]
    assert second.left_open_aborted == 1
    assert second.unchecked_left_open == []
    assert not file.path.exists()
    await second.maybe_begin()
    assert second.in_transaction


async def test_a_start_whose_check_cannot_finish_stops_and_keeps_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = LeftOpenFile(tmp_path / LEFT_OPEN_FILE)
    file.save({LeftOpen(OUT1, 7, 1)})
    _reset(monkeypatch)
    _Client.answer = lambda entries: LeftOpenCheck(unanswered={e: "no leader" for e in entries})
    made = StreamsProducer(
        _Transport(),  # type: ignore[arg-type]
        ProducerConfig(transactional_id="tx"),
        left_open_file=file,
    )
    made.left_open_deadline = 0.1
    with pytest.raises(TransactionLeftOpenError, match=r"out\[1\]"):
        await made.start()
    assert not _published(made)
    assert file.load() == {LeftOpen(OUT1, 7, 1)}  # the next restart asks again


def test_the_file_is_written_whole_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = LeftOpenFile(tmp_path / LEFT_OPEN_FILE)
    assert file.load() == set()
    entries = {LeftOpen(OUT1, 7, 1), LeftOpen(GROUP_OFFSETS, 7, 1, "g")}
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    file.save(entries, "tx")
    assert file.load() == entries
    assert len(synced) == 2  # the temporary file before the rename, the directory after

    # A crash before the rename leaves the old list whole (the temporary file is ignored).
    def crash(src: object, dst: object) -> None:
        raise KeyboardInterrupt  # the process dies here

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        file.save({LeftOpen(OUT2, 7, 2)})
    assert file.load() == entries
    monkeypatch.undo()

    file.save(set())  # all answered: no file
    assert not file.path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{LEFT_OPEN_FILE}.tmp"]


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"version": 1, "entries": [{"topic": "out"}]}',
        '{"version": 1, "entries": [{"topic": "out", "partition": "1", "producer_id": 7, '
        '"producer_epoch": 1}]}',
        '{"version": 99, "entries": []}',
        "",
    ],
)
def test_a_file_that_cannot_be_read_stops_the_worker_naming_it_and_the_fix(
    tmp_path: Path, content: str
) -> None:
    file = LeftOpenFile(tmp_path / LEFT_OPEN_FILE)
    file.path.write_text(content)
    with pytest.raises(TransactionLeftOpenError) as raised:
        file.load()
    message = str(raised.value)
    assert f"cannot read {file.path}" in message
    assert "txn hanging --abort" in message and f"delete {file.path}" in message


def test_a_file_that_cannot_be_written_names_the_state_directory(tmp_path: Path) -> None:
    file = LeftOpenFile(tmp_path / "missing" / LEFT_OPEN_FILE)
    with pytest.raises(StateDirectoryError, match=r"missing: cannot write left-open\.json"):
        file.save({LeftOpen(OUT1, 7, 1)})


# -- INVALID_TXN_STATE on EndTxn(commit) is a known abort (review 2.5) ---------------------


async def test_an_end_txn_answered_invalid_txn_state_is_a_known_abort_and_checked(
    producer: StreamsProducer,
) -> None:
    """Under transaction version 2 the coordinator answers a commit on a transaction it had
    aborted (and bumped the epoch of) INVALID_TXN_STATE, never a committed one's: the EndTxn
    went out, but nothing committed, so the partitions are checked like any given up (before:
    taken for an unknown outcome, and left alone)."""
    await _write(producer)
    _Client.aborted_at_end_txn = True
    with pytest.raises(AbortedByCoordinatorError) as raised:  # young: another producer's doing
        await producer.commit({TopicPartition("in", 0): 5}, GROUP)
    assert isinstance(raised.value, ProducerFencedError)  # the worker rejoins, as after fencing
    assert not isinstance(raised.value, CommitOutcomeUnknownError)
    await producer.recreate()
    assert _Client.checked == [
        [LeftOpen(GROUP_OFFSETS, 7, 1, "g"), LeftOpen(OUT1, 7, 1), LeftOpen(OUT2, 7, 1)]
    ]
    assert producer.left_open_aborted == 1


async def test_a_timed_out_transaction_answered_invalid_txn_state_is_rewound_not_migrated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Older than the transaction timeout: the coordinator timed it out. A known abort, as
    when the timeout is found before EndTxn: rewind and retry, the tasks kept (not
    CommitTimedOutError, whose outcome is unknown)."""
    _reset(monkeypatch)
    made = StreamsProducer(
        _Transport(),  # type: ignore[arg-type]
        ProducerConfig(transactional_id="tx", transaction_timeout_ms=0),
    )
    await made.start()
    await _write(made)
    _Client.aborted_at_end_txn = True
    with pytest.raises(TransactionTimedOutError) as raised:
        await made.commit({TopicPartition("in", 0): 5}, GROUP)
    assert not isinstance(raised.value, CommitOutcomeUnknownError | ProducerFencedError)
    await made.recreate()
    assert [e.tp for e in _Client.checked[0]] == [GROUP_OFFSETS, OUT1, OUT2]


async def test_the_transport_tells_invalid_txn_state_on_end_txn_from_a_fencing() -> None:
    class _Producer:
        fatal_error = None

        async def commit_transaction(self) -> None:
            raise self.error

    client = KafkaProducerClient("127.0.0.1:1", ProducerConfig(transactional_id="t"), {})
    fake = _Producer()
    client._producer = fake  # type: ignore[assignment]
    fake.error = aerrors.InvalidTxnState()
    with pytest.raises(AbortedByCoordinatorError, match="INVALID_TXN_STATE"):
        await client.commit_transaction()
    fake.error = aerrors.ProducerFenced()
    with pytest.raises(ProducerFencedError) as raised:
        await client.commit_transaction()
    assert not isinstance(raised.value, AbortedByCoordinatorError)
