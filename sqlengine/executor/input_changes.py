"""A step's input batches for one table turned into the table's change, by the rows they meet in its state.

Deletes are clamped to the copies that exist (bag semantics: ``DELETE`` of a row that is not there removes
nothing), and a table with a PRIMARY KEY applies its batches as upserts (an insert replaces the row of its key).
Both look up the stored rows of the batches' keys: from the driver's state cache, by key from the runs' files
when the keys are few, else by a scan of the runs for those keys (DuckDB with a local master, Spark with a
cluster master).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import pyarrow as pa

from sqlengine.executor import keyed_reads
from sqlengine.executor.context import StepContext
from sqlengine.executor.local_step import LocalExecutor, NeedsSpark
from sqlengine.executor.spark_state import SparkState
from sqlengine.zset import W, clamp_in_order, consolidate_arrow


class InputChanges:
    def __init__(self, ctx: StepContext, driver: LocalExecutor, spark: SparkState):
        self.ctx = ctx
        self.driver = driver
        self.spark = spark

    def stored_rows(self, op: int, probe: pa.Table, cols: List[str], consolidate: bool = True) -> pa.Table:
        """Committed rows of integral ``op`` equal (NULL-safely) on ``cols`` to some row of ``probe`` (possibly more
        rows, see ``LocalExecutor.stored_rows``), consolidated (or, without ``consolidate``, maybe not, when
        scanned), as Arrow on the driver."""
        try:   # the cache, or (few keys) the row groups of the runs' files that can hold them, on the driver
            return self.driver.stored_rows(op, probe, cols)
        except NeedsSpark:
            pass
        ctx = self.ctx
        paths = ctx.store.paths(ctx.keys[op])
        if not paths or not probe.num_rows:
            return ctx.state_arrow[op].empty_table()
        # a scan of the runs for the probe's keys: DuckDB's with a local master (the runs are files on this
        # machine: no Spark job, no rows shipped from the JVM), else a Spark job's
        scan = self.driver.scanner if ctx.placement.driver_scans else self.spark.scan
        lead = keyed_reads.lead_column(probe, cols)
        rows = None
        if lead is not None:
            # by one column that tells the probe's rows apart (a table's id), a superset of the rows, found faster
            # than by all (one column's range prunes the sorted runs' row groups); where the state holds
            # many more rows of those values, by all columns
            try:
                rows = scan(op, paths, ctx.state_arrow[op], (lead,), [(probe, (lead,))], 4 * probe.num_rows + 1000)
            except NeedsSpark:
                pass
        if rows is None:
            rows = scan(op, paths, ctx.state_arrow[op], tuple(cols), [(probe, tuple(cols))], None)
        return consolidate_arrow(rows) if rows.num_rows and consolidate else rows

    def clamp_deletes(self, table: str, parts: List[pa.Table]) -> pa.Table:
        """Apply a step's input batches for ``table`` in order, with bag semantics: a delete removes at
        most the copies that exist at that point (in the committed state or added by earlier batches).
        Looks up the existing copies of every deleted row (none without deletes) with ``stored_rows``."""
        op = self.ctx.table_integral(table)
        schema = self.ctx.state_arrow[op]
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
        Looks up the current rows of every key in the batches with ``stored_rows``."""
        op = self.ctx.table_integral(table)
        schema = self.ctx.state_arrow[op]
        kcols = self.ctx.key_columns(table, primary_key)
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
