"""Watching a consumer group make progress: committed offsets against end offsets, over time.

The chaos run needs three things from the group's committed offsets (there is no event a stream
processor emits that means "processing works again", but its committed offsets are exactly that):

- after each fault, how long until processing resumed: every input partition that received
  records since the fault has had its committed offset move past where it was (invariant 12);
- at the end, that everything was processed (committed == end on every input partition);
- a snapshot for the fault log.

Polling the broker with a deadline is the only way to observe this, so the monitor polls
(every ``interval`` seconds) and keeps the latest answer; a poll that fails (a broker is down)
keeps the previous answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streams_app.aio import cancel_and_wait, within
from streams_app.chaos.reader import partitions_of

log = logging.getLogger(__name__)

Offsets = dict[tuple[str, int], int]
#: Seconds without any new input after which input counts as stopped (the generator is done).
INPUT_STOPPED = 5.0


class ProgressMonitor:
    def __init__(
        self, bootstrap: str, group_id: str, topics: Collection[str], interval: float = 0.25
    ) -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.topics = list(topics)
        self.interval = interval
        self.committed: Offsets = {}
        self.ends: Offsets = {}
        self.updated_at = 0.0
        #: When the end offsets last moved (monotonic): input stopped if long ago.
        self.ends_changed_at = time.monotonic()
        #: Every answer that differed from the one before: (monotonic time, committed, ends).
        self.history: list[tuple[float, Offsets, Offsets]] = []
        self._updated = asyncio.Event()
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="chaos-progress")
        self._consumer: Any = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_uncommitted",
            enable_auto_commit=False,
            client_id="chaos-progress",
        )
        self._tps: list[TopicPartition] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._admin.start()
        await self._consumer.start()
        self._tps = await partitions_of(self._consumer, self.topics)
        await self.poll()
        self._task = asyncio.create_task(self._run(), name="chaos-progress")

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await cancel_and_wait({"chaos progress monitor": task})
        with contextlib.suppress(Exception):
            await self._consumer.stop()
        with contextlib.suppress(Exception):
            await self._admin.close()

    async def _run(self) -> None:
        # Ends by cancellation (stop); the loop's waits use `within`, which cannot swallow it.
        while True:
            try:
                await within(self.poll(), 10)
            except Exception as exc:
                log.debug("progress poll failed: %r", exc)
            await asyncio.sleep(self.interval)

    async def poll(self) -> None:
        started = time.monotonic()
        # The group's offsets first, the end offsets after: then "committed >= end" means that
        # everything the topics held at the second read had been processed by the first. In
        # the other order a transaction that committed in between (the last input's, which
        # also wrote the repartition topic) was counted processed while its repartition
        # records were not yet in the ends read: "drained" came one hop early, the workers
        # were stopped, and the repartition topic was left behind its committed offsets.
        found = await self._admin.list_consumer_group_offsets(self.group_id, partitions=self._tps)
        ends = await self._consumer.end_offsets(self._tps)
        committed = {
            (tp.topic, tp.partition): int(meta.offset)
            for tp, meta in found.items()
            if meta is not None and meta.offset >= 0
        }
        if set(self.committed) - set(committed):
            # A coordinator moving answers without some offsets it has: not an answer.
            raise RuntimeError("the group's offsets came back incomplete")
        self.publish(
            started, committed, {(tp.topic, tp.partition): int(o) for tp, o in ends.items()}
        )

    def publish(self, started: float, committed: Offsets, ends: Offsets) -> None:
        """Take an answer read by a poll that started at ``started`` (monotonic)."""
        if ends != self.ends:
            self.ends_changed_at = started
        self.ends = ends
        self.committed = committed
        if not self.history or self.history[-1][1:] != (self.committed, self.ends):
            self.history.append((started, dict(self.committed), dict(self.ends)))
        # What was read is at least as new as the moment the poll started.
        self.updated_at = started
        self._updated.set()
        self._updated = asyncio.Event()

    async def next_update(self) -> None:
        await self._updated.wait()

    def snapshot(self) -> tuple[Offsets, Offsets]:
        return dict(self.committed), dict(self.ends)

    def lag(self) -> int:
        return sum(max(0, end - self.committed.get(tp, 0)) for tp, end in self.ends.items())

    def caught_up(self) -> bool:
        return bool(self.ends) and all(
            self.committed.get(tp, 0) >= end for tp, end in self.ends.items()
        )

    def resumed_since(self, committed: Mapping[tuple[str, int], int]) -> bool:
        """Has every partition with input since ``committed`` was taken committed past it, and
        has there been such input (or has input stopped altogether)?

        Without the second half the answer was vacuous whenever no input had arrived since the
        baseline: the generator writes in chunks, and a fault striking while the group was
        caught up between two of them was "resumed" at the next poll, cut or not.
        """
        new_input = False
        for tp, end in self.ends.items():
            before = committed.get(tp, 0)
            if end > before:
                new_input = True
                if self.committed.get(tp, 0) <= before:
                    return False
        return new_input or self.updated_at - self.ends_changed_at > INPUT_STOPPED

    async def wait_resumed(self, since: float, timeout: float) -> float | None:
        """Seconds from ``since`` (monotonic, when a fault struck) until processing resumed.

        The baseline is the first answer read entirely after ``since`` (what was committed
        when the fault struck, or later); processing has resumed once input arrived beyond the
        baseline and every partition that has such input has committed past it (or, when no
        input comes any more, once that is clear). None if that takes over ``timeout``.
        """
        deadline = since + timeout
        baseline: Offsets | None = None
        while True:
            if self.updated_at >= since:
                if baseline is None:
                    baseline = dict(self.committed)
                elif self.resumed_since(baseline):
                    return self.updated_at - since
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await within(self.next_update(), remaining)

    async def wait_caught_up(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.caught_up():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await within(self.next_update(), remaining)
        return True
