"""Final results when input goes quiet: the opt-in idle close (docs/joins.md, issue 37 item 8).

Windows close, and left/outer join records get their nulls, only when stream time passes their
close, and stream time only moves when records come (Kafka Streams: confluentinc/ksql #9084,
quixstreams #790). So a key whose input stops never gets its last result. A windowed table or a
join declared with ``idle_close=`` opts out of that: once every input partition of a task it
reads has been *quiet* for that long (no record processed, nothing left to fetch or buffered),
the task moves its stream time up to the wall clock, and what that closes is emitted, in the
worker's transaction like any result. Off by default, so the default answers stay Kafka
Streams'. The price is lateness: records that come afterwards with times older than the new
stream time minus grace are late, so it suits inputs whose event times follow the wall clock.

**When.** A partition is quiet since the last time the task's position on it moved (a record
processed, or a transaction marker stepped over), measured on the worker's monotonic clock
from when this worker first saw the position; and it must be caught up: the last fetch
response knew of nothing past the position, and no fetched record waits in a partition group.
Idle close notes the positions once per turn of the loop (per batch, never per record) and
checks at most every :data:`CHECK_EVERY` of the smallest ``idle_close`` (bounded).

**Only when something is due.** A target moves its stream time only when the wall clock has
passed the close of something it holds (a window, a waiting join record). An idle worker with
nothing pending stays quiet: no transaction, no changelog record, no commit.

**Exactly once.** The advance and what it emits are part of the open transaction: a windowed
table's observed time is committed with the task's offsets (the task is marked touched, so its
offsets and their metadata go into the next commit even though no record moved them), a join's
stream time and its released records with its unmatched store. An abort undoes all of it, and
the next check does it again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from streams_app.runtime.clock import Clock
from streams_app.runtime.joins.base import JoinProcessor, TaskContext
from streams_app.runtime.task import Task
from streams_app.transport.base import TopicPartition

if TYPE_CHECKING:
    from streams_app.app.table import Table
    from streams_app.app.windowed import WindowedTableState

#: Idle close looks at most this often, as a share of the smallest ``idle_close``.
CHECK_EVERY = 0.1
#: ... and never more often than this, nor less often than that (seconds).
CHECK_BOUNDS = (0.05, 1.0)


class IdleTarget(Protocol):
    """A windowed table or a join that opted in (``idle_close=``)."""

    @property
    def name(self) -> str: ...

    @property
    def idle_close(self) -> float:
        """Seconds of quiet input before stream time follows the wall clock."""
        ...

    def applies(self, task: Task) -> bool:
        """Whether ``task`` holds a partition of it."""
        ...

    def inputs(self, task: Task) -> Iterable[TopicPartition]:
        """The partitions of ``task`` whose quiet it waits for."""
        ...

    async def close(self, task: Task, wall_ms: int) -> bool:
        """Move its stream time in ``task`` up to ``wall_ms`` if that closes something, and
        emit what it can emit itself; True if it moved (the caller then punctuates ``task``)."""
        ...


class WindowedIdleTarget:
    """A windowed table's idle close: its observed stream time follows the wall clock; the
    punctuator then emits the windows that closed (final results, ``on_window_close``) and
    expires what fell out of retention, as after any batch."""

    def __init__(self, table: Table) -> None:
        if table.window is None or table.idle_close is None:
            raise ValueError(f"table {table.name!r} is not a windowed table with idle_close")
        self.table = table
        self.name = table.name
        self.idle_close: float = table.idle_close

    def applies(self, task: Task) -> bool:
        table = self.table
        return table.name in task.stores and table.partitions in (None, task.partition_count)

    def inputs(self, task: Task) -> Iterable[TopicPartition]:
        # Agents update windowed tables from any record of the task: all its inputs.
        return task.partitions

    async def close(self, task: Task, wall_ms: int) -> bool:
        state: WindowedTableState = task.windowed(self.table)  # type: ignore[assignment]
        due = state.next_close()
        if due is None or due > wall_ms or wall_ms <= state.observed:
            return False
        state.prior = state.observed = wall_ms
        task.touched = True  # its offsets carry the new observed time (runtime.stream_time)
        return True


class JoinIdleTarget:
    """A join's idle close (``idle_close=`` on a stream-stream join, or a stream-table join
    with grace): its processor moves the join's stream time in the task and emits what that
    releases (``JoinProcessor.on_idle``), in the task's transaction."""

    def __init__(self, processor: JoinProcessor) -> None:
        join = processor.join
        if join.idle_close_ms is None:
            raise ValueError(f"join {join.name!r} has no idle_close")
        self.processor = processor
        self.name = join.name
        self.idle_close: float = join.idle_close_ms / 1000
        self.reads = frozenset(join.reads)

    def applies(self, task: Task) -> bool:
        return any(tp.topic in self.reads for tp in task.partitions)

    def inputs(self, task: Task) -> Iterable[TopicPartition]:
        return [tp for tp in task.partitions if tp.topic in self.reads]

    async def close(self, task: Task, wall_ms: int) -> bool:
        with TaskContext(task):
            moved = await self.processor.on_idle(task, wall_ms)
        if moved:
            task.touched = True  # commit the join's stream time even if nothing was emitted
        return moved


