"""The PySpark data pipeline: a read_committed Kafka source, exactly-once sinks, the audit job.

One concept per module; import from them directly (this package imports nothing, so the
pyspark-free :mod:`streams_app.spark.lineage` stays importable without the ``spark`` extra):

- :mod:`~streams_app.spark.jars`: the Kafka connector jars, resolved from Maven Central once;
- :mod:`~streams_app.spark.session`: the SparkSession (127.0.0.1 locally, any master);
- :mod:`~streams_app.spark.schema`: Spark schemas from faust Record models;
- :mod:`~streams_app.spark.reader`: streaming and batch readers of topology output topics;
- :mod:`~streams_app.spark.sinks`: exactly-once file and PostgreSQL sinks;
- :mod:`~streams_app.spark.pipeline`: the orders topology's pipeline;
- :mod:`~streams_app.spark.audit`: duplicates, gaps and aborted records per partition;
- :mod:`~streams_app.spark.lineage`: moved to :mod:`streams_app.lineage` (the old names stay);
- :mod:`~streams_app.spark.postgres_server`: moved to :mod:`streams_app.postgres.server`;
- ``submit.py``: the entry script for ``spark-submit`` (see docs/pipeline.md).
"""
