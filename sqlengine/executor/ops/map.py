"""Filters and projections (``Filter``, ``Project``): linear, no state.

Delta rule: d(map(R)) = map(dR), applied to the change directly (``delta_rules.map_sql``).  Fast path: a
projection that only picks columns (:func:`project_columns`).  On the driver a row whose expression
fails is recorded as a row error and left out (:mod:`sqlengine.executor.row_errors`), the others go on.
"""
from __future__ import annotations

import re

from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner.logical import Filter, Project, Unnest, col

from sqlengine.executor import arrow_exprs, arrow_ops
from sqlengine.executor import delta_rules as rules
from sqlengine.executor.backends.duckdb import beside_nulls, duck
from sqlengine.executor.op_schemas import data_types, normalize, with_weight
from sqlengine.executor.row_errors import DATA_ERRORS
from sqlengine.types import arrow_type
from sqlengine.zset import W

SKIPS_UNCHANGED = False


def owns(op) -> bool:
    """Is ``op`` a map (a Spark step keeps a small change on the driver through maps)?"""
    return op.kind == "map"


def probes(op) -> list:
    return []


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    node = op.node
    if isinstance(node, Unnest):
        return with_weight(data_types(ins[0]) + [arrow_type(t) for t in node.types])
    if not isinstance(node, Project):   # a filter keeps its input's columns
        return ins[0]
    types = data_types(ins[0])
    if all(e.sql[1:].isdigit() and e.sql.startswith("c") for e in node.exprs):
        return with_weight([types[int(e.sql[1:])] for e in node.exprs])
    got = typer.select_types(ins[0], [f"({duck(e.sql)}) AS {col(i)}" for i, e in enumerate(node.exprs)])
    return with_weight([normalize(t, e.type) for t, e in zip(got, node.exprs)])


# ---------------------------------------------------------------- on the driver
def project_columns(node: Project, d: pa.Table) -> Optional[pa.Table]:
    """A projection that only picks (and reorders or repeats) columns."""
    idx = [arrow_ops.column_index(e.sql) for e in node.exprs]
    if None in idx:
        return None
    return pa.table([d.column(col(i)) for i in idx] + [d.column(W)], names=[col(j) for j in range(len(idx))] + [W])


_INTEGER = re.compile(r"-?\d{1,18}")
_TYPED_NULL = re.compile(r"CAST\(NULL AS [^()]*(\(\d+, \d+\))?\)")


def constant(e, n: int) -> Optional[pa.Array]:
    """Expression ``e`` as ``n`` values, when it is an integer literal or a typed NULL (``CAST(NULL AS T)``, a
    scalar type), else None."""
    if not (_INTEGER.fullmatch(e.sql) or _TYPED_NULL.fullmatch(e.sql)) or e.type.base in ("ARRAY", "MAP", "STRUCT"):
        return None
    t = arrow_type(e.type)
    if e.sql.startswith("CAST"):
        return pa.nulls(n, t)
    if not pa.types.is_integer(t):
        return None
    return pa.array(np.full(n, int(e.sql)), t)


def project_simple(node: Project, d: pa.Table) -> Optional[pa.Table]:
    """A projection of columns, integer literals, typed NULLs and DOUBLE arithmetic
    (:mod:`sqlengine.executor.arrow_exprs`), in Arrow."""
    plain = [arrow_ops.column_index(e.sql) for e in node.exprs]
    fixed = [constant(e, d.num_rows) if i is None else None for e, i in zip(node.exprs, plain)]
    values = arrow_exprs.project_values([e.sql for e, i, c in zip(node.exprs, plain, fixed) if i is None and c is None],
                                        d)
    if values is None:
        return None
    it = iter(values)
    cols = [d.column(col(i)) if i is not None else c if c is not None else next(it) for i, c in zip(plain, fixed)]
    return pa.table(cols + [d.column(W)], names=[col(j) for j in range(len(cols))] + [W])


