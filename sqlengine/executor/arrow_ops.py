"""The commonest operators of a small step in plain Arrow compute, without a DuckDB query.

A DuckDB query over Arrow costs 2-12 ms here, mostly planning, where an Arrow
group-by or hash join of a few hundred rows costs about 0.1 ms.  These
functions cover the shapes that dominate small steps: equi-joins on plain
columns, and the accumulating aggregates (COUNT/SUM/AVG over integer and
floating-point columns).  Each returns ``None`` for a shape it does not
cover, and the caller (``local_lower``) runs its DuckDB lowering instead;
both compute the same Z-set, and the differential tests run both.
"""
from __future__ import annotations

from decimal import Decimal
from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner.logical import Aggregate, Join, Project, col

from sqlengine.zset import W, canonical_float, canonical_floats, consolidate_arrow


def _column_index(sql: str) -> Optional[int]:
    return int(sql[1:]) if sql.startswith("c") and sql[1:].isdigit() else None


HUGE = pa.decimal128(38, 0)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _summable(t: pa.DataType) -> bool:
    return _numeric(t) or t == HUGE


def _common_key(a: pa.ChunkedArray, b: pa.ChunkedArray):
    if a.type == b.type:
        return a, b
    if pa.types.is_integer(a.type) and pa.types.is_integer(b.type):
        return a.cast(pa.int64()), b.cast(pa.int64())
    if _numeric(a.type) and _numeric(b.type):   # as DuckDB compares them: in DOUBLE, rounded (2^53 + 1 = 2^53)
        return a.cast(pa.float64(), safe=False), b.cast(pa.float64(), safe=False)
    return None


def _weighted(xs, w):
    """x * w for SUM/AVG: exact DECIMAL(38, 0) for integers (a sum that leaves BIGINT is a row error, never a
    wrapped value; ``op_schemas.acc_type``), DOUBLE for floating point."""
    if pa.types.is_integer(xs.type):
        try:
            return pc.multiply_checked(xs.cast(pa.int64()), w).cast(HUGE)
        except pa.ArrowInvalid:   # |x * w| beyond BIGINT (a weight above 1): exact in Python
            return pa.array([None if x is None else Decimal(x * n) for x, n in zip(xs.to_pylist(), w.to_pylist())],
                            HUGE)
    return pc.multiply(xs.cast(pa.float64()), w)


def project_columns(node: Project, d: pa.Table) -> Optional[pa.Table]:
    """A projection that only picks (and reorders or repeats) columns."""
    idx = [_column_index(e.sql) for e in node.exprs]
    if None in idx:
        return None
    return pa.table([d.column(col(i)) for i in idx] + [d.column(W)], names=[col(j) for j in range(len(idx))] + [W])


def permutes_columns(node) -> bool:
    """Is ``node`` a projection that picks every column of its input (reordered, maybe repeated)?  It maps
    distinct rows to distinct rows."""
    if not isinstance(node, Project):
        return False
    idx = [_column_index(e.sql) for e in node.exprs]
    return None not in idx and set(idx) == set(range(len(node.input.fields)))


THREADED_JOIN_ROWS = 100_000


def equi_join(node: Join, left: pa.Table, right: pa.Table) -> Optional[pa.Table]:
    """Inner join on plain columns without a residual (NULL keys never match): left columns, right columns
    renamed to their joined positions, weight = product of the weights."""
    if node.residual is not None or node.null_safe or not node.left_keys:
        return None
    nl, nr = len(node.left.fields), len(node.right.fields)
    li = [_column_index(k.sql) for k in node.left_keys]
    ri = [_column_index(k.sql) for k in node.right_keys]
    if None in li or None in ri:
        return None
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
    # Acero's threads pay from about a hundred thousand rows (1M x 632k rows: 0.12 s, against 0.32 s on one);
    # below that their start costs more than they save in a step of milliseconds
    j = lt.join(rt, keys=keys, join_type="inner", use_threads=lt.num_rows + rt.num_rows > THREADED_JOIN_ROWS)
    names = [col(i) for i in range(nl + nr)]
    w = pc.multiply(j.column(W), j.column("__w2"))
    return pa.table([j.column(c) for c in names] + [w], names=names + [W])


def _args(node: Aggregate, t: pa.Table) -> Optional[List[Optional[str]]]:
    """The argument column of each aggregate call (None for COUNT(*)), if all are numeric plain columns."""
    out = []
    for a in node.aggs:
        if a.func == "COUNT_STAR":
            out.append(None)
            continue
        c = a.args[0].sql
        if _column_index(c) is None or c not in t.column_names:
            return None
        if a.func != "COUNT" and not _numeric(t.schema.field(c).type):
            return None
        out.append(c)
    return out


