"""Joins (inner, left, right, full, semi, anti): bilinear.

Delta rule (``delta_rules.join_rule``): d(A join B) = dA join B_old + dA join dB + A_old join dB, where a side
that did not change drops its terms (``SKIPS_UNCHANGED``), plus for outer, semi and anti joins the change of
the rows without (or with) a match, recomputed for the join keys either change touches.  It reads both
inputs' integrals (``LOLD``, ``ROLD``), each by its join key, with the probe keys taken from both changes
(:func:`probes`); an inner join reads a side's integral only when the other side changed
(:func:`reads_state`).  Fast path: an equi-join on plain columns in Arrow (:func:`equi_join`).  On the
driver a row whose key or residual condition fails is recorded as a row error and left out.
"""
from __future__ import annotations

from typing import List, Optional

import pyarrow as pa
import pyarrow.compute as pc

from planner.logical import Join, col

from sqlengine import nested
from sqlengine.executor import arrow_ops
from sqlengine.executor import delta_rules as rules
from sqlengine.executor.backends.duckdb import duck, shift_columns
from sqlengine.executor.op_schemas import data_types, with_weight
from sqlengine.executor.ops import ProbeSpec
from sqlengine.executor.row_errors import DATA_ERRORS
from sqlengine.zset import W, canonical_float

SKIPS_UNCHANGED = True


def probes(op) -> List[ProbeSpec]:
    """Each side's integral by its join key, probed with both changes' keys (a side's change meets the other
    side's state; an outer join's padded rows need both sides' rows of the touched keys)."""
    node: Join = op.node
    nl = len(node.left.fields)
    lk = tuple(duck(k.sql) for k in node.left_keys)
    rk = tuple(shift_columns(duck(k.sql), -nl) for k in node.right_keys)
    if not lk:
        return [ProbeSpec((), []), ProbeSpec((), [])]
    both = [(0, lk), (1, rk)]
    return [ProbeSpec(lk, both), ProbeSpec(rk, both)]


def reads_state(op, j: int, ins) -> bool:
    """d(A join B) = dA join B_new + A_old join dB: an inner join's A_old only meets dB, B_old only dA."""
    return not (op.node.kind == "inner" and ins[1 - j] is None)


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    if op.node.kind in ("semi", "anti"):
        return ins[0]
    return with_weight(data_types(ins[0]) + data_types(ins[1]))


# ---------------------------------------------------------------- on the driver
def _common_key(a: pa.ChunkedArray, b: pa.ChunkedArray):
    if nested.is_nested_arrow(a.type) or nested.is_nested_arrow(b.type):   # Arrow cannot hash it: DuckDB joins
        return None
    if a.type == b.type:
        return a, b
    if pa.types.is_integer(a.type) and pa.types.is_integer(b.type):
        return a.cast(pa.int64()), b.cast(pa.int64())
    if arrow_ops.numeric(a.type) and arrow_ops.numeric(b.type):
        # as DuckDB compares them: in DOUBLE, rounded (2^53 + 1 = 2^53)
        return a.cast(pa.float64(), safe=False), b.cast(pa.float64(), safe=False)
    return None


THREADED_JOIN_ROWS = 100_000


def equi_join(node: Join, left: pa.Table, right: pa.Table) -> Optional[pa.Table]:
    """Inner join on plain columns without a residual (NULL keys never match): left columns, right columns
    renamed to their joined positions, weight = product of the weights."""
    if node.residual is not None or node.null_safe or not node.left_keys:
        return None
    nl, nr = len(node.left.fields), len(node.right.fields)
    li = [arrow_ops.column_index(k.sql) for k in node.left_keys]
    ri = [arrow_ops.column_index(k.sql) for k in node.right_keys]
    if None in li or None in ri or nested.has_nested(left.schema) or nested.has_nested(right.schema):
        return None   # (Acero joins no nested column, key or not: DuckDB does)
    lt = left.select(col(i) for i in range(nl)).append_column(W, left.column(W))
    rt = right.rename_columns([col(nl + j) if c != W else "__w2" for j, c in enumerate(right.column_names)])
    keys = []
    for n, (a, b) in enumerate(zip(li, ri)):
        pair = _common_key(lt.column(col(a)), rt.column(col(b)))
        if pair is None:
            return None
        pair = tuple(canonical_float(x) for x in pair)   # 0.0 = -0.0 and NaN = NaN, as in SQL
        lt = lt.append_column(f"__k{n}", pair[0])
        rt = rt.append_column(f"__k{n}", pair[1])
        keys.append(f"__k{n}")
    # Acero's threads pay from about a hundred thousand rows; below that their start costs more than they save
    # in a step of milliseconds
    j = lt.join(rt, keys=keys, join_type="inner", use_threads=lt.num_rows + rt.num_rows > THREADED_JOIN_ROWS)
    names = [col(i) for i in range(nl + nr)]
    w = pc.multiply(j.column(W), j.column("__w2"))
    return pa.table([j.column(c) for c in names] + [w], names=names + [W])


