"""What happens when processing a record fails.

An agent error always first aborts the transaction and rewinds every task to its committed
offsets (see :mod:`streams_app.runtime.commit`): nothing the failed attempt produced is ever
visible. Then the policy decides:

- ``retry`` (default): process again after a backoff that doubles up to ``retry_backoff_max``;
  after ``max_retries`` attempts on the same record (if set) the worker stops.
- ``stop``: the worker stops with an error naming the agent and the record's position.
- ``dlq``: when the record comes round again it goes to the dead-letter topic instead of the
  agent, inside the transaction, and processing goes on.

A record that cannot be decoded is not an agent error: it goes to the dead-letter topic at
once, whatever the policy, so a poison record can never crash-loop a worker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streams_app.app.context import Event
from streams_app.errors import TopologyError
from streams_app.settings import Settings

#: Dead-letter record headers (values are UTF-8).
H_ERROR_TYPE = "dlq.error.type"
H_ERROR_MESSAGE = "dlq.error.message"
H_SOURCE_TOPIC = "dlq.source.topic"
H_SOURCE_PARTITION = "dlq.source.partition"
H_SOURCE_OFFSET = "dlq.source.offset"
H_AGENT = "dlq.agent"
_MAX_MESSAGE = 500


class Decision(enum.Enum):
    RETRY = "retry"
    STOP = "stop"
    DEAD_LETTER = "dlq"


@dataclass(frozen=True)
class Failure:
    agent: str
    error: BaseException
    topic: str | None
    partition: int | None
    offset: int | None

    @classmethod
    def of(cls, agent: str, error: BaseException, event: Event | None) -> Failure:
        if event is None:
            return cls(agent, error, None, None, None)
        return cls(agent, error, event.topic, event.partition, event.offset)

    @property
    def position(self) -> tuple[str, int, int] | None:
        if self.topic is None or self.partition is None or self.offset is None:
            return None
        return (self.topic, self.partition, self.offset)

    def describe(self) -> str:
        where = (
            f"{self.topic}[{self.partition}]@{self.offset}" if self.position else "outside a record"
        )
        return f"agent {self.agent} failed on {where}: {type(self.error).__name__}"


class ErrorPolicy:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.attempts: dict[tuple[str, int, int] | None, int] = {}
        #: Records to send to the dead-letter topic instead of the agent when they come again.
        self.poisoned: dict[tuple[str, int, int], Failure] = {}

    def decide(self, failure: Failure) -> Decision:
        if isinstance(failure.error, TopologyError):
            return Decision.STOP  # a programming error: retrying cannot help
        policy = self.settings.error_policy
        if policy == "stop":
            return Decision.STOP
        position = failure.position
        if policy == "dlq" and position is not None:
            self.poisoned[position] = failure
            return Decision.DEAD_LETTER
        attempts = self.attempts.get(position, 0) + 1
        self.attempts[position] = attempts
        if self.settings.max_retries is not None and attempts > self.settings.max_retries:
            return Decision.STOP
        return Decision.RETRY

    def backoff(self, failure: Failure) -> float:
        attempts = max(1, self.attempts.get(failure.position, 1))
        return float(
            min(
                self.settings.retry_backoff * (2 ** (attempts - 1)),
                self.settings.retry_backoff_max,
            )
        )

    def take_poisoned(self, topic: str, partition: int, offset: int) -> Failure | None:
        return self.poisoned.pop((topic, partition, offset), None)

    def succeeded(self) -> None:
        """A commit went through: earlier failures are history."""
        self.attempts.clear()


def dead_letter_headers(
    *,
    error: BaseException,
    topic: str,
    partition: int,
    offset: int,
    agent: str | None,
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
    return headers
