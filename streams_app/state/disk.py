"""Disk errors under the state directory, told apart from bugs.

A full file system, a read-only one, or a directory the worker may not write surface as an
``OSError`` (``errno`` ENOSPC, EDQUOT, EROFS, EACCES, EPERM) from our own file handling, or as
a plain ``Exception("IO error: No space left on device: ...")`` from RocksDB (rocksdict passes
RocksDB's status text on). Either way the operator needs one line: which directory, what is
wrong, what to do; not 22 frames of traceback (issue 35, item 7). :func:`disk_error` makes that
line (:class:`~streams_app.errors.StateDirectoryError`) from whatever was raised.

Nothing committed is lost when the disk fails: a commit writes the stores only after Kafka
committed the transaction, so a store that could not be written is merely behind its
changelog, and the next start restores the tail (``state/restore.py``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from streams_app.errors import StateDirectoryError

#: errno -> (what is wrong, the fix).
_KINDS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: (
        "no space left on its file system",
        "free space there (or give the worker a larger volume), then start the worker again; "
        "nothing committed is lost, and the tables catch up from their changelogs",
    ),
    errno.EDQUOT: (
        "the disk quota is exhausted",
        "raise the quota or free space, then start the worker again; nothing committed is lost",
    ),
    errno.EROFS: (
        "it is on a read-only file system",
        "mount it read-write, or point --state-dir (state_dir) at a writable directory",
    ),
    errno.EACCES: (
        "permission denied",
        "let the user the worker runs as write there (chown/chmod), or point --state-dir "
        "(state_dir) at a directory it may write",
    ),
}
_KINDS[errno.EPERM] = _KINDS[errno.EACCES]
#: How RocksDB (through rocksdict) words the same errors: its messages carry strerror's text.
_TEXTS = {os.strerror(code): code for code in _KINDS}


def _errno_of(exc: BaseException) -> int | None:
    if isinstance(exc, OSError) and exc.errno in _KINDS:
        return exc.errno
    if type(exc) is Exception or "rocksdb" in type(exc).__module__.lower():
        text = str(exc)
        if "IO error" in text or "While " in text:
            for message, code in _TEXTS.items():
                if message in text:
                    return code
    return None


def disk_error(exc: BaseException, directory: Path | str) -> StateDirectoryError | None:
    """The one-line error for ``exc`` (or an error it was raised from) if it is a disk error
    under ``directory``; None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StateDirectoryError):
            return current
        code = _errno_of(current)
        if code is not None:
            problem, fix = _KINDS[code]
            detail = getattr(current, "filename", None)
            where = f" ({detail})" if detail and str(detail) != str(directory) else ""
            return StateDirectoryError(str(directory), f"{problem}{where}", fix)
        current = current.__cause__ or current.__context__
    return None
