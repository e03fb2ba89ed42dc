"""The errors streams_app raises to its users.

Each one is meant to be read by an operator: the message names what is wrong (the setting, the
address, the topic) and what to do about it.
"""

from __future__ import annotations


class StreamsAppError(Exception):
    """Base class of every error streams_app raises on purpose."""


class ConfigError(StreamsAppError):
    """A setting is wrong; raised at start, before anything is consumed."""

    def __init__(self, setting: str, problem: str, fix: str) -> None:
        self.setting = setting
        self.problem = problem
        self.fix = fix
        super().__init__(f"setting {setting!r}: {problem}. Fix: {fix}")


class ToolchainError(StreamsAppError):
    """java, mvn or a jar the embedded broker or Spark needs is missing or too old."""


class BrokerUnavailable(StreamsAppError):
    """No Kafka broker answered at the configured address."""

    def __init__(self, address: str, detail: str = "") -> None:
        self.address = address
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"no Kafka broker answered at {address}{extra}. Start one (`streams-app broker start`) "
            "or point the app at a running broker with broker=... / STREAMS_APP_BROKER."
        )


class StateDirectoryError(StreamsAppError):
    """The state directory cannot be written: its file system is full or read-only, or the
    worker may not write there. Names the directory, the error and the fix; the CLI exits with
    :attr:`exit_status` (sysexits' ``EX_IOERR``), so a supervisor can tell it from a crash.
    Nothing committed is lost: the tables' changelogs hold it, and restore catches the stores up
    at the next start."""

    #: The worker's exit status for this error (others: 2 for errors of ours, 1 for crashes).
    exit_status = 74

    def __init__(self, directory: str, problem: str, fix: str) -> None:
        self.directory = directory
        self.problem = problem
        self.fix = fix
        super().__init__(f"state directory {directory}: {problem}. Fix: {fix}")


class TopologyError(StreamsAppError):
    """The topology cannot run as defined: missing topics, co-partitioning, ..."""


class MissingSourceTopic(TopologyError):
    """An input topic of the topology no longer exists (deleted while the worker ran), for
    longer than ``missing_topic_timeout``: Kafka Streams' ``MissingSourceTopicException``."""


class ChangelogMissing(TopologyError):
    """A table's changelog topic was deleted while the worker ran: commits would fail forever,
    and a recreated changelog would not hold the table. The local stores still do."""


class ChangelogBehindStore(StreamsAppError):
    """At start, a table's local store holds changelog offsets beyond the end of its changelog:
    the changelog was deleted (and recreated) since. Wiping the store would lose the table
    silently, so the worker refuses to start until an operator re-seeds the changelog from the
    store or wipes the store (``streams-app -A app changelog reseed|wipe``)."""

    def __init__(self, table: str, changelog: str, partitions: dict[int, tuple[int, int]]) -> None:
        self.table = table
        self.changelog = changelog
        #: Partition -> (the store's changelog offset, the changelog's end offset).
        self.partitions = partitions
        where = "; ".join(
            f"partition {p}: the local store is at changelog offset {stored}, the changelog "
            f"ends at {end}"
            for p, (stored, end) in sorted(partitions.items())
        )
        super().__init__(
            f"table {table!r} (changelog {changelog!r}) {where}. The changelog was deleted "
            "(and recreated) since these offsets were committed: refusing to start rather than "
            "wipe the table. Fix: stop every worker of the app, then either re-seed the "
            "changelog from the local stores, on every machine that holds the table "
            f"(`streams-app -A <app> changelog reseed {table} --state-dir <dir>`), or drop "
            "the local state and start from the changelog as it is (`streams-app -A <app> "
            f"changelog wipe {table} --state-dir <dir>`)"
        )


class BrokerTooOld(StreamsAppError):
    """The broker lacks an API version exactly-once v2 depends on (KIP-447 needs Kafka 2.5+)."""


class RecordError(StreamsAppError):
    """The record itself cannot be processed as the topology declares it: bytes that do not
    decode into the topic's type, a tombstone where a model is expected, a null key where a
    table needs one. No retry can help, so it goes to the dead-letter topic at once, whatever
    the error policy (see docs/guarantees.md, "Errors and dead letters")."""


class NullKeyError(RecordError):
    """A table was used while processing a record without a key.

    Tables are partitioned like the topics that update them: a record's key decides its
    partition, and so which table partition its task owns. A record without a key landed on a
    partition its key never chose, so reading or writing a table row for it would touch the
    row of some other partition (Kafka Streams' aggregations skip such records for the same
    reason)."""


class ProcessingTimeout(StreamsAppError):
    """An agent worked on a record (its batch) longer than ``processing_timeout``: the record
    counts as failed, and ``error_policy`` decides (retry, dead-letter or stop). Not a bad
    record: a slow downstream call may well succeed when retried."""


class WorkerStopped(StreamsAppError):
    """The worker stopped because the error policy said so; carries the original error."""


class BrokerAuthenticationError(StreamsAppError):
    """The broker refused our credentials (SASL) at start."""


class BrokerSecurityMismatch(StreamsAppError):
    """The client and the broker's listener disagree on TLS or SASL (e.g. TLS to a PLAINTEXT
    listener), or the broker's certificate is not trusted."""


class AuthorizationError(StreamsAppError):
    """The broker refused an operation for want of an ACL; names the ACL and the principal.

    Fatal, as in Kafka Streams: retrying cannot help until an operator adds the ACL."""

    def __init__(self, operation: str, resource: str, name: str, principal: str) -> None:
        self.operation = operation
        self.resource = resource
        self.name = name
        self.principal = principal
        option = {
            "topic": "--topic",
            "group": "--group",
            "transactional id": "--transactional-id",
            "cluster": "--cluster",
        }.get(resource, f"--{resource}")
        target = option if resource == "cluster" else f"{option} '{name}'"
        super().__init__(
            f"the broker refused {operation} on {resource} {name!r} for principal {principal}: "
            f"the ACL ({operation} on {resource} {name!r}) is missing. Fix: add it, e.g. "
            f"kafka-acls.sh --bootstrap-server ... --add --allow-principal {principal} "
            f"--operation {operation.title().replace('_', '')} {target}"
        )


class DatabaseUnavailable(StreamsAppError):
    """No PostgreSQL answered at the configured address (named as host:port/db, never the DSN)."""

    def __init__(self, address: str, detail: str = "") -> None:
        self.address = address
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"PostgreSQL at {address} is unavailable{extra}. Start it, or fix the DSN "
            "(--dsn / STREAMS_APP_POSTGRES_DSN)."
        )


class LateRecord(StreamsAppError):
    """A record arrived after every window it belongs to had closed (dead-letter reason)."""


class InvalidTimestamp(StreamsAppError):
    """A record's timestamp is missing or negative (dead-letter reason)."""