def aggregate_partial(node: Aggregate, d: pa.Table) -> Optional[pa.Table]:
    """Per-group sums of a change (see ``delta_rules.acc_columns``): weight, sum(x*w), sum(w where x not null)."""
    k = len(node.keys)
    args = _args(node, d)
    if not k or args is None:
        return None
    keys = [col(i) for i in range(k)]
    cols = {c: canonical_float(d.column(c)) for c in keys}
    w = d.column(W)
    cols["__cnt"] = w
    zero = pa.scalar(0, pa.int64())
    for i, (a, x) in enumerate(zip(node.aggs, args)):
        if x is None:
            continue
        xs = d.column(x)
        if a.func != "COUNT":
            cols[f"__s{i}"] = _weighted(xs, w)
        cols[f"__n{i}"] = pc.if_else(pc.is_valid(xs), w, zero)
    t = pa.table(cols)
    accs = [c for c in t.column_names if c.startswith("__")]
    g = t.group_by(keys, use_threads=False).aggregate([(c, "sum") for c in accs])
    return g.rename_columns([c[:-4] if c.endswith("_sum") else c for c in g.column_names]).select(keys + accs)


class Consolidated(list):
    """A change's parts whose union is consolidated already (no two rows equal): nothing to merge."""


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    """Row by row: equal values, or both NULL."""
    return pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))


def aggregate_output(node: Aggregate, partial: pa.Table, state: pa.Table, accs: List[str],
                     initial: bool) -> Optional[Consolidated]:
    """-final(old) + final(old + partial) per group, for the groups of ``state`` (a superset of the touched
    groups' rows), in one pass: a group by key of the state's and the partial's rows gives each group's old
    and new sums side by side, and a group whose final row does not change emits nothing (so untouched
    groups, and touched ones whose results stay the same, cost no output rows).  The change is consolidated."""
    k = len(node.keys)
    if not k or any(not _summable(partial.schema.field(c).type) for c in accs):
        return None
    keys = [col(i) for i in range(k)]
    names = keys + [col(k + i) for i in range(len(node.aggs))]

    def finals(g: pa.Table, suffix: str):
        """The output columns of the groups from their sums (``<acc><suffix>_sum``), and which groups exist."""
        sums = {c: g.column(f"{c}{suffix}_sum") for c in accs}
        sums = {c: pc.fill_null(v, 0) if c.startswith(("__cnt", "__n")) else v for c, v in sums.items()}
        out = [g.column(c) for c in keys]
        for i, a in enumerate(node.aggs):
            if a.func == "COUNT_STAR":
                e = sums["__cnt"]
            elif a.func == "COUNT":
                e = sums[f"__n{i}"]
            else:
                s, n = sums[f"__s{i}"], sums[f"__n{i}"]
                if a.func == "AVG":
                    s = pc.divide(s.cast(pa.float64()), n.cast(pa.float64()))
                e = pc.if_else(pc.greater(n, 0), s, pa.nulls(len(n), s.type))
            out.append(e)
        return out, pc.not_equal(sums["__cnt"], 0)

    def weighted(out, keep, weight: int) -> pa.Table:
        t = pa.table(out + [pa.array(np.full(len(out[0]), weight, np.int64))], names=names + [W])
        return t.filter(keep)

    partial = canonical_floats(partial, keys)
    if initial:
        g = partial.group_by(keys, use_threads=False).aggregate([(c, "sum") for c in accs])
        return Consolidated([weighted(*finals(g, ""), 1)])
    old = canonical_floats(state.select(partial.column_names).cast(partial.schema), keys)
    both = pa.concat_tables([old, partial])
    from_old = pa.array(np.arange(both.num_rows) < old.num_rows)
    cols = {c: both.column(c) for c in keys + accs}
    for c in accs:   # the old rows' sums beside the sums of all rows
        cols[f"{c}__old"] = pc.if_else(from_old, both.column(c), pa.nulls(both.num_rows, both.schema.field(c).type))
    g = pa.table(cols).group_by(keys, use_threads=False).aggregate(
        [(c, "sum") for c in accs] + [(f"{c}__old", "sum") for c in accs])
    new_out, new_keep = finals(g, "")
    old_out, old_keep = finals(g, "__old")
    same = pc.and_(new_keep, old_keep)
    for a, b in zip(new_out[k:], old_out[k:]):
        same = pc.and_(same, _same(a, b))
    changed = pc.invert(same)
    return Consolidated([weighted(new_out, pc.and_(new_keep, changed), 1),
                         weighted(old_out, pc.and_(old_keep, changed), -1)])


