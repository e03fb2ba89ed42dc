"""The generator: keyed integers into the input topic, and a record of what Kafka acknowledged.

Modelled on the driver of Kafka's streams EOS system test (``EosTestDriver``): an idempotent
producer (acks=all) writes ``records`` records, key ``str(randrange(keys))`` (UTF-8), value
``randrange(values)`` (a JSON integer), partitioned by Kafka's default murmur2 partitioner. The
records are spread evenly over ``duration`` seconds so that faults hit a system that is busy.

Every acknowledged record is remembered with its partition and offset (:class:`Acked`): the
verifier checks that each one is in the topic (a lost acknowledged write is a broker/client
failure, reported apart from the stream processor's). A send that fails (a broker bounce outlasting
the request timeout) is counted as *indeterminate*: the record may or may not have been written,
and the producer is replaced (an idempotent producer whose batch failed has a gap in its sequence
numbers and cannot be reused). The input the verifier checks against is always what the topic
holds, never what the generator meant to send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from streams_app.aio import within

log = logging.getLogger(__name__)

#: Records sent between two checks of the pace (and of acknowledgements), at most ...
CHUNK = 500
#: ... and at most this many seconds' worth, so that input flows steadily at low rates too
#: (the progress monitor tells "resumed" from "nothing arrived" by new input).
CHUNK_SECONDS = 0.25


@dataclass
class Acked:
    """What the brokers acknowledged, per partition, in acknowledgement order."""

    offsets: dict[int, array[int]] = field(default_factory=dict)
    keys: dict[int, array[int]] = field(default_factory=dict)
    values: dict[int, array[int]] = field(default_factory=dict)

    def add(self, partition: int, offset: int, key: int, value: int) -> None:
        if partition not in self.offsets:
            self.offsets[partition] = array("q")
            self.keys[partition] = array("l")
            self.values[partition] = array("l")
        self.offsets[partition].append(offset)
        self.keys[partition].append(key)
        self.values[partition].append(value)

    def __len__(self) -> int:
        return sum(len(o) for o in self.offsets.values())


@dataclass
class GeneratorResult:
    sent: int = 0
    acked: Acked = field(default_factory=Acked)
    #: Sends that failed: written or not, nobody knows.
    indeterminate: int = 0
    producers: int = 0
    seconds: float = 0.0


class Generator:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        records: int,
        duration: float,
        seed: int,
        keys: int = 20_000,
        values: int = 10_000,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.records = records
        self.duration = duration
        self.keys = keys
        self.values = values
        self.request_timeout_ms = request_timeout_ms
        self._rng = random.Random(seed)
        self.result = GeneratorResult()
        self._stop = asyncio.Event()
        self._hurried = False
        #: Set by :meth:`stop` and :meth:`hurry`: ends the wait for the next record's due time.
        self._wake = asyncio.Event()

    def stop(self) -> None:
        """Stop early (the records not sent yet are simply not part of the run)."""
        self._stop.set()
        self._wake.set()

    def hurry(self) -> None:
        """Send the records not sent yet at once, unpaced. A back-to-back schedule calls it when
        its last fault has recovered: pacing is there so that faults hit a busy system, and
        spreading the rest over what is left of ``duration`` would only make the run longer
        (the duration is then an upper bound, chosen so that no fault strikes after the input)."""
        self._hurried = True
        self._wake.set()

    @property
    def progress(self) -> float:
        return self.result.sent / self.records if self.records else 1.0

    async def _producer(self) -> Any:
        """A started producer; while no broker answers (the soak restarts its only one), try
        again every second: there is no event to wait for."""
        while True:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                enable_idempotence=True,
                acks="all",
                linger_ms=5,
                request_timeout_ms=self.request_timeout_ms,
                client_id="chaos-generator",
            )
            try:
                await producer.start()
            except KafkaConnectionError:
                await producer.stop()
                log.info("generator: no broker answers; trying again in 1 s")
                await asyncio.sleep(1.0)
                continue
            self.result.producers += 1
            return producer

    async def run(self) -> GeneratorResult:
        result = self.result
        started = time.monotonic()
        producer = await self._producer()
        rate = self.records / self.duration if self.duration > 0 else 0.0
        chunk_size = max(1, min(CHUNK, int(rate * CHUNK_SECONDS))) if rate else CHUNK
        try:
            while result.sent < self.records and not self._stop.is_set():
                if rate and not self._hurried:
                    # Pace: the n-th record is due n / rate seconds after the start.
                    due = started + result.sent / rate
                    delay = due - time.monotonic()
                    if delay > 0:
                        with contextlib.suppress(TimeoutError):
                            await within(self._wake.wait(), delay)
                        continue  # due now, or stopped, or hurried: look again
                size = CHUNK if self._hurried else chunk_size
                count = min(size, self.records - result.sent)
                chunk = [
                    (self._rng.randrange(self.keys), self._rng.randrange(self.values))
                    for _ in range(count)
                ]
                failed = await self._send_chunk(producer, chunk)
                result.sent += count
                if failed:
                    log.warning("generator: %d sends failed; replacing the producer", failed)
                    result.indeterminate += failed
                    await producer.stop()
                    producer = await self._producer()
        finally:
            await producer.stop()
            result.seconds = time.monotonic() - started
        return result

    async def _send_chunk(self, producer: Any, chunk: list[tuple[int, int]]) -> int:
        futures: list[asyncio.Future[Any]] = []
        failed = 0
        for key, value in chunk:
            try:
                futures.append(
                    await producer.send(self.topic, key=b"%d" % key, value=b"%d" % value)
                )
            except Exception as exc:
                log.warning("generator: send failed: %r", exc)
                futures.append(_failed_future(exc))
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        for (key, value), outcome in zip(chunk, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                failed += 1
            else:
                self.result.acked.add(outcome.partition, outcome.offset, key, value)
        return failed


def _failed_future(exc: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future