def local(lw, op, ins, reads, initial: bool = False) -> List[pa.Table]:
    try:
        return _terms(lw, op, ins, reads)
    except DATA_ERRORS:
        if lw.careful:
            raise
    node: Join = op.node
    nl = len(node.left.fields)
    names = [f.name for f in node.left.fields] + [f.name for f in node.right.fields]
    what = f"ON of {node.describe()}"[:200]
    if ins[0] is not None:
        lw.record(op, ins[0], *lw.bad_rows(ins[0], [k.sql for k in node.left_keys]),
                  [k.sql for k in node.left_keys], names, what)
    if ins[1] is not None:
        dr = ins[1].rename_columns([col(nl + j) if c != W else W for j, c in enumerate(ins[1].column_names)])
        lw.record(op, dr, *lw.bad_rows(dr, [k.sql for k in node.right_keys]),
                  [k.sql for k in node.right_keys], names, what)
    with lw.carefully():
        return _terms(lw, op, ins, reads)


def _terms(lw, op, ins, reads) -> List[pa.Table]:
    tables = {"DL": ins[0], "DR": ins[1], "LOLD": reads[0], "ROLD": reads[1]}
    out = []
    for term in rules.join_rule(op.node, ins[0] is not None, ins[1] is not None, lw.x_rule()):
        if term.join is not None:
            out.append(pairs_local(lw, op, *(tables[n] for n in term.join)))
        else:
            out.append(lw.rule(term.sql, **{n: t for n, t in tables.items() if t is not None}))
    return out


def pairs_local(lw, op, left: pa.Table, right: pa.Table) -> pa.Table:
    """The inner join of Z-sets ``left`` and ``right`` on the driver: Arrow's hash join where it applies."""
    node: Join = op.node
    fast = equi_join(node, left, right)
    if fast is not None:
        return fast
    x = lw.x_rule()
    if not (lw.careful and node.residual is not None):
        return lw.rule(rules.join_sql(node, "L", "R", x), L=left, R=right)
    # each pair of this term is a change: record the pairs whose condition fails, keep the others out
    pairs = lw.rule(rules.join_sql(node, "L", "R", x, residual=False), L=left, R=right)
    names = [f.name for f in node.left.fields] + [f.name for f in node.right.fields]
    rids, which = lw.bad_rows(pairs, [node.residual.sql])
    lw.record(op, pairs, rids, which, [node.residual.sql], names, f"ON of {node.describe()}"[:200])
    return lw.rule(f"SELECT * FROM P WHERE ({rules.under_try(node.residual.sql)})", P=pairs)


# ---------------------------------------------------------------- on Spark
def spark(lw, op, ins, reads, initial: bool = False):
    from sqlengine.executor.backends.spark import union_all
    frames = {"DL": ins[0], "DR": ins[1], "LOLD": reads[0], "ROLD": reads[1]}
    return union_all([lw.rule(t.sql, **frames)
                      for t in rules.join_rule(op.node, ins[0] is not None, ins[1] is not None)])


def pairs_spark(lw, op, left, right):
    """The inner join of Z-set DataFrames ``left`` and ``right``."""
    return lw.rule(rules.join_sql(op.node, "L", "R"), L=left, R=right)
