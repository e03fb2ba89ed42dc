"""Summarise py-spy's collapsed stacks: where a worker's CPU time goes, by function.

    python -m benchmarks.profile_summary PROFILE.collapsed [--top 40]

``self`` is time spent in the function's own code, ``total`` includes what it calls (each
function counted once per sample, so recursion does not inflate it).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LOCATION = re.compile(r"\s*\((?P<file>[^:()]+)(?::\d+)?\)$")


def _name(frame: str) -> str:
    """``fun (path/to/module.py:12)`` -> ``fun (module.py)``."""
    match = _LOCATION.search(frame)
    if not match:
        return frame
    file = match.group("file")
    parts = file.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else file
    return f"{frame[: match.start()]} ({short})"


def summarise_collapsed(path: Path, top: int = 40) -> str:
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_name(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += count
        own[frames[-1]] += count
        for name in set(frames):
            total[name] += count
    if not samples:
        return "no samples\n"
    out = [f"{samples} samples (CPU time only; idle waits are not sampled)", ""]
    out.append(f"{'self %':>7}  function")
    for name, count in own.most_common(top):
        out.append(f"{100 * count / samples:7.1f}  {name}")
    out += ["", f"{'total %':>7}  function"]
    for name, count in total.most_common(top):
        out.append(f"{100 * count / samples:7.1f}  {name}")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    print(summarise_collapsed(args.path, args.top), end="")


if __name__ == "__main__":
    main()
