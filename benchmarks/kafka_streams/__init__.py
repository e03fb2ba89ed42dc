"""The Kafka Streams row of the benchmark: ``CountBench.java`` built against Maven Central's jars.

``build()`` resolves ``kafka-streams`` at the embedded broker's Kafka version (the same Maven
resolution, cache and lock as the broker's own jars: :func:`streams_app.jvm.resolve_jars`) and
compiles ``CountBench.java`` with ``javac`` into the cache, once per source and version: the
directory is keyed by a hash of both, so an edit recompiles and a second ``make bench`` does
not touch Maven or javac at all.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from streams_app.broker.jars import kafka_version
from streams_app.errors import ToolchainError
from streams_app.jvm import cache_dir, file_lock, java_executable, resolve_jars

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "CountBench.java"
MAIN_CLASS = "CountBench"
#: Kafka Streams' own default producer/consumer settings otherwise; a 1 GB heap like the broker.
JVM_OPTS = ("-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


def _javac() -> str:
    javac = shutil.which("javac")
    if not javac:
        raise ToolchainError(
            "javac was not found: the Kafka Streams benchmark row is compiled from source. "
            "Install a JDK (Debian/Ubuntu: `apt-get install openjdk-17-jdk-headless`)."
        )
    return javac


def build(version: str | None = None) -> str:
    """The classpath to run :data:`MAIN_CLASS` with (resolving and compiling the first time)."""
    version = version or kafka_version()
    pom = (HERE / "pom.xml").read_text().replace("@KAFKA_VERSION@", version)
    libs = resolve_jars(f"kafka-streams-{version}", pom)
    source = SOURCE.read_text()
    digest = hashlib.sha256(f"{version}\n{source}".encode()).hexdigest()[:12]
    classes = cache_dir() / f"kafka-streams-bench-{digest}"
    classpath = f"{classes}:{libs}/*"
    if (classes / "complete").exists():
        return classpath
    with file_lock(cache_dir() / "kafka-streams-bench.lock"):
        if (classes / "complete").exists():
            return classpath
        staging = classes.with_name(classes.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        proc = subprocess.run(
            [_javac(), "-nowarn", "-cp", f"{libs}/*", "-d", str(staging), str(SOURCE)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ToolchainError(f"javac failed on {SOURCE}:\n{proc.stdout}{proc.stderr}")
        (staging / "complete").write_text("ok\n")
        shutil.rmtree(classes, ignore_errors=True)
        staging.rename(classes)
    return classpath


def command(
    classpath: str,
    *,
    bootstrap: str,
    application_id: str,
    input_topic: str,
    output_topic: str,
    guarantee: str,
    commit_interval_s: float,
    state_dir: Path,
) -> list[str]:
    """The ``java`` command line of one run (the JVM itself is the measured process)."""
    return [
        java_executable(),
        *JVM_OPTS,
        "-cp",
        classpath,
        MAIN_CLASS,
        bootstrap,
        application_id,
        input_topic,
        output_topic,
        guarantee,
        str(round(commit_interval_s * 1000)),
        str(state_dir),
    ]
