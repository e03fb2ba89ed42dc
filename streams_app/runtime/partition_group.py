"""PartitionGroup: a task's co-partitioned inputs, processed smallest timestamp first.

When a task reads several partitions of one stage (``orders[3]`` and ``restocks[3]``), the order
in which their records are processed should not depend on the order the consumer happened to
fetch them in. As Kafka Streams' ``PartitionGroup`` does, records are buffered per partition and
the next one processed is always the head with the smallest timestamp among partitions that
have buffered data.

A partition with nothing buffered is waited for (the task is *not ready*) when the consumer
knows records are on the broker for it (its fetched lag is above 0, or no fetch has answered
for it yet): they are one fetch away. When its lag is 0, the task waits up to ``max_task_idle``
seconds (Kafka Streams' ``max.task.idle.ms``, KIP-353/KIP-695; default 0: do not wait for new
records to be produced) and then goes on without it ("enforced processing"). ``max_task_idle <
0`` never waits at all.

Buffered records have already been fetched, so the consumer's position is past them: the task's
committed offset stays the next record *processed*, and a buffer that grows past ``limit``
pauses its partition until it drains.

The buffers hold the records themselves; only a partition's head needs its timestamp, which is
taken when the head is compared and kept until it is taken (a topic's ``timestamp_fn`` may
decode the value). A join's task mostly has one partition with records (the table's is read
up): its whole buffer is then one run, handed over as a list without a tuple or a timestamp
made per record.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

from streams_app.transport.base import RecordLike, TopicPartition

LagFn = Callable[[TopicPartition], "int | None"]


class PartitionGroup:
    __slots__ = (
        "_deadlines",
        "_heads",
        "_lag",
        "_max_idle",
        "_timestamps",
        "buffered",
        "enforced",
        "limit",
        "paused",
        "queues",
    )

    def __init__(
        self,
        partitions: Iterable[TopicPartition],
        *,
        max_idle: float,
        lag: LagFn,
        limit: int,
    ) -> None:
        self.queues: dict[TopicPartition, deque[RecordLike]] = {
            tp: deque() for tp in sorted(partitions)
        }
        #: Each partition's ordering timestamp (``add``'s), and its head's, once taken (the
        #: head is the same record until it is taken out: ``_head_time``).
        self._timestamps: dict[TopicPartition, Callable[[RecordLike], int]] = {}
        self._heads: dict[TopicPartition, int] = {}
        self._max_idle = max_idle
        self._lag = lag
        self._deadlines: dict[TopicPartition, float] = {}
        self.limit = limit
        self.buffered = 0
        #: Partitions this group paused because their buffer is full.
        self.paused: set[TopicPartition] = set()
        #: Times the group went on without an empty partition (Kafka Streams' sensor).
        self.enforced = 0

    def add(
        self,
        tp: TopicPartition,
        records: Sequence[RecordLike],
        timestamp: Callable[[RecordLike], int],
    ) -> None:
        # A join's inputs all come through here: one C call, and no timestamp taken yet.
        self.queues[tp].extend(records)
        self._timestamps[tp] = timestamp
        self.buffered += len(records)

    def _head_time(self, tp: TopicPartition, queue: deque[RecordLike]) -> int:
        """The timestamp of ``tp``'s head (``queue[0]``), taken once while it is the head."""
        head = self._heads.get(tp)
        if head is None:
            head = self._heads[tp] = self._timestamps[tp](queue[0])
        return head

    def ready(self, now: float) -> bool:
        """Whether the next record may be taken now (see the module doc)."""
        if not self.buffered:
            return False
        if self._max_idle < 0:
            return True
        enforced = False
        for tp, queue in self.queues.items():
            if queue:
                self._deadlines.pop(tp, None)
                continue
            lag = self._lag(tp)
            if lag is None or lag > 0:
                self._deadlines.pop(tp, None)
                return False  # its records are one fetch away
            deadline = self._deadlines.setdefault(tp, now + self._max_idle)
            if now < deadline:
                return False
            enforced = True
        if enforced:
            self.enforced += 1
        return True

    def next_deadline(self) -> float | None:
        return min(self._deadlines.values(), default=None)

    def next_run(self) -> tuple[TopicPartition, list[RecordLike]]:
        """The partition with the smallest head timestamp (ties: lowest partition first) and its
        records up to the next head of any other partition."""
        queues = self.queues
        nonempty = [tp for tp, queue in queues.items() if queue]
        if len(nonempty) == 1:  # the only partition with records (a join's, mostly): all
            tp = nonempty[0]
            queue = queues[tp]
            run = list(queue)
            queue.clear()
            self._heads.pop(tp, None)
            self.buffered -= len(run)
            return tp, run
        heads = sorted((self._head_time(tp, queues[tp]), tp) for tp in nonempty)
        _, tp = heads[0]
        bound = heads[1]
        queue = queues[tp]
        timestamp = self._timestamps[tp]
        run = [queue.popleft()]  # the head: before the bound (ties: the lower partition)
        self._heads.pop(tp)
        while queue:
            head = timestamp(queue[0])
            if (head, tp) >= bound:
                self._heads[tp] = head
                break
            run.append(queue.popleft())
        self.buffered -= len(run)
        return tp, run

    def to_pause(self) -> list[TopicPartition]:
        out = [
            tp for tp, q in self.queues.items() if len(q) >= self.limit and tp not in self.paused
        ]
        self.paused.update(out)
        return out

    def to_resume(self) -> list[TopicPartition]:
        out = [tp for tp in self.paused if len(self.queues[tp]) < self.limit // 2]
        self.paused.difference_update(out)
        return out

    def clear(self) -> list[TopicPartition]:
        """Drop every buffered record (after an abort: the consumer seeks back); returns the
        partitions this group had paused, to resume."""
        for queue in self.queues.values():
            queue.clear()
        self._heads.clear()
        self.buffered = 0
        self._deadlines.clear()
        paused, self.paused = sorted(self.paused), set()
        return paused

    def drop(self, tp: TopicPartition) -> None:
        """Forget ``tp``'s buffered records: the consumer seeks back to the first record not
        processed (a partition held back for busy agents) and fetches them again. Its pause,
        if this group made one, is now the worker's."""
        queue = self.queues[tp]
        self.buffered -= len(queue)
        queue.clear()
        self._heads.pop(tp, None)
        self.paused.discard(tp)
        self._deadlines.pop(tp, None)

    def has_buffered(self, tp: TopicPartition) -> bool:
        return bool(self.queues[tp])
