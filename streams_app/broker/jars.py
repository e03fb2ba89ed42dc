"""The Apache Kafka broker jars, resolved from Maven Central once per user and version."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from streams_app.jvm import resolve_jars

#: The Kafka version the embedded broker runs; override with STREAMS_APP_KAFKA_VERSION.
DEFAULT_KAFKA_VERSION = "4.3.1"
LOG4J_VERSION = "2.25.3"


def kafka_version() -> str:
    return os.environ.get("STREAMS_APP_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)


def resource_text(name: str) -> str:
    return resources.files("streams_app.broker").joinpath("resources", name).read_text()


def broker_libs(version: str | None = None) -> Path:
    """The directory holding the broker's classpath, fetched with ``mvn`` the first time."""
    version = version or kafka_version()
    if not version.startswith("4."):
        raise ValueError(f"the embedded broker runs Kafka 4.x (KRaft only); got {version!r}")
    pom = (
        resource_text("broker-pom.xml")
        .replace("@KAFKA_VERSION@", version)
        .replace("@LOG4J_VERSION@", LOG4J_VERSION)
    )
    return resolve_jars(f"kafka-{version}", pom)


def tools_classpath(version: str | None = None) -> str:
    """A classpath running Kafka's own tools (``org.apache.kafka.tools.DumpLogSegments``, ...):
    the broker's jars plus the ``kafka-tools`` jar, fetched with ``mvn`` once and cached."""
    version = version or kafka_version()
    libs = broker_libs(version)
    pom = resource_text("tools-pom.xml").replace("@KAFKA_VERSION@", version)
    tools = resolve_jars(f"kafka-tools-{version}", pom)
    return f"{tools}/*:{libs}/*"


def streams_libs(version: str | None = None) -> Path:
    """Kafka Streams' classpath (``kafka-streams`` and its dependencies) at the broker's version,
    fetched with ``mvn`` the first time: for Kafka Streams applications the project runs next
    to streams_app (``streams_app.jvm.compile_java`` builds them)."""
    version = version or kafka_version()
    pom = resource_text("streams-pom.xml").replace("@KAFKA_VERSION@", version)
    return resolve_jars(f"kafka-streams-{version}", pom)