RECOMPUTABLE = {"MIN", "MAX", "COUNT_STAR", "COUNT", "SUM", "AVG"}


def aggregate_recompute(node: Aggregate, d: pa.Table, state: Optional[pa.Table],
                        emitted: Optional[pa.Table] = None) -> Optional[pa.Table]:
    """agg(old + d) - agg(old) over the groups of ``state`` (the input's integral, a superset of the touched
    groups' rows; untouched groups cancel), for MIN/MAX and the plain counting aggregates, no DISTINCT.  With
    ``emitted`` (the op's own output, ``planner.circuit.keeps_output``): agg(old + d) over the groups ``d``
    touches, minus their rows in ``emitted``; only where ``d``'s keys have no NULL and no float (Arrow's join
    matches neither as SQL does)."""
    k = len(node.keys)
    if not k or any(a.func not in RECOMPUTABLE or a.distinct for a in node.aggs):
        return None
    if emitted is not None and any(d.column(col(i)).null_count or pa.types.is_floating(d.schema.field(col(i)).type)
                                   for i in range(k)):
        return None
    args = []
    for a in node.aggs:
        c = None if a.func == "COUNT_STAR" else a.args[0].sql
        if c is not None and (_column_index(c) is None or
                              (a.func in ("SUM", "AVG") and not _numeric(d.schema.field(c).type))):
            return None
        args.append(c)
    keys = [col(i) for i in range(k)]

    def agg(z: pa.Table, weight: int) -> pa.Table:
        z = consolidate_arrow(z) if z.num_rows else z
        z = z.filter(pc.greater(z.column(W), 0))
        w = z.column(W)
        cols = {c: canonical_float(z.column(c)) for c in keys}
        specs = []
        for i, (a, x) in enumerate(zip(node.aggs, args)):
            if a.func in ("MIN", "MAX"):
                cols[f"__x{i}"] = z.column(x)
                specs.append((f"__x{i}", a.func.lower()))
                continue
            if a.func != "COUNT_STAR":
                xs = z.column(x)
                cols[f"__n{i}"] = pc.if_else(pc.is_valid(xs), w, pa.scalar(0, pa.int64()))
                specs.append((f"__n{i}", "sum"))
                if a.func != "COUNT":
                    cols[f"__s{i}"] = _weighted(xs, w)
                    specs.append((f"__s{i}", "sum"))
        cols["__cnt"] = w
        specs.append(("__cnt", "sum"))
        g = pa.table(cols).group_by(keys, use_threads=False).aggregate(specs)
        out = [g.column(c) for c in keys]
        for i, a in enumerate(node.aggs):
            if a.func in ("MIN", "MAX"):
                out.append(g.column(f"__x{i}_{a.func.lower()}"))
            elif a.func == "COUNT_STAR":
                out.append(g.column("__cnt_sum"))
            elif a.func == "COUNT":
                out.append(g.column(f"__n{i}_sum"))
            else:
                s, n = g.column(f"__s{i}_sum"), g.column(f"__n{i}_sum")
                if a.func == "AVG":
                    s = pc.divide(s.cast(pa.float64()), n.cast(pa.float64()))
                out.append(pc.if_else(pc.greater(n, 0), s, pa.nulls(len(n), s.type)))
        names = keys + [col(k + i) for i in range(len(node.aggs))]
        return pa.table(out + [pa.array([weight] * g.num_rows, pa.int64())], names=names + [W])

    if state is None:
        return agg(d, 1)
    old = state.select(d.column_names).cast(d.schema)
    if emitted is None:
        return pa.concat_tables([agg(pa.concat_tables([old, d]), 1), agg(old, -1)], promote_options="permissive")
    touched = d.select(keys).group_by(keys, use_threads=False).aggregate([])
    old = old.join(touched, keys=keys, join_type="left semi", use_threads=False)
    new = agg(pa.concat_tables([old, d]), 1)
    stored = emitted.cast(pa.schema([pa.field(c, new.schema.field(c).type) if c in keys else f
                                     for c, f in zip(emitted.column_names, emitted.schema)]))
    stored = stored.join(touched, keys=keys, join_type="left semi", use_threads=False)
    gone = stored.set_column(stored.schema.get_field_index(W), W, pc.negate(stored.column(W)))
    return pa.concat_tables([new, gone.select(new.column_names)], promote_options="permissive")