class _Quiet:
    """Per task: for each input partition, the position last seen and since when."""

    __slots__ = ("since", "task")

    def __init__(self, task: Task) -> None:
        self.task = task
        self.since: dict[TopicPartition, tuple[int | None, float]] = {}


class IdleClose:
    """Runs the idle close of a worker's opted-in targets over its running tasks."""

    def __init__(
        self,
        clock: Clock,
        targets: Sequence[IdleTarget],
        lag: Callable[[TopicPartition], int | None],
    ) -> None:
        self.clock = clock
        self.targets = list(targets)
        self._lag = lag
        shortest = min((t.idle_close for t in self.targets), default=0.0)
        low, high = CHECK_BOUNDS
        self.check_every = min(max(shortest * CHECK_EVERY, low), high)
        self._next_check = -1.0
        self._quiet: dict[object, _Quiet] = {}
        #: Closes that moved a stream time (per target name), for /metrics and tests.
        self.closes: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.targets)

    def due(self) -> bool:
        """Whether the next :meth:`run` would look (the test driver waits for it: a moved
        manual clock is not idle until the loop has checked what it closes)."""
        return self.clock.monotonic() >= self._next_check

    def quiet_for(self, task: Task, partitions: Iterable[TopicPartition], now: float) -> float:
        """How long every one of ``partitions`` has been quiet and caught up (0: not)."""
        quiet = self._quiet.get(task.id)
        if quiet is None or quiet.task is not task:
            quiet = self._quiet[task.id] = _Quiet(task)
        since = quiet.since
        offsets = task.offsets
        oldest = now
        for tp in partitions:
            position = offsets.get(tp)
            seen = since.get(tp)
            if seen is None or seen[0] != position:
                since[tp] = (position, now)
                oldest = now
                continue
            if self._lag(tp) != 0 or task.buffered(tp):
                since[tp] = (position, now)  # not caught up: quiet starts once it is
                oldest = now
                continue
            if seen[1] < oldest:
                oldest = seen[1]
        return now - oldest

    async def run(self, tasks: Iterable[Task], punctuate: Callable[[Task], Awaitable[None]]) -> int:
        """Close what is due in ``tasks``; ``punctuate(task)`` emits what a moved stream time
        closed (the punctuator's end-of-batch work) and lets agents reading a join's released
        results take them. Returns how many targets moved.

        Called once per turn of the loop: every call notes where the tasks' positions are
        (so quiet is measured from the turn that processed the last record, not from the
        next check); only every :attr:`check_every` does it close anything."""
        clock = self.clock
        now = clock.monotonic()
        check = now >= self._next_check
        if check:
            self._next_check = now + self.check_every
        wall_ms = int(clock.time() * 1000)
        moved = 0
        live: set[object] = set()
        for task in tasks:
            live.add(task.id)
            touched = False
            for target in self.targets:
                if not target.applies(task):
                    continue
                quiet = self.quiet_for(task, target.inputs(task), now)
                if not check or quiet < target.idle_close:
                    continue
                if await target.close(task, wall_ms):
                    touched = True
                    moved += 1
                    self.closes[target.name] = self.closes.get(target.name, 0) + 1
            if touched:
                await punctuate(task)
        for gone in set(self._quiet) - live:
            del self._quiet[gone]
        return moved
