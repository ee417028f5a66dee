"""Feldera-style ``RuntimeConfig`` and ``PipelineBuilder``, for code that comes from Feldera's Python SDK.

>>> RuntimeConfig(workers=4).session_conf()["spark.master"]
'local[4]'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, Optional

from planner.errors import PipelineError


class PipelineStatus(str, Enum):
    """A pipeline's state, ``status()["state"]``: a string enum, so ``status()["state"] == "running"`` holds
    and it serializes as its value."""
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    FAILED = "failed"
    READ_ONLY = "read-only"

    __str__ = str.__str__
    __format__ = str.__format__


@dataclass
class RuntimeConfig:
    """The knobs that mean something here.

    * ``workers``: Spark's local parallelism (``local[N]``) and shuffle partitions (a cluster master given in
      ``spark_conf`` is kept);
    * ``storage``: the storage directory (``storage_dir``);
    * ``min_batch_size_records`` and ``max_buffering_delay_usecs``: a step waits until at least that many
      input rows are pending, or until the first pending input waited that long (default 0.1 s when only
      the minimum is set), trading latency for throughput; by default a step takes what is pending at once;
    * ``spark_conf``: any Spark or ``sqlengine.*`` setting.

    Feldera's ``checkpoint_interval_secs`` has no equivalent (every step commits, so each step is a
    checkpoint).  ``clock_resolution_usecs`` (1 s by default): how often the clock that ``NOW()`` reads in views
    advances, so how often a pipeline with such a view steps when no input arrives.
    """
    workers: Optional[int] = None
    storage: Optional[str] = None
    min_batch_size_records: int = 0
    max_buffering_delay_usecs: int = 0
    clock_resolution_usecs: int = 1_000_000
    spark_conf: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise PipelineError(f"RuntimeConfig: workers must be at least 1, not {self.workers}")
        if self.clock_resolution_usecs < 1:
            raise PipelineError("RuntimeConfig: clock_resolution_usecs must be positive")
        if self.min_batch_size_records < 0 or self.max_buffering_delay_usecs < 0:
            raise PipelineError("RuntimeConfig: min_batch_size_records and max_buffering_delay_usecs must be >= 0")

    def session_conf(self) -> Dict[str, str]:
        """The settings given to the pipeline's SparkSession (``spark_conf`` plus what ``workers`` implies)."""
        conf = dict(self.spark_conf)
        if self.workers:
            if not str(conf.get("spark.master", "local")).startswith(("spark://", "yarn", "k8s://")):
                conf.setdefault("spark.master", f"local[{self.workers}]")
            conf.setdefault("spark.sql.shuffle.partitions", str(self.workers))
        return conf

    def batching(self) -> tuple:
        """(minimum rows, maximum wait in seconds) before a step; (0, 0): no waiting."""
        delay = self.max_buffering_delay_usecs / 1e6
        if self.min_batch_size_records and not delay:
            delay = 0.1
        return self.min_batch_size_records, delay


class PipelineBuilder:
    """``PipelineBuilder(client, name, sql, runtime_config).create_or_replace()``: an embedded
    :class:`~sqlengine.Pipeline` when ``client`` is None, else a pipeline on the server of ``client``
    (``sqlengine.connect(url)``)."""

    def __init__(self, client=None, name: str = "pipeline", sql: str = "",
                 runtime_config: Optional[RuntimeConfig] = None):
        self.client, self.name, self.sql = client, name, sql
        self.runtime_config = runtime_config or RuntimeConfig()

    def create_or_replace(self):
        rc = self.runtime_config
        if self.client is not None:
            return self.client.create_pipeline(self.name, self.sql, runtime_config={"spark_conf": rc.session_conf()})
        from sqlengine.api.pipeline import Pipeline
        return Pipeline.from_sql(self.sql, name=self.name, storage_dir=rc.storage, spark_conf=rc.session_conf(),
                                 runtime_config=rc)

    create = create_or_replace
