"""The orders pipeline in a process of its own, so a test can SIGKILL it in the middle of a batch.

    python -m tests.spark.pipeline_child '<json config>'

Config: ``bootstrap``, ``topic``, ``home``, ``dsn``, ``max_offsets``, and ``crash`` (a directory
for markers, or null). With ``crash`` set, the run stops itself at two points and waits to be
killed:

- the postgres query, right after its sink committed a batch (the first with rows from batch
  ``CRASH_FROM_BATCH`` on) to PostgreSQL and before Spark wrote that batch to the checkpoint's
  commit log (marker ``postgres``, holding the batch id);
- the files query, inside the task writing the Parquet files of the batch holding the record
  ``crash_order`` (marker ``files``): a Python UDF on the written rows blocks there.

Without ``crash`` it runs the plain pipeline with ``availableNow`` and exits.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streams_app.spark.pipeline import OrdersPipeline
from streams_app.spark.session import spark_session
from streams_app.spark.sinks import PostgresSink, Trigger
from tests.spark.support import TEST_CONF

#: The postgres query crashes after the first batch from this one on that wrote rows.
CRASH_FROM_BATCH = 2


class CrashAfterCommit(PostgresSink):
    def __init__(self, *args: Any, markers: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.markers = markers

    def write_batch(self, batch: DataFrame, query_id: str, batch_id: int) -> int | None:
        written = super().write_batch(batch, query_id, batch_id)
        if batch_id >= CRASH_FROM_BATCH and written:
            (self.markers / "postgres").write_text(str(batch_id))
            time.sleep(600)
        return written


class CrashingPipeline(OrdersPipeline):
    markers: Path
    crash_order: str

    def postgres_sink(self) -> PostgresSink:
        sink = super().postgres_sink()
        return CrashAfterCommit(
            sink.dsn, sink.table, transform=sink.transform, markers=self.markers
        )

    def files_frame(self) -> DataFrame:
        markers, crash_order = str(self.markers), self.crash_order

        def pass_through(order_id: str) -> bool:
            # Runs in the Python worker of the task writing this batch's Parquet files.
            if order_id == crash_order:
                (Path(markers) / "files").write_text(order_id)
                time.sleep(600)
            return True

        blocking = F.udf(pass_through, "boolean")
        return super().files_frame().where(blocking(F.col("order_id")))


def main() -> int:
    config = json.loads(sys.argv[1])
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    logging.getLogger("streams_app").setLevel(logging.INFO)
    spark = spark_session("pipeline-child", "local[2]", conf=TEST_CONF)
    crash = config.get("crash")
    cls = CrashingPipeline if crash else OrdersPipeline
    pipeline = cls(
        spark,
        config["bootstrap"],
        config["home"],
        postgres_dsn=config["dsn"],
        topic=config["topic"],
        trigger=Trigger(available_now=True),
        max_offsets_per_trigger=config["max_offsets"],
    )
    if isinstance(pipeline, CrashingPipeline):
        pipeline.markers = Path(crash)
        pipeline.crash_order = config["crash_order"]
    pipeline.run()
    print("pipeline finished", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
