"""The Spark pipeline reads over SASL_SSL from the secured broker (ACLs on)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from streams_app import App
from streams_app.spark.pipeline import OrdersPipeline
from streams_app.spark.security import kafka_security_options
from streams_app.spark.sinks import Trigger
from streams_app.testing.secure import SecureKafka
from streams_app.transport.base import TopicSpec
from tests.spark.support import reservations, run_async


def test_pipeline_reads_over_sasl_ssl(
    spark: SparkSession, secure_kafka: SecureKafka, unique: str, tmp_path: Path
) -> None:
    app = App(f"spark-{unique}", **secure_kafka.sasl_settings("alice", "SCRAM-SHA-512"))
    topic = f"inventory-{unique}"
    app.topic(topic, key_serializer="raw", value_serializer="raw")
    records = reservations("s", 6)

    async def produce() -> None:
        admin = app.transport().admin()
        await admin.start()
        try:
            await admin.create_topics([TopicSpec(topic, 2, 1)])
        finally:
            await admin.close()
        async with app.producer() as producer:
            for r in records:
                await producer.send(
                    topic, key=r.item.encode(), value=r.value(), partition=r.partition
                )

    run_async(produce())
    options = kafka_security_options(app.conf)
    assert options["kafka.security.protocol"] == "SASL_SSL"
    pipeline = OrdersPipeline(
        spark,
        secure_kafka.sasl_bootstrap,
        str(tmp_path / "pipeline"),
        None,
        topic,
        Trigger(available_now=True),
        kafka_options=options,
    )
    pipeline.start(only=("files",))
    pipeline.await_termination()
    pipeline.stop()
    found = sorted(row.order_id for row in pipeline.file_rows().collect())
    assert found == sorted(r.order_id for r in records)
