"""A step on Spark: the circuit's changes as lazy Spark plans, with each op placed where its changes are.

Linear operators stay lazy and fuse into their consumer's Spark job; an op's change is *cut* (collected as
Arrow on the driver, consolidated there) only where it is stored as state, delivered to a listener, or consumed
more than once.  So a step costs one Spark job per cut plus one per accumulating aggregate, and an op none of
whose inputs changed costs nothing.  An op whose changes are on the driver (Arrow, at most
``placement.driver_rows`` rows) runs there, as in a driver step, when the state rows they meet can be read by
their keys: from the cache, the row groups of the runs that can hold them, or a scan of the runs for those keys
(DuckDB with a local master, a Spark job with a cluster master); else, or beyond ``placement.scan_rows`` of
them, it runs on Spark (see :mod:`sqlengine.executor.placement`).  The step loop is
:func:`sqlengine.executor.step.run_ops`, the driver step's too.
"""
from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Dict, List, Optional, Set

import pyarrow as pa
from pyspark.sql import DataFrame

from planner.circuit import Op

from sqlengine.executor import arrow_ops, ops, step as step_loop
from sqlengine.executor.context import StepContext
from sqlengine.executor.casts import cast_to
from sqlengine.executor.local_step import LocalExecutor, NeedsSpark
from sqlengine.executor.ops import aggregate as agg_op, map as map_op, source
from sqlengine.executor.row_errors import RowErrors
from sqlengine.executor.spark_state import SparkState
from sqlengine.executor.step import EMPTY
from sqlengine.state.store import Manifest, Run

ON_SPARK = object()   # an op of a Spark step tried on the driver that must run on Spark (SparkStep._on_driver)
log = logging.getLogger("sqlengine")


