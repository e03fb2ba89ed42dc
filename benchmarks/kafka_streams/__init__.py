"""The Kafka Streams rows of the benchmark: ``CountBench.java`` (the count) and ``JoinBench.java``
(the join rows, ``benchmarks/join_bench.py``) built against Maven Central's jars.

``build()`` resolves ``kafka-streams`` at the embedded broker's Kafka version
(:func:`streams_app.broker.jars.streams_libs`: the same Maven resolution, cache and lock as the
broker's own jars) and compiles both with ``javac`` into the cache
(:func:`streams_app.jvm.compile_java`), once per source and version, so a second ``make bench``
does not touch Maven or javac at all.
"""

from __future__ import annotations

from pathlib import Path

from streams_app.broker.jars import streams_libs
from streams_app.jvm import compile_java, java_executable

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "CountBench.java"
JOIN_SOURCE = HERE / "JoinBench.java"
MAIN_CLASS = "CountBench"
JOIN_CLASS = "JoinBench"
#: Kafka Streams' own default producer/consumer settings otherwise; a 1 GB heap like the broker.
JVM_OPTS = ("-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


def build(version: str | None = None) -> str:
    """The classpath to run :data:`MAIN_CLASS` and :data:`JOIN_CLASS` with (resolving and
    compiling the first time)."""
    libs = f"{streams_libs(version)}/*"
    classes = compile_java("kafka-streams-bench", [SOURCE, JOIN_SOURCE], libs)
    return f"{classes}:{libs}"


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
    threads: int = 1,
    join: str | None = None,
    users_topic: str | None = None,
) -> list[str]:
    """The ``java`` command line of one run (the JVM itself is the measured process); ``join``
    (``stream-table`` or ``stream-stream``, with ``users_topic``): a join row instead of the
    count."""
    return [
        java_executable(),
        *JVM_OPTS,
        "-cp",
        classpath,
        MAIN_CLASS if join is None else JOIN_CLASS,
        bootstrap,
        application_id,
        input_topic,
        output_topic,
        guarantee,
        str(round(commit_interval_s * 1000)),
        str(state_dir),
        str(threads),
        *([] if join is None else [join, users_topic or ""]),
    ]
