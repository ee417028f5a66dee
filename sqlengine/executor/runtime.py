"""The engine: runs the circuit once per step, on the driver or on Spark, and prepares its commit.

A step runs on the driver (:mod:`.local_step`: DuckDB over Arrow, the state read through the driver's cache)
when its input is small and the state it reads is cached or readable by key, else on Spark
(:mod:`.spark_step`); both run the step loop of :mod:`.step` over the operators of :mod:`.ops`.  A Spark step
that fails on a row is run again on the driver, which records the row and goes on.  The engine composes the
parts, which share one :class:`~sqlengine.executor.context.StepContext`: Spark's state reads
(:mod:`.spark_state`), the input clamps (:mod:`.input_changes`) and the merges (:mod:`.merges`).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import pyarrow as pa

from planner.errors import UnsupportedError
from planner.program import Program

from sqlengine.executor.context import StepContext
from sqlengine.executor.input_changes import InputChanges
from sqlengine.executor.local_step import LocalExecutor, NeedsSpark, release_memory
from sqlengine.executor.merges import Merger
from sqlengine.executor.ops import source
from sqlengine.executor.placement import Placement
from sqlengine.executor.row_errors import ERRORS_KEY, RowErrors
from sqlengine.executor.session import is_local
from sqlengine.executor.spark_state import SparkState
from sqlengine.executor.spark_step import SparkStep
from sqlengine.executor.step import EMPTY
from sqlengine.state import row_groups
from sqlengine.state.scratch import Scratch
from sqlengine.state.store import Manifest, StateStore, StorageError
from sqlengine.zset import W, all_positive, consolidate_arrow, consolidate_spark

log = logging.getLogger("sqlengine")


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
        ctx = self.ctx = StepContext(program, store, placement, master)
        self.program, self.circuit, self.ops, self.store, self.master = program, ctx.circuit, ctx.ops, store, master
        self.keys, self.derived, self.sort_columns = ctx.keys, ctx.derived, ctx.sort_columns
        self.arrow_schemas, self.state_arrow, self.op_views = ctx.arrow_schemas, ctx.state_arrow, ctx.op_views
        self.stats = ctx.stats
        self.scratch = Scratch(os.path.join(os.path.dirname(os.path.abspath(store.root)), "scratch"))
        self.local = LocalExecutor(ctx)
        self.sparks = SparkState(ctx, spark, self.scratch)
        self.spark_step = SparkStep(ctx, self.local, self.sparks)
        self.inputs = InputChanges(ctx, self.local, self.sparks)
        self.merges = Merger(ctx, self.local, self.sparks)
        # what reads the state rows of a change's keys for an op on the driver, beyond the row groups that can
        # hold them: DuckDB where the runs are files on this machine, else Spark's executors
        self.local.scanner = self._scanner()

    def _scanner(self):
        where = self.ctx.placement.state_scans or ("duckdb" if is_local(self.master or "local") else "spark")
        return self.local.scan_with_duckdb if where == "duckdb" else self.sparks.scan

    @property
    def placement(self) -> Placement:
        return self.ctx.placement

    @placement.setter
    def placement(self, placement: Placement) -> None:
        self.ctx.placement = placement
        self.local.scanner = self._scanner()

    @property
    def spark(self):
        return self.sparks.spark

    @property
    def spark_ready(self) -> bool:
        return self.sparks.ready

    def table_input(self, table: str) -> int:
        return self.ctx.table_input(table)

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

    def state_paths(self, op_id: int) -> List[str]:
        """The committed runs an integral is read from: its own, or those of the state it is derived from."""
        d = self.derived.get(op_id)
        if d is not None:
            return [p for b in d.base for p in self.state_paths(b)]
        return self.store.paths(self.keys[op_id])

    def weights_positive(self, op_id: int, manifest: Manifest) -> bool:
        """Whether every stored row of integral ``op_id`` (as of ``manifest``) has a positive weight, by the
        statistics in its runs' parquet footers (no row is read)."""
        if op_id in self.derived:
            return False
        least = row_groups.column_min(self.store.paths(self.keys[op_id], manifest), W)
        return least is not None and least > 0

    # ------------------------------------------------------------ the step
    def backfill(self, step: int, new_keys: Set[str], views: Set[str]) -> StepResult:
        """After a program change: compute the state of the operators ``new_keys`` names (new or changed
        views) from scratch, with the tables' committed contents as the input change, and the changes of
        ``views`` (their whole contents).  Operators that kept their state are not written; state of
        operators the program no longer has is dropped from the manifest.  Runs on the driver when the
        tables' contents fit the state cache, else on Spark."""
        old = self.store.current
        need = self.ctx.backfill_ops(new_keys, views)
        contents = {}
        for op in self.ops:
            if source.reads_table(op) and op.id in need:
                if self.circuit.stream(op.node.table):   # an append-only table nothing read: its rows were never kept
                    raise UnsupportedError(
                        f"table {op.node.table} is append-only and was not stored (nothing read it), so a view that "
                        f"is new or changed cannot be computed from its past rows: declare it WITH "
                        f"('materialized' = 'true') to keep its rows, or use a new storage_dir")
                integral = self.ctx.table_integral(op.node.table)
                # the stored rows are consolidated first only where some weight is negative (a delete whose
                # run is not merged yet): positive duplicates cancel nothing, and every operator takes them
                if self.local.cached(integral, old):
                    rows = self.state_rows(integral)
                    contents[op.node.table] = rows if all_positive(rows) else consolidate_arrow(rows)
                else:
                    df = self.sparks.read_state(integral, old)
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
        need = self.ctx.needed_ops(listened) if need is None else need
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
                self.stats.driver_attempts_failed += 1
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
            self.stats.spark_fallbacks += 1
            error = f"step {step}: {type(e).__name__}: {(str(e).strip() or '?').splitlines()[0][:300]}"
            self.stats.last_spark_error = error
            log.warning("step %d failed on Spark and runs on the driver instead: %s", step, error,
                        exc_info=log.isEnabledFor(logging.DEBUG))
            arrow = {t: d if d is None or isinstance(d, pa.Table) else
                     self.stats.from_spark(d.toArrow()).cast(self.arrow_schemas[self.ctx.table_input(t)])
                     for t, d in table_deltas.items()}
            return self._run_local(arrow, *args)

    def _run_local(self, table_deltas, step, listened, out_ids, initial, need, reads_from, write_keys) -> StepResult:
        self.ctx.sums.start()
        deltas, new_runs, errors = self.local.run_step(step, table_deltas, need, initial, out_ids,
                                                       reads_from=None if write_keys is None else reads_from,
                                                       write_keys=write_keys)
        self.stats.steps_local += 1
        return self._result(step, self.store.current, new_runs, deltas, listened, errors)

    def _run_spark(self, table_deltas, step, listened, out_ids, initial, need, reads_from, write_keys) -> StepResult:
        old = self.store.current
        self.stats.steps_spark += 1
        self.ctx.sums.start()
        deltas, new_runs, errors = self.spark_step.run(step, table_deltas, need, initial, out_ids, reads_from,
                                                       write_keys)
        return self._result(step, old, new_runs, deltas, listened, errors)

    def _result(self, step: int, old: Manifest, new_runs, deltas, listened: Set[str],
                errors: RowErrors) -> StepResult:
        self.local.finish_writes()   # every new run written before the manifest lists it
        outputs = {}
        for v in listened:
            delta = self.circuit.outputs[v].delta
            d = deltas.get(delta, EMPTY)
            outputs[v] = d if d is EMPTY or isinstance(d, pa.Table) else self.sparks.collect(d, self.arrow_schemas[delta])
        changed = {}
        for v, out in self.circuit.outputs.items():
            d = outputs.get(v, deltas.get(out.delta, EMPTY))
            if isinstance(d, pa.Table):
                changed[v] = d.num_rows
        m = Manifest(step=step, log_position=list(old.log_position), runs=new_runs, meta=dict(old.meta))
        if self.ctx.sums.bounds:
            m.meta["sum_bounds"] = dict(self.ctx.sums.bounds)
        if len(errors):
            run = self.store.write_run(ERRORS_KEY, errors.table(step), step)
            m.runs[ERRORS_KEY] = list(m.runs.get(ERRORS_KEY, [])) + [run]
            counts = dict(m.meta.get("errors", {}))
            for v, n in errors.counts().items():
                counts[v] = counts.get(v, 0) + n
            m.meta["errors"] = counts
        return StepResult(m, outputs, changed)
