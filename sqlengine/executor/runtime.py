"""The step executor: runs the circuit once per step on Spark and prepares its commit.

A step turns the input changes of every table into the changes of every
operator, in circuit order.  Linear operators stay lazy and fuse into their
consumer's Spark job; an op's change is *cut* (collected as Arrow on the
driver, consolidated there) only where it is stored as state, delivered to a
listener, or consumed more than once.  So a step costs one Spark job per cut
plus one per accumulating aggregate, and an op none of whose inputs changed
costs nothing.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, functions as F

from planner.circuit import Op
from planner.errors import InternalError
from planner.program import Program

from sqlengine.executor import arrow_ops, delta_rules as rules, keyed_reads, ops, step as step_loop
from sqlengine.executor.backends.duckdb import DuckDBBackend
from sqlengine.executor.backends.spark import SparkBackend
from sqlengine.executor.derived import derivation
from sqlengine.executor.local_step import LocalExecutor, NeedsSpark, cast_to, release_memory, scannable
from sqlengine.executor.op_schemas import derive as derive_schemas
from sqlengine.executor.ops import accumulators, aggregate as agg_op, join as join_op, map as map_op, source
from sqlengine.executor.placement import Placement
from sqlengine.executor.row_errors import ERRORS_KEY, RowErrors, read_errors
from sqlengine.executor.schema import spark_schema_of
from sqlengine.executor.session import is_local
from sqlengine.executor.step import EMPTY
from sqlengine.state import row_groups
from sqlengine.state.scratch import Scratch
from sqlengine.state.store import Manifest, Run, StateStore, StorageError
from sqlengine.zset import W, all_positive, clamp_in_order, consolidate_arrow, consolidate_spark

ON_SPARK = object()   # an op of a Spark step tried on the driver that must run on Spark (Engine._on_driver)
BIGINT_MAX = (1 << 63) - 1
log = logging.getLogger("sqlengine")


def state_key(op: Op) -> str:
    digest = hashlib.sha1(f"{op.kind}|{op.mode}|{op.node!r}".encode()).hexdigest()[:16]
    if op.kind == "integrate" and op.node.algebra == "source":
        return f"table-{op.node.table}-{digest[:8]}"
    return f"{'acc' if op.kind == 'aggregate' else 'int'}-{digest}"


def merge_tag(part: List[Run]) -> str:
    """The tag of the run that merges runs ``part`` (see ``StateStore.run_path``)."""
    return f"m{len(part)}"


@dataclass
class Merged:
    """A merge of runs ``old`` (paths, oldest first) of state ``key`` into ``run``."""
    key: str
    old: List[str]
    run: Run


@dataclass
class StepResult:
    manifest: Manifest
    outputs: Dict[str, Optional[pa.Table]]
    changed_rows: Dict[str, int] = field(default_factory=dict)   # view -> rows in its change, where computed


class Engine:
    """Runs the circuit of ``program`` in steps over ``store``.

    ``spark`` is a SparkSession or a zero-argument callable returning one (a session still starting in the
    background): it is asked for only when a step, a merge or a lookup actually runs on Spark, so steps on
    the driver never wait for the JVM.  ``placement``: where steps and operators run (default: the
    default :class:`~sqlengine.executor.placement.Placement`); read at each use, so it may be replaced.
    """

    def __init__(self, program: Program, spark, store: StateStore, master: Optional[str] = None,
                 placement: Optional[Placement] = None):
        self.placement = placement if placement is not None else Placement.from_dict(None)
        self.program = program
        self.circuit = program.circuit
        self._spark = spark
        self._ansi = False
        self.master = master
        self.store = store
        self.scratch = Scratch(os.path.join(os.path.dirname(os.path.abspath(store.root)), "scratch"))
        self._lowerer = None
        self._cut_pool: Optional[ThreadPoolExecutor] = None
        self.ops = self.circuit.ops
        self.keys = {op.id: state_key(op) for op in self.ops if op.owns_state}
        self.derived = {op.id: derivation(self.circuit, op) for op in self.ops
                        if source.integrates(op) and op.mode == "derived"}
        pks = {t: self.key_columns(t, s.primary_key) for t, s in program.tables.items()}
        self.sort_columns = keyed_reads.sort_columns(self.circuit, self.derived, pks)   # op id -> its runs' order
        self.consumers: Dict[int, List[int]] = {op.id: [] for op in self.ops}
        for op in self.ops:
            for i in op.inputs:
                self.consumers[i].append(op.id)
        self._empty: Dict[int, DataFrame] = {}
        self._frames: "OrderedDict[tuple, DataFrame]" = OrderedDict()   # runs_frame's, least recently used first
        self._frames_lock = threading.Lock()
        # the types are the driver executor's (DuckDB's binder over empty tables): no Spark analysis at start
        self.arrow_schemas, self.state_arrow = derive_schemas(self.circuit)
        self._spark_schemas: Dict[int, object] = {}
        self._spark_state_schemas: Dict[int, object] = {}
        self.op_views = self._views_of_ops()
        self.local = LocalExecutor(self)
        self.steps_local = 0      # steps run on the driver (see local_step) and on Spark
        self.steps_spark = 0
        self.state_rows_dropped = 0   # closed rows dropped from state (event time)
        self._run_times: Dict[str, object] = {}   # run path -> its bounded column, sorted (sorted_times)
        self._sum_bounds: Dict[str, int] = {}   # this step's bounds on integer SUMs (sums_fit)
        self.narrowed_reads = 0   # Spark state reads narrowed to a change's keys (keyed_reads)
        self.spark_fallbacks = 0  # Spark steps that failed (e.g. on a row) and were re-run on the driver
        self.driver_attempts_failed = 0   # driver steps that could not read uncached state by key: run on Spark
        # Ops on the driver (placement.ops_on_driver()): a Spark step runs an op on the driver when its changes
        # are there (Arrow, at most placement.driver_rows rows) and the state rows they meet can be read by their
        # keys: from the cache, the row groups of the runs that can hold them, or a scan of the runs for those
        # keys (LocalExecutor.read with scan: DuckDB with a local master, a Spark job with a cluster master);
        # else, or beyond placement.scan_rows of them, the op runs on Spark.  A 1M-row change at 10M rows: g's
        # output took 7-9 s as a Spark job, 0.6 s here.
        # what reads the state rows of a change's keys for an op on the driver, beyond the row groups that can
        # hold them: DuckDB where the runs are files on this machine, else Spark's executors
        self.local.scanner = self._duckdb_scan if is_local(master or "local") else self._spark_scan
        self.spark_scans = 0      # such reads run as Spark jobs
        self.ops_on_driver = 0    # ops of Spark steps that ran on the driver (placement.ops_on_driver())
        self.ops_declined = 0     # ops of Spark steps tried there that ran on Spark (their reads were too wide)
        self._consolidated: Set[int] = set()   # this Spark step's ops whose change on the driver is consolidated
        self._need: Set[int] = set()           # the ops this Spark step runs
        self.last_spark_error: Optional[str] = None

    @property
    def spark(self):
        if callable(self._spark):
            self._spark = self._spark()
        if not self._ansi:
            # a failing expression must raise on Spark as on the driver (a session the user passed in too)
            self._spark.conf.set("spark.sql.ansi.enabled", "true")
            for k, v in keyed_reads.SPARK_CONF.items():   # state reads filtered by key skip row groups
                self._spark.conf.set(k, v)
            self._ansi = True
        return self._spark

    def run_order(self, op_id: int) -> Optional[str]:
        """The column new runs of ``op_id`` are sorted by, when Spark may read them by key: with a cluster master
        (large steps run there), or with the driver's disk tier off (state beyond the cache's budget is read by
        Spark).  With a local master and the disk tier on, every step whose input is on the driver runs there,
        reading state through the cache's own key index, so the order would buy nothing."""
        if str(self.master or "local").startswith("local") and self.local.cache.disk:
            return None
        return self.sort_columns.get(op_id)

    def write_state_run(self, op_id: int, t: pa.Table, step: int, tag: str = "d") -> Tuple[Run, pa.Table]:
        """Write a run of ``op_id``'s state in its run order (sorted, in small row groups, where Spark may read it
        by key): the run, and its rows as written (for the cache)."""
        order = self.run_order(op_id)
        t = keyed_reads.sorted_run(t, order)
        return self.store.write_run(self.keys[op_id], t, step, tag=tag, small_groups=order is not None), t

    @property
    def spark_ready(self) -> bool:
        return not callable(self._spark)

    @property
    def lowerer(self) -> SparkBackend:
        if self._lowerer is None:
            self._lowerer = SparkBackend(self.spark)
        return self._lowerer

    def _views_of_ops(self) -> Dict[int, List[str]]:
        """The views each op feeds (whose change or contents depend on it)."""
        out: Dict[int, List[str]] = {op.id: [] for op in self.ops}
        for v, o in sorted(self.circuit.outputs.items()):
            for op in self.circuit.upstream(o.delta):
                out[op.id].append(v)
        return out

    # ------------------------------------------------------------ schemas
    @property
    def schemas(self) -> Dict[int, object]:
        """op id -> Spark schema of its change (from the Arrow schema; built on first use of Spark)."""
        if not self._spark_schemas:
            self._spark_schemas.update({i: spark_schema_of(s) for i, s in self.arrow_schemas.items()})
        return self._spark_schemas

    @property
    def state_schemas(self) -> Dict[int, object]:
        if not self._spark_state_schemas:
            self._spark_state_schemas.update({i: spark_schema_of(s) for i, s in self.state_arrow.items()})
        return self._spark_state_schemas

    def _empty_df(self, schema) -> DataFrame:
        return self.spark.createDataFrame([], schema)

    # ------------------------------------------------------------ state access
    def read_state(self, op_id: int, manifest: Optional[Manifest] = None, key=None) -> DataFrame:
        """The committed state of integral ``op_id`` (as of ``manifest``), as the union of its runs.  ``key``:
        (spec, probe tables, their specs), the key the reader looks the state up by, as for
        ``LocalExecutor.read``: the read is narrowed to rows that can match a probe row (see
        :mod:`sqlengine.executor.keyed_reads`) when the probe values are few and known here."""
        d = self.derived.get(op_id)
        if d is not None:   # through the table's state, or the join of its inputs' states, and the maps
            if d.aggregate is not None:   # pragma: no cover - planner.rules.aggregate_contents: no op reads it
                raise InternalError(f"integral #{op_id} (a view's contents) is read whole, by state_rows")
            below = None
            if key is not None and key[0] and d.join is None:
                below = (tuple(f"c{j}" for j in d.below(key[0])),) + tuple(key[1:])
            df = self.read_state(d.base[0], manifest, below)
            if d.join is not None:
                df = join_op.pairs_spark(self.lowerer, d.join, df, self.read_state(d.base[1], manifest))
            for m in d.chain:
                df = map_op.spark(self.lowerer, m, [df])
            return df.select(*[F.col(f.name).cast(f.dataType) for f in self.state_schemas[op_id]])
        paths = self.store.paths(self.keys[op_id], manifest)
        schema = self.state_schemas[op_id]
        if not paths:
            return self._cached_empty(op_id, schema)
        df = self.runs_frame(op_id, paths)
        return self._narrowed(op_id, df, key) if key is not None else df

    def runs_frame(self, op_id: int, paths: List[str]) -> DataFrame:
        """The parquet runs ``paths`` of ``op_id``'s state as one DataFrame.  Runs never change, so the frame (its
        analyzed relation and file listing, about 17 ms to build) is kept for the next steps that read the same
        runs: most steps leave most operators' runs as they were."""
        key = (op_id, tuple(paths))
        with self._frames_lock:
            df = self._frames.get(key)
            if df is not None:
                self._frames.move_to_end(key)
                return df
        df = self.spark.read.schema(self.state_schemas[op_id]).parquet(*paths)
        with self._frames_lock:
            self._frames[key] = df
            while len(self._frames) > self.placement.runs_frames:
                self._frames.popitem(last=False)
        return df

    def _narrowed(self, op_id: int, df: DataFrame, key) -> DataFrame:
        """``df`` (runs of ``op_id``) filtered to the row groups that can hold the probes' keys (``key``: spec,
        probe tables, their specs), when those are few and known here (see :mod:`keyed_reads`)."""
        column = self.sort_columns.get(op_id)
        found = keyed_reads.key_filter(column, *key, self.placement.max_keys) if column and key[0] else None
        if found is not None:
            values, has_null = found
            self.narrowed_reads += 1
            df = df.filter(keyed_reads.in_list(column, values, has_null))
        return df

    def state_paths(self, op_id: int) -> List[str]:
        """The committed runs an integral is read from: its own, or those of the state it is derived from."""
        d = self.derived.get(op_id)
        if d is not None:
            return [p for b in d.base for p in self.state_paths(b)]
        return self.store.paths(self.keys[op_id])

    def state_rows(self, op_id: int) -> pa.Table:
        """The committed runs of a state-owning op, concatenated (unconsolidated), from the driver's state
        cache where they are cached, else from their files.  A view's contents derived from its aggregate
        (``planner.rules.aggregate_contents``) are computed from the aggregate's runs."""
        d = self.derived.get(op_id)
        if d is not None and d.aggregate is not None:
            return self.local.aggregate_contents(d, op_id, self.state_rows(d.aggregate.id))
        schema = self.state_arrow[op_id]
        parts = [self.local.run_table(r.path, schema) for r in self.store.runs(self.keys[op_id])]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _cached_empty(self, op_id: int, schema) -> DataFrame:
        if op_id not in self._empty:
            self._empty[op_id] = self._empty_df(schema)
        return self._empty[op_id]

    def key_columns(self, table: str, names) -> List[str]:
        """The state columns (``c<n>``) of ``table``'s columns ``names``."""
        fields = [f.name for f in self.program.tables[table].fields]
        return [f"c{fields.index(k)}" for k in names]

    def table_integral(self, table: str) -> int:
        return self.circuit.tables[table][1]

    def table_input(self, table: str) -> int:
        return self.circuit.tables[table][0]

    # ------------------------------------------------------------ helpers
    def to_df(self, op_id: int, x, schema=None) -> DataFrame:
        if x is EMPTY:
            return self._cached_empty(-op_id - 1, schema or self.schemas[op_id])
        if isinstance(x, pa.Table):
            return self.arrow_df(x, schema or self.schemas[op_id])
        return x

    def arrow_df(self, t: pa.Table, schema) -> DataFrame:
        """Arrow rows on the driver as a DataFrame: a big table through a scratch parquet file, which Spark reads
        much faster than the rows ``createDataFrame`` ships (see :mod:`sqlengine.state.scratch`)."""
        if t.num_rows < self.placement.scratch_rows:
            return self.spark.createDataFrame(t, schema=schema)
        return self.spark.read.schema(schema).parquet(self.scratch.write(t))

    def collect(self, df: DataFrame, arrow_schema: pa.Schema, consolidate: bool = True) -> Optional[pa.Table]:
        """Run ``df`` (one Spark job) and bring its rows to the driver as Arrow."""
        t = df.toArrow().cast(arrow_schema)
        if consolidate and t.num_rows:
            t = consolidate_arrow(t)
        return t if t.num_rows else EMPTY

    def stored_rows(self, op: int, probe: pa.Table, cols: List[str], consolidate: bool = True) -> pa.Table:
        """Committed rows of integral ``op`` equal (NULL-safely) on ``cols`` to some row of ``probe`` (possibly more
        rows, see ``LocalExecutor.stored_rows``), consolidated (or, without ``consolidate``, maybe not, when
        scanned), as Arrow on the driver: from the driver's state cache, else by key from the runs' files when
        the probe's keys are few, else (a local master) by a DuckDB scan of the runs' files, else in one Spark
        job."""
        try:   # the cache, or (few keys) the row groups of the runs' files that can hold them, on the driver
            return self.local.stored_rows(op, probe, cols)
        except NeedsSpark:
            pass
        paths = self.store.paths(self.keys[op])
        if not paths or not probe.num_rows:
            return self.state_arrow[op].empty_table()
        # a scan of the runs for the probe's keys: DuckDB's with a local master (the runs are files on this
        # machine: 9x faster than the same job on local Spark), else a Spark job's
        scan = self.local.scanner if self.placement.driver_scans else self._spark_scan
        lead = keyed_reads.lead_column(probe, cols)
        rows = None
        if lead is not None:
            # by one column that tells the probe's rows apart (a table's id), a superset of the rows, found faster
            # than by all (500k deleted rows of a 10M-row table: 0.22 s against 0.38 s); where the state holds
            # many more rows of those values, by all columns
            try:
                rows = scan(op, paths, self.state_arrow[op], (lead,), [(probe, (lead,))], 4 * probe.num_rows + 1000)
            except NeedsSpark:
                pass
        if rows is None:
            rows = scan(op, paths, self.state_arrow[op], tuple(cols), [(probe, tuple(cols))], None)
        return consolidate_arrow(rows) if rows.num_rows and consolidate else rows

    def clamp_deletes(self, table: str, parts: List[pa.Table]) -> pa.Table:
        """Apply a step's input batches for ``table`` in order, with bag semantics: a delete removes at
        most the copies that exist at that point (in the committed state or added by earlier batches).

        Looks up the existing copies of every deleted row (none without deletes) with ``stored_rows``.
        """
        op = self.table_integral(table)
        schema = self.state_arrow[op]
        parts = [p.cast(schema) for p in parts]
        negs = [p.filter(pa.compute.less(p.column(W), 0)) for p in parts]
        if not any(n.num_rows for n in negs):   # inserts only: a Z-set need not be consolidated to be right
            return pa.concat_tables(parts)
        cols = [c for c in schema.names if c != W]
        probe_rows = pa.concat_tables(negs)
        return clamp_in_order(parts, probe_rows, self.stored_rows(op, probe_rows, cols, consolidate=False))

    def upsert(self, table: str, parts: List[pa.Table], primary_key) -> pa.Table:
        """Batches for a table with a PRIMARY KEY, applied in order: an insert replaces the row with the
        same key (emits -old +new), a delete removes the row with the key (only key columns are read).

        Looks up the current rows of every key in the batches with ``stored_rows``.
        """
        op = self.table_integral(table)
        schema = self.state_arrow[op]
        kcols = self.key_columns(table, primary_key)
        cols = [c for c in schema.names if c != W]
        batch = pa.concat_tables([p.cast(schema) for p in parts])
        existing = self.stored_rows(op, batch, kcols)
        current: Dict[tuple, Optional[tuple]] = {}
        for r in existing.to_pylist():
            if r[W] > 0:
                current[tuple(r[c] for c in kcols)] = tuple(r[c] for c in cols)
        out_rows, out_w = [], []
        for r in batch.to_pylist():
            key = tuple(r[c] for c in kcols)
            old = current.get(key)
            if old is not None:
                out_rows.append(old)
                out_w.append(-1)
            if r[W] > 0:
                new = tuple(r[c] for c in cols)
                out_rows.append(new)
                out_w.append(1)
                current[key] = new
            else:
                current[key] = None
        if not out_rows:
            return schema.empty_table()
        arrays = [pa.array([row[i] for row in out_rows], schema.field(c).type) for i, c in enumerate(cols)]
        return consolidate_arrow(pa.Table.from_arrays(arrays + [pa.array(out_w, pa.int64())], schema=schema))

    # ------------------------------------------------------------ the step
    def sums_fit(self, op: Op, partial: Optional[pa.Table], write: bool) -> bool:
        """Can no group of accumulating aggregate ``op`` hold an integer SUM outside BIGINT's range after this
        step?  Kept per aggregate, durably with the step (``meta["sum_bounds"]``): B = the sum over steps and
        groups of |partial sum|, which bounds every group's |SUM| (a group's SUM is the sum of its partials).
        While B fits, a step need not compute the aggregate's change to find the groups whose SUM does not fit
        (row errors, see ``LocalExecutor._in_range``); past it, or for state from before B was kept, it does."""
        cols = accumulators.integer_sums(op.node)
        if not cols:
            return True
        if not write:
            return False
        key = self.keys[op.id]
        b = self._sum_bounds.get(key)
        if b is None:
            if self.store.current.runs.get(key):   # state written before the bound was kept
                return False
            b = 0
        if partial is not None and partial.num_rows:
            try:
                b += sum(int(pc.sum(pc.abs(partial.column(c))).as_py() or 0) for c in cols)
            except (pa.ArrowInvalid, OverflowError):   # beyond DECIMAL(38): no bound
                b = 1 << 127
        self._sum_bounds[key] = b
        return b <= BIGINT_MAX

    def emits(self, op: Op, need: Set[int], out_ids: Set[int]) -> bool:
        """Is the change of ``op`` wanted in this step: listened to, or read by an op that runs."""
        return op.id in out_ids or any(c in need for c in self.consumers[op.id])

    def consolidates(self, op: Op, need: Set[int], out_ids: Set[int]) -> bool:
        """Is ``op``'s change consolidated when it is made?  Users get consolidated changes, and a non-linear op's
        change is consolidated so that its rows that cancel go no further; operators accept duplicate rows (as
        linear ops pass them on), so that is skipped where every op the change reaches only sums it: accumulating
        aggregates, through linear ops that are not delivered (a join's million rows summed into a thousand groups
        need not be consolidated first: 0.2 s at a 1M-row change)."""
        if op.id in out_ids:
            return True
        return op.algebra != "linear" and not self._summed(op.id, need, out_ids)

    def _summed(self, op_id: int, need: Set[int], out_ids: Set[int]) -> bool:
        cons = [self.ops[c] for c in self.consumers[op_id] if c in need]
        return bool(cons) and all(
            agg_op.accumulates(c)
            or (c.algebra == "linear" and not source.integrates(c) and c.id not in out_ids
                and self._summed(c.id, need, out_ids))
            for c in cons)

    def needed_ops(self, listened: Set[str]) -> Set[int]:
        roots = [op.id for op in self.ops if op.owns_state]
        roots += [self.circuit.outputs[v].delta for v in listened]
        need: Set[int] = set()
        for r in roots:
            need |= {o.id for o in self.circuit.upstream(r)}
        return need

    def backfill_ops(self, new_keys: Set[str], views: Set[str]) -> Set[int]:
        roots = [op.id for op in self.ops if op.owns_state and self.keys[op.id] in new_keys]
        roots += [self.circuit.outputs[v].delta for v in views]
        need: Set[int] = set()
        for r in roots:
            need |= {o.id for o in self.circuit.upstream(r)}
        return need

    def weights_positive(self, op_id: int, manifest: Manifest) -> bool:
        """Whether every stored row of integral ``op_id`` (as of ``manifest``) has a positive weight, by the
        statistics in its runs' parquet footers (no row is read)."""
        if op_id in self.derived:
            return False
        least = row_groups.column_min(self.store.paths(self.keys[op_id], manifest), W)
        return least is not None and least > 0

    def backfill(self, step: int, new_keys: Set[str], views: Set[str]) -> StepResult:
        """After a program change: compute the state of the operators ``new_keys`` names (new or changed
        views) from scratch, with the tables' committed contents as the input change, and the changes of
        ``views`` (their whole contents).  Operators that kept their state are not written; state of
        operators the program no longer has is dropped from the manifest.  Runs on the driver when the
        tables' contents fit the state cache, else on Spark."""
        old = self.store.current
        need = self.backfill_ops(new_keys, views)
        contents = {}
        for op in self.ops:
            if source.reads_table(op) and op.id in need:
                integral = self.table_integral(op.node.table)
                # the stored rows are consolidated first only where some weight is negative (a delete whose
                # run is not merged yet): positive duplicates cancel nothing, and every operator takes them
                if self.local.cached(integral, old):
                    rows = self.state_rows(integral)
                    contents[op.node.table] = rows if all_positive(rows) else consolidate_arrow(rows)
                else:
                    df = self.read_state(integral, old)
                    contents[op.node.table] = df if self.weights_positive(integral, old) else consolidate_spark(df)
        live = set(self.keys.values())
        result = self.run_step(step, contents, views, initial=True, need=need, write_keys=new_keys)
        result.manifest.runs = {k: v for k, v in result.manifest.runs.items() if k in live or k == ERRORS_KEY}
        return result

    def run_step(self, step: int, table_deltas: Dict[str, object], listened: Set[str],
                 initial: bool = False, need: Optional[Set[int]] = None,
                 write_keys: Optional[Set[str]] = None) -> StepResult:
        """Run one step.  ``initial`` marks the first step of a new pipeline: global aggregates
        (no GROUP BY) then emit their row for empty input, even with no input change.

        For a backfill (``write_keys`` given): only ``need`` ops run, from empty state (every read sees no
        rows), and only the state of ops in ``write_keys`` is written.

        The step runs on the driver when it can (``LocalExecutor.usable``), else on Spark.  A Spark step
        that fails (a row whose expression raises: Spark runs with ANSI semantics) is run again on the
        driver, which keeps failing rows out of the views and records them (``row_errors``), when the
        state it reads fits the driver's cache."""
        old = self.store.current
        reads_from = old if write_keys is None else Manifest()
        need = self.needed_ops(listened) if need is None else need
        self.local.finish_writes(raise_errors=False)   # of an attempt that failed before its result
        self.scratch.clear()   # the last step's (and the delete clamp's, which has run)
        live = [r.path for runs in old.runs.values() for r in runs] + list(self.store.keep)   # + a merge's
        self.local.cache.retain(live)
        self.local.files.retain(live)
        out_ids = {self.circuit.outputs[v].delta for v in listened}
        args = (step, listened, out_ids, initial, need, reads_from, write_keys)
        if self.local.usable(table_deltas, need, reads_from):
            try:
                result = self._run_local(table_deltas, *args)
            except NeedsSpark as e:   # state not cached that the change's keys cannot narrow: on Spark
                self.local.finish_writes(raise_errors=False)
                self.driver_attempts_failed += 1
                log.debug("step %d runs on Spark: %s", step, e)
            else:
                if sum(d.num_rows for d in table_deltas.values() if isinstance(d, pa.Table)) >= self.placement.bulk_rows:
                    release_memory()
                return result
        try:
            return self._run_spark(table_deltas, *args)
        except StorageError:
            raise
        except Exception as e:
            self.local.finish_writes(raise_errors=False)
            if not self.local.fits(need, reads_from):
                raise
            self.spark_fallbacks += 1
            self.last_spark_error = f"step {step}: {type(e).__name__}: {(str(e).strip() or '?').splitlines()[0][:300]}"
            log.warning("step %d failed on Spark and runs on the driver instead: %s", step, self.last_spark_error,
                        exc_info=log.isEnabledFor(logging.DEBUG))
            arrow = {t: d if d is None or isinstance(d, pa.Table) else
                     d.toArrow().cast(self.arrow_schemas[self.table_input(t)]) for t, d in table_deltas.items()}
            return self._run_local(arrow, *args)

    def _start_attempt(self) -> None:
        """Each attempt at a step (on Spark, then maybe on the driver) starts from the committed SUM bounds."""
        self._sum_bounds = dict(self.store.current.meta.get("sum_bounds", {}))

    def _run_local(self, table_deltas, step, listened, out_ids, initial, need, reads_from, write_keys) -> StepResult:
        self._start_attempt()
        deltas, new_runs, errors = self.local.run_step(step, table_deltas, need, initial, out_ids,
                                                       reads_from=None if write_keys is None else reads_from,
                                                       write_keys=write_keys)
        self.steps_local += 1
        return self._result(step, self.store.current, new_runs, deltas, listened, errors)

    def _run_spark(self, table_deltas, step, listened, out_ids, initial, need, reads_from, write_keys) -> StepResult:
        old = self.store.current
        self.steps_spark += 1
        self._start_attempt()
        deltas: Dict[int, object] = {}
        # the ops run on the driver record their failing rows, as in a driver step; a row that fails a Spark job
        # fails the step, which then runs on the driver (run_step)
        errors = self.local.lowerer.errors = RowErrors()
        try:
            new_runs = self._spark_changes(deltas, table_deltas, step, out_ids, initial, need, reads_from, write_keys)
            for i, x in deltas.items():
                deltas[i] = x.result() if isinstance(x, Future) else x
        finally:   # a failed step leaves no job of its own running
            self.local.lowerer.errors = None
            wait([x for x in deltas.values() if isinstance(x, Future)])
        return self._result(step, old, new_runs, deltas, listened, errors)

    def _spark_changes(self, deltas, table_deltas, step, out_ids, initial, need, reads_from, write_keys):
        """The step's changes on Spark, into ``deltas`` (op id -> EMPTY, Arrow, a lazy DataFrame, or the Future
        of a cut; see :mod:`sqlengine.executor.step`); returns its new runs."""
        old = self.store.current
        new_runs: Dict[str, List[Run]] = {k: list(v) for k, v in old.runs.items()}
        self._consolidated = set()
        self._need = need

        def writes(op_id: int) -> bool:
            return write_keys is None or self.keys[op_id] in write_keys

        def write_integral(op: Op, d) -> None:
            if op.id in self.derived or not writes(op.id):
                return
            if not isinstance(d, pa.Table):  # pragma: no cover - integrate inputs are always cut
                d = self.collect(d, self.arrow_schemas[op.inputs[0]])
            if d is not EMPTY:
                self.local.write_run(op.id, d.cast(self.state_arrow[op.id]), step, new_runs)

        def change(op: Op, ins: list):
            return self._spark_op(op, ins, step, out_ids, initial, need, reads_from, writes, new_runs)

        step_loop.run_ops(self.ops, need, deltas, table_deltas, initial, write_integral, change)
        return new_runs

    def _spark_op(self, op: Op, ins: list, step, out_ids, initial, need, reads_from, writes, new_runs):
        """The change of ``op`` in a Spark step, from its inputs' changes ``ins``: on the driver where they are
        and its state can be read by key (placement), else a lazy plan on Spark, cut (collected by a job of its
        own, see ``_cut``) where it is stored, delivered or read more than once."""
        small = len(ins) == 1 and isinstance(ins[0], pa.Table) and ins[0].num_rows <= self.placement.driver_rows
        if small and map_op.owns(op):
            # a small change stays on the driver through filters and projections, so that the state
            # reads of the ops it feeds can be narrowed to its keys
            consolidated = op.inputs[0] in self._consolidated and map_op.permutes_columns(op.node)
            return self._driver_rows(op, lambda: map_op.local(self.local.lowerer, op, ins), out_ids, consolidated)
        accumulates = agg_op.accumulates(op)
        if not accumulates and self._driver_ok(ins):
            out = self._on_driver(op, lambda: self._driver_op(op, ins, reads_from, initial, out_ids))
            if out is not ON_SPARK:
                return out
        if ops.skips_unchanged(op):   # these skip the terms of unchanged inputs
            ins_df = [None if x is EMPTY else self.to_df(i, x) for i, x in zip(op.inputs, ins)]
        elif not (small and accumulates):
            ins_df = [self.to_df(i, x) for i, x in zip(op.inputs, ins)]
        reads = self._keyed_reads(op, ins, reads_from)
        fits = True
        if accumulates:
            if small:   # no Spark job for the partial sums of a small change on the driver
                partial = cast_to(agg_op.partial_local(self.local.lowerer, op, ins[0]), self.state_arrow[op.id])
                partial = partial if partial.num_rows else EMPTY
            else:
                partial = self.collect(agg_op.partial_spark(self.lowerer, op, ins_df[0]), self.state_arrow[op.id],
                                       consolidate=False)
            if partial is not EMPTY and writes(op.id):
                self.local.write_run(op.id, partial, step, new_runs)
            fits = self.sums_fit(op, None if partial is EMPTY else partial, writes(op.id))
            if fits and not self.emits(op, need, out_ids):   # only its state changes
                return EMPTY
            if agg_op.seeds(op, initial) and partial is EMPTY:
                df = agg_op.output_spark(self.lowerer, op, self._cached_empty(op.id, self.state_schemas[op.id]),
                                         self.read_state(op.id, reads_from), initial=True)
            elif partial is EMPTY:
                return EMPTY
            else:
                out = ON_SPARK if not (small and fits and self._driver_ok(ins)) else self._on_driver(
                    op, lambda: self._driver_output(op, partial, reads_from, initial, out_ids))
                if out is not ON_SPARK:
                    return out
                pdf = self.arrow_df(partial, self.state_schemas[op.id])
                keys = tuple(f"c{i}" for i in range(len(op.node.keys)))
                own = self.read_state(op.id, reads_from, (keys, [partial], [keys]))
                df = agg_op.output_spark(self.lowerer, op, pdf, own, initial=initial)
        else:
            df = self.lowerer.lower(op, ins_df, reads, initial=initial)
        cons = [c for c in self.consumers[op.id] if c in need]
        must_cut = (op.id in out_ids or len(cons) > 1 or not fits   # (a SUM out of range fails the step)
                    or any(source.integrates(self.ops[c]) for c in cons))
        if must_cut:   # its job runs while the ops that do not need it are planned and run
            return self._cut(df, self.arrow_schemas[op.id])
        return df

    def _on_driver(self, op: Op, change):
        """``change()``, an op's change computed on the driver, or ON_SPARK when the state it reads is too wide to
        read there (NeedsSpark): the op then runs on Spark."""
        try:
            return change()
        except NeedsSpark as e:
            self.ops_declined += 1
            log.debug("op #%d runs on Spark: %s", op.id, e)
            return ON_SPARK

    def _duckdb_scan(self, op_id: int, files: List[str], schema: pa.Schema, spec: tuple, probes: List[tuple],
                     limit: Optional[int]) -> pa.Table:
        return self.local.scan_runs(files, schema, spec, probes, limit)

    def _spark_scan(self, op_id: int, files: List[str], schema: pa.Schema, spec: tuple, probes: List[tuple],
                    limit: Optional[int]) -> pa.Table:
        """Rows of the runs ``files`` of integral ``op_id`` whose ``spec`` columns equal, NULL-safely, those of
        some probe row (``(table, its key columns)``; no ``spec``: every row), found by one Spark job: the
        executors read the runs and semi-join them with the probes' distinct keys (broadcast up to
        ``placement.broadcast_bytes``; the read narrowed to the row groups that can hold them when they are few); the rows
        come to the driver.  More than ``limit`` rows raise NeedsSpark."""
        from pyspark.sql.types import StructType
        sschema = self.state_schemas[op_id]
        df = self.runs_frame(op_id, files)
        if spec:
            if not scannable(schema, spec, probes):
                return schema.empty_table()
            df = self._narrowed(op_id, df, (spec, [t for t, _ in probes], [ps for _, ps in probes]))
            want = pa.schema([schema.field(c) for c in spec])
            try:
                keys = pa.concat_tables([pa.table([t.column(c) for c in ps], names=list(spec)).cast(want)
                                         for t, ps in probes])
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise NeedsSpark(f"the probe keys of a read by {spec} do not cast to the state's types: {e}")
            keys = keys.group_by(list(spec), use_threads=False).aggregate([])
            kdf = self.arrow_df(keys, StructType([sschema[c] for c in spec]))
            if keys.nbytes <= self.placement.broadcast_bytes:
                kdf = F.broadcast(kdf)
            df = self.lowerer.rule(rules.semi("S", list(spec), "K", list(schema.names)), S=df, K=kdf)
        rows = (df if limit is None else df.limit(limit + 1)).toArrow()
        if limit is not None and rows.num_rows > limit:
            raise NeedsSpark(f"the state's rows of a change's keys are more than {limit}")
        self.spark_scans += 1
        return cast_to(rows.select(schema.names), schema)

    def _driver_ok(self, ins: list) -> bool:
        """May an op of a Spark step whose changes are ``ins`` run on the driver (``placement.ops_on_driver()``)?"""
        return (self.placement.ops_on_driver() and all(x is EMPTY or isinstance(x, pa.Table) for x in ins)
                and sum(x.num_rows for x in ins if x is not EMPTY) <= self.placement.driver_rows)

    def _driver_op(self, op: Op, ins: list, m: Manifest, initial: bool, out_ids: Set[int]):
        """The change of ``op`` from its changes ``ins`` (Arrow or EMPTY), on the driver as in a driver step,
        reading the state rows of their keys (NeedsSpark when they cannot be read so)."""
        return self._driver_rows(op, lambda: self.local.op_change(op, ins, m, initial, scan=self.placement.driver_scans), out_ids)

    def _driver_output(self, op: Op, partial: pa.Table, m: Manifest, initial: bool, out_ids: Set[int]):
        """An accumulating aggregate's change from its partial sums ``partial`` on the driver, reading the old
        sums of their groups by key (NeedsSpark when they cannot be read so)."""
        return self._driver_rows(op, lambda: self.local.aggregate_change(op, partial, m, initial,
                                                                           scan=self.placement.driver_scans),
                                 out_ids)

    def _driver_rows(self, op: Op, change, out_ids: Set[int], consolidated: bool = False):
        """``change()`` (an op's rule on the driver) finished as in a driver step: rows that fail are recorded in
        the step's row errors (set by ``_run_spark``).  ``consolidated``: the change has no two equal rows (a
        projection that keeps every column of a consolidated change), so it is not consolidated again."""
        out = change()
        if consolidated:
            out = arrow_ops.Consolidated([out])
        if isinstance(out, arrow_ops.Consolidated) or op.id in out_ids:   # (consolidated below, if not already)
            self._consolidated.add(op.id)
        out = self.local.finish_change(op, out, self.arrow_schemas[op.id],
                                       consolidate=self.consolidates(op, self._need, out_ids),
                                       unless_inserts=op.id not in out_ids)
        if not map_op.owns(op):
            self.ops_on_driver += 1
        return EMPTY if out is None else out

    def _cut(self, df: DataFrame, schema: pa.Schema) -> Future:
        """``collect(df)`` in a job of its own, on one of ``placement.cut_threads`` threads: the cuts of independent
        branches of the circuit (e.g. two views' outputs) run at the same time."""
        from pyspark.util import inheritable_thread_target   # the step's job group, for the Spark UI
        if self._cut_pool is None:
            self._cut_pool = ThreadPoolExecutor(self.placement.cut_threads, thread_name_prefix="sqlengine-cut")
        return self._cut_pool.submit(inheritable_thread_target(self.spark)(self.collect), df, schema)

    def _keyed_reads(self, op: Op, ins: list, reads_from: Manifest) -> List[DataFrame]:
        """The states ``op`` reads, each narrowed to the keys of the changes it meets when those are on the
        driver (see :mod:`sqlengine.executor.keyed_reads`)."""
        specs = ops.probes(op)
        out = []
        for j, r in enumerate(op.reads):
            key = None
            if j < len(specs) and specs[j].spec:
                sources = specs[j].sources
                probes = [None if ins[i] is EMPTY else ins[i] for i, _ in sources]
                if all(p is None or isinstance(p, pa.Table) for p in probes):
                    key = (specs[j].spec, probes, [s for _, s in sources])
            out.append(self.read_state(r, reads_from, key))
        return out

    def _result(self, step: int, old: Manifest, new_runs, deltas, listened: Set[str],
                errors: RowErrors) -> StepResult:
        self.local.finish_writes()   # every new run written before the manifest lists it
        outputs = {}
        for v in listened:
            d = deltas.get(self.circuit.outputs[v].delta, EMPTY)
            outputs[v] = d if d is EMPTY or isinstance(d, pa.Table) else self.collect(d, self.arrow_schemas[self.circuit.outputs[v].delta])
        changed = {}
        for v, out in self.circuit.outputs.items():
            d = outputs.get(v, deltas.get(out.delta, EMPTY))
            if isinstance(d, pa.Table):
                changed[v] = d.num_rows
        m = Manifest(step=step, log_position=list(old.log_position), runs=new_runs, meta=dict(old.meta))
        if self._sum_bounds:
            m.meta["sum_bounds"] = dict(self._sum_bounds)
        if len(errors):
            run = self.store.write_run(ERRORS_KEY, errors.table(step), step)
            m.runs[ERRORS_KEY] = list(m.runs.get(ERRORS_KEY, [])) + [run]
            counts = dict(m.meta.get("errors", {}))
            for v, n in errors.counts().items():
                counts[v] = counts.get(v, 0) + n
            m.meta["errors"] = counts
        return StepResult(m, outputs, changed)

    # ------------------------------------------------------------ compaction
    def merge_plan(self, m: Manifest) -> List[Tuple[str, List[Run]]]:
        """(state key, the runs to merge into one) for every key of ``m`` with too many runs: the newest runs
        (size-tiered, ``StateStore.merge_plan``); the error log's runs all."""
        out = []
        for key, rs in m.runs.items():
            if not self.store.needs_merge(rs):
                continue
            if key == ERRORS_KEY:   # an append-only log: its runs are concatenated, oldest first
                out.append((key, list(rs)))
            elif self._op_of(key) is not None:
                out.append((key, list(rs[self.store.merge_plan(rs):])))
        return out

    def merge_runs(self, key: str, part: List[Run], step: int, lowerer: Optional[DuckDBBackend] = None) -> Merged:
        """Write the merge of runs ``part`` of state ``key`` as a new run (listed by no manifest until
        ``apply_merges``) and cache its rows.  Safe beside a running step (see ``compaction``): it reads only
        immutable runs, and runs DuckDB on ``lowerer``'s connection."""
        old = [r.path for r in part]
        if key == ERRORS_KEY:
            run = self.store.write_run(key, read_errors(self.store, old), step, tag=merge_tag(part))
            return Merged(key, old, run)
        op = self.ops[self._op_of(key)]
        small = sum(r.rows for r in part) <= self.placement.driver_merge_rows
        t = self.local.merge(op, old, small=small, lowerer=lowerer)
        if t is None:
            t = self._merge_on_spark(op, part)
        run, t = self.write_state_run(op.id, t, step, tag=merge_tag(part))
        self.local.cache.put(run.path, t)
        if run.rows >= self.placement.bulk_rows:
            del t
            release_memory()
        return Merged(key, old, run)

    def _op_of(self, key: str) -> Optional[int]:
        """The op whose state ``key`` is (None: not this engine's)."""
        return next((i for i, k in self.keys.items() if k == key), None)

    @staticmethod
    def apply_merges(m: Manifest, merged: List[Merged]) -> Optional[Manifest]:
        """``m`` with each merged run in place of the runs it merged, where ``m`` still lists them all, in
        order (a merge whose runs were rewritten meanwhile, by dropping closed rows, is dropped); None if no
        merge applies."""
        runs = {k: list(v) for k, v in m.runs.items()}
        changed = False
        for g in merged:
            rs = runs.get(g.key, [])
            paths = [r.path for r in rs]
            if g.old[0] not in paths:
                continue
            i = paths.index(g.old[0])
            if paths[i:i + len(g.old)] != g.old:
                continue
            runs[g.key] = rs[:i] + [g.run] + rs[i + len(g.old):]
            changed = True
        if not changed:
            return None
        return Manifest(step=m.step, log_position=list(m.log_position), runs=runs, meta=m.meta)

    def drop_closed(self, step: int, closed: Dict[int, tuple]) -> Optional[Manifest]:
        """Drop closed rows (``{op id: (state column, bound)}``, see :mod:`sqlengine.executor.watermarks`) from
        the state runs: a run is rewritten without them when they are at least ``GC_FRACTION`` of it, or removed
        when they are all of it.  Returns a new manifest if anything changed."""
        from sqlengine.executor.watermarks import GC_FRACTION, drop_closed, sorted_times
        m = self.store.current
        runs = {k: list(v) for k, v in m.runs.items()}
        changed = False
        for op_id, (column, bound) in closed.items():
            key = self.keys[op_id]
            schema = self.state_arrow[op_id]
            kept: List[Run] = []
            for r in runs.get(key, []):
                times = self._run_times.get(r.path)
                if times is None:
                    times = self._run_times[r.path] = sorted_times(self.local.run_table(r.path, schema).column(column))
                n = int(np.searchsorted(times, bound, side="left"))
                if n == 0 or (n < r.rows and n < GC_FRACTION * r.rows):
                    kept.append(r)
                    continue
                changed = True
                rest, dropped = drop_closed(self.local.run_table(r.path, schema), column, bound)
                self.state_rows_dropped += dropped
                if rest.num_rows:
                    run, rest = self.write_state_run(op_id, rest, step, tag=f"g{len(kept)}")
                    self.local.cache.put(run.path, rest)
                    self._run_times[run.path] = times[n:]
                    kept.append(run)
            runs[key] = kept
        live = {r.path for rs in runs.values() for r in rs}
        for path in [p for p in self._run_times if p not in live]:   # merged away or rewritten
            del self._run_times[path]
        if not changed:
            return None
        return Manifest(step=m.step, log_position=m.log_position, runs=runs, meta=m.meta)

    def _merge_on_spark(self, op: Op, part: List[Run]) -> pa.Table:
        df = self.runs_frame(op.id, [f"{self.store.root}/{r.path}" for r in part])
        rule = ops.of(op.kind).merge_rule(op)
        merged = consolidate_spark(df) if rule is None else self.lowerer.rule(rule, R=df)
        return merged.toArrow().cast(self.state_arrow[op.id])
