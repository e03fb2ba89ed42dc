"""Extracting Faust's examples from its source distribution: only ``examples/``, only plain
files and folders, on every Python 3.11 (Debian 12's 3.11.2 has no tarfile 'data' filter)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from streams_app.errors import ToolchainError
from streams_app.testing.faust_sdist import _extract_examples


def _archive(tmp_path: Path, *, link: bool = False) -> Path:
    path = tmp_path / "faust_streaming-0.0.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (
            ("faust_streaming-0.0.0/examples/word_count.py", b"print('hi')\n"),
            ("faust_streaming-0.0.0/examples/django/app.py", b"x = 1\n"),
            ("faust_streaming-0.0.0/faust/__init__.py", b"not an example\n"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o4777  # setuid and world-writable: both dropped
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("faust_streaming-0.0.0/examples/passwd")
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return path


def test_only_the_examples_come_out_as_plain_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limits applied by hand, as on a Python without the 'data' filter (on one with it,
    tarfile applies the same; tests/faust_conformance extracts the real archive either way)."""
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    into = tmp_path / "out"
    _extract_examples(_archive(tmp_path), into)
    found = sorted(str(p.relative_to(into)) for p in into.rglob("*") if p.is_file())
    assert found == ["examples/django/app.py", "examples/word_count.py"]
    assert (into / "examples/word_count.py").read_bytes() == b"print('hi')\n"
    assert (into / "examples/word_count.py").stat().st_mode & 0o7022 == 0


def test_a_link_in_the_examples_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="not a plain file or folder"):
        _extract_examples(_archive(tmp_path, link=True), tmp_path / "out")
    assert not (tmp_path / "out" / "examples" / "passwd").exists()
