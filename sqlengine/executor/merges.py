"""Merging an operator's state runs into one, and dropping closed rows from them (event time).

A merge reads only committed runs, which never change, and writes a run that no manifest lists until
``apply_merges`` puts it in the place of the runs it merges; so it can run beside a step (see
:mod:`sqlengine.executor.compaction`, which schedules them).  Runs the driver caches are merged there by DuckDB,
with the op kind's merge rule (``ops.of(kind).merge_rule``: an aggregate sums its partials per group); runs
that are not cached are merged by a Spark job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from planner.circuit import Op

from sqlengine.executor import ops
from sqlengine.executor.backends.duckdb import DuckDBBackend
from sqlengine.executor.context import StepContext
from sqlengine.executor.local_step import LocalExecutor, release_memory
from sqlengine.executor.row_errors import ERRORS_KEY, read_errors
from sqlengine.executor.spark_state import SparkState
from sqlengine.state.store import Manifest, Run
from sqlengine.zset import consolidate_spark


def merge_tag(part: List[Run]) -> str:
    """The tag of the run that merges runs ``part`` (see ``StateStore.run_path``)."""
    return f"m{len(part)}"


@dataclass
class Merged:
    """A merge of runs ``old`` (paths, oldest first) of state ``key`` into ``run``."""
    key: str
    old: List[str]
    run: Run


class Merger:
    def __init__(self, ctx: StepContext, driver: LocalExecutor, spark: SparkState):
        self.ctx = ctx
        self.driver = driver
        self.spark = spark
        self._run_times: Dict[str, object] = {}   # run path -> its bounded column, sorted (sorted_times)

    def merge_plan(self, m: Manifest) -> List[Tuple[str, List[Run]]]:
        """(state key, the runs to merge into one) for every key of ``m`` with too many runs: the newest runs
        (size-tiered, ``StateStore.merge_plan``); the error log's runs all."""
        store = self.ctx.store
        out = []
        for key, rs in m.runs.items():
            if not store.needs_merge(rs):
                continue
            if key == ERRORS_KEY:   # an append-only log: its runs are concatenated, oldest first
                out.append((key, list(rs)))
            elif self.ctx.op_of(key) is not None:
                out.append((key, list(rs[store.merge_plan(rs):])))
        return out

    def merge_runs(self, key: str, part: List[Run], step: int, lowerer: Optional[DuckDBBackend] = None) -> Merged:
        """Write the merge of runs ``part`` of state ``key`` as a new run (listed by no manifest until
        ``apply_merges``) and cache its rows.  Safe beside a running step: it reads only immutable runs, and
        runs DuckDB on ``lowerer``'s connection."""
        ctx = self.ctx
        old = [r.path for r in part]
        if key == ERRORS_KEY:
            run = ctx.store.write_run(key, read_errors(ctx.store, old), step, tag=merge_tag(part))
            return Merged(key, old, run)
        op = ctx.ops[ctx.op_of(key)]
        small = sum(r.rows for r in part) <= ctx.placement.driver_merge_rows
        t = self.driver.merge(op, old, small=small, lowerer=lowerer)
        if t is None:
            t = self.merge_on_spark(op, part)
        run, t = self.driver.write_state_run(op.id, t, step, tag=merge_tag(part))
        self.driver.cache.put(run.path, t)
        self.driver.cache.index_like(run.path, old)
        if run.rows >= ctx.placement.bulk_rows:
            del t
            release_memory()
        return Merged(key, old, run)

    def merge_on_spark(self, op: Op, part: List[Run]) -> pa.Table:
        """Runs ``part`` of ``op``'s state, not all cached, merged by a Spark job."""
        self.ctx.stats.spark_merges += 1
        df = self.spark.runs_frame(op.id, [f"{self.ctx.store.root}/{r.path}" for r in part])
        rule = ops.of(op.kind).merge_rule(op)
        merged = consolidate_spark(df) if rule is None else self.spark.backend.rule(rule, R=df)
        return self.ctx.stats.from_spark(merged.toArrow()).cast(self.ctx.state_arrow[op.id])

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
        ctx = self.ctx
        m = ctx.store.current
        runs = {k: list(v) for k, v in m.runs.items()}
        changed = False
        for op_id, (column, bound) in closed.items():
            key = ctx.keys[op_id]
            schema = ctx.state_arrow[op_id]
            kept: List[Run] = []
            for r in runs.get(key, []):
                times = self._run_times.get(r.path)
                if times is None:
                    times = self._run_times[r.path] = sorted_times(self.driver.run_table(r.path, schema).column(column))
                n = int(np.searchsorted(times, bound, side="left"))
                if n == 0 or (n < r.rows and n < GC_FRACTION * r.rows):
                    kept.append(r)
                    continue
                changed = True
                rest, dropped = drop_closed(self.driver.run_table(r.path, schema), column, bound)
                ctx.stats.state_rows_dropped += dropped
                if rest.num_rows:
                    run, rest = self.driver.write_state_run(op_id, rest, step, tag=f"g{len(kept)}")
                    self.driver.cache.put(run.path, rest)
                    self._run_times[run.path] = times[n:]
                    kept.append(run)
            runs[key] = kept
        live = {r.path for rs in runs.values() for r in rs}
        for path in [p for p in self._run_times if p not in live]:   # merged away or rewritten
            del self._run_times[path]
        if not changed:
            return None
        return Manifest(step=m.step, log_position=m.log_position, runs=runs, meta=m.meta)
