"""Missing or old java/mvn: the message says what to install (checked with fake executables)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from streams_app.errors import ToolchainError
from streams_app.jvm import java_executable, maven_executable


def fake_java(bin_dir: Path, version_line: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)


def test_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"java was not found.*Java 17.*openjdk-17"):
        java_executable()


def test_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_java(tmp_path / "bin", 'openjdk version "11.0.22" 2024-01-16')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ToolchainError, match=r"is Java 11.*needs Java 17"):
        java_executable()


def test_java_8_version_format_is_understood(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_java(tmp_path / "jdk" / "bin", 'java version "1.8.0_392"')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(ToolchainError, match="is Java 8"):
        java_executable()


def test_java_17_is_accepted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_java(tmp_path / "jdk" / "bin", 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert java_executable() == str(tmp_path / "jdk" / "bin" / "java")


def test_missing_maven_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        ToolchainError, match=r"mvn \(Apache Maven\) was not found.*apt-get install maven"
    ):
        maven_executable()


def test_cluster_ids_never_start_with_a_dash() -> None:
    from streams_app.broker.cluster import new_cluster_id

    # 1 in 64 base64 ids starts with '-', which kafka-storage reads as an option.
    ids = [new_cluster_id() for _ in range(5000)]
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)
