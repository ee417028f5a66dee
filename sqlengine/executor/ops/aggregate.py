"""GROUP BY aggregates, in three modes (``op.mode``).

* recompute: the touched groups are recomputed from the input's integral (``S``, read by the group keys):
  -agg(old) + agg(old + d) (``delta_rules.aggregate_sql``); with ``planner.circuit.keeps_output`` the old
  rows are read from the op's own output (``O``) instead of recomputed.  Fast path: MIN, MAX and the counting
  aggregates in Arrow (:func:`aggregate_recompute`).
* retract (Python aggregates with ``retract``, and COUNTs): each group's accumulators are kept beside its
  output, in the integral of the op's own change (``O``); a step updates the touched groups from the change's
  rows alone (``delta_rules.retract_sql``).
* accumulate (COUNT, SUM, AVG; MIN and MAX over an input that only gains rows): the op owns its state,
  per-group sums and extremes (:mod:`.accumulators`).  A step adds
  the change's partial sums (:func:`partial_local`, :func:`partial_spark`) as a run of the state, then emits
  -final(old) + final(old + partial) for their groups, reading the old sums by group key
  (:func:`output_local`, :func:`output_spark`).  Fast paths: both phases in Arrow
  (:func:`aggregate_partial`, :func:`aggregate_output`).  Runs merge by adding up the sums
  (:func:`merge_rule`).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner.errors import UnsupportedError
from planner.logical import Aggregate, col

from sqlengine import nested
from sqlengine.executor import arrow_ops
from sqlengine.executor import delta_rules as rules
from sqlengine.executor.delta_rules import cols
from sqlengine.executor.op_schemas import _nullable, data_types, with_weight
from sqlengine.executor.row_errors import DATA_ERRORS, field_labels, first_line
from sqlengine.executor.ops import ProbeSpec
from sqlengine.executor.ops import accumulators as acc
from sqlengine.executor.arrow_ops import Consolidated
from sqlengine.executor.schema import HUGE
from sqlengine.types import arrow_type
from sqlengine.zset import W, canonical_float, canonical_floats, consolidate_arrow

SKIPS_UNCHANGED = False


def accumulates(op) -> bool:
    """Does ``op`` keep per-group sums as its own state (accumulate mode)?"""
    return op.kind == "aggregate" and op.mode == "accumulate"


def seeds(op, initial: bool) -> bool:
    """Does ``op`` emit in this step though no input changed?  A global aggregate (no GROUP BY) emits its
    row for the empty input in the pipeline's first step (``initial``)."""
    return initial and op.kind == "aggregate" and not op.node.keys


def probes(op) -> List[ProbeSpec]:
    """Its input's integral; its own output's (keeps_output); in accumulate mode its own state: keys first in
    each, probed with the change's group keys."""
    keys = tuple(cols(len(op.node.keys)))
    return [ProbeSpec(keys, [(0, keys)]) for _ in op.reads or (0,)]


def output_types(node: Aggregate, ins: pa.Schema) -> list:
    types = data_types(ins)
    out = [types[i] for i in range(len(node.keys))]
    for a in node.aggs:
        arg = types[int(a.args[0].sql[1:])] if a.args and a.args[0].sql[1:].isdigit() else None
        if a.func in ("COUNT", "COUNT_STAR"):
            out.append(pa.int64())
        elif a.func in ("MIN", "MAX"):
            out.append(arg if arg is not None else arrow_type(a.type))
        elif a.func == "SUM":
            if arg is not None and pa.types.is_integer(arg):
                out.append(pa.int64())
            elif arg is not None and pa.types.is_decimal(arg):
                out.append(pa.decimal128(38, arg.scale))
            else:
                out.append(pa.float64())
        elif a.func == "AVG" or a.func.startswith(("STDDEV", "VAR")):   # DOUBLE, as in DuckDB
            out.append(pa.float64())
        else:   # planner.aggregate_functions
            out.append(arrow_type(a.type))
    return out


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    return with_weight(output_types(op.node, ins[0]))