class SparkStep:
    """Runs steps of ``ctx``'s circuit on Spark (``spark``), placing ops on ``driver`` where their changes are."""

    def __init__(self, ctx: StepContext, driver: LocalExecutor, spark: SparkState):
        self.ctx = ctx
        self.driver = driver
        self.spark = spark
        self._cut_pool: Optional[ThreadPoolExecutor] = None
        self._consolidated: Set[int] = set()   # this step's ops whose change on the driver is consolidated
        self._need: Set[int] = set()           # the ops this step runs

    def run(self, step: int, table_deltas: Dict[str, object], need: Set[int], initial: bool, out_ids: Set[int],
            reads_from: Manifest, write_keys: Optional[Set[str]]) -> tuple:
        """The changes of every op in ``need`` (Arrow, or a lazy DataFrame where no one cuts it), the step's new
        runs, and the row errors of the ops run on the driver (a row that fails a Spark job fails the step,
        which the engine then runs on the driver)."""
        ctx = self.ctx
        deltas: Dict[int, object] = {}
        new_runs: Dict[str, List[Run]] = {k: list(v) for k, v in ctx.store.current.runs.items()}
        self._consolidated = set()
        self._need = need
        self.spark.new_step()
        errors = self.driver.lowerer.errors = RowErrors()

        def writes(op_id: int) -> bool:
            return write_keys is None or ctx.keys[op_id] in write_keys

        def write_integral(op: Op, d) -> None:
            if op.id not in ctx.keys or op.id in ctx.derived or not writes(op.id):   # (a stream keeps nothing)
                return
            if not isinstance(d, pa.Table):  # pragma: no cover - integrate inputs are always cut
                d = self.spark.collect(d, ctx.arrow_schemas[op.inputs[0]])
            if d is not EMPTY:
                self.driver.write_run(op.id, d.cast(ctx.state_arrow[op.id]), step, new_runs)

        def change(op: Op, ins: list):
            return self._op(op, ins, step, out_ids, initial, need, reads_from, writes, new_runs)

        try:
            step_loop.run_ops(ctx.ops, need, deltas, table_deltas, initial, write_integral, change)
            for i, x in deltas.items():
                deltas[i] = x.result() if isinstance(x, Future) else x
        finally:   # a failed step leaves no job of its own running
            self.driver.lowerer.errors = None
            wait([x for x in deltas.values() if isinstance(x, Future)])
        return deltas, new_runs, errors

    def _op(self, op: Op, ins: list, step, out_ids, initial, need, reads_from, writes, new_runs):
        """The change of ``op`` from its inputs' changes ``ins``: on the driver where they are and its state can
        be read by key (placement), else a lazy plan on Spark, cut (collected by a job of its own, see ``_cut``)
        where it is stored, delivered or read more than once."""
        ctx, sp = self.ctx, self.spark
        small = len(ins) == 1 and isinstance(ins[0], pa.Table) and ins[0].num_rows <= ctx.placement.driver_rows
        if small and map_op.owns(op):
            # a small change stays on the driver through filters and projections, so that the state
            # reads of the ops it feeds can be narrowed to its keys
            consolidated = op.inputs[0] in self._consolidated and map_op.permutes_columns(op.node)
            return self._driver_rows(op, lambda: map_op.local(self.driver.lowerer, op, ins), out_ids, consolidated)
        accumulates = agg_op.accumulates(op)
        if not accumulates and self._driver_ok(ins):
            out = self._on_driver(op, lambda: self._driver_op(op, ins, reads_from, initial, out_ids))
            if out is not ON_SPARK:
                return out
        if ops.skips_unchanged(op):   # these skip the terms of unchanged inputs
            ins_df = [None if x is EMPTY else sp.to_df(i, x) for i, x in zip(op.inputs, ins)]
        elif not (small and accumulates):
            ins_df = [sp.to_df(i, x) for i, x in zip(op.inputs, ins)]
        reads = self._keyed_reads(op, ins, reads_from)
        fits = True
        if accumulates:
            if small:   # no Spark job for the partial sums of a small change on the driver
                partial = cast_to(agg_op.partial_local(self.driver.lowerer, op, ins[0]), ctx.state_arrow[op.id])
                partial = partial if partial.num_rows else EMPTY
            else:
                partial = sp.collect(agg_op.partial_spark(sp.backend, op, ins_df[0]), ctx.state_arrow[op.id],
                                     consolidate=False)
            if partial is not EMPTY and writes(op.id):
                self.driver.write_run(op.id, partial, step, new_runs)
            fits = ctx.sums.fit(op, None if partial is EMPTY else partial, writes(op.id))
            if fits and not ctx.emits(op, need, out_ids):   # only its state changes
                return EMPTY
            if agg_op.seeds(op, initial) and partial is EMPTY:
                df = agg_op.output_spark(sp.backend, op, sp.empty(op.id, sp.state_schemas[op.id]),
                                         sp.read_state(op.id, reads_from), initial=True)
            elif partial is EMPTY:
                return EMPTY
            else:
                out = ON_SPARK if not (small and fits and self._driver_ok(ins)) else self._on_driver(
                    op, lambda: self._driver_output(op, partial, reads_from, initial, out_ids))
                if out is not ON_SPARK:
                    return out
                pdf = sp.arrow_df(partial, sp.state_schemas[op.id])
                keys = tuple(f"c{i}" for i in range(len(op.node.keys)))
                own = sp.read_state(op.id, reads_from, (keys, [partial], [keys]))
                df = agg_op.output_spark(sp.backend, op, pdf, own, initial=initial)
        else:
            df = sp.backend.lower(op, ins_df, reads, initial=initial)
        cons = [c for c in ctx.consumers[op.id] if c in need]
        must_cut = (op.id in out_ids or len(cons) > 1 or not fits   # (a SUM out of range fails the step)
                    or any(source.integrates(ctx.ops[c]) for c in cons))
        if must_cut:   # its job runs while the ops that do not need it are planned and run
            return self._cut(df, ctx.arrow_schemas[op.id])
        return df

    def _on_driver(self, op: Op, change):
        """``change()``, an op's change computed on the driver, or ON_SPARK when the state it reads is too wide to
        read there (NeedsSpark): the op then runs on Spark."""
        try:
            return change()
        except NeedsSpark as e:
            self.ctx.stats.ops_declined += 1
            log.debug("op #%d runs on Spark: %s", op.id, e)
            return ON_SPARK

    def _driver_ok(self, ins: list) -> bool:
        """May an op of a Spark step whose changes are ``ins`` run on the driver (``placement.ops_on_driver()``)?"""
        placement = self.ctx.placement
        return (placement.ops_on_driver() and all(x is EMPTY or isinstance(x, pa.Table) for x in ins)
                and sum(x.num_rows for x in ins if x is not EMPTY) <= placement.driver_rows)

    def _driver_op(self, op: Op, ins: list, m: Manifest, initial: bool, out_ids: Set[int]):
        """The change of ``op`` from its changes ``ins`` (Arrow or EMPTY), on the driver as in a driver step,
        reading the state rows of their keys (NeedsSpark when they cannot be read so)."""
        scan = self.ctx.placement.driver_scans
        return self._driver_rows(op, lambda: self.driver.op_change(op, ins, m, initial, scan=scan), out_ids)

    def _driver_output(self, op: Op, partial: pa.Table, m: Manifest, initial: bool, out_ids: Set[int]):
        """An accumulating aggregate's change from its partial sums ``partial`` on the driver, reading the old
        sums of their groups by key (NeedsSpark when they cannot be read so)."""
        scan = self.ctx.placement.driver_scans
        return self._driver_rows(op, lambda: self.driver.aggregate_change(op, partial, m, initial, scan=scan),
                                 out_ids)

    def _driver_rows(self, op: Op, change, out_ids: Set[int], consolidated: bool = False):
        """``change()`` (an op's rule on the driver) finished as in a driver step: rows that fail are recorded in
        the step's row errors.  ``consolidated``: the change has no two equal rows (a projection that keeps
        every column of a consolidated change), so it is not consolidated again."""
        out = change()
        if consolidated:
            out = arrow_ops.Consolidated([out])
        if isinstance(out, arrow_ops.Consolidated) or op.id in out_ids:   # (consolidated below, if not already)
            self._consolidated.add(op.id)
        out = self.driver.finish_change(op, out, self.ctx.arrow_schemas[op.id],
                                        consolidate=self.ctx.consolidates(op, self._need, out_ids),
                                        unless_inserts=op.id not in out_ids)
        if not map_op.owns(op):
            self.ctx.stats.ops_on_driver += 1
        return EMPTY if out is None else out

    def _cut(self, df: DataFrame, schema: pa.Schema) -> Future:
        """``collect(df)`` in a job of its own, on one of ``placement.cut_threads`` threads: the cuts of independent
        branches of the circuit (e.g. two views' outputs) run at the same time."""
        from pyspark.util import inheritable_thread_target   # the step's job group, for the Spark UI
        if self._cut_pool is None:
            self._cut_pool = ThreadPoolExecutor(self.ctx.placement.cut_threads, thread_name_prefix="sqlengine-cut")
        return self._cut_pool.submit(inheritable_thread_target(self.spark.spark)(self.spark.collect), df, schema)

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
            out.append(self.spark.read_state(r, reads_from, key))
        return out
