"""The Spark side of the state: the session, state read as DataFrames, and rows moved between Arrow and Spark.

The session is asked for only when something actually runs on Spark (a step, a merge of runs not cached, a
lookup with a cluster master), so steps on the driver never wait for the JVM.  A state is the union of its
parquet runs, read narrowed to the row groups that can hold a change's keys where those are few and known on
the driver (:mod:`sqlengine.executor.keyed_reads`); a derived integral is read through the state it is
derived from (:mod:`sqlengine.executor.derived`).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Dict, List, Optional

import pyarrow as pa
from pyspark.sql import DataFrame, functions as F

from planner.errors import InternalError

from sqlengine import nested
from sqlengine.executor import delta_rules as rules, keyed_reads
from sqlengine.executor.backends.spark import SparkBackend
from sqlengine.executor.schema import chunked
from sqlengine.executor.context import StepContext
from sqlengine.executor.casts import cast_to
from sqlengine.executor.local_step import NeedsSpark, outside_years, scannable
from sqlengine.executor.ops import join as join_op, map as map_op
from sqlengine.executor.schema import spark_schema_of
from sqlengine.executor.step import EMPTY
from sqlengine.state.scratch import Scratch
from sqlengine.state.store import Manifest
from sqlengine.zset import consolidate_arrow


class SparkState:
    """Spark for the engine of ``ctx``: ``spark`` is a SparkSession or a zero-argument callable returning one (a
    session still starting in the background).  ``scratch``: where big Arrow tables are written for Spark to read."""

    def __init__(self, ctx: StepContext, spark, scratch: Scratch):
        self.ctx = ctx
        self._spark = spark
        self._ansi = False
        self.scratch = scratch
        self._backend: Optional[SparkBackend] = None
        self._empty: Dict[int, DataFrame] = {}
        self._frames: "OrderedDict[tuple, DataFrame]" = OrderedDict()   # runs_frame's, least recently used first
        self._frames_lock = threading.Lock()
        self._schemas: Dict[int, object] = {}
        self._state_schemas: Dict[int, object] = {}
        self._shipped: Dict[tuple, tuple] = {}   # this step's Arrow changes shipped to Spark: (id, schema) -> (t, df)

    def new_step(self) -> None:
        """Forget the last step's shipped changes (:meth:`to_df`)."""
        self._shipped = {}

    @property
    def spark(self):
        if callable(self._spark):
            self._spark = self._spark()
        if not self._ansi:
            # a failing expression must raise on Spark as on the driver (a session the user passed in too)
            self._spark.conf.set("spark.sql.ansi.enabled", "true")
            self._spark.conf.set("spark.sql.timeType.enabled", "true")   # TIME columns
            for k, v in keyed_reads.SPARK_CONF.items():   # state reads filtered by key skip row groups
                self._spark.conf.set(k, v)
            self._ansi = True
        return self._spark

    @property
    def ready(self) -> bool:
        """Has the session started (without waiting for it)?"""
        return not callable(self._spark)

    @property
    def backend(self) -> SparkBackend:
        if self._backend is None:
            self._backend = SparkBackend(self.spark, self.ctx.functions)
            self._backend.stats = self.ctx.stats   # (what a rule brings to the driver: ops.recursive)
        return self._backend

    # ------------------------------------------------------------ schemas
    @property
    def schemas(self) -> Dict[int, object]:
        """op id -> Spark schema of its change (from the Arrow schema; built on first use of Spark)."""
        if not self._schemas:
            self._schemas.update({i: spark_schema_of(s) for i, s in self.ctx.arrow_schemas.items()})
        return self._schemas

    @property
    def state_schemas(self) -> Dict[int, object]:
        if not self._state_schemas:
            self._state_schemas.update({i: spark_schema_of(s) for i, s in self.ctx.state_arrow.items()})
        return self._state_schemas

    def empty(self, op_id: int, schema) -> DataFrame:
        """An empty DataFrame of ``schema``, kept per ``op_id``."""
        if op_id not in self._empty:
            self._empty[op_id] = self.spark.createDataFrame([], schema)
        return self._empty[op_id]

    # ------------------------------------------------------------ state
    def read_state(self, op_id: int, manifest: Optional[Manifest] = None, key=None) -> DataFrame:
        """The committed state of integral ``op_id`` (as of ``manifest``), as the union of its runs.  ``key``:
        (spec, probe tables, their specs), the key the reader looks the state up by, as for
        ``LocalExecutor.read``: the read is narrowed to rows that can match a probe row (see
        :mod:`sqlengine.executor.keyed_reads`) when the probe values are few and known here."""
        ctx = self.ctx
        d = ctx.derived.get(op_id)
        if d is not None:   # through the table's state, or the join of its inputs' states, and the maps
            if d.aggregate is not None:   # pragma: no cover - planner.rules.aggregate_contents: no op reads it
                raise InternalError(f"integral #{op_id} (a view's contents) is read whole, by state_rows")
            below = None
            if key is not None and key[0] and d.join is None:
                below = (tuple(f"c{j}" for j in d.below(key[0])),) + tuple(key[1:])
            df = self.read_state(d.base[0], manifest, below)
            if d.join is not None:
                df = join_op.pairs_spark(self.backend, d.join, df, self.read_state(d.base[1], manifest))
            for m in d.chain:
                df = map_op.spark(self.backend, m, [df])
            return df.select(*[F.col(f.name).cast(f.dataType) for f in self.state_schemas[op_id]])
        paths = ctx.store.paths(ctx.keys[op_id], manifest)
        if not paths:
            return self.empty(op_id, self.state_schemas[op_id])
        df = self.runs_frame(op_id, paths)
        return self.narrowed(op_id, df, key) if key is not None else df

    def runs_frame(self, op_id: int, paths: List[str]) -> DataFrame:
        """The parquet runs ``paths`` of ``op_id``'s state as one DataFrame.  Runs never change, so the frame (its
        analyzed relation and file listing) is kept for the next steps that read the same runs: most steps leave
        most operators' runs as they were."""
        key = (op_id, tuple(paths))
        with self._frames_lock:
            df = self._frames.get(key)
            if df is not None:
                self._frames.move_to_end(key)
                return df
        df = self.spark.read.schema(self.state_schemas[op_id]).parquet(*paths)
        with self._frames_lock:
            self._frames[key] = df
            while len(self._frames) > self.ctx.placement.runs_frames:
                self._frames.popitem(last=False)
        return df

    @property
    def frames_kept(self) -> int:
        """How many DataFrames over runs ``runs_frame`` keeps now."""
        return len(self._frames)

    def narrowed(self, op_id: int, df: DataFrame, key) -> DataFrame:
        """``df`` (runs of ``op_id``) filtered to the row groups that can hold the probes' keys (``key``: spec,
        probe tables, their specs), when those are few and known here (see :mod:`keyed_reads`)."""
        column = self.ctx.sort_columns.get(op_id)
        found = keyed_reads.key_filter(column, *key, self.ctx.placement.max_keys) if column and key[0] else None
        if found is not None:
            values, has_null = found
            self.ctx.stats.narrowed_reads += 1
            df = df.filter(keyed_reads.in_list(column, values, has_null))
        return df

    def scan(self, op_id: int, files: List[str], schema: pa.Schema, spec: tuple, probes: List[tuple],
             limit: Optional[int]) -> pa.Table:
        """Rows of the runs ``files`` of integral ``op_id`` whose ``spec`` columns equal, NULL-safely, those of
        some probe row (``(table, its key columns)``; no ``spec``: every row), found by one Spark job: the
        executors read the runs and semi-join them with the probes' distinct keys (broadcast up to
        ``placement.broadcast_bytes``; the read narrowed to the row groups that can hold them when they are
        few); the rows come to the driver.  More than ``limit`` rows raise NeedsSpark."""
        from pyspark.sql.types import StructType
        sschema = self.state_schemas[op_id]
        df = self.runs_frame(op_id, files)
        if spec:
            if not scannable(schema, spec, probes):
                return schema.empty_table()
            df = self.narrowed(op_id, df, (spec, [t for t, _ in probes], [ps for _, ps in probes]))
            want = pa.schema([schema.field(c) for c in spec])
            try:
                keys = pa.concat_tables([pa.table([t.column(c) for c in ps], names=list(spec)).cast(want)
                                         for t, ps in probes])
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise NeedsSpark(f"the probe keys of a read by {spec} do not cast to the state's types: {e}")
            keys = nested.group_by(keys, list(spec), [])
            kdf = self.arrow_df(keys, StructType([sschema[c] for c in spec]))
            if keys.nbytes <= self.ctx.placement.broadcast_bytes:
                kdf = F.broadcast(kdf)
            df = self.backend.rule(rules.semi("S", list(spec), "K", list(schema.names)), S=df, K=kdf)
        rows = self.ctx.stats.from_spark((df if limit is None else df.limit(limit + 1)).toArrow())
        if limit is not None and rows.num_rows > limit:
            raise NeedsSpark(f"the state's rows of a change's keys are more than {limit}")
        self.ctx.stats.spark_scans += 1
        return cast_to(rows.select(schema.names), schema)

    # ------------------------------------------------------------ rows between Arrow and Spark
    def to_df(self, op_id: int, x, schema=None) -> DataFrame:
        """An op's change (EMPTY, Arrow or a DataFrame) as a DataFrame."""
        if x is EMPTY:
            return self.empty(-op_id - 1, schema or self.schemas[op_id])
        if isinstance(x, pa.Table):   # shipped once per step, however many ops read it
            key = (id(x), op_id if schema is None else str(schema))
            hit = self._shipped.get(key)
            if hit is None or hit[0] is not x:
                hit = self._shipped[key] = (x, self.arrow_df(x, schema or self.schemas[op_id]))
            return hit[1]
        return x

    def arrow_df(self, t: pa.Table, schema) -> DataFrame:
        """Arrow rows on the driver as a DataFrame: a big table through a scratch parquet file, which Spark reads
        much faster than the rows ``createDataFrame`` ships (see :mod:`sqlengine.state.scratch`)."""
        self.ctx.stats.to_spark(t)
        if t.num_rows < self.ctx.placement.scratch_rows:
            return self.spark.createDataFrame(chunked(t), schema=schema)
        return self.spark.read.schema(schema).parquet(self.scratch.write(t))

    def collect(self, df: DataFrame, arrow_schema: pa.Schema, consolidate: bool = True) -> Optional[pa.Table]:
        """Run ``df`` (one Spark job) and bring its rows to the driver as Arrow.  A DATE or TIMESTAMP outside the
        years 1 to 9999 (Spark computes ``DATE '9999-12-31' + INTERVAL 1 MONTH``) fails the step, which then runs
        on the driver: there such a value is a row error (``LocalExecutor._in_range``), as Python holds none."""
        t = cast_to(self.ctx.stats.from_spark(df.toArrow()), arrow_schema)
        for f in t.schema:
            if (pa.types.is_date(f.type) or pa.types.is_timestamp(f.type)) and \
                    outside_years(t.column(f.name)) is not None:
                raise ValueError(f"column {f.name}: a DATE or TIMESTAMP outside the years 1 to 9999 (a row error)")
        if consolidate and t.num_rows:
            t = consolidate_arrow(t)
        return t if t.num_rows else EMPTY