def state_schema(op, change, ins: List[pa.Schema]):
    """In accumulate mode: keys, then the accumulators (:func:`accumulators.state_fields`)."""
    if not accumulates(op):
        return None
    return _nullable(acc.state_fields(op.node, data_types(ins[0])))


def merge_rule(op) -> str:
    """Runs ``R`` of the sums merged into one (``delta_rules.merge_sql``)."""
    return rules.merge_sql(op.node, acc.columns(op.node))


# ---------------------------------------------------------------- on the driver, in Arrow (the fast paths)
def _summable(t: pa.DataType) -> bool:
    return arrow_ops.numeric(t) or t == HUGE


def _args(node: Aggregate, t: pa.Table) -> Optional[List[Optional[str]]]:
    """The argument column of each aggregate call (None for COUNT(*)), if all are numeric plain columns."""
    out = []
    for a in node.aggs:
        if a.func == "COUNT_STAR":
            out.append(None)
            continue
        c = a.args[0].sql
        if arrow_ops.column_index(c) is None or c not in t.column_names:
            return None
        if a.func in ("MIN", "MAX"):   # a running extreme (insert-only input): Acero's min and max
            if nested.has_nested(t.schema, [c]) or pa.types.is_floating(t.schema.field(c).type):
                return None
        elif a.func != "COUNT" and not arrow_ops.numeric(t.schema.field(c).type):
            return None
        out.append(c)
    return out


