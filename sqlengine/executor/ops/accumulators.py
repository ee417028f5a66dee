"""The accumulating aggregate's state layout, defined once.

An accumulating aggregate (``op.mode == "accumulate"``: COUNT, SUM and AVG, no DISTINCT) keeps per group
additive sums instead of its input's rows.  A state row is the group's keys ``c0..c(k-1)`` followed by

* ``__cnt``: the sum of the weights (the group exists while it is not 0);
* per call ``i``: ``__s<i>``, the sum of ``x * w`` (SUM and AVG), and ``__n<i>``, the sum of ``w`` where ``x``
  is not NULL (COUNT, SUM and AVG);
* per MIN or MAX call ``i`` over an input that only gains rows (``planner.circuit.insert_only``): ``__min<i>`` or
  ``__max<i>``, the least or greatest ``x``;

added up on read (runs of partial sums; the least or greatest of the runs' MIN and MAX), and turned into the output row by :func:`final_sql` (the rules) or
:func:`final_arrow` (the Arrow fast path).  Integer sums are exact DECIMAL(38, 0), so they never wrap.

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE t (k INT, x INT); CREATE VIEW v AS SELECT k, COUNT(*), SUM(x), AVG(x) FROM t GROUP BY k")
>>> op = next(o for o in p.circuit.ops if o.kind == "aggregate")
>>> columns(op.node)
['__cnt', '__s1', '__n1', '__s2', '__n2']
>>> final_sql(op.node)[2]
'CASE WHEN __n2 > 0 THEN CAST(__s2 AS DOUBLE) / CAST(__n2 AS DOUBLE) END'
"""
from __future__ import annotations

from decimal import Decimal
from typing import Callable, Dict, List, Optional

import pyarrow as pa
import pyarrow.compute as pc

from planner.logical import Aggregate, col

from sqlengine.executor.schema import HUGE, HUGE_SQL, INTEGER_BASES
from sqlengine.zset import W

COUNT = "__cnt"        # the sum of the weights of the group's rows
PREFIX = "__"          # every accumulator's name starts with it (no data column's does)
SUM_PREFIX = "__s"     # the sum accumulators' names: __s<i>


def sum_of(i: int) -> str:
    """The accumulator of call ``i``'s sum of ``x * w``."""
    return f"{SUM_PREFIX}{i}"


def count_of(i: int) -> str:
    """The accumulator of call ``i``'s sum of ``w`` where ``x`` is not NULL."""
    return f"__n{i}"


def extreme_of(i: int, func: str) -> str:
    """The accumulator of MIN or MAX call ``i`` (``func``): its least or greatest value."""
    return f"__{func.lower()}{i}"


def extreme(name: str) -> str:
    """``MIN`` or ``MAX`` for the accumulator of a MIN or MAX call, else ``""`` (a sum)."""
    return "MIN" if name.startswith("__min") else "MAX" if name.startswith("__max") else ""


def is_accumulator(name: str) -> bool:
    return name.startswith(PREFIX)


def is_count(name: str) -> bool:
    """Is accumulator ``name`` a count (0, not NULL, for a group without rows)?"""
    return name == COUNT or name.startswith("__n")


def columns(node: Aggregate) -> List[str]:
    """The accumulators of ``node``'s state, in the order of its columns after the keys."""
    out = [COUNT]
    for i, a in enumerate(node.aggs):
        if a.func == "COUNT":
            out.append(count_of(i))
        elif a.func in ("SUM", "AVG"):
            out += [sum_of(i), count_of(i)]
        elif a.func in ("MIN", "MAX"):
            out.append(extreme_of(i, a.func))
    return out


def acc_type(arg: pa.DataType) -> pa.DataType:
    """The accumulator type of SUM/AVG over ``arg``: exact DECIMAL(38, s) for integers and decimals."""
    if pa.types.is_integer(arg):
        return HUGE
    if pa.types.is_decimal(arg):
        return pa.decimal128(38, arg.scale)
    return pa.float64()


