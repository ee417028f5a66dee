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
    "spark.sql.timeType.enabled": "true",   # TIME columns (TimeType), off by default in Spark 4
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
        active = running_session()
        if active is not None:
            return active
        check_java()
        builder = SparkSession.builder
        for k, v in {**DEFAULTS, **(conf or {})}.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark


MASTER_ENV = "SQLENGINE_SPARK_MASTER"


def is_local(master: str) -> bool:
    return str(master).startswith("local")


def resolve_conf(spark_conf: Optional[Dict[str, str]], master: Optional[str]) -> Dict[str, str]:
    """The session settings of a pipeline: ``master`` (the ``spark_master`` argument) wins over
    ``spark_conf["spark.master"]``, which wins over ``$SQLENGINE_SPARK_MASTER``, which wins over ``local[2]``.
    A SparkSession already running in this process (Spark allows one) with a different master than the one
    asked for is an error, rather than a silent run on the wrong cluster."""
    conf = dict(spark_conf or {})
    asked = master or conf.get("spark.master") or os.environ.get(MASTER_ENV) or None
    if asked:
        conf["spark.master"] = asked
        active = running_session()
        if active is not None:
            running = active.sparkContext.master
            if running != asked and not (is_local(running) and is_local(asked)):
                raise PipelineError(f"Spark master {asked!r} was asked for, but this process already runs a "
                                    f"SparkSession on {running!r} (one per process): stop it first, or pass "
                                    "that session as spark=")
    return conf


def check_storage_reachable(spark, root: str) -> None:
    """On a cluster, check that every executor sees the storage directory ``root`` (state runs and input log
    files are read by executors by path): a probe file written here must be readable there.  Raises
    ``PipelineError`` naming the executors' hosts that do not see it."""
    import socket
    import uuid
    if "://" in root and not root.startswith("file://"):
        return   # a distributed filesystem URI: the same for every executor
    path = os.path.join(root, f".probe-{uuid.uuid4().hex}")
    token = uuid.uuid4().hex
    with open(path, "w") as f:
        f.write(token)
    try:
        sc = spark.sparkContext
        n = max(4, 2 * sc.defaultParallelism)

        def probe(_):
            try:
                with open(path) as f:
                    seen = f.read() == token
            except OSError:
                seen = False
            return socket.gethostname(), seen
        try:
            found = sc.parallelize(range(n), n).map(probe).collect()
        except Exception as e:   # noqa: BLE001 - e.g. no Python on the executors
            raise PipelineError(f"cannot check that Spark's executors (master {sc.master}) see the storage "
                                f"directory {root}: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                                ) from e
        blind = sorted({host for host, seen in found if not seen})
        if blind:
            raise PipelineError(
                f"the storage directory {root} is not visible to Spark's executors on {', '.join(blind)} "
                f"(master {sc.master}); executors read state and input files by path, so storage must be on a "
                f"filesystem every worker mounts at the same path (e.g. NFS), or run with a local master")
    finally:
        try:
            os.remove(path)
        except OSError:
            pass


def running_session():
    """This process's SparkSession, if one runs, whichever thread started it (``getActiveSession`` alone
    sees only the calling thread's: pipelines start theirs on a thread of their own)."""
    from pyspark.sql import SparkSession
    active = SparkSession.getActiveSession()
    if active is None:
        active = getattr(SparkSession, "_instantiatedSession", None)
    if active is not None and getattr(active.sparkContext, "_jsc", None) is None:   # stopped
        return None
    return active


def spark_master(conf: Optional[Dict[str, str]] = None) -> str:
    """The master the embedded session has or will have."""
    active = running_session()
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
