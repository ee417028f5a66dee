"""Where each step and each operator runs: every threshold of that choice, in one place.

A step runs on the driver (DuckDB and Arrow over the state cache) when its input is small and the state it
reads is cached or readable by key; otherwise on Spark, where each operator may still run on the driver when
its changes are there and the state rows they meet can be read by key (``driver_ops``).  Merges of
small runs, scans of state for a change's keys, and the hand-off of driver-side changes to Spark have their
own thresholds.  The figures behind the defaults are in ``benchmarks/RESULTS.md`` and ``docs/SCALING.md``.

The thresholds come from ``RuntimeConfig(placement={...})`` (names as the fields below):

>>> Placement.from_dict({"local_step_rows": 0}).step_rows("local[2]")
0
>>> Placement().step_rows("spark://h:7077")
200000
>>> Placement.from_dict({"local_step_row": 1})
Traceback (most recent call last):
...
ValueError: unknown placement setting 'local_step_row' (did you mean 'local_step_rows'?). Settings: ...

``SQLENGINE_LOCAL_STEP_ROWS`` in the environment is the default of ``local_step_rows`` where the
configuration does not set it (for benchmarks that run the engine in child processes).
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, fields
from typing import Any, Dict, Optional

LOCAL_STEP_ROWS_ENV = "SQLENGINE_LOCAL_STEP_ROWS"


@dataclass(frozen=True)
class Placement:
    # ---- steps on the driver (local_step)
    # Steps with at most this many input rows run on the driver; None: every step whose state fits the cache
    # with a local master (Spark on the same cores as the driver), ``cluster_local_step_rows`` with a cluster
    # master; 0: every step on Spark, and every operator of it too (no ``driver_ops``).
    local_step_rows: Optional[int] = None
    cluster_local_step_rows: int = 200_000
    # A step of at most this many input rows whose state is not all cached may still run on the driver,
    # reading the state it needs by key from the runs' files, at most ``file_read_rows`` rows decoded per read.
    file_step_rows: int = 20_000
    file_read_rows: int = 2_000_000
    # After a step or merge of at least this many rows, freed memory goes back to the OS; runs of tables this
    # big are consolidated by DuckDB's parallel aggregation rather than Arrow's (LocalExecutor._cancel_deletes).
    bulk_rows: int = 100_000

    # ---- operators of Spark steps on the driver (SparkStep._driver_ok)
    # A Spark step filters, projects and sums (partial sums) a change on the driver (Arrow) of at most this
    # many rows (a Spark job for it costs more than the work, up to millions of rows), and runs an op
    # there when its changes are at most this many rows and the state rows they meet can be read by key.
    driver_rows: int = 4_000_000
    # A scan of state runs for a change's keys (for an op of a Spark step run on the driver) returns at most
    # this many rows; more: the op runs on Spark.
    scan_rows: int = 4_000_000
    # Do Spark steps run operators on the driver where their changes are?  None: unless local_step_rows is 0.
    driver_ops: Optional[bool] = None
    # State beyond the cache that keys cannot narrow is scanned for them: with a local master by DuckDB on the
    # driver, with a cluster master by a Spark job; off, such reads run as the Spark path's jobs.
    driver_scans: bool = True
    # Where those scans run: None: DuckDB with a local master, a Spark job with a cluster master; or "duckdb",
    # "spark" (a test runs a cluster's scans on a local session).
    state_scans: Optional[str] = None
    # Does the driver cache state at all?  False: every read is by key from the runs' files, or a scan, as when
    # the state outgrows the driver with the disk tier off (read when the pipeline starts).
    cache_state: bool = True
    # Distinct probe values up to which a state read is narrowed by key (keyed_reads.key_filter).
    max_keys: int = 2000

    # ---- merges and hand-offs
    # Runs this small are merged on the driver, read from their files if not cached (a merge on Spark
    # collects the merged run to the driver too, to write it, so it only adds a job).
    driver_merge_rows: int = 100_000_000
    # A driver-side change this big reaches Spark as a parquet file (see state.scratch).
    scratch_rows: int = 20_000
    # The delete clamp's probe keys are broadcast up to this size (faster than the shuffle Spark would choose).
    broadcast_bytes: int = 64 << 20
    # A Spark step's cuts run as concurrent jobs on this many threads.
    cut_threads: int = 2
    # DataFrames over state runs kept between steps (SparkState.runs_frame).
    runs_frames: int = 512

    def step_rows(self, master: Optional[str]) -> int:
        """The most input rows of a step that runs on the driver, given Spark's ``master``."""
        if self.local_step_rows is not None:
            return self.local_step_rows
        if str(master or "local").startswith("local"):
            return 1 << 62
        return self.cluster_local_step_rows

    def ops_on_driver(self) -> bool:
        """Do Spark steps run operators on the driver where their changes are?"""
        return self.driver_ops if self.driver_ops is not None else self.local_step_rows != 0

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]], env: bool = True) -> "Placement":
        """The placement ``d`` overrides (names as the fields; missing ones at their defaults, and
        ``local_step_rows`` from ``SQLENGINE_LOCAL_STEP_ROWS`` if set and ``env``).  ValueError names an unknown setting
        or a wrong value."""
        d = dict(d or {})
        known = cls.names()
        for k, v in d.items():
            if k not in known:
                close = difflib.get_close_matches(str(k), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown placement setting {k!r}{hint}. Settings: {', '.join(known)}")
            if k == "state_scans":
                if v not in (None, "duckdb", "spark"):
                    raise ValueError(f"placement setting state_scans must be 'duckdb', 'spark' or null, not {v!r}")
                continue
            want = bool if k in ("driver_scans", "driver_ops", "cache_state") else int
            if not (isinstance(v, want) and (want is bool or not isinstance(v, bool)) and (want is bool or v >= 0)) \
                    and not (v is None and k in ("local_step_rows", "driver_ops")):
                raise ValueError(f"placement setting {k} must be {'true or false' if want is bool else 'an integer >= 0'}, "
                                 f"not {v!r}")
        if env and "local_step_rows" not in d and os.environ.get(LOCAL_STEP_ROWS_ENV) is not None:
            d["local_step_rows"] = int(os.environ[LOCAL_STEP_ROWS_ENV])
        return cls(**d)

    @classmethod
    def from_config(cls, rc) -> "Placement":
        """The placement of a ``RuntimeConfig`` (None: the default one)."""
        return cls.from_dict(getattr(rc, "placement", None))

    def replace(self, **kw) -> "Placement":
        return dataclasses.replace(self, **kw)
