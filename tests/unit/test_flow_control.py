"""Flow control's one reset (runtime/worker/flow.py), on a recording stand-in consumer.

An abort keeps the assignment: held partitions resume, a partition backing off stays paused
until its time. A migration or revocation ends the assignment: nothing is resumed (the next
assignment starts unpaused) and every hold and backoff is forgotten. The real-broker case is
tests/runtime/test_flow_reset.py.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from streams_app.runtime.worker.flow import FlowControl
from streams_app.transport.base import TopicPartition

A = TopicPartition("in", 0)
B = TopicPartition("in", 1)
C = TopicPartition("in", 2)


class Consumer:
    def __init__(self, assigned: set[TopicPartition]) -> None:
        self.assigned = assigned
        self.calls: list[tuple[str, list[TopicPartition]]] = []

    def assignment(self) -> set[TopicPartition]:
        return self.assigned

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        self.calls.append(("pause", sorted(partitions)))

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        self.calls.append(("resume", sorted(partitions)))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", [tp]))


class Runner:
    """No agent reads anything: every held partition's agents count as idle."""

    def actor_lists(self, topic: str) -> list[Any]:
        return []

    def all_idle(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay: float, fun: Callable[[], None]) -> None:
        pass


def flow(assigned: set[TopicPartition]) -> tuple[FlowControl, Consumer]:
    consumer = Consumer(assigned)
    control = FlowControl(consumer, Runner(), Clock())  # type: ignore[arg-type]
    return control, consumer


def test_an_abort_resumes_held_partitions_but_not_one_backing_off() -> None:
    control, consumer = flow({A, B, C})
    control.held |= {A, B}
    control.held_for_retry.add(A)
    control.back_off([B], 30.0)
    control.draining = True
    consumer.calls.clear()

    control.reset(assignment_ends=False)

    assert consumer.calls == [("resume", [A])]
    assert not control.held and not control.held_for_retry and not control.draining
    assert set(control.backing_off) == {B}  # resumed by resume_due once its time is up


def test_the_end_of_an_assignment_forgets_every_pause_without_resuming() -> None:
    control, consumer = flow({A, B, C})
    control.held.add(A)
    control.back_off([B], 30.0)
    control.draining = True
    consumer.calls.clear()

    control.reset(assignment_ends=True)

    assert consumer.calls == []  # the next assignment starts unpaused
    assert not control.held and not control.backing_off and not control.draining


def test_a_backoff_resumes_once_due_unless_held_or_no_longer_owned() -> None:
    control, consumer = flow({A, B, C})
    control.back_off([A, B, C], 5.0)
    control.held.add(B)
    consumer.calls.clear()
    assert control.due() == []
    control.clock.now += 5.0  # type: ignore[attr-defined]

    due = control.due()
    control.resume_due(due, owned={A, B})

    assert sorted(due) == [A, B, C]
    assert consumer.calls == [("resume", [A])]  # B waits for its agents, C is not ours
    assert not control.backing_off
