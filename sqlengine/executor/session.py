"""The embedded SparkSession: one per process, created on first use, tuned for small steps."""
from __future__ import annotations

import os
import shutil
import sys
import threading
from concurrent.futures import Future
from typing import Dict, Optional

from planner.errors import PipelineError

DEFAULTS: Dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "sqlengine",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "2",
    # Steps run many tiny jobs; adaptive re-planning costs more than it saves on them.
    "spark.sql.adaptive.enabled": "false",
    # Expressions that fail raise, as in DuckDB (bad casts, overflow): the engine then re-runs the step on the
    # driver, which keeps the failing rows out of the views and records them (sqlengine.executor.row_errors).
    "spark.sql.ansi.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.useLargeVarTypes": "false",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=ERROR",
}

_lock = threading.Lock()


def check_java() -> None:
    java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                                    if os.environ.get("JAVA_HOME") else None)
    if not java or not os.path.exists(java):
        raise PipelineError("Java 17 is required to run Spark but no 'java' was found on PATH or in JAVA_HOME; "
                            "install it (e.g. apt-get install openjdk-17-jre-headless) or run ./run.sh setup")


def get_spark(conf: Optional[Dict[str, str]] = None):
    """The process-wide SparkSession (created with ``DEFAULTS`` overridden by ``conf``)."""
    with _lock:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        check_java()
        builder = SparkSession.builder
        for k, v in {**DEFAULTS, **(conf or {})}.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark


def spark_master(conf: Optional[Dict[str, str]] = None) -> str:
    """The master the embedded session has or will have."""
    from pyspark.sql import SparkSession
    active = SparkSession.getActiveSession()
    if active is not None:
        return active.sparkContext.master
    return {**DEFAULTS, **(conf or {})}["spark.master"]


def spark_in_background(conf: Optional[Dict[str, str]] = None) -> Future:
    """Start (or reuse) the process-wide SparkSession on a background thread; the future gives it."""
    future: Future = Future()

    def run():
        try:
            future.set_result(get_spark(conf))
        except BaseException as e:  # noqa: BLE001 - delivered to whoever needs Spark
            future.set_exception(e)

    threading.Thread(target=run, name="sqlengine-spark-start", daemon=True).start()
    return future


class LazySpark:
    """Like the future of ``spark_in_background``, but the session starts only when a step first needs it
    (``spark_conf={"sqlengine.spark.start": "lazy"}``): for pipelines whose steps fit the driver, and for
    processes that restart often."""

    def __init__(self, conf: Optional[Dict[str, str]] = None):
        self.conf = conf
        self._spark = None

    def result(self):
        if self._spark is None:
            self._spark = get_spark(self.conf)
        return self._spark

    def done(self) -> bool:
        return self._spark is not None


START_OPTION = "sqlengine.spark.start"   # "eager" (default: start in the background at once) or "lazy"


def start_spark(conf: Dict[str, str]):
    """The future session for ``conf``, started now in the background or lazily (``START_OPTION``)."""
    mode = conf.get(START_OPTION, os.environ.get("SQLENGINE_SPARK_START", "eager"))
    if mode not in ("eager", "lazy"):
        raise PipelineError(f"{START_OPTION} must be 'eager' or 'lazy', not {mode!r}")
    spark_conf = {k: v for k, v in conf.items() if k != START_OPTION}
    return LazySpark(spark_conf) if mode == "lazy" else spark_in_background(spark_conf)
