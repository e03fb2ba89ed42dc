"""Dead-letter topics: where records that cannot be processed go, inside the transaction.

A dead letter is a copy of the consumed record (same key, value and headers, same partition
number) plus headers saying what failed and where the record came from
(:func:`~streams_app.runtime.errors_policy.dead_letter_headers`). It is sent in the same
transaction that moves the input offset past the record, so the record is either dead-lettered
and skipped, or neither: never lost, never dead-lettered twice for ``read_committed`` readers.

A copy that would not fit (larger than ``max_request_size`` or the topic's
``max.message.bytes``) is truncated instead (``runtime/dead_letter_size.py``): at once when it
is over ``max_request_size``, or, when the broker refuses it at commit (a topic limit the
worker could not read), in a smaller form when the record comes round after the abort. Only a
copy with no key and no value refused too stops the worker with :class:`DeadLetterRefused`,
naming the record, instead of looping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streams_app.errors import WorkerStopped
from streams_app.runtime.dead_letter_size import BARE, FIT, fit
from streams_app.runtime.errors_policy import dead_letter_headers
from streams_app.runtime.producer import StreamsProducer
from streams_app.topology.contract import SendFuture
from streams_app.transport.errors import TransportError, is_record_rejected

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetter:
    """A record on its way to a dead-letter topic: where it came from and why."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]
    error: BaseException
    agent: str | None
    attempts: int = 0

    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    @property
    def position(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


class DeadLetterRefused(WorkerStopped):
    """The dead-letter topic refused a record for good: the worker stops, naming the record."""

    def __init__(self, letter: DeadLetter, dead_letter_topic: str, cause: BaseException) -> None:
        self.topic = letter.topic
        self.partition = letter.partition
        self.offset = letter.offset
        self.agent = letter.agent
        self.error = letter.error
        self.cause = cause
        agent = f"agent {letter.agent}, " if letter.agent else ""
        super().__init__(
            f"cannot dead-letter {letter.where()} ({agent}{type(letter.error).__name__}): "
            f"topic {dead_letter_topic!r} refused it for good ({type(cause).__name__}). "
            "even with no key and no value. Stopping rather than retrying forever; nothing of "
            f"it was committed and the record is still at {letter.where()}. Fix: raise the "
            "topic's max.message.bytes (a copy is the dlq.* headers and at least some bytes), "
            "or fix what made the record fail; then restart"
        )


class DeadLetters:
    """The dead letters of the open transaction, and the count of committed ones."""

    def __init__(
        self,
        producer: StreamsProducer,
        topics: Mapping[str, str],
        partition_counts: Mapping[str, int],
        *,
        on_committed: Callable[[str], None] | None = None,
    ) -> None:
        self.producer = producer
        #: Told the source topic of each dead letter once its transaction commits (metrics:
        #: a dead letter sent again after an abort counts once).
        self._on_committed = on_committed
        #: Source topic -> its dead-letter topic.
        self.topics = topics
        self._partition_counts = partition_counts
        #: (send future, letter, how it was truncated: "" when whole) of the open transaction.
        self._open: list[tuple[SendFuture, DeadLetter, str]] = []
        #: How many of ``_open`` the commit in flight carries (None: no commit in flight);
        #: letters sent meanwhile belong to the next transaction (runtime/commit.py).
        self._sealed: int | None = None
        #: Dead letters committed so far (a record sent again after an abort counts once).
        self.committed_count = 0
        #: Of those, the ones sent truncated (the whole copy would not have fit).
        self.truncated_count = 0
        #: Records whose copy the broker refused: the smaller step their next copy takes.
        self._step: dict[tuple[str, int, int], int] = {}

    async def send(self, letter: DeadLetter) -> None:
        topic = self.topics[letter.topic]
        step = self._step.get(letter.position, FIT)
        copy = fit(
            letter.key,
            letter.value,
            tuple(letter.headers),
            dead_letter_headers(
                error=letter.error,
                topic=letter.topic,
                partition=letter.partition,
                offset=letter.offset,
                agent=letter.agent,
                attempts=letter.attempts,
            ),
            self.producer.max_request_size,
            step,
        )
        # Logged when it commits (committed()): a transaction that aborts takes the letter
        # with it, and the record is dead-lettered again when it comes round.
        log.debug(
            "record %s sent to dead-letter topic %s (not committed yet)", letter.where(), topic
        )
        count = self._partition_counts.get(topic)
        partition = letter.partition if not count else letter.partition % count
        try:
            future = await self.producer.send(
                topic, key=copy.key, value=copy.value, partition=partition, headers=copy.headers
            )
        except TransportError as exc:
            if not is_record_rejected(exc):
                raise
            if step >= BARE:
                raise DeadLetterRefused(letter, topic, exc) from exc
            self._step[letter.position] = step + 1  # refused by the client: smaller, now
            await self.send(letter)
            return
        truncated = (
            f", truncated ({copy.truncated} cut; the value was {copy.original_size} bytes) "
            "to fit what the broker accepts"
            if copy.truncated
            else ""
        )
        self._open.append((future, letter, truncated))

    def raise_if_refused(self) -> bool:
        """After a failed commit (and its abort): did the broker refuse a dead letter? Then its
        record is dead-lettered smaller when it comes round (True); a bare copy refused stops
        the worker (:class:`DeadLetterRefused`).

        Forgets the transaction's dead letters either way: they were aborted with it, and the
        records they came from are dead-lettered again when they come round.
        """
        sent, self._open, self._sealed = self._open, [], None
        refused = False
        for future, letter, _ in sent:
            if not future.done() or future.cancelled():
                continue
            exc = future.exception()
            if exc is not None and is_record_rejected(exc):
                step = self._step.get(letter.position, FIT)
                if step >= BARE:
                    raise DeadLetterRefused(letter, self.topics[letter.topic], exc) from exc
                self._step[letter.position] = step + 1
                refused = True
        return refused

    def aborted(self) -> None:
        self._open.clear()
        self._sealed = None

    def seal(self) -> None:
        """A commit goes into flight while processing goes on: the letters sent so far are
        the ones it carries."""
        self._sealed = len(self._open)

    def committed(self) -> None:
        upto = len(self._open) if self._sealed is None else self._sealed
        done, self._open, self._sealed = self._open[:upto], self._open[upto:], None
        self.committed_count += len(done)
        for _, letter, truncated in done:
            self.truncated_count += bool(truncated)
            self._step.pop(letter.position, None)
            log.warning(
                "record %s went to dead-letter topic %s (%s%s)%s",
                letter.where(),
                self.topics[letter.topic],
                type(letter.error).__name__,
                f" after {letter.attempts} attempts" if letter.attempts > 1 else "",
                truncated,
            )
            if self._on_committed is not None:
                self._on_committed(letter.topic)
