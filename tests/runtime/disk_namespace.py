"""A tmpfs of a given size, and worker processes whose state directory is on it: run as
``unshare -rm python -m tests.runtime.disk_namespace MOUNTPOINT SIZE`` (a private mount
namespace, as root within it), so that a test can fill the file system or make it read-only
without being root itself and without touching the machine's mounts.

Commands, one per line on stdin, each answered by one line on stdout (``ok ...`` or
``error ...``):

- ``worker STATE_DIR LOG``: start ``streams-app -A $TEST_APP worker`` on ``STATE_DIR`` (the
  environment is this process's), its output to ``LOG``;
- ``fill``: write a file until the file system is full; ``free``: delete it;
- ``ro`` / ``rw``: remount the file system read-only / read-write;
- ``wait SECONDS``: until the worker exits (``ok <exit status>``, or ``error timeout``);
- ``term``: SIGTERM the worker and wait (``ok <exit status>``);
- ``quit``: stop the worker if it runs, unmount, exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main() -> int:
    mountpoint, size = Path(sys.argv[1]), sys.argv[2]
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)], check=True
    )
    filler = mountpoint / "filler"
    worker: subprocess.Popen[bytes] | None = None
    print("ok mounted", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        try:
            if command == "worker":
                state_dir, log = args
                with open(log, "ab") as out:
                    worker = subprocess.Popen(
                        [
                            *(sys.executable, "-m", "streams_app", "-A", os.environ["TEST_APP"]),
                            *("worker", "-l", "info", "--state-dir", state_dir),
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                reply = f"ok {worker.pid}"
            elif command == "fill":
                written = 0
                fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                try:
                    while True:
                        written += os.write(fd, b"\0" * 4096)
                except OSError:  # full
                    pass
                finally:
                    os.close(fd)
                reply = f"ok {written}"
            elif command == "free":
                filler.unlink(missing_ok=True)
                reply = "ok"
            elif command in ("ro", "rw"):
                option = f"remount,{command}"
                subprocess.run(["mount", "-o", option, str(mountpoint)], check=True)
                reply = "ok"
            elif command == "wait":
                assert worker is not None
                try:
                    reply = f"ok {worker.wait(float(args[0]))}"
                except subprocess.TimeoutExpired:
                    reply = "error timeout"
            elif command == "term":
                assert worker is not None
                worker.terminate()
                reply = f"ok {worker.wait(60)}"
            elif command == "quit":
                break
            else:
                reply = f"error unknown command {command}"
        except Exception as exc:
            reply = f"error {type(exc).__name__}: {exc}"
        print(reply, flush=True)
    if worker is not None and worker.poll() is None:
        worker.kill()
        worker.wait()
    subprocess.run(["umount", "-l", str(mountpoint)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
