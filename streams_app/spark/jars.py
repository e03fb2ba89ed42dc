"""Spark's Kafka connector, resolved from Maven Central once per user and pyspark version.

pyspark ships Spark itself but not ``spark-sql-kafka-0-10``. Of the connector's runtime
dependencies, pyspark already carries lz4, snappy, zstd, jsr305, spark-tags and the Hadoop
client, so only four jars are needed. They are resolved with ``mvn`` through
:func:`streams_app.jvm.resolve_jars` into the per-user cache (a directory of their own, apart from
the broker's Kafka 4.x jars: the connector brings its own kafka-clients 3.9) and handed to the
SparkSession as ``spark.jars``, so no Spark start after the first reaches for the network.
"""

from __future__ import annotations

from pathlib import Path

from streams_app.errors import ToolchainError
from streams_app.jvm import resolve_jars

#: Maven coordinates: org.apache.spark:<CONNECTOR_ARTIFACT>:<pyspark version>.
CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"
#: The connector and the runtime dependencies pyspark does not already ship.
CONNECTOR_JARS = (
    CONNECTOR_ARTIFACT,
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.streams_app</groupId>
  <artifactId>spark-kafka-connector</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>@ARTIFACT@</artifactId>
      <version>@SPARK_VERSION@</version>
    </dependency>
  </dependencies>
</project>
"""


def spark_version() -> str:
    """The installed pyspark's version: the connector must match it exactly."""
    try:
        import pyspark
    except ImportError as exc:
        raise ToolchainError(
            "pyspark is not installed. The data pipeline needs the 'spark' extra: "
            "`pip install -e '.[spark]'` (or `make setup`)."
        ) from exc
    return str(pyspark.__version__)


def connector_coordinates(version: str | None = None) -> str:
    return f"org.apache.spark:{CONNECTOR_ARTIFACT}:{version or spark_version()}"


def connector_jars(version: str | None = None) -> list[Path]:
    """The connector's jars (fetched with ``mvn`` the first time), sorted by path."""
    version = version or spark_version()
    pom = _POM.replace("@ARTIFACT@", CONNECTOR_ARTIFACT).replace("@SPARK_VERSION@", version)
    libs = resolve_jars(f"spark-kafka-{version}", pom, CONNECTOR_JARS)
    jars = sorted(libs.glob("*.jar"))
    found = {jar.name.rsplit("-", 1)[0] for jar in jars}
    missing = [name for name in CONNECTOR_JARS if name not in found]
    if missing:
        raise ToolchainError(
            f"the Spark Kafka connector jars in {libs} lack {', '.join(missing)}; delete that "
            "directory so the next run resolves them again."
        )
    return jars
