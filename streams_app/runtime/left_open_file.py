"""Where transactions this worker gave up may still be open, kept in its state directory.

:class:`~streams_app.runtime.producer.StreamsProducer` checks the partitions of a transaction
it gave up for records the broker left open (Kafka skips the ABORT marker of a partition
without a leader), and no transaction begins until each has answered. Those entries must
outlive the process: a worker stopped by
:class:`~streams_app.transport.errors.TransactionLeftOpenError`, or killed between giving a
transaction up and the check, is restarted on the same state directory (``worker
--processes``' supervisor does it after a second, so does any process manager). That is the
same transactional id and the same producer id, and its first commit to such a partition
would commit the records given up (duplicates). So every entry is written here when it is
added, the file is rewritten (or removed) as entries are answered, and the producer's
:meth:`~streams_app.runtime.producer.StreamsProducer.start` checks what it lists before the
first transaction.

The entry's epoch is the one the given-up transaction wrote with: the restarted producer's
InitProducerId bumps its epoch, but the partition's leader still has the old one for our
producer id (nothing newer was written there), and accepts an ABORT marker at that epoch.

Written like the process id (:func:`~streams_app.state.directory.write_durably`): a crash
leaves the old list or the new one, never half of one.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from streams_app.errors import StateDirectoryError
from streams_app.state.directory import fsync_directory, write_durably
from streams_app.transport.base import LeftOpen, TopicPartition
from streams_app.transport.errors import TransactionLeftOpenError

#: The file's name in the worker's state directory (``<root>/<app id>/``).
LEFT_OPEN_FILE = "left-open.json"

_VERSION = 1


class LeftOpenFile:
    """The list of :class:`~streams_app.transport.base.LeftOpen` entries not answered yet."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def load(self) -> set[LeftOpen]:
        """The entries listed (none without a file). A file that cannot be read stops the
        worker: what it listed may still be open, and nothing else knows where."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise self._unreadable(exc.strerror or str(exc)) from exc
        try:
            return _entries(json.loads(text))
        except (ValueError, TypeError, KeyError) as exc:
            raise self._unreadable(f"not a list of entries ({type(exc).__name__}: {exc})") from exc

    def save(self, entries: Collection[LeftOpen], transactional_id: str | None = None) -> None:
        """Replace the list with ``entries``; none: remove the file."""
        directory = self.path.parent
        try:
            if not entries:
                if not self.path.exists():
                    return
                self.path.unlink()
                fsync_directory(directory)
            else:
                write_durably(self.path, self._document(entries, transactional_id))
        except OSError as exc:
            raise StateDirectoryError(
                str(directory),
                f"cannot write {self.path.name} ({exc.strerror or exc}), the list of partitions "
                "where a transaction this worker gave up may still be open",
                "free space or fix the permissions; before restarting, once every partition "
                "has a leader, run `streams-app txn hanging --abort` (what the list would have "
                "checked)",
            ) from exc

    def _document(self, entries: Collection[LeftOpen], transactional_id: str | None) -> str:
        document = {
            "version": _VERSION,
            "transactional_id": transactional_id,
            "entries": [
                {
                    "topic": e.tp.topic,
                    "partition": e.tp.partition,
                    "producer_id": e.producer_id,
                    "producer_epoch": e.producer_epoch,
                    "group": e.group,
                }
                for e in sorted(entries)
            ],
        }
        return json.dumps(document, indent=1) + "\n"

    def _unreadable(self, problem: str) -> TransactionLeftOpenError:
        return TransactionLeftOpenError(
            f"cannot read {self.path} ({problem}): it lists the partitions where a transaction "
            "this worker gave up may still be open, to be checked before the first commit. "
            "Stopping. Fix: once every partition has a leader, run `streams-app txn hanging "
            f"--abort` (it aborts what is left open), then delete {self.path} and restart"
        )


def _entries(document: Any) -> set[LeftOpen]:
    if not isinstance(document, dict) or document.get("version") != _VERSION:
        raise ValueError(f"expected an object with version {_VERSION}")
    found: set[LeftOpen] = set()
    for item in document["entries"]:
        topic, partition = item["topic"], item["partition"]
        pid, epoch, group = item["producer_id"], item["producer_epoch"], item.get("group")
        if not (
            isinstance(topic, str)
            and all(type(n) is int for n in (partition, pid, epoch))
            and (group is None or isinstance(group, str))
        ):
            raise ValueError(f"malformed entry {item!r}")
        found.add(LeftOpen(TopicPartition(topic, partition), pid, epoch, group))
    return found