def state_fields(node: Aggregate, types: List[pa.DataType]) -> List[pa.Field]:
    """The fields of the state of ``node`` over an input of column ``types``: keys, then :func:`columns`."""
    fields = [pa.field(col(i), types[i]) for i in range(len(node.keys))] + [pa.field(COUNT, pa.int64())]
    for i, a in enumerate(node.aggs):
        if a.func == "COUNT":
            fields.append(pa.field(count_of(i), pa.int64()))
        elif a.func in ("SUM", "AVG"):
            arg = types[int(a.args[0].sql[1:])]
            fields += [pa.field(sum_of(i), acc_type(arg)), pa.field(count_of(i), pa.int64())]
        elif a.func in ("MIN", "MAX"):
            fields.append(pa.field(extreme_of(i, a.func), types[int(a.args[0].sql[1:])]))
    return fields


def integer_column(node: Aggregate, sql: str) -> bool:
    """Is aggregate argument ``sql`` an integer column of the input (its SUM is an exact BIGINT)?"""
    fields = node.input.fields
    return (sql.startswith("c") and sql[1:].isdigit() and int(sql[1:]) < len(fields)
            and fields[int(sql[1:])].type.base in INTEGER_BASES)


def integer_sums(node: Aggregate) -> List[str]:
    """The accumulators of the integer SUMs: a group's total may not fit the BIGINT result."""
    return [sum_of(i) for i, a in enumerate(node.aggs) if a.func == "SUM" and integer_column(node, a.args[0].sql)]


# ---------------------------------------------------------------- in SQL (the rules, delta_rules)
def partial_sql(node: Aggregate) -> List[str]:
    """The select items of the partial sums of a change (grouped by its keys), in :func:`columns`' order."""
    parts = [f"SUM({W}) AS {COUNT}"]
    for i, a in enumerate(node.aggs):
        if a.func == "COUNT_STAR":
            continue
        x = a.args[0].sql
        if a.func in ("MIN", "MAX"):   # (the change only inserts: insert_only)
            parts.append(f"{a.func}(CASE WHEN {W} > 0 THEN {x} END) AS {extreme_of(i, a.func)}")
            continue
        nn = f"SUM(CASE WHEN ({x}) IS NOT NULL THEN {W} ELSE 0 END) AS {count_of(i)}"
        if integer_column(node, x):
            x = f"CAST({x} AS {HUGE_SQL})"
        parts += [nn] if a.func == "COUNT" else [f"SUM(({x}) * {W}) AS {sum_of(i)}", nn]
    return parts


def total_sql(c: str) -> str:
    """The select item adding up accumulator ``c`` over a group's rows (the least or greatest for a MIN or MAX)."""
    if extreme(c):
        return f"{extreme(c)}({c}) AS {c}"
    return f"COALESCE(SUM({c}), 0) AS {c}" if is_count(c) else f"SUM({c}) AS {c}"


def added_sql(c: str, old: str, new: str) -> str:
    """The select item adding accumulator ``c`` of relation ``new`` to that of ``old`` (NULL: none)."""
    if is_count(c):
        return f"COALESCE({old}.{c}, 0) + {new}.{c} AS {c}"
    both = {"MIN": f"LEAST({old}.{c}, {new}.{c})", "MAX": f"GREATEST({old}.{c}, {new}.{c})"}.get(
        extreme(c), f"{old}.{c} + {new}.{c}")
    return f"CASE WHEN {old}.{c} IS NULL THEN {new}.{c} WHEN {new}.{c} IS NULL THEN {old}.{c} " \
           f"ELSE {both} END AS {c}"


def final_sql(node: Aggregate, pre: str = "") -> List[str]:
    """Each call's result from a group's totals (their columns prefixed ``pre``)."""
    out = []
    for i, a in enumerate(node.aggs):
        s, n = pre + sum_of(i), pre + count_of(i)
        if a.func == "COUNT_STAR":
            out.append(pre + COUNT)
        elif a.func in ("MIN", "MAX"):
            out.append(pre + extreme_of(i, a.func))
        elif a.func == "COUNT":
            out.append(n)
        elif a.func == "SUM":
            out.append(f"CASE WHEN {n} > 0 THEN {s} END")
        else:
            # in DOUBLE on both executors (Spark divides a DECIMAL sum in DECIMAL), so that the old value
            # recomputed from the stored sums has the bits that were emitted
            out.append(f"CASE WHEN {n} > 0 THEN CAST({s} AS DOUBLE) / CAST({n} AS DOUBLE) END")
    return out


