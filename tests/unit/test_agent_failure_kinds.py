"""An agent's send that fails because the producer broke under it (fenced, timed out by the
coordinator, the group moved on) is the transaction's failure, not the record's: it takes the
migration or transaction-failure path, and the error policy never counts it against the
record (the short networked chaos run, seed 739716, dead-lettered a good record after four
fenced sends)."""

from __future__ import annotations

from typing import Any

import pytest

from streams_app.runtime.errors_policy import Failure
from streams_app.runtime.worker.failures import FailureHandler
from streams_app.transport.errors import (
    ProducerFencedError,
    SendFailedError,
    TransactionLeftOpenError,
    TransactionTimedOutError,
)


class _Policy:
    def __init__(self) -> None:
        self.decided: list[Failure] = []

    def decide(self, failure: Failure) -> Any:
        self.decided.append(failure)
        raise _Decided


class _Decided(Exception):
    pass


def handler() -> tuple[FailureHandler, list[tuple[str, BaseException]], _Policy]:
    calls: list[tuple[str, BaseException]] = []
    h = object.__new__(FailureHandler)
    policy = _Policy()
    h.policy = policy  # type: ignore[assignment]

    async def on_migrated(exc: BaseException) -> None:
        calls.append(("migrated", exc))

    async def on_transaction_failure(exc: BaseException) -> None:
        calls.append(("transaction", exc))

    h.on_migrated = on_migrated  # type: ignore[method-assign]
    h.on_transaction_failure = on_transaction_failure  # type: ignore[method-assign]
    return h, calls, policy


def failure(error: BaseException) -> Failure:
    return Failure.of("agent", error, None)


async def test_a_fenced_send_is_a_migration_not_the_records_failure() -> None:
    h, calls, policy = handler()
    fenced = ProducerFencedError("fenced")
    await h.on_agent_failures([failure(RuntimeError("agent bug")), failure(fenced)])
    assert calls == [("migrated", fenced)]
    assert policy.decided == []


async def test_a_transaction_timed_out_under_a_send_aborts_and_retries() -> None:
    h, calls, policy = handler()
    timed_out = TransactionTimedOutError("timed out")
    await h.on_agent_failures([failure(timed_out)])
    assert calls == [("transaction", timed_out)]
    assert policy.decided == []


async def test_a_left_open_check_stops_the_worker() -> None:
    h, calls, _ = handler()
    with pytest.raises(TransactionLeftOpenError):
        await h.on_agent_failures([failure(TransactionLeftOpenError("left open"))])
    assert calls == []


@pytest.mark.parametrize("error", [RuntimeError("agent bug"), SendFailedError("refused")])
async def test_other_failures_stay_the_records_for_the_error_policy(error: Exception) -> None:
    h, calls, policy = handler()
    with pytest.raises(_Decided):
        await h.on_agent_failures([failure(error)])
    assert calls == [] and len(policy.decided) == 1
