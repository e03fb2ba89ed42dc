"""Flow control: which input partitions are paused, why, and what resumes them.

The concern it owns: the worker's pauses beyond the restore's (a task's partitions stay paused
until its tables are restored: ``runtime/task_manager.py``) and a partition group's (buffering:
``runtime/partition_group.py``):

- **held**: a partition whose records feed agents that are busy (parked on an RPC reply, or a
  commit is due and they are working through their inbox). Its records from the first one not
  handed out are left in Kafka (seek) and it is paused, so the transaction that must wait for
  those agents stays short; it resumes once they are idle (:meth:`FlowControl.release`).
  *Held for a retry*: it holds a record that failed before and is retried in a transaction of
  its own, so it waits for every agent;
- **backing off**: a partition paused while a failed record of its own waits out its retry
  backoff (:mod:`streams_app.runtime.errors_policy`); every other partition goes on;
- **draining**: a commit is due but agents are busy; busy agents get no new records until it
  happens (``runtime/worker/records.py`` reads it once per partition run).

:meth:`FlowControl.reset` is the one place all of it is forgotten. An abort keeps the assignment:
held partitions resume (from the committed offsets the abort seeks to), those backing off stay
paused until their time is up. A migration or a revocation ends the assignment: nothing is
resumed, backoffs are dropped too, because the consumer's next assignment starts with every
partition unpaused (aiokafka makes a new ``Assignment`` with fresh partition states on every
rebalance; the in-memory model clears its paused set on assignment) and the new tasks pause
their own partitions until restored.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from streams_app.runtime.actor import AgentRunner
from streams_app.runtime.clock import Clock
from streams_app.runtime.task import Task
from streams_app.transport.base import ConsumerClient, TopicPartition


def _nothing() -> None:
    pass


class FlowControl:
    def __init__(self, consumer: ConsumerClient, runner: AgentRunner, clock: Clock) -> None:
        self.consumer = consumer
        self.runner = runner
        self.clock = clock
        #: Partitions paused because the agents they feed are busy.
        self.held: set[TopicPartition] = set()
        #: Of those, the ones holding a record to retry alone: they wait for every agent.
        self.held_for_retry: set[TopicPartition] = set()
        #: Partitions paused while a failed record of theirs backs off -> when they resume.
        self.backing_off: dict[TopicPartition, float] = {}
        #: A commit is due but agents are busy: busy agents get no new records until it
        #: happens.
        self.draining = False

    # -- held for busy agents ---------------------------------------------------------------

    def hold(self, task: Task, tp: TopicPartition, offset: int, *, retry: bool = False) -> None:
        """Leave ``tp``'s records from ``offset`` on in Kafka, the partition paused until the
        agents it feeds are idle (:meth:`release`). Paused, not merely rewound: fetched
        again at once, it would spin the loop without letting the agents' RPC requests out."""
        self.consumer.seek(tp, offset)
        self.consumer.pause([tp])
        self.held.add(tp)
        if retry:
            self.held_for_retry.add(tp)
        group = task.group_for(tp)
        if group is not None:
            group.drop(tp)  # its later records come again from the seek, in order

    def release(self, *, everything: bool = False) -> None:
        """Resume partitions held back for busy agents once those agents are idle again (a
        partition also backing off after a failure stays paused until its time is up).
        ``everything``: resume them all, busy or not (an abort: they start over)."""
        if not self.held:
            return
        ready = []
        for tp in self.held:
            streams = [
                actors[tp.partition % len(actors)].input
                for actors in self.runner.actor_lists(tp.topic)
            ]
            if everything or (
                all(s.idle for s in streams)
                and (tp not in self.held_for_retry or self.runner.all_idle())
            ):
                ready.append(tp)
        if ready:
            self.held.difference_update(ready)
            self.held_for_retry.difference_update(ready)
            assigned = self.consumer.assignment()
            self.consumer.resume(
                [tp for tp in ready if tp in assigned and tp not in self.backing_off]
            )

    def group_lag(self, tp: TopicPartition) -> int | None:
        """A partition group's view of ``tp``'s lag: a partition held back for busy agents
        (parked on an RPC reply) delivers nothing until they are free, so the group must not
        wait for it, or the reply the agents wait for, on a co-partitioned topic, is never
        processed."""
        if tp in self.held:
            return 0
        return self.consumer.fetched_lag(tp)

    def resumable(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Of ``partitions`` a partition group would resume, those flow control does not hold
        paused (backing off, or held back for busy agents)."""
        return [tp for tp in partitions if tp not in self.backing_off and tp not in self.held]

    # -- backing off after a failure -----------------------------------------------------------

    def back_off(self, partitions: list[TopicPartition], delay: float) -> None:
        """Pause ``partitions`` for ``delay`` seconds (a failed record's retry backoff)."""
        until = self.clock.monotonic() + delay
        self.consumer.pause(partitions)
        for tp in partitions:
            self.backing_off[tp] = max(until, self.backing_off.get(tp, 0.0))
        # Nothing needs to run then (the loop looks at every turn), but a manual clock (the
        # test driver) learns that time has to pass.
        self.clock.call_later(delay, _nothing)

    def due(self) -> list[TopicPartition]:
        """Partitions whose backoff is over (:meth:`resume_due` resumes them)."""
        now = self.clock.monotonic()
        return [tp for tp, until in self.backing_off.items() if until <= now]

    def resume_due(self, due: list[TopicPartition], owned: Container[TopicPartition]) -> None:
        """End the backoff of ``due``; resume those still ``owned`` (by a task of this worker)
        unless also held back for busy agents (they wait for them: :meth:`release`)."""
        for tp in due:
            self.backing_off.pop(tp, None)
        resume = [tp for tp in due if tp in owned and tp not in self.held]
        if resume:
            self.consumer.resume(resume)

    # -- the one reset ---------------------------------------------------------------------------

    def reset(self, *, assignment_ends: bool) -> None:
        """Forget every hold, backoff and drain (see the module docstring for why the two
        cases differ). ``assignment_ends``: a migration or revocation, the consumer's next
        assignment starts unpaused; else an abort, the same partitions are processed on."""
        if assignment_ends:
            self.held.clear()
            self.held_for_retry.clear()
            self.backing_off.clear()
        else:
            self.release(everything=True)
        self.draining = False
