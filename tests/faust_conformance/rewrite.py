"""The one change a Faust app needs: its imports name streams_app instead of faust.

``import faust`` becomes ``import streams_app as faust``; ``from faust import X`` and
``from faust.cli import option`` name ``streams_app`` and ``streams_app.cli``. Nothing else in the
app's source is touched (the suite checks that only import lines differ).
"""

from __future__ import annotations

import re

_IMPORT = re.compile(r"^(\s*)import faust\s*$")
_FROM = re.compile(r"^(\s*)from faust((?:\.[\w.]+)?) import (.+)$")
_SUBMODULES = {"": "streams_app", ".cli": "streams_app.cli"}


def to_streams_app(source: str) -> str:
    out = []
    for line in source.splitlines(keepends=True):
        text = line.rstrip("\n")
        if match := _IMPORT.match(text):
            line = f"{match.group(1)}import streams_app as faust\n"
        elif match := _FROM.match(text):
            module = _SUBMODULES.get(match.group(2))
            if module is None:
                raise ValueError(f"no streams_app counterpart for faust{match.group(2)}: {text}")
            line = f"{match.group(1)}from {module} import {match.group(3)}\n"
        out.append(line)
    return "".join(out)


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """The lines the rewrite changed (each must be an import line)."""
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
