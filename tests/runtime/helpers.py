"""Running a worker inside the test's event loop, against the real broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from streams_app import App
from streams_app.runtime.worker import Worker
from streams_app.testing.workers import WorkerProcess


async def await_started(worker: Worker, run: asyncio.Task[None], timeout: float = 60) -> None:
    """Wait until ``worker`` (running as ``run``) has started: raises its start error if it
    fails first, TimeoutError (cancelling it) if it is not started in ``timeout`` seconds."""
    started = asyncio.create_task(worker.started.wait())
    done, _ = await asyncio.wait(
        {run, started}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
    )
    if run in done:
        started.cancel()
        run.result()  # raises the start error
        raise AssertionError("the worker ended without starting or failing")
    if started not in done:
        started.cancel()
        run.cancel()
        raise TimeoutError(f"worker did not start within {timeout:g}s")


@contextlib.asynccontextmanager
async def running_worker(app: App, state_dir: Path, **overrides: Any) -> AsyncIterator[Worker]:
    worker = app.worker(state_dir=state_dir, **overrides)
    task = asyncio.create_task(worker.run())
    await await_started(worker, task)
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 60)


async def wait_until(predicate: Any, timeout: float = 60.0, interval: float = 0.05) -> None:
    """Poll a condition on state Kafka offers no event for (e.g. a count of committed records)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


def sums_of(sent: list[tuple[str, int]]) -> dict[str, int]:
    """Each key's sum over ``sent`` (what ``tests.runtime.apps.keyed_sum``'s table holds)."""
    sums: dict[str, int] = {}
    for key, value in sent:
        sums[key] = sums.get(key, 0) + value
    return sums


async def table_from_changelog(bootstrap: str, changelog: str) -> dict[Any, Any]:
    """A table as its changelog holds it: JSON keys and values, the latest record per key
    (read_committed), a tombstone deleting its key."""
    from streams_app.readback import read_topics

    out: dict[Any, Any] = {}
    for record in (await read_topics(bootstrap, [changelog]))[changelog]:
        key = json.loads(record.key or b"null")
        if record.value is None:
            out.pop(key, None)
        else:
            out[key] = json.loads(record.value)
    return out


async def produce_keyed(
    bootstrap: str, topic: str, count: int, *, seed: int, keys: int = 200, start: int = 0
) -> list[tuple[str, int]]:
    """Write ``count`` keyed integers with an idempotent producer (acks=all), like the EOS test
    generator. Returns what was sent, in order."""
    import random

    from aiokafka import AIOKafkaProducer

    rng = random.Random(seed)
    sent: list[tuple[str, int]] = []
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    await producer.start()
    try:
        futures = []
        for _ in range(count):
            key, value = f"k{rng.randrange(keys)}", rng.randrange(10_000)
            sent.append((key, value))
            futures.append(await producer.send(topic, key=key.encode(), value=b"%d" % value))
        await producer.flush()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


class KafkaObserver:
    """One long-lived consumer and admin client for polling offsets during a test."""

    def __init__(self, bootstrap: str) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.admin import AIOKafkaAdminClient

        self.bootstrap = bootstrap
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level="read_uncommitted"
        )
        self.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        #: A read_committed consumer, started on first use (:meth:`in_transaction`).
        self._stable: Any = None

    async def __aenter__(self) -> KafkaObserver:
        await self.consumer.start()
        await self.admin.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()
        await self.admin.close()
        if self._stable is not None:
            await self._stable.stop()

    async def in_transaction(self, topics: list[str]) -> bool:
        """Whether a transaction with records in one of ``topics`` is open (a partition's
        high watermark above its last stable offset): a moment to SIGKILL a worker in."""
        if self._stable is None:
            from aiokafka import AIOKafkaConsumer

            self._stable = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap, isolation_level="read_committed"
            )
            await self._stable.start()
        tps = [tp for topic in topics for tp in await self.partitions(topic)]
        if not tps:
            return False
        high = await self.consumer.end_offsets(tps)
        stable = await self._stable.end_offsets(tps)
        return any(high[tp] > stable[tp] for tp in tps)

    async def partitions(self, topic: str) -> list[Any]:
        from aiokafka import TopicPartition

        parts = self.consumer.partitions_for_topic(topic)
        if not parts:
            await self.consumer._client.force_metadata_update()
            parts = self.consumer.partitions_for_topic(topic) or set()
        return [TopicPartition(topic, p) for p in sorted(parts)]

    async def end_total(self, topic: str) -> int:
        """Sum of a topic's high watermarks (open transactions included)."""
        tps = await self.partitions(topic)
        return sum((await self.consumer.end_offsets(tps)).values()) if tps else 0

    async def committed_total(self, group: str, topic: str) -> int:
        """Sum of the group's committed offsets on ``topic`` (partitions without one: 0)."""
        tps = await self.partitions(topic)
        committed = await self.admin.list_consumer_group_offsets(group, partitions=tps)
        return sum(max(0, c.offset) for c in committed.values())

    async def committed_equals_end(self, group: str, topic: str) -> bool:
        """Has the group committed every input record (committed offset == end offset)?"""
        tps = await self.partitions(topic)
        if not tps:
            return False
        ends = await self.consumer.end_offsets(tps)
        committed = await self.admin.list_consumer_group_offsets(group, partitions=tps)
        return all(tp in committed and committed[tp].offset == ends[tp] for tp in tps)


def keyed_sum_workers(tmp_path: Path, env: dict[str, str], *names: str) -> list[WorkerProcess]:
    """Worker processes of ``tests.runtime.apps.keyed_sum`` (:func:`app_workers`)."""
    return app_workers("tests.runtime.apps.keyed_sum", tmp_path, env, *names)


def app_workers(
    module: str, tmp_path: Path, env: dict[str, str], *names: str
) -> list[WorkerProcess]:
    """Worker processes of the app in ``module``, each with its own state directory and log
    under ``tmp_path`` (not started)."""
    return [
        WorkerProcess(
            module,
            state_dir=tmp_path / name,
            log_path=tmp_path / f"{name}.log",
            env=env,
            name=name,
        )
        for name in names
    ]
