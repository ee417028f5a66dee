"""Feldera-style ``RuntimeConfig`` and ``PipelineBuilder``, for code that comes from Feldera's Python SDK.

>>> RuntimeConfig(workers=4).session_conf()["spark.master"]
'local[4]'
"""
from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Dict, Optional

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
    """The knobs that mean something here, with Feldera's names.

    * ``workers``: Spark's local parallelism (``local[N]``) and shuffle partitions (a cluster master given in
      ``spark_conf`` is kept);
    * ``storage``: the storage directory (``storage_dir``; on a server, a directory on the server's machine,
      by default ``<server storage root>/<name>/storage``).  State is always on disk here, so Feldera's
      ``storage=True`` has no meaning and is rejected with what to write instead;
    * ``min_batch_size_records`` and ``max_buffering_delay_usecs``: a step waits until at least that many
      input rows are pending, or until the first pending input waited that long (default 0.1 s when only
      the minimum is set), trading latency for throughput; by default a step takes what is pending at once;
    * ``clock_resolution_usecs`` (1 s by default): how often the clock that ``NOW()`` reads in views
      advances, so how often a pipeline with such a view steps when no input arrives;
    * ``checkpoint_interval_secs``: accepted for Feldera code and always met: every step commits, so each
      step is a checkpoint;
    * ``wait_for_lock_secs``: how long opening the storage waits for another process that has it open (one
      writer per storage directory, see ``sqlengine.state.lock``); 0: fail at once, naming that process;
    * ``spark_conf``: any Spark or ``sqlengine.*`` setting (values kept as strings);
    * ``placement``: where steps and operators run, by name: the thresholds of
      :class:`sqlengine.executor.placement.Placement` (e.g. ``{"local_step_rows": 0}``: every step on Spark).

    ``to_dict()`` / ``from_dict()`` are the one serialization, used by the client, the server and the CLI:

    >>> RuntimeConfig.from_dict(RuntimeConfig(workers=2, min_batch_size_records=10).to_dict()).workers
    2
    """
    workers: Optional[int] = None
    storage: Optional[str] = None
    min_batch_size_records: int = 0
    max_buffering_delay_usecs: int = 0
    max_step_bytes: int = 1 << 30
    clock_resolution_usecs: int = 1_000_000
    spark_conf: Dict[str, str] = field(default_factory=dict)
    checkpoint_interval_secs: Optional[float] = None
    wait_for_lock_secs: float = 0.0
    placement: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.storage, (bool, dict)):
            raise PipelineError(
                f"RuntimeConfig: storage={self.storage!r} is Feldera's switch for durable state; here state is "
                "always on disk and storage names its directory: write RuntimeConfig(storage=\"path/to/dir\"), or "
                "leave it unset (a temporary directory embedded, <root>/<name>/storage on a server)")
        if self.storage is not None:
            if not isinstance(self.storage, (str, os.PathLike)):
                raise PipelineError(f"RuntimeConfig: storage must be a directory path, not {self.storage!r}")
            self.storage = os.fspath(self.storage)
        for name in ("workers", "min_batch_size_records", "max_buffering_delay_usecs", "clock_resolution_usecs",
                     "max_step_bytes"):
            v = getattr(self, name)
            if not (v is None and name == "workers") and (isinstance(v, bool) or not isinstance(v, int)):
                raise PipelineError(f"RuntimeConfig: {name} must be an integer, not {v!r}")
        for name in ("checkpoint_interval_secs", "wait_for_lock_secs"):
            v = getattr(self, name)
            if not (v is None and name == "checkpoint_interval_secs") and \
                    (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                raise PipelineError(f"RuntimeConfig: {name} must be a number of seconds >= 0, not {v!r}")
        if self.workers is not None and self.workers < 1:
            raise PipelineError(f"RuntimeConfig: workers must be at least 1, not {self.workers}")
        if self.clock_resolution_usecs < 1:
            raise PipelineError("RuntimeConfig: clock_resolution_usecs must be positive")
        if self.max_step_bytes < 1:
            raise PipelineError("RuntimeConfig: max_step_bytes must be positive")
        if self.min_batch_size_records < 0 or self.max_buffering_delay_usecs < 0:
            raise PipelineError("RuntimeConfig: min_batch_size_records and max_buffering_delay_usecs must be >= 0")
        if not isinstance(self.spark_conf, dict) or \
                not all(isinstance(v, (str, int, float, bool)) for v in self.spark_conf.values()):
            raise PipelineError("RuntimeConfig: spark_conf must map setting names to strings or numbers")
        self.spark_conf = {str(k): (str(v).lower() if isinstance(v, bool) else str(v))
                           for k, v in self.spark_conf.items()}
        from sqlengine.executor.placement import Placement   # (pure Python: no Spark import)
        if self.placement is None:
            self.placement = {}
        if not isinstance(self.placement, dict):
            raise PipelineError(f"RuntimeConfig: placement must map setting names to values, not {self.placement!r}")
        try:
            Placement.from_dict(self.placement, env=False)
        except ValueError as e:
            raise PipelineError(f"RuntimeConfig: {e}") from None
        self.placement = dict(self.placement)

    # ------------------------------------------------------------------ the one serialization
    def to_dict(self) -> Dict[str, Any]:
        """Every field, as JSON values (what the client sends and the server stores and answers)."""
        out = asdict(self)
        out["spark_conf"] = dict(self.spark_conf)
        out["placement"] = dict(self.placement)
        return out

    @classmethod
    def from_dict(cls, d: Any) -> "RuntimeConfig":
        """The config ``d`` describes (a JSON object of fields, missing ones at their defaults); an unknown
        field or a wrong value raises ``PipelineError`` saying which."""
        if not isinstance(d, dict):
            raise PipelineError(f"runtime_config must be a JSON object, not {type(d).__name__}")
        known = [f.name for f in fields(cls)]
        for k in d:
            if k not in known:
                close = difflib.get_close_matches(str(k), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise PipelineError(f"runtime_config: unknown field {k!r}{hint}. Fields: {', '.join(known)}")
        return cls(**{k: ({} if k in ("spark_conf", "placement") and v is None else v) for k, v in d.items()})

    @classmethod
    def coerce(cls, rc: Any) -> "RuntimeConfig":
        """``rc`` as a RuntimeConfig: None is the default one, a dict goes through :meth:`from_dict`."""
        if rc is None:
            return cls()
        if isinstance(rc, cls):
            return rc
        if isinstance(rc, dict):
            return cls.from_dict(rc)
        raise PipelineError(f"runtime_config must be a RuntimeConfig or a dict, not {type(rc).__name__}")

    def storage_for(self, storage_dir: Optional[str]) -> Optional[str]:
        """The storage directory of a pipeline given ``storage_dir`` and this config (they must agree)."""
        if storage_dir is None:
            return self.storage
        if isinstance(storage_dir, bool):
            raise PipelineError("storage_dir must be a directory path (state is always on disk here), not "
                                f"{storage_dir!r}")
        if self.storage is not None and os.path.abspath(self.storage) != os.path.abspath(os.fspath(storage_dir)):
            raise PipelineError(f"storage_dir={storage_dir!r} and RuntimeConfig(storage={self.storage!r}) name "
                                "different directories; give one of them")
        return os.fspath(storage_dir)

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
    (``sqlengine.connect(url)``).  ``udfs``: the Python functions the SQL calls (``sqlengine.udf``), for an
    embedded pipeline; a server's pipelines call those it was started with (``sqlengine serve --udfs``)."""

    def __init__(self, client=None, name: str = "pipeline", sql: str = "",
                 runtime_config: Optional[RuntimeConfig] = None, udfs=()):
        self.client, self.name, self.sql = client, name, sql
        self.runtime_config = runtime_config or RuntimeConfig()
        self.udfs = tuple(udfs)

    def create_or_replace(self):
        rc = self.runtime_config
        if self.client is not None:
            if self.udfs:
                raise PipelineError("udfs= are for an embedded pipeline: a server's pipelines call the functions "
                                    "of its --udfs files, or functions declared in SQL with their code inline")
            return self.client.create_pipeline(self.name, self.sql, runtime_config=rc)
        from sqlengine.api.pipeline import Pipeline
        return Pipeline.from_sql(self.sql, name=self.name, runtime_config=rc, udfs=self.udfs)

    create = create_or_replace
