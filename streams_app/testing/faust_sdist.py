"""faust-streaming's source distribution, for its ``examples/``: fetched once, never built.

The Faust conformance suite runs faust-streaming's own example apps. They are not in the wheel
(the installed package), only in the source distribution on PyPI, so the test set-up downloads
that archive once from the package index pip uses (which names it with its SHA-256, checked),
into the per-user cache next to the Kafka jars, and extracts ``examples/`` from it as plain
files. Nothing of Faust is copied into this repository, and the archive is never built or
installed.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import shutil
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

from streams_app.errors import ToolchainError
from streams_app.jvm import cache_dir, file_lock

#: The faust-streaming version streams_app depends on (pyproject.toml).
FAUST_VERSION = "0.15.3"


def sdist_dir(version: str = FAUST_VERSION) -> Path:
    return cache_dir() / f"faust-streaming-{version}"


def faust_examples(version: str = FAUST_VERSION) -> Path:
    """The ``examples/`` folder of faust-streaming ``version``'s sdist (downloaded once)."""
    root = sdist_dir(version)
    examples = root / "examples"
    if (root / "complete").exists():
        return examples
    with file_lock(cache_dir() / "faust-streaming.lock"):
        if (root / "complete").exists():
            return examples
        staging = cache_dir() / f".faust-streaming-{version}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        archive = _download(version, staging)
        _extract_examples(archive, staging)
        (staging / "complete").write_text(f"{archive.name}\n")
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
    return examples


def _index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def _download(version: str, into: Path) -> Path:
    """The sdist as pip finds it: PyPI's simple index (PEP 503) lists the file with its
    SHA-256, which is checked."""
    page_url = f"{_index_url()}/faust-streaming/"
    wanted = {f"faust_streaming-{version}.tar.gz", f"faust-streaming-{version}.tar.gz"}
    try:
        with urllib.request.urlopen(page_url, timeout=60) as response:
            page = response.read().decode()
        links = [
            urllib.parse.urljoin(page_url, html.unescape(href))
            for href in re.findall(r'href="([^"]+)"', page)
        ]
        matches = [u for u in links if urllib.parse.urlsplit(u).path.rsplit("/", 1)[-1] in wanted]
        if not matches:
            raise ToolchainError(f"{page_url} lists no source distribution of version {version}")
        url, _, fragment = matches[0].partition("#")
        expected = dict(part.split("=", 1) for part in fragment.split("&") if "=" in part).get(
            "sha256"
        )
        target = into / urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1]
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=120) as response, open(target, "wb") as out:
            while chunk := response.read(1 << 16):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, ValueError) as exc:
        raise ToolchainError(
            f"could not download the faust-streaming {version} source distribution from "
            f"{page_url} ({type(exc).__name__}: {exc}); check that the package index is "
            "reachable (PIP_INDEX_URL names another)"
        ) from exc
    if not expected:
        raise ToolchainError(f"{page_url} gives no SHA-256 for {target.name}; not using it")
    if digest.hexdigest() != expected:
        target.unlink(missing_ok=True)
        raise ToolchainError(f"{target.name} does not match the index's SHA-256; not using it")
    return target


def _extract_examples(archive: Path, into: Path) -> None:
    """Only ``<name>/examples/...`` members, as plain files and folders: tarfile's 'data'
    filter where this Python has it (3.11.4 and later), and on an older 3.11 (Debian 12's
    3.11.2, which ``make setup`` picks there) the same limits applied here."""
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) >= 2 and parts[1] == "examples":
                if ".." in parts or not (member.isfile() or member.isdir()):
                    raise ToolchainError(
                        f"{archive.name}: {member.name} is not a plain file or folder inside "
                        "examples/; not extracting it"
                    )
                member.name = str(Path(*parts[1:]))
                members.append(member)
        if not members:
            raise ToolchainError(f"{archive.name} has no examples/ folder")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, members=members, filter="data")
            return
        for member in members:  # what the 'data' filter does to a file or folder
            member.mode &= 0o755
            member.uid = member.gid = os.getuid()
            member.uname = member.gname = ""
        tar.extractall(into, members=members, numeric_owner=True)
