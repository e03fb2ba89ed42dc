"""The per-record error policy: decisions, their bounds, and how long they are remembered."""

from __future__ import annotations

import pytest

from streams_app import App, ConfigError, NullKeyError
from streams_app.codecs import DecodeError
from streams_app.errors import TopologyError
from streams_app.runtime.errors_policy import Decision, ErrorPolicy, Failure
from streams_app.settings import Settings
from streams_app.transport.base import TopicPartition
from streams_app.transport.errors import RecordRejectedError

TP = TopicPartition("orders", 1)


def policy(**settings: object) -> ErrorPolicy:
    return ErrorPolicy(Settings.build("app", settings, {}))


def failure(error: BaseException, offset: int = 7, partition: int = 1) -> Failure:
    return Failure("reserve[0]", error, "orders", partition, offset)


def test_defaults_retry_three_times_with_backoff_then_dead_letter() -> None:
    p = policy()
    decisions = [p.decide(failure(RuntimeError())) for _ in range(4)]
    assert decisions == [Decision.RETRY] * 3 + [Decision.DEAD_LETTER]
    assert p.poison_for("orders", 1, 7) is not None
    assert p.attempts_of(("orders", 1, 7)) == 4


def test_backoff_doubles_up_to_the_maximum() -> None:
    p = policy(retry_backoff=0.5, retry_backoff_max=3.0, error_policy="retry")
    backoffs = []
    for _ in range(5):
        assert p.decide(failure(RuntimeError())) is Decision.RETRY
        backoffs.append(p.backoff(("orders", 1, 7)))
    assert backoffs == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"error_policy": "stop"}, [Decision.RETRY] * 3 + [Decision.STOP]),
        ({"error_policy": "stop", "max_retries": 0}, [Decision.STOP]),
        ({"error_policy": "dlq", "max_retries": 1}, [Decision.RETRY, Decision.DEAD_LETTER]),
        ({"error_policy": "retry", "max_retries": 1}, [Decision.RETRY] * 6),
        ({"error_policy": "dlq", "max_retries": None}, [Decision.RETRY] * 6),
    ],
)
def test_policies_decide_after_max_retries(
    settings: dict[str, object], expected: list[Decision]
) -> None:
    p = policy(**settings)
    assert [p.decide(failure(RuntimeError())) for _ in expected] == expected


@pytest.mark.parametrize(
    "error",
    [DecodeError("x"), NullKeyError("x"), RecordRejectedError("too large")],
)
@pytest.mark.parametrize("name", ["dlq", "stop", "retry"])
def test_bad_records_are_dead_lettered_at_once_whatever_the_policy(
    error: BaseException, name: str
) -> None:
    assert policy(error_policy=name).decide(failure(error)) is Decision.DEAD_LETTER


def test_programming_errors_stop_at_once() -> None:
    assert policy().decide(failure(TopologyError("x"))) is Decision.STOP


def test_at_most_once_never_retries() -> None:
    amo = {"processing_guarantee": "at_most_once"}
    assert policy(**amo).decide(failure(RuntimeError())) is Decision.DEAD_LETTER
    assert policy(**amo, error_policy="retry").decide(failure(RuntimeError())) is Decision.SKIP
    assert policy(**amo, error_policy="stop").decide(failure(RuntimeError())) is Decision.STOP


def test_a_dead_letter_decision_is_kept_until_a_commit_covers_it() -> None:
    """Two records failing in one window: each one's abort must not forget the other."""
    p = policy(max_retries=0)
    assert p.decide(failure(RuntimeError(), offset=3, partition=0)) is Decision.DEAD_LETTER
    assert p.decide(failure(RuntimeError(), offset=5, partition=1)) is Decision.DEAD_LETTER
    for _ in range(3):  # looked up on every replay: the mark stays
        assert p.poison_for("orders", 0, 3) is not None
        assert p.poison_for("orders", 1, 5) is not None
    p.committed({TopicPartition("orders", 0): 4, TopicPartition("orders", 1): 5})
    assert p.poison_for("orders", 0, 3) is None  # committed past it: history
    assert p.poison_for("orders", 1, 5) is not None  # not yet
    p.keep_only([TopicPartition("orders", 0)])  # partition 1 went to another worker
    assert p.poison_for("orders", 1, 5) is None


def test_a_commit_of_other_partitions_does_not_reset_a_records_retries() -> None:
    p = policy(max_retries=2)
    assert p.decide(failure(RuntimeError())) is Decision.RETRY
    p.committed({TopicPartition("orders", 0): 100, TP: 7})  # its own partition stays at it
    assert p.decide(failure(RuntimeError())) is Decision.RETRY
    assert p.decide(failure(RuntimeError())) is Decision.DEAD_LETTER


def callback_failure() -> Failure:
    return Failure.of("on_window_close of per-minute", RuntimeError(), None, replayed=True)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, [Decision.RETRY] * 3 + [Decision.STOP]),  # dlq: there is no record to dead-letter
        ({"error_policy": "stop", "max_retries": 0}, [Decision.STOP]),
        ({"error_policy": "retry"}, [Decision.RETRY] * 6),
    ],
)
def test_a_replayed_callback_is_retried_with_backoff_then_stops(
    settings: dict[str, object], expected: list[Decision]
) -> None:
    """A window-close callback runs again as soon as the abort replays its records: skipping
    it (as a wall-clock timer is skipped until its next interval) livelocked the worker."""
    p = policy(**settings)
    p.committed({TP: 7})
    decisions = []
    for _ in expected:
        decisions.append(p.decide(callback_failure()))
        p.committed({TP: 7})  # the replay fails before any progress: same offsets
    assert decisions == expected
    if Decision.STOP not in expected:
        assert p.backoff(None) == 3.2  # 0.1 doubling, the worker waits
    p.committed({TP: 8})  # progress: the callback got past
    assert p.callback_failures == 0


def test_a_wall_clock_timer_failure_is_skipped_until_its_next_interval() -> None:
    p = policy()
    assert p.decide(Failure.of("timer:tick", RuntimeError(), None)) is Decision.SKIP


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"dead_letter_topic": "__consumer_offsets"}, "dead_letter_topic"),
        ({"dead_letter_topic": "__{topic}"}, "dead_letter_topic"),
        ({"dead_letter_topic": "bad name"}, "dead_letter_topic"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_request_size": 0}, "max_request_size"),
    ],
)
def test_error_settings_are_checked_at_start(kwargs: dict[str, object], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        App("app", **kwargs)
    assert info.value.setting == setting
    assert "Fix:" in str(info.value)