def aggregate_partial(node: Aggregate, d: pa.Table) -> Optional[pa.Table]:
    """Per-group sums of a change: its accumulators (see :mod:`sqlengine.executor.ops.accumulators`)."""
    k = len(node.keys)
    args = _args(node, d)
    if not k or args is None or nested.has_nested(d.schema, [col(i) for i in range(k)]):
        return None
    keys = [col(i) for i in range(k)]
    sums = acc.partial_arrow(node, d, args, extremes=True, narrow=True)
    t = pa.table({**{c: canonical_float(d.column(c)) for c in keys}, **sums})
    g = t.group_by(keys, use_threads=False).aggregate([(c, acc.how(c)) for c in sums])
    return acc.widen(g.rename_columns([c[:-4] if c.endswith(("_sum", "_min", "_max")) else c
                                       for c in g.column_names]).select(keys + list(sums)))


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
    if not k or any(not _summable(partial.schema.field(c).type) for c in accs if not acc.extreme(c)) or \
            nested.has_nested(partial.schema, [col(i) for i in range(k)]):
        return None
    keys = [col(i) for i in range(k)]
    names = keys + [col(k + i) for i in range(len(node.aggs))]

    def finals(g: pa.Table, suffix: str):
        """The output columns of the groups from their sums (``<acc><suffix>_sum``), and which groups exist."""
        sums = {c: g.column(f"{c}{suffix}_{acc.how(c)}") for c in accs}
        sums = {c: pc.fill_null(v, 0) if acc.is_count(c) else v for c, v in sums.items()}
        out = [g.column(c) for c in keys] + [acc.final_arrow(a, i, sums.__getitem__) for i, a in enumerate(node.aggs)]
        return out, pc.not_equal(sums[acc.COUNT], 0)

    def weighted(out, keep, weight: int) -> pa.Table:
        t = pa.table(out + [pa.array(np.full(len(out[0]), weight, np.int64))], names=names + [W])
        return t.filter(keep)

    partial = canonical_floats(partial, keys)
    if initial:
        g = partial.group_by(keys, use_threads=False).aggregate([(c, acc.how(c)) for c in accs])
        return Consolidated([weighted(*finals(g, ""), 1)])
    old = canonical_floats(state.select(partial.column_names).cast(partial.schema), keys)
    both = pa.concat_tables([old, partial])
    from_old = pa.array(np.arange(both.num_rows) < old.num_rows)
    cols = {c: both.column(c) for c in keys + accs}
    for c in accs:   # the old rows' sums beside the sums of all rows
        cols[f"{c}__old"] = pc.if_else(from_old, both.column(c), pa.nulls(both.num_rows, both.schema.field(c).type))
    g = pa.table(cols).group_by(keys, use_threads=False).aggregate(
        [(c, acc.how(c)) for c in accs] + [(f"{c}__old", acc.how(c)) for c in accs])
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
    if not k or any(a.func not in RECOMPUTABLE or a.distinct for a in node.aggs) or nested.has_nested(d.schema):
        return None   # (Acero groups and joins no nested column: DuckDB does)
    if emitted is not None and any(d.column(col(i)).null_count or pa.types.is_floating(d.schema.field(col(i)).type)
                                   for i in range(k)):
        return None
    args = []
    for a in node.aggs:
        c = None if a.func == "COUNT_STAR" else a.args[0].sql
        if c is not None and (arrow_ops.column_index(c) is None or
                              (a.func in ("SUM", "AVG") and not arrow_ops.numeric(d.schema.field(c).type))):
            return None
        args.append(c)
    keys = [col(i) for i in range(k)]

    def agg(z: pa.Table, weight: int) -> pa.Table:
        z = consolidate_arrow(z) if z.num_rows else z
        z = z.filter(pc.greater(z.column(W), 0))
        cols = {c: canonical_float(z.column(c)) for c in keys}
        sums = acc.partial_arrow(node, z, args, narrow=True)
        specs = [(c, "sum") for c in sums]
        cols.update(sums)
        for i, (a, x) in enumerate(zip(node.aggs, args)):
            if a.func in ("MIN", "MAX"):
                cols[f"__x{i}"] = z.column(x)
                specs.append((f"__x{i}", a.func.lower()))
                if pa.types.is_floating(z.schema.field(x).type):   # Arrow's min and max skip NaN: count them
                    nan = pc.fill_null(pc.is_nan(z.column(x)), False)
                    cols[f"__nan{i}"] = nan.cast(pa.int64())
                    cols[f"__num{i}"] = pc.and_(pc.invert(nan), pc.is_valid(z.column(x))).cast(pa.int64())
                    specs += [(f"__nan{i}", "sum"), (f"__num{i}", "sum")]
        g = acc.widen(pa.table(cols).group_by(keys, use_threads=False).aggregate(specs))
        out = [g.column(c) for c in keys]
        for i, a in enumerate(node.aggs):
            if a.func in ("MIN", "MAX"):
                v = g.column(f"__x{i}_{a.func.lower()}")
                if f"__nan{i}" in cols:   # NaN is greater than every number, as in DuckDB and Spark
                    nans = pc.greater(g.column(f"__nan{i}_sum"), 0)
                    if a.func == "MIN":
                        nans = pc.and_(nans, pc.equal(g.column(f"__num{i}_sum"), 0))
                    v = pc.if_else(nans, pa.scalar(float("nan"), v.type), v)
                out.append(v)
            else:
                out.append(acc.final_arrow(a, i, lambda c: g.column(f"{c}_sum")))
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


# ---------------------------------------------------------------- on the driver
def retracts(op) -> bool:
    """Does ``op`` keep Python aggregates' accumulators in its own output's integral (retract mode)?"""
    return op.kind == "aggregate" and op.mode == "retract"


def local(lw, op, ins, reads, initial: bool = False) -> pa.Table:
    if accumulates(op):
        raise UnsupportedError("accumulating aggregates are lowered in two phases (partial, output)")
    if retracts(op):
        return lw.rule(rules.retract_sql(op.node), D=ins[0], O=reads[0])
    if initial:
        fast = aggregate_recompute(op.node, ins[0], None)
        if fast is not None:
            return fast
        return _groups_apart(lw, op, ins[0], lambda d: lw.rule(rules.aggregate_sql(op.node, initial=True), D=d))
    emitted = reads[1] if len(reads) > 1 else None   # it retracts what it emitted (circuit.keeps_output)
    fast = aggregate_recompute(op.node, ins[0], reads[0], emitted)
    if fast is not None:
        return fast
    if emitted is not None:
        return _groups_apart(lw, op, ins[0], lambda d: lw.rule(rules.aggregate_sql(op.node, emitted=True),
                                                               S=reads[0], D=d, O=emitted), emitted)
    return lw.rule(rules.aggregate_sql(op.node), S=reads[0], D=ins[0])


