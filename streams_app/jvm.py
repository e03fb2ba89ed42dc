"""Java tooling shared by the embedded broker and the Spark pipeline.

Both need jars from Maven Central: the broker runs Apache Kafka's own server jars, and Spark needs
its Kafka connector. They are resolved once with ``mvn`` into a per-user cache and reused from
there, so the second ``make test`` on a machine does not touch the network.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from streams_app.errors import ToolchainError

MIN_JAVA = 17
#: maven-dependency-plugin is named explicitly: Maven 3.8's super-POM default (2.8) is too old.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def cache_dir() -> Path:
    """The per-user cache (``$STREAMS_APP_CACHE_DIR``, else ``$XDG_CACHE_HOME/streams_app``)."""
    explicit = os.environ.get("STREAMS_APP_CACHE_DIR")
    if explicit:
        root = Path(explicit)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "streams_app"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so parallel test sessions don't resolve the same jars twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def java_executable() -> str:
    """The ``java`` to run, checked to be at least Java 17 (Kafka 4's broker needs 17)."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        raise ToolchainError(
            "java was not found. The embedded Kafka broker needs Java 17 or newer: install it "
            "(Debian/Ubuntu: `apt-get install openjdk-17-jdk-headless`) or set JAVA_HOME."
        )
    version = _java_major_version(candidate)
    if version < MIN_JAVA:
        raise ToolchainError(
            f"{candidate} is Java {version}; the embedded Kafka 4.x broker needs Java {MIN_JAVA} "
            "or newer. Install openjdk-17-jdk-headless (or newer) and put it first on PATH, "
            "or set JAVA_HOME."
        )
    return candidate


def _java_major_version(java: str) -> int:
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if not match:
        raise ToolchainError(f"could not read the version of {java}: {proc.stderr.strip()!r}")
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(match.group(2) or 0) if major == 1 else major


def maven_executable() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise ToolchainError(
            "mvn (Apache Maven) was not found. It fetches the Kafka jars from Maven Central once: "
            "install it (Debian/Ubuntu: `apt-get install maven`) and make sure Maven Central "
            "is reachable."
        )
    return mvn


def resolve_jars(
    name: str,
    pom: str,
    include_artifacts: Iterable[str] | None = None,
) -> Path:
    """Resolve the runtime dependencies of ``pom`` into ``<cache>/<name>-<hash>/libs``.

    The directory is keyed by a hash of the POM, so changing a version resolves afresh, and is
    only published (renamed into place) once Maven succeeded: a half-finished download is never
    mistaken for a complete one.
    """
    includes = sorted(include_artifacts or [])
    digest = hashlib.sha256((pom + "|".join(includes)).encode()).hexdigest()[:12]
    target = cache_dir() / f"{name}-{digest}"
    libs = target / "libs"
    if (target / "complete").exists():
        return libs
    with file_lock(cache_dir() / f"{name}.lock"):
        if (target / "complete").exists():
            return libs
        java_executable()
        mvn = maven_executable()
        staging = cache_dir() / f".{name}-{digest}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        (staging / "pom.xml").write_text(pom)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(staging / "pom.xml"),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging / 'libs'}",
        ]
        if includes:
            cmd.append("-DincludeArtifactIds=" + ",".join(includes))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ToolchainError(
                f"mvn could not resolve the {name} jars from Maven Central "
                f"(exit {proc.returncode}). Check that https://repo1.maven.org is reachable "
                f"(or that ~/.m2/settings.xml names a mirror).\n{tail}"
            )
        if not any((staging / "libs").glob("*.jar")):
            raise ToolchainError(f"mvn resolved no jars for {name}; see {staging / 'pom.xml'}")
        (staging / "complete").write_text("ok\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return libs


def javac_executable() -> str:
    """The ``javac`` that compiles the project's Java programs (a JDK, not only a JRE)."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "javac") if java_home else shutil.which("javac")
    if not candidate or not Path(candidate).exists():
        raise ToolchainError(
            "javac was not found: a Java program of the project (a Kafka Streams application) "
            "is compiled from source. Install a JDK (Debian/Ubuntu: `apt-get install "
            "openjdk-17-jdk-headless`) or set JAVA_HOME to one."
        )
    return candidate


def compile_java(name: str, sources: Iterable[Path], classpath: str) -> Path:
    """Compile ``sources`` against ``classpath`` into ``<cache>/<name>-<hash>/``; return it.

    The directory is keyed by a hash of the sources and the classpath, so an edit recompiles
    and the second run compiles nothing; like :func:`resolve_jars`, it is only published once
    ``javac`` succeeded. Run the program with ``java -cp <returned dir>:<classpath> Main``.
    """
    files = sorted(Path(s).resolve() for s in sources)
    digest = hashlib.sha256()
    digest.update(classpath.encode())
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    target = cache_dir() / f"{name}-{digest.hexdigest()[:12]}"
    if (target / "complete").exists():
        return target
    with file_lock(cache_dir() / f"{name}.lock"):
        if (target / "complete").exists():
            return target
        javac = javac_executable()
        staging = target.with_name(f".{target.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        proc = subprocess.run(
            [javac, "-nowarn", "-cp", classpath, "-d", str(staging), *map(str, files)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ToolchainError(f"javac failed on {', '.join(map(str, files))}:\n{proc.stderr}")
        (staging / "complete").write_text("ok\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target