def unnest_rows(node: Unnest, d: pa.Table) -> Optional[pa.Table]:
    """An UNNEST of an ARRAY column in Arrow (``delta_rules.unnest_sql``'s meaning): each row once per element
    (a NULL element too), the element or its ROW's fields appended, and its position (from 1) with ORDINALITY;
    a row whose array is NULL or empty gives none, or with ``outer`` one row of NULLs.  None where the
    expression is not a column of ARRAY type, or a column's type is not the planned one."""
    i = arrow_ops.column_index(node.expr.sql)
    if i is None or d.num_rows == 0:
        return None
    arr = d.column(col(i)).combine_chunks()
    if not pa.types.is_list(arr.type):   # (not a MAP either: its type is no list type)
        return None
    parents = pc.list_parent_indices(arr)
    elements = pc.list_flatten(arr)
    if node.fields_of:
        if not pa.types.is_struct(elements.type) or \
                any(elements.type.get_field_index(f) < 0 for f in node.fields_of):
            return None
        values = [pc.struct_field(elements, f) for f in node.fields_of]
    else:
        values = [elements]
    if node.ordinality:
        p = parents.to_numpy()   # (ascending: the position is the distance from its parent's first element)
        k = np.arange(len(p))
        starts = np.ones(len(p), bool)
        starts[1:] = p[1:] != p[:-1]
        values.append(pa.array(k - np.maximum.accumulate(np.where(starts, k, 0)) + 1, pa.int64()))
    rows = d.take(parents)
    if node.outer:
        lengths = pc.fill_null(pc.list_value_length(arr), 0)
        lonely = pc.indices_nonzero(pc.equal(lengths, 0))
        if len(lonely):
            rows = pa.concat_tables([rows, d.take(lonely)])
            values = [pa.concat_arrays([v, pa.nulls(len(lonely), v.type)]) for v in values]
    n = len(node.input.fields)
    want = [arrow_type(t) for t in node.types]
    if [v.type for v in values] != want:
        return None
    return pa.table([rows.column(col(k)) for k in range(n)] + values + [rows.column(W)],
                    names=[col(k) for k in range(n + len(values))] + [W])


def permutes_columns(node) -> bool:
    """Is ``node`` a projection that picks every column of its input (reordered, maybe repeated)?  It maps
    distinct rows to distinct rows."""
    if not isinstance(node, Project):
        return False
    idx = [arrow_ops.column_index(e.sql) for e in node.exprs]
    return None not in idx and set(idx) == set(range(len(node.input.fields)))


def local(lw, op, ins, reads=(), initial: bool = False) -> pa.Table:
    (d,) = ins
    node = op.node
    if isinstance(node, Project):
        fast = project_columns(node, d)
        if fast is None:
            fast = project_simple(node, d)
        if fast is not None:
            return fast
    if isinstance(node, Filter):
        fast = arrow_exprs.filter_rows(node.predicate.sql, d)
        if fast is not None:
            return fast
    if isinstance(node, Unnest):
        fast = unnest_rows(node, d)
        if fast is not None:
            return fast
    try:
        return _rule(lw, node, d)
    except DATA_ERRORS:
        if lw.careful:
            raise
        exprs = [node.predicate.sql] if isinstance(node, Filter) else [node.expr.sql] \
            if isinstance(node, Unnest) else [e.sql for e in node.exprs]
        return _careful(lw, op, d, exprs, "WHERE" if isinstance(node, Filter) else "UNNEST"
                        if isinstance(node, Unnest) else "SELECT")


