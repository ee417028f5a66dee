"""Event time at run time: each table's watermark, late rows, closed state and emit-final views.

A table with an event-time column (``LATENESS`` or ``WATERMARK FOR``, see ``planner/watermarks.py``) has
a watermark: the largest event time among the rows it received, minus the lateness.  It only moves
forward and is committed with each step (the manifest's ``meta["watermarks"]``, microseconds since the
epoch), so it survives restarts.

**Late rows.**  A row whose event time is below the table's watermark at the start of the step that
takes it is late: it is dropped (an insert or a delete alike), counted (``status()["late_rows"]``) and
written to ``<storage>/dead_letter/<table>.late.jsonl``.  A late row never changes a closed window.  A
row whose event time is NULL is never late (it belongs to no window).

**Closed state.**  The planner proves, per state operator, a bound below which its rows can never change
again and nothing reads them (``program.gc``: a column and ``min(W(table) + offset)`` over some tables).
After a step, rows below their bound are dropped from the state runs: a run is rewritten without them
when they are at least a fifth of it (or all of it), so per step the work stays proportional to what
closes, and the garbage kept at any time is bounded.  How many rows of a run a bound closes comes from the
run's sorted times, kept per run (runs never change), so runs that stay as they are are not read.

**Emit-final views** (``WITH ('emit_final' = 'column')``) emit each row once, when the watermark passes
its bounded column, and never retract it: their output in a step is the rows of the view's integral with
the column in ``[bound before the step, bound after it)``.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner.logical import col

from sqlengine.zset import W

GC_FRACTION = 0.2   # rewrite a run when at least this fraction of its rows closed


def micros(arr) -> np.ndarray:
    """Timestamps (naive, UTC) as int64 microseconds, NULL as the minimum int64 (never late)."""
    a = pc.cast(arr, pa.timestamp("us")).cast(pa.int64())
    return pc.fill_null(a, np.iinfo(np.int64).min).to_numpy(zero_copy_only=False)


def bound_of(terms, watermarks: Dict[str, int]) -> Optional[int]:
    """``min(W(table) + offset)`` over ``terms``, or None while some table has no watermark yet."""
    values = []
    for table, offset in terms:
        w = watermarks.get(table)
        if w is None:
            return None
        values.append(int(w) + int(offset))
    return min(values) if values else None


class EventTime:
    """The event-time columns of a program's tables, and what a step does with them."""

    def __init__(self, program, storage_dir: str):
        self.storage_dir = storage_dir
        self.columns: Dict[str, Tuple[int, int]] = {}   # table -> (column index, lateness in microseconds)
        for name, t in program.tables.items():
            lat = getattr(t, "lateness", None)
            if lat is not None:
                column, lateness = lat
                self.columns[name] = ([f.name for f in t.fields].index(column), int(lateness))
        self.program = program
        self.gc = dict(getattr(program, "gc", {}) or {})
        self.final = dict(getattr(program, "final", {}) or {})

    def __bool__(self) -> bool:
        return bool(self.columns)

    def split_late(self, table: str, parts: List[pa.Table], watermark: Optional[int]):
        """(the parts without their late rows, the late rows), and the new watermark after the kept rows."""
        index, lateness = self.columns[table]
        c = col(index)
        kept: List[pa.Table] = []
        late: List[pa.Table] = []
        newest = watermark
        for p in parts:
            ts = micros(p.column(c))
            if watermark is not None:
                is_late = (ts < watermark) & (ts != np.iinfo(np.int64).min)
                if is_late.any():
                    late.append(p.filter(pa.array(is_late)))
                    p = p.filter(pa.array(~is_late))
                    ts = ts[~is_late]
            if p.num_rows:
                kept.append(p)
                valid = ts[ts != np.iinfo(np.int64).min]
                if valid.size:
                    top = int(valid.max()) - lateness
                    newest = top if newest is None else max(newest, top)
        return kept, (pa.concat_tables(late) if late else None), newest

    def write_late(self, table: str, rows: pa.Table, step: int) -> None:
        """Late rows to the table's dead-letter file (at least once: a crashed step writes them again)."""
        t = self.program.tables[table]
        names = [f.name for f in t.fields]
        index, _ = self.columns[table]
        d = os.path.join(self.storage_dir, "dead_letter")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{table}.late.jsonl"), "a") as f:
            for r in rows.to_pylist():
                rec = {names[i]: r[col(i)] for i in range(len(names))}
                f.write(json.dumps({"table": table, "step": step, "weight": r[W],
                                    "error": f"late row: {names[index]} is below the table's watermark",
                                    "row": rec}, default=str) + "\n")

    def closed(self, state_schemas: Dict[int, pa.Schema], watermarks: Dict[str, int]) -> Dict[int, Tuple[str, int]]:
        """op id -> (state column, bound) of the state ops whose rows below the bound may go now."""
        out = {}
        for op_id, b in self.gc.items():
            value = bound_of(b.terms, watermarks)
            if value is not None:
                out[op_id] = (col(b.column), value)
        return out


def sorted_times(arr) -> np.ndarray:
    """A run's bounded column as sorted microseconds, NULLs left out (never closed): how many of its rows a
    bound closes is then one binary search, so a step reads no run that does not have to be rewritten."""
    ts = micros(arr)
    return np.sort(ts[ts != np.iinfo(np.int64).min])


def drop_closed(t: pa.Table, column: str, bound: int) -> Tuple[pa.Table, int]:
    """The rows of ``t`` that are not closed (``column`` >= ``bound``, or NULL), and how many closed."""
    ts = micros(t.column(column))
    closed = (ts < bound) & (ts != np.iinfo(np.int64).min)
    n = int(closed.sum())
    return (t.filter(pa.array(~closed)) if n else t), n


def final_rows(rows: pa.Table, column: str, lo: Optional[int], hi: int) -> pa.Table:
    """Rows whose ``column`` is in ``[lo, hi)`` (``lo`` None: below ``hi``)."""
    ts = micros(rows.column(column))
    keep = (ts < hi) & (ts != np.iinfo(np.int64).min)
    if lo is not None:
        keep &= ts >= lo
    return rows.filter(pa.array(keep))
