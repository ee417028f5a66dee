"""The embedded SparkSession: one per process, created on first use, tuned for small steps."""
from __future__ import annotations

import os
import shutil
import sys
import threading
from typing import Dict, Optional

from planner.errors import PipelineError

DEFAULTS: Dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "sqlengine",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "2",
    # Steps run many tiny jobs; adaptive re-planning costs more than it saves on them.
    "spark.sql.adaptive.enabled": "false",
    # SQL semantics as DuckDB and the SQL standard's NULL-on-error variants: x/0 is NULL, bad casts are NULL.
    "spark.sql.ansi.enabled": "false",
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