def _calls(sql: str, names) -> bool:
    """Whether ``sql`` calls a function of ``names`` (a name as a whole word before a parenthesis: a function
    ``f`` is not called by ``NULLIF(...)``)."""
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\s*\(", sql, re.IGNORECASE) for n in names)


def _rule(lw, node, d: pa.Table) -> pa.Table:
    """The map's rule over ``d``.  A chunk of one row is a constant vector to DuckDB, over which it skips what a
    NULL operand makes moot (``NULLIF(d, d) + CAST(big AS INT)`` is NULL there, and fails beside other rows, as in
    a table): chunks are combined, and a change of one row is evaluated beside a row of NULLs (its weight NULL too),
    which is dropped (not where a Python function is called, which may not take NULLs)."""
    sql = rules.map_sql(node)
    if d.num_rows > 1 and d.num_columns and any(len(c) == 1 for c in d.column(0).chunks):
        d = d.combine_chunks()
    if d.num_rows != 1 or (lw.python_names and _calls(sql, lw.python_names)):
        return lw.rule(sql, D=d)
    out = lw.rule(sql, D=beside_nulls(d))
    return out.filter(pc.is_valid(out.column(W)))


def _careful(lw, op, d: pa.Table, exprs: List[str], clause: str) -> pa.Table:
    """A filter or projection of the rows of ``d`` where no expression fails; the others are recorded.  A
    batch that fails where no row fails alone (DuckDB evaluates some expressions over the whole batch) runs
    in parts."""
    rids, which = lw.bad_rows(d, exprs, failed=True)
    names = [f.name for f in op.node.input.fields]
    lw.record(op, d, rids, which, exprs, names, f"{clause} of {op.node.describe()}"[:200])
    keep = np.ones(d.num_rows, dtype=bool)
    keep[rids] = False
    good = d.filter(pa.array(keep))
    if not good.num_rows:   # (an expression that fails on every row may fail with no row at all: a constant)
        if isinstance(op.node, Filter):
            return good
        if isinstance(op.node, Unnest):
            return lw.rule(rules.map_sql(op.node), D=good)
        return pa.table([pa.nulls(0) for _ in op.node.exprs] + [good.column(W)],
                        names=[col(i) for i in range(len(op.node.exprs))] + [W])
    with lw.carefully():
        try:
            return local(lw, op, [good])
        except DATA_ERRORS:
            return _in_parts(lw, op, good)


def _in_parts(lw, op, t: pa.Table) -> pa.Table:
    """The map over ``t`` in halves, down to single rows where a half fails: for a batch DuckDB fails as a
    whole (a vector of a NULLIF and a CAST) where no row fails alone, and TRY does not help."""
    try:
        return lw.rule(rules.map_sql(op.node), D=t)
    except DATA_ERRORS:
        if t.num_rows <= 1:
            raise
    half = t.num_rows // 2
    return pa.concat_tables([_in_parts(lw, op, t.slice(0, half)), _in_parts(lw, op, t.slice(half))],
                            promote_options="permissive")


# ---------------------------------------------------------------- on Spark
def spark(lw, op, ins, reads=(), initial: bool = False):
    if isinstance(op.node, Unnest):
        return _unnest_spark(lw, op.node, ins[0])
    return lw.rule(rules.map_sql(op.node), D=ins[0])


def _unnest_spark(lw, node: Unnest, d):
    """UNNEST on Spark: the array computed by the rule, then ``posexplode`` (``posexplode_outer`` for LEFT JOIN
    UNNEST: a NULL or empty array gives one row of NULLs, as DuckDB's LEFT JOIN LATERAL does)."""
    from pyspark.sql import functions as F
    n = len(node.input.fields)
    keep = [F.col(col(i)) for i in range(n)]
    arr = lw.rule(f"SELECT *, ({node.expr.sql}) AS __arr FROM D", D=d)
    explode = F.posexplode_outer if node.outer else F.posexplode
    x = arr.select(*keep, F.col(W), explode("__arr").alias("__i", "__v"))
    values = [F.col("__v").getField(f) for f in node.fields_of] or [F.col("__v")]
    if node.ordinality:
        values.append((F.col("__i") + 1).cast("bigint"))
    return x.select(*keep, *[v.alias(col(n + j)) for j, v in enumerate(values)], F.col(W))
