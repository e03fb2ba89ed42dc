"""The SparkSession the pipeline and the audit job run in.

Locally (``local[N]``) Spark binds to 127.0.0.1: without it Spark picks the machine's first
non-loopback address ("hostname resolves to a loopback address; using 192.0.2.2") and the driver,
its block manager and the Kafka clients talk over that. On a cluster (``spark://...``,
``yarn``, ``k8s://...``) executors must reach the driver, so nothing is pinned to loopback there.

Under ``spark-submit`` the JVM already exists when Python starts: the master, the driver's
address and ``--jars`` come from the submit command line, and this module only adds the SQL
settings.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from streams_app.spark.jars import connector_jars

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
LOOPBACK = "127.0.0.1"
#: Environment variable naming the master when none is passed (e.g. spark://host:7077).
MASTER_ENV = "STREAMS_APP_SPARK_MASTER"

#: Settings for sessions this module launches on a local master: small and quiet.
LOCAL_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
}
#: Runtime SQL settings applied unless the submit command or ``conf`` set them: hour buckets are
#: computed in UTC, whatever the machine's zone.
SQL_DEFAULTS: Mapping[str, str] = {"spark.sql.session.timeZone": "UTC"}


def under_spark_submit() -> bool:
    """True when ``spark-submit`` started this Python process (the JVM is already running)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster")


def spark_session(
    app_name: str = "streams_app",
    master: str | None = None,
    *,
    conf: Mapping[str, str] | None = None,
    jars: Sequence[Path] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """Get (or create) the process's SparkSession with the Kafka connector on its classpath.

    ``master`` defaults to ``$STREAMS_APP_SPARK_MASTER``, else ``local[2]``. On a local master
    the session binds to 127.0.0.1, has no UI and uses 2 shuffle partitions. Under
    ``spark-submit`` the master, jars and addresses come from the submit command line and only
    :data:`SQL_DEFAULTS` are added. ``conf`` entries override everything here.

    Spark reads the JVM-level settings (master, jars, bind address) only when the first session
    of the process starts; a later call returns that session.
    """
    builder = SparkSession.builder.appName(app_name)
    settings: dict[str, str] = {}
    if not under_spark_submit():
        master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
        builder = builder.master(master)
        settings["spark.jars"] = ",".join(str(j) for j in (jars or connector_jars()))
        if is_local_master(master):
            settings.update(LOCAL_CONF)
            # The launcher and the JVM read SPARK_LOCAL_IP from the environment at start.
            os.environ["SPARK_LOCAL_IP"] = LOOPBACK
            settings["spark.driver.host"] = LOOPBACK
            settings["spark.driver.bindAddress"] = LOOPBACK
    elif master:
        builder = builder.master(master)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    started = time.monotonic()
    spark = builder.getOrCreate()
    log.info("SparkSession %s ready in %.1fs", spark.version, time.monotonic() - started)
    explicit = spark.sparkContext.getConf()
    for key, value in SQL_DEFAULTS.items():
        if key not in settings and not explicit.contains(key):
            spark.conf.set(key, value)
    spark.sparkContext.setLogLevel(log_level)
    return spark


def driver_process(spark: SparkSession) -> Any:
    """The ``Popen`` of the driver JVM this Python process launched (None under spark-submit,
    where the JVM launched Python)."""
    gateway = getattr(spark.sparkContext, "_gateway", None)
    return getattr(gateway, "proc", None)


def driver_alive(spark: SparkSession, wait: float = 5.0) -> bool:
    """False once the driver JVM this process launched has exited (killed, out of memory).

    Called when a Py4J call failed: the connection breaks while the killed JVM is still being
    torn down, so give it ``wait`` seconds to be reaped before calling it alive.
    """
    proc = driver_process(spark)
    if proc is None:
        return True
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return True
    return False