# ---------------------------------------------------------------- in Arrow (the fast paths, arrow_ops)
def weighted(xs, w, narrow: bool = False):
    """x * w for SUM/AVG: exact DECIMAL(38, 0) for integers (a sum that leaves BIGINT is a row error, never a
    wrapped value), DOUBLE for floating point.  ``narrow``: integers stay BIGINT when the sum of every |x * w|
    is below 2^62, so that no sum of them per group can wrap (summed in BIGINT, then :func:`widen`ed: much
    cheaper than summing DECIMALs over a big change)."""
    if pa.types.is_integer(xs.type):
        try:
            prod = pc.multiply_checked(xs.cast(pa.int64()), w)
        except pa.ArrowInvalid:   # |x * w| beyond BIGINT (a weight above 1): exact in Python
            return pa.array([None if x is None else Decimal(x * n) for x, n in zip(xs.to_pylist(), w.to_pylist())],
                            HUGE)
        if narrow and (pc.sum(pc.abs(prod.cast(pa.float64(), safe=False))).as_py() or 0) < NARROW_BOUND:
            return prod
        return prod.cast(HUGE)
    return pc.multiply(xs.cast(pa.float64()), w)


NARROW_BOUND = float(1 << 62)   # below BIGINT's limit by more than a DOUBLE sum's rounding of the bound


def widen(t: pa.Table) -> pa.Table:
    """``t`` with each integer sum accumulator (of ``weighted(..., narrow=True)``, summed) in DECIMAL(38, 0)."""
    for i, f in enumerate(t.schema):
        if f.name.startswith(SUM_PREFIX) and pa.types.is_integer(f.type):
            t = t.set_column(i, f.name, t.column(i).cast(HUGE))
    return t


def partial_arrow(node: Aggregate, t: pa.Table, args: List[Optional[str]],
                  extremes: bool = False, narrow: bool = False) -> Dict[str, object]:
    """The accumulators of each row of ``t`` (to be summed per group, or for ``extremes`` the MIN and MAX calls'
    values of the inserted rows, to be reduced by :func:`how`), in :func:`columns`' order, for the calls that
    have them (``args``: each call's argument column, None for COUNT(*)).  ``narrow``: integer sums may be
    BIGINT (see :func:`weighted`); :func:`widen` the summed table."""
    w = t.column(W)
    out = {COUNT: w}
    zero = pa.scalar(0, pa.int64())
    for i, (a, x) in enumerate(zip(node.aggs, args)):
        if extremes and a.func in ("MIN", "MAX"):
            xs = t.column(x)
            out[extreme_of(i, a.func)] = pc.if_else(pc.greater(w, 0), xs, pa.nulls(len(xs), xs.type))
            continue
        if x is None or a.func not in ("COUNT", "SUM", "AVG"):
            continue
        xs = t.column(x)
        if a.func != "COUNT":
            out[sum_of(i)] = weighted(xs, w, narrow)
        out[count_of(i)] = pc.if_else(pc.is_valid(xs), w, zero)
    return out


def how(name: str) -> str:
    """The Arrow aggregation that adds up accumulator ``name`` over a group's rows."""
    return extreme(name).lower() or "sum"


def final_arrow(a, i: int, total: Callable[[str], object]):
    """Call ``a`` (number ``i``)'s result from its group's totals (``total(accumulator)``), for COUNT(*),
    COUNT, SUM, AVG and running MIN and MAX."""
    if a.func == "COUNT_STAR":
        return total(COUNT)
    if a.func in ("MIN", "MAX"):
        return total(extreme_of(i, a.func))
    if a.func == "COUNT":
        return total(count_of(i))
    s, n = total(sum_of(i)), total(count_of(i))
    if a.func == "AVG":
        s = pc.divide(s.cast(pa.float64()), n.cast(pa.float64()))
    return pc.if_else(pc.greater(n, 0), s, pa.nulls(len(n), s.type))
