"""What happens when a record cannot be processed: decided per record, never per worker.

Two kinds of failure, as in Kafka Streams (``DeserializationExceptionHandler`` for the first,
KIP-1033's ``ProcessingExceptionHandler`` for the second):

**A bad record** (:class:`~streams_app.errors.RecordError`): bytes that do not decode into the
topic's declared type (not JSON, not UTF-8, a JSON array, a missing field, ``"qty": "two"``), a
tombstone on a topic of Record values, a null key where a table needs a key, an output the
broker refuses for good (too large). No retry can cure it and stopping would only crash-loop
the worker on it, so it goes to the dead-letter topic at once, whatever the policy.

**An agent error** (anything else an agent raises on a record): the transaction is aborted (so
nothing of the failed attempt is ever visible) and every task rewinds to its committed offsets,
which is inherent in one transaction per worker. Then:

- the record is retried up to ``max_retries`` times (default 3); before each retry only **its
  partition** is paused for a backoff (``retry_backoff`` doubling up to ``retry_backoff_max``),
  while every other partition is processed and committed;
- after the last retry, ``error_policy`` decides: ``dlq`` (the default) sends the record to the
  dead-letter topic inside the transaction and goes on; ``stop`` stops the worker with an error
  naming the agent and the record; ``retry`` never gives up (the partition waits, the others go
  on: for failures known to be transient, such as a downstream service that is down).

Every failure costs one abort, and each record is retried a bounded number of times, so the
number of aborts is bounded by (failing records) x (max_retries + 1): no livelock.

A dead-letter decision outlives the abort that follows it: the record's position stays marked
until a commit covers it (:meth:`ErrorPolicy.committed`). Marks used to be dropped on first use,
so two failing records in one uncommitted window made each other's abort forget the other's
mark, and the worker alternated between them forever.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from streams_app.errors import RecordError, TopologyError
from streams_app.settings import AT_MOST_ONCE, Settings
from streams_app.topology.contract import Event
from streams_app.transport.base import TopicPartition

#: Dead-letter record headers (values are UTF-8).
H_ERROR_TYPE = "dlq.error.type"
H_ERROR_MESSAGE = "dlq.error.message"
H_SOURCE_TOPIC = "dlq.source.topic"
H_SOURCE_PARTITION = "dlq.source.partition"
H_SOURCE_OFFSET = "dlq.source.offset"
H_AGENT = "dlq.agent"
H_ATTEMPTS = "dlq.attempts"
_MAX_MESSAGE = 500

Position = tuple[str, int, int]


class Decision(enum.Enum):
    #: Abort, pause the record's partition for a backoff, then process the record again.
    RETRY = "retry"
    #: Abort, then send the record to the dead-letter topic when it comes round again.
    DEAD_LETTER = "dlq"
    #: Abort and stop the worker.
    STOP = "stop"
    #: At-most-once: the record is dropped (its offset was committed before processing).
    SKIP = "skip"


@dataclass(frozen=True)
class Failure:
    agent: str
    error: BaseException
    topic: str | None
    partition: int | None
    offset: int | None
    #: The record that failed (None outside a record: a timer).
    event: Event | None = field(default=None, compare=False, repr=False)
    #: Outside a record, but run again as soon as the abort replays its input: a window-close
    #: callback or a stream-time timer (a wall-clock timer waits for its next interval).
    replayed: bool = False

    @classmethod
    def of(
        cls, agent: str, error: BaseException, event: Event | None, *, replayed: bool = False
    ) -> Failure:
        if event is None:
            return cls(agent, error, None, None, None, replayed=replayed)
        return cls(agent, error, event.topic, event.partition, event.offset, event)

    @property
    def position(self) -> Position | None:
        if self.topic is None or self.partition is None or self.offset is None:
            return None
        return (self.topic, self.partition, self.offset)

    @property
    def tp(self) -> TopicPartition | None:
        if self.topic is None or self.partition is None:
            return None
        return TopicPartition(self.topic, self.partition)

    def where(self) -> str:
        if self.position is None:
            return "outside a record"
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def describe(self) -> str:
        """One line for logs and errors: coordinates and the error's type, never its text (it
        may quote the record's data)."""
        if self.position is None:
            return f"{self.agent} failed outside a record: {type(self.error).__name__}"
        return f"agent {self.agent} failed on {self.where()}: {type(self.error).__name__}"


def is_bad_record(error: BaseException) -> bool:
    """A failure of the record itself, which no retry can cure (see the module doc)."""
    return isinstance(error, RecordError)