def _python_calls(node: Aggregate) -> List[str]:
    return [a.params[0].strip("'") for a in node.aggs if a.func == "UDAF"]


def _groups_apart(lw, op, d: pa.Table, rule, emitted: Optional[pa.Table] = None) -> pa.Table:
    """``rule(d)``; where a Python aggregate raises (a group's value cannot be computed), the change of each
    touched group on its own: a group whose rule raises is recorded as a row error (its key, the function's
    message) and left out of the view, its emitted rows retracted as stored (``emitted``: the op's own output,
    read by the change's keys; every aggregate with a Python call keeps it, ``planner.circuit.keeps_output``)."""
    calls = _python_calls(op.node)
    try:
        return rule(d)
    except DATA_ERRORS:
        if lw.careful or not calls:
            raise
    k = len(op.node.keys)
    names = field_labels(op.node)[:k]   # (the keys as the user wrote them, not the internal k0, ...)
    groups: dict = {}
    for i, r in enumerate(d.select([col(j) for j in range(k)]).to_pylist() if k else [{}] * d.num_rows):
        groups.setdefault(_key(r), (r, []))[1].append(i)
    old = emitted.to_pylist() if emitted is not None else []
    out = []
    for key, (values, rows) in groups.items():
        try:
            out.append(rule(d.take(pa.array(rows, pa.int64()))))
        except DATA_ERRORS as e:
            if lw.errors is not None:
                lw.errors.add(op.id, lw.op_views.get(op.id, []), ", ".join(f"{c}(...)" for c in calls),
                              first_line(e), [{n: values[col(j)] for j, n in enumerate(names)}], [1],
                              operator="GROUP BY")
            gone = [r for r in old if _key({c: r[c] for c in values}) == key and r[W] > 0]
            if gone:
                out.append(pa.Table.from_pylist([{**r, W: -r[W]} for r in gone], schema=emitted.schema))
    if not out:
        return rule(d.slice(0, 0))
    first = out[0].schema
    return pa.concat_tables([t.select(first.names).cast(first) for t in out])


def _key(row: dict) -> str:
    """A group's key values as one comparable text (a ROW or LIST key as its values)."""
    return repr([row[c] for c in sorted(row)])


def partial_local(lw, op, d: pa.Table) -> pa.Table:
    """The partial sums of change ``d`` per group."""
    fast = aggregate_partial(op.node, d)
    if fast is not None:
        return fast
    return lw.rule(rules.partial_sql(op.node), D=d)


def output_local(lw, op, partial: pa.Table, state: pa.Table, initial: bool = False) -> pa.Table:
    """The change from partial sums ``partial`` and the state rows of their groups ``state``."""
    accs = acc.columns(op.node)
    fast = aggregate_output(op.node, partial, state, accs, initial)
    if fast is not None:
        return fast
    if initial:
        return lw.rule(rules.output_sql(op.node, accs, initial=True), P=partial)
    return lw.rule(rules.output_sql(op.node, accs), S=state, P=partial)


# ---------------------------------------------------------------- on Spark
def spark(lw, op, ins, reads, initial: bool = False):
    if accumulates(op):
        raise UnsupportedError("accumulating aggregates are lowered in two phases (partial, output)")
    if retracts(op):
        return lw.rule(rules.retract_sql(op.node), D=ins[0], O=reads[0])
    if initial:
        return lw.rule(rules.aggregate_sql(op.node, initial=True), D=ins[0])
    if len(reads) > 1:
        return lw.rule(rules.aggregate_sql(op.node, emitted=True), D=ins[0], S=reads[0], O=reads[1])
    return lw.rule(rules.aggregate_sql(op.node), D=ins[0], S=reads[0])


def partial_spark(lw, op, d):
    return lw.rule(rules.partial_sql(op.node), D=d)


def output_spark(lw, op, partial, state, initial: bool = False):
    accs = acc.columns(op.node)
    if initial:
        return lw.rule(rules.output_sql(op.node, accs, initial=True), P=partial)
    return lw.rule(rules.output_sql(op.node, accs), P=partial, S=state)
