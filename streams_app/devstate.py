"""State files of the development servers the CLI starts (``broker start``, ``postgres start``).

A server started by one CLI call is stopped or queried by a later one, so its pid and data
directory live in a small JSON file. A pid alone is not proof (pids are recycled): each
server's module checks that the pid still runs *its* program on *its* data before acting.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def load(path: Path, cls: type[T]) -> T | None:
    """The state recorded at ``path``; None when there is none or it no longer parses."""
    try:
        return cls(**json.loads(path.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def save(path: Path, state: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(state), indent=2))


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
