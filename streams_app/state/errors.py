"""Errors of the local state layer, each naming the path or changelog partition concerned."""

from __future__ import annotations

from pathlib import Path

from streams_app.errors import StreamsAppError


class StateLockedError(StreamsAppError):
    """A RocksDB partition is held open by another process, or by another handle in this one."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"the RocksDB state at {path} is locked by another process or handle ({detail}). "
            "Two workers must never share a state directory: give each worker its own "
            "--state-dir. Inside one process, close the partition (and drop any items() "
            "iterator over it) before opening it again."
        )


class RestoreStalledError(StreamsAppError):
    """A changelog partition stopped advancing before its end offset was reached."""

    def __init__(self, stalled: dict[str, tuple[int, int]], timeout: float) -> None:
        self.stalled = stalled
        self.timeout = timeout
        parts = ", ".join(
            f"{name} (at offset {position}, end offset {end})"
            for name, (position, end) in sorted(stalled.items())
        )
        super().__init__(
            f"restoring state made no progress for {timeout:g}s on changelog partition(s) {parts}. "
            "A read_committed consumer cannot read past an open transaction: most likely a "
            "previous owner of the partition (a zombie, or a crashed worker with another "
            "state dir) left one open; the broker aborts it after the producer's "
            "transaction.timeout.ms. If it persists, list open transactions with "
            "`kafka-transactions.sh --bootstrap-server ... list` and abort the hanging one."
        )


class ChangelogBeyondEnd(StreamsAppError):
    """Store partitions whose changelog offset lies beyond their changelog's end: the changelog
    was deleted and recreated under them (the runtime names the table:
    :class:`~streams_app.errors.ChangelogBehindStore`)."""

    def __init__(self, partitions: dict[tuple[str, int], tuple[int, int]]) -> None:
        #: (changelog topic, partition) -> (stored offset, end offset).
        self.partitions = partitions
        super().__init__(
            "store partitions beyond their changelog's end: "
            + ", ".join(
                f"{t}[{p}] at {stored}, end {end}"
                for (t, p), (stored, end) in sorted(partitions.items())
            )
        )
