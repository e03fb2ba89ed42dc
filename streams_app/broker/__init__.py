"""The embedded, real Apache Kafka 4.x broker: fetched from Maven Central, run as a local JVM."""

from streams_app.broker.cluster import TEST_SETTINGS, EmbeddedKafka, free_port
from streams_app.broker.jars import DEFAULT_KAFKA_VERSION, broker_libs, kafka_version
from streams_app.broker.node import KafkaNode, NodeAddress

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "TEST_SETTINGS",
    "EmbeddedKafka",
    "KafkaNode",
    "NodeAddress",
    "broker_libs",
    "free_port",
    "kafka_version",
]
