"""Which transactions ``StreamsProducer.recreate`` checks for records the broker left open.

Unit test of our own bookkeeping, on the recording fake of test_commit_order: a transaction
given up before its EndTxn(commit) went out is a known abort, so its partitions are checked
(and what is open there aborted) once the new producer has started; one whose EndTxn went out
may have committed and is left alone. That the broker really leaves such records open, and that
the abort keeps them out of the next commit, is tested on the real cluster in
tests/runtime/test_skipped_marker.py.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest

from streams_app.runtime.producer import StreamsProducer
from streams_app.transport.base import GroupMetadata, ProducerConfig, TopicPartition
from streams_app.transport.errors import CommitOutcomeUnknownError, TransportError
from tests.unit.test_commit_order import RecordingClient, RecordingTransport

GROUP = GroupMetadata("g", 3, "member-1")


class _Client(RecordingClient):
    """Also a LeftoverAbortingProducerClient: each start is the next epoch of producer id 7."""

    epochs = 0
    checked: list[tuple[list[TopicPartition], int, int]] = []
    fail_end_txn = False

    async def start(self) -> None:
        await super().start()
        _Client.epochs += 1
        self.epoch = _Client.epochs

    def producer_identity(self) -> tuple[int, int] | None:
        return 7, self.epoch

    async def abort_left_open(
        self, partitions: Collection[TopicPartition], producer_id: int, producer_epoch: int
    ) -> dict[TopicPartition, int]:
        _Client.checked.append((sorted(partitions), producer_id, producer_epoch))
        return {TopicPartition("out", 1): 40}

    async def commit_transaction(self) -> None:
        await super().commit_transaction()
        if _Client.fail_end_txn:
            raise TransportError("no answer to EndTxn (injected)")


class _Transport(RecordingTransport):
    def producer(self, config: ProducerConfig) -> _Client:
        return _Client(self.calls)


@pytest.fixture
async def producer() -> StreamsProducer:
    _Client.epochs, _Client.checked, _Client.fail_end_txn = 0, [], False
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
    out = [TopicPartition("out", 1), TopicPartition("out", 2)]
    assert _Client.checked == [(out, 7, 1)]
    assert producer.left_open_aborted == 1
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
