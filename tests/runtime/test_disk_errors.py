"""A state directory that cannot be written (issue 35, item 7): one line naming the directory,
the error and the fix, exit status 74, no traceback, and nothing committed lost. Before, a full
disk or an existing read-only state directory ended the worker with a raw ``OSError``
traceback (22 frames) and exit status 1.

The state directory lives on a small tmpfs in a private mount namespace
(``tests/runtime/disk_namespace.py`` under ``unshare -rm``), which the test fills or remounts
read-only: no root needed, the machine's mounts untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streams_app.readback import read_topics, wait_committed
from streams_app.state.disk import disk_error
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import produce_keyed, sums_of, table_from_changelog, wait_until

PARTITIONS = 4


def _namespaces_work() -> str | None:
    """Why a private mount namespace cannot be had here (None: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt && umount /mnt"],
        capture_output=True,
        text=True,
    )
    return None if probe.returncode == 0 else f"no private mount namespace: {probe.stderr.strip()}"


NO_NAMESPACE = _namespaces_work()
needs_namespace = pytest.mark.skipif(NO_NAMESPACE is not None, reason=NO_NAMESPACE or "")


class Namespace:
    """``tests.runtime.disk_namespace`` under ``unshare -rm``, driven line by line."""

    def __init__(self, mountpoint: Path, size: str, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [
                *("unshare", "-rm", sys.executable, "-m", "tests.runtime.disk_namespace"),
                *(str(mountpoint), size),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self.ask_sync(None) == "ok mounted"

    def ask_sync(self, command: str | None) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    async def ask(self, command: str) -> str:
        reply = await asyncio.to_thread(self.ask_sync, command)
        assert reply.startswith("ok"), (command, reply)
        return reply

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.ask_sync("quit")
            self.process.wait(60)


def worker_env(bootstrap: str, unique: str) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.update(
        {
            "STREAMS_APP_BROKER": bootstrap,
            "STREAMS_APP_WEB_PORT": "0",
            "TEST_SUFFIX": unique,
            "TEST_APP": "tests.runtime.apps.keyed_sum",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
    )
    return env


async def keyed_sum_on_a_tmpfs(
    bootstrap: str, unique: str, tmp_path: Path, size: str
) -> tuple[str, str, Path, Path, Namespace]:
    """The input topic, the group, the state directory (on a tmpfs of ``size``), the worker's
    log and the namespace that runs it."""
    source = f"ks-in-{unique}"
    await create_topics(bootstrap, TopicSpec(source, PARTITIONS, 1))
    mountpoint = tmp_path / "disk"
    namespace = Namespace(mountpoint, size, worker_env(bootstrap, unique))
    return source, f"ks-{unique}", mountpoint / "state", tmp_path / "worker.log", namespace


def error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("streams-app: error:")]


@needs_namespace
async def test_a_full_state_disk_stops_the_worker_with_one_line_and_loses_nothing(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    source, group, state, log, ns = await keyed_sum_on_a_tmpfs(
        bootstrap_servers, unique, tmp_path, "4m"
    )
    try:
        sent = await produce_keyed(bootstrap_servers, source, 500, seed=1, keys=50)
        await ns.ask(f"worker {state} {log}")
        await wait_committed(bootstrap_servers, group, [source], timeout=90)
        await ns.ask("fill")
        # The worker goes on while RocksDB has room it allocated before (its log); the next
        # flush of its memtables to a table file (every 5 s while writes come) fails: it stops.
        more: list[tuple[str, int]] = []
        for seed in range(2, 120):
            more += await produce_keyed(bootstrap_servers, source, 200, seed=seed, keys=50)
            exited = await asyncio.to_thread(ns.ask_sync, "wait 1")
            if exited != "error timeout":
                break
        assert exited == "ok 74", (exited, log.read_text()[-3000:])
        text = log.read_text()
        (line,) = error_lines(text)
        assert f"state directory {state}/{group}: no space left" in line
        assert "Fix: free space there" in line
        assert "Traceback" not in text
        # Space again, same state directory: nothing committed was lost, nothing doubled.
        await ns.ask("free")
        await ns.ask(f"worker {state} {log}")
        await wait_committed(
            bootstrap_servers, group, [source], outputs=[f"ks-sum-{unique}"], timeout=90
        )
        await ns.ask("term")
    finally:
        ns.close()
    expected = sums_of(sent + more)
    assert await table_from_changelog(bootstrap_servers, f"ks-{unique}-sums-changelog") == expected
    echoes = (await read_topics(bootstrap_servers, [f"ks-echo-{unique}"]))[f"ks-echo-{unique}"]
    assert len(echoes) == len(sent) + len(more)


@needs_namespace
async def test_an_existing_read_only_state_directory_is_one_line_not_a_traceback(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    source, group, state, log, ns = await keyed_sum_on_a_tmpfs(
        bootstrap_servers, unique, tmp_path, "8m"
    )
    try:
        sent = await produce_keyed(bootstrap_servers, source, 300, seed=3, keys=20)
        await ns.ask(f"worker {state} {log}")
        await wait_committed(bootstrap_servers, group, [source], timeout=90)
        assert await ns.ask("term") == "ok 0"
        await ns.ask("ro")
        before = len(log.read_text())
        await ns.ask(f"worker {state} {log}")
        assert await ns.ask("wait 90") == "ok 74"
        text = log.read_text()[before:]
        (line,) = error_lines(text)
        assert f"state directory {state}/{group}: it is on a read-only file system" in line
        assert "Fix: mount it read-write" in line
        assert "Traceback" not in text
        # Writable again: the same state, nothing lost.
        await ns.ask("rw")
        await ns.ask(f"worker {state} {log}")
        await wait_until(lambda: "started; inputs" in log.read_text()[before:], timeout=90)
        await wait_committed(bootstrap_servers, group, [source], timeout=90)
        await ns.ask("term")
    finally:
        ns.close()
    assert await table_from_changelog(bootstrap_servers, f"ks-{unique}-sums-changelog") == sums_of(
        sent
    )


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (OSError(28, "No space left on device"), "no space left"),
        (PermissionError(13, "Permission denied", "/s/x/.lock"), "permission denied (/s/x/.lock)"),
        (OSError(30, "Read-only file system"), "read-only file system"),
        (
            Exception("IO error: No space left on device: While appending to file: /s/x/1.log"),
            "no space left",
        ),
    ],
)
def test_disk_errors_are_recognised_whatever_raised_them(error: Exception, words: str) -> None:
    found = disk_error(RuntimeError("wrapper"), "/s/x")
    assert found is None
    try:
        raise RuntimeError("while committing") from error
    except RuntimeError as wrapped:
        found = disk_error(wrapped, "/s/x")
    assert found is not None and words in str(found) and found.exit_status == 74
    assert disk_error(Exception("IO error: Corruption: bad block"), "/s/x") is None