class ErrorPolicy:
    """The per-record decisions of one worker, and how long they are remembered."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: Failed attempts per record; forgotten once a commit moves past the record.
        self.attempts: dict[Position, int] = {}
        #: Records to send to the dead-letter topic instead of the agent when they come round
        #: again; kept until a commit covers them (an abort in between must not forget them).
        self.poisoned: dict[Position, Failure] = {}
        #: Consecutive failures outside any record (timers), for the ``stop`` policy.
        self.outside_failures = 0
        #: Consecutive failures of replayed callbacks (window closes, stream-time timers),
        #: forgotten only when a commit makes progress: an abort replays the same records,
        #: which run the same callback again.
        self.callback_failures = 0
        self._last_committed: dict[TopicPartition, int] = {}

    def decide(self, failure: Failure) -> Decision:
        if isinstance(failure.error, TopologyError):
            return Decision.STOP  # a programming error: retrying cannot help
        settings = self.settings
        position = failure.position
        if position is None and failure.replayed:
            return self._decide_callback()
        if position is None:  # a timer: it runs again at its next interval
            self.outside_failures += 1
            retries = settings.max_retries
            if settings.error_policy == "stop" and (
                retries is None or self.outside_failures > retries
            ):
                return Decision.STOP
            return Decision.SKIP
        if is_bad_record(failure.error):
            return self._dead_letter(position, failure)
        attempts = self.attempts[position] = self.attempts.get(position, 0) + 1
        if settings.processing_guarantee == AT_MOST_ONCE:
            # No retry without repeating what the failed attempt already sent (acks=0).
            if settings.error_policy == "stop":
                return Decision.STOP
            if settings.error_policy == "dlq":
                return self._dead_letter(position, failure)
            return Decision.SKIP
        retries = settings.max_retries
        if settings.error_policy == "retry" or retries is None or attempts <= retries:
            return Decision.RETRY
        if settings.error_policy == "stop":
            return Decision.STOP
        return self._dead_letter(position, failure)

    def _decide_callback(self) -> Decision:
        """A window-close callback or stream-time timer failed. The abort replays the records
        that ran it, so it fails again at once: never skip it (that would livelock), retry it
        with backoff ``max_retries`` times, then stop (``stop`` and ``dlq``: there is no record
        to dead-letter, and dropping a window's final result would lose it) or, under
        ``retry``, go on retrying with backoff."""
        settings = self.settings
        if settings.processing_guarantee == AT_MOST_ONCE:
            return Decision.SKIP  # nothing is aborted, nothing replayed
        self.callback_failures += 1
        retries = settings.max_retries
        if settings.error_policy == "retry" or retries is None or self.callback_failures <= retries:
            return Decision.RETRY
        return Decision.STOP

    def _dead_letter(self, position: Position, failure: Failure) -> Decision:
        self.poisoned[position] = failure
        return Decision.DEAD_LETTER

    def backoff(self, position: Position | None) -> float:
        """Seconds the record's partition waits before the record is retried (None: a
        replayed callback, whose worker waits)."""
        tries = self.callback_failures if position is None else self.attempts.get(position, 1)
        attempts = max(1, tries)
        return float(
            min(
                self.settings.retry_backoff * (2 ** (attempts - 1)),
                self.settings.retry_backoff_max,
            )
        )

    def poison_for(self, topic: str, partition: int, offset: int) -> Failure | None:
        """The failure a record is to be dead-lettered for, if it is; the mark stays."""
        return self.poisoned.get((topic, partition, offset))

    def attempts_of(self, position: Position) -> int:
        return self.attempts.get(position, 0)

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A commit went through with these offsets (next record to process per partition):
        decisions about records below them are history."""
        self.outside_failures = 0
        if offsets != self._last_committed:  # progress: the failed callback got past
            self.callback_failures = 0
            self._last_committed = dict(offsets)
        for book in (self.poisoned, self.attempts):
            if book:
                for position in [p for p in book if _below(p, offsets)]:
                    del book[position]

    def succeeded(self) -> None:
        """A whole batch committed (the PostgreSQL sink, which decides per batch): every
        decision so far is history."""
        self.outside_failures = 0
        self.callback_failures = 0
        self.attempts.clear()
        self.poisoned.clear()

    def keep_only(self, partitions: Collection[TopicPartition]) -> None:
        """A new assignment: decisions about partitions now owned elsewhere are moot (their
        owner decides afresh); those about partitions still ours stand."""
        owned = {(tp[0], tp[1]) for tp in partitions}
        for book in (self.poisoned, self.attempts):
            for position in [p for p in book if (p[0], p[1]) not in owned]:
                del book[position]


def _below(position: Position, offsets: Mapping[TopicPartition, int]) -> bool:
    committed = offsets.get(TopicPartition(position[0], position[1]))
    return committed is not None and position[2] < committed


def dead_letter_headers(
    *,
    error: BaseException,
    topic: str,
    partition: int,
    offset: int,
    agent: str | None,
    attempts: int = 0,
    original: tuple[tuple[str, bytes], ...] = (),
) -> list[tuple[str, bytes]]:
    """The original headers, plus what failed and where the record came from."""
    message = str(error)[:_MAX_MESSAGE]
    headers = list(original)
    headers += [
        (H_ERROR_TYPE, type(error).__name__.encode()),
        (H_ERROR_MESSAGE, message.encode("utf-8", "replace")),
        (H_SOURCE_TOPIC, topic.encode()),
        (H_SOURCE_PARTITION, str(partition).encode()),
        (H_SOURCE_OFFSET, str(offset).encode()),
    ]
    if agent:
        headers.append((H_AGENT, agent.encode()))
    if attempts:
        headers.append((H_ATTEMPTS, str(attempts).encode()))
    return headers
