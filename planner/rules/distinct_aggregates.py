"""Rule ``distinct_aggregates``: COUNT, SUM and AVG over DISTINCT values are kept by counting through a DISTINCT,
so that the aggregate accumulates instead of recomputing its touched groups from their rows.

An aggregate with ``COUNT(DISTINCT x)`` cannot keep a running sum: whether a new ``x`` counts depends on the
group's other rows.  Without this rule it reads, for each group a step touches, every row of the group (Nexmark
q15: every bid of the day).  With it, the values go through one :class:`Distinct` over rows ``(keys, values)``,
which emits a row when a value enters a group's set (its weight turns positive) and retracts it when it leaves;
the aggregate then counts (sums, averages) those rows as any accumulating COUNT/SUM/AVG does, beside the group's
own rows.  The work per step follows the change: the DISTINCT probes its state with the change's
``(group, value)`` pairs only, and the aggregate adds their ±1 to its sums.  This is Flink's split distinct
aggregation in the Z-set form: DBSP's ``distinct`` before a linear aggregate.

The aggregate's input becomes the union of

* the group's rows as they were, with ``__one`` = 1 (what COUNT(*) now counts) and NULL values for the sets;
* the DISTINCT's rows: the keys, NULLs for the other columns and ``__one``, and the value in its set's column.

Each call without DISTINCT reads what it read (NULL in the sets' rows, which it skips); each call over DISTINCT
values reads its set's column (NULL in every other row).  A value set is one argument: ``COUNT(DISTINCT x)`` and
``SUM(DISTINCT x)`` share one; a FILTER is already in the argument (the binder writes ``CASE WHEN p THEN x
END``).  A NULL never enters a set, as COUNT(DISTINCT) skips NULLs.  A group exists while it has rows, and its
sets' rows come from its rows, so they vanish with them.

It applies to an aggregate whose calls are COUNT, COUNT(*), SUM and AVG, SUM and AVG not over floats, and MIN
and MAX where the input only gains rows (``planner.circuit.insert_only``; not over floats or nested values): the
calls an aggregate accumulates; with at least one over DISTINCT values, when:

* no key and no DISTINCT argument is a float (``-0.0`` and ``0.0`` are one value) or a nested, JSON or BLOB value;
* no table under it has event time (the DISTINCT's state is not trimmed by the watermark).

>>> from planner import compile_program
>>> from planner.logical import format_plan
>>> p = compile_program("CREATE TABLE t (g INT, x INT, y INT);"
...     "CREATE VIEW v AS SELECT g, COUNT(*) AS n, COUNT(DISTINCT x) AS d FROM t GROUP BY g")
>>> print(format_plan(p.views["v"].plan))
Project c0 AS g, c1 AS n, c2 AS d  -> (g INT, n BIGINT, d BIGINT)
  Aggregate keys=[c0] aggs=[COUNT(c1), COUNT(c2)]  -> (k0 INT, agg0 BIGINT NOT NULL, agg1 BIGINT NOT NULL)
    UnionAll (2 inputs)  -> (k0 INT, __one INT, __v0 INT)
      Project c0 AS k0, 1 AS __one, CAST(NULL AS INT) AS __v0  -> (k0 INT, __one INT NOT NULL, __v0 INT)
        Scan t  -> (g INT, x INT, y INT)
      Project c0 AS k0, CAST(NULL AS INT) AS __one, c1 AS __v0  -> (k0 INT, __one INT, __v0 INT)
        Distinct  -> (k0 INT, a0 INT)
          Filter c1 IS NOT NULL  -> (k0 INT, a0 INT)
            Project c0 AS k0, c1 AS a0  -> (k0 INT, a0 INT)
              Scan t  -> (g INT, x INT, y INT)
"""
from __future__ import annotations

from typing import Dict, List

from ..circuit import FLOATS, INVERTIBLE, UNORDERED, event_time_under, insert_only, running_extreme
from ..logical import AggCall, Aggregate, Distinct, Expr, Filter, Node, Project, UnionAll, col
from ..types import BOOLEAN, SqlType, typed_null
from .exprs import cannot_fail, column_index
from .tree import with_inputs

ONE = "__one"             # 1 in the group's rows, NULL in the sets' rows: what COUNT(*) counts
VALUE = "__v"             # set t's values (NULL in every other row): column __v<t>
ONE_TYPE = SqlType("INT", False)
_NOT_VALUES = UNORDERED + ("BLOB",)   # (no key or value of a set: a float's two zeros, a nested value)


def distinct_aggregates(plan: Node, ctx=None) -> Node:
    """``plan`` with every eligible aggregate counting its DISTINCT values through a DISTINCT (module docstring)."""
    barriers = ctx.view_plan_ids() if ctx is not None else frozenset()
    tables = getattr(ctx, "tables", None) or {}
    memo: Dict[int, Node] = {}

    def visit(n: Node) -> Node:
        hit = memo.get(id(n))
        if hit is not None:
            return hit
        if id(n) in barriers:    # another view's plan, shared with it as it is (its rules already ran)
            out = n
        else:
            out = with_inputs(n, tuple(visit(c) for c in n.inputs)) if n.inputs else n
            if isinstance(out, Aggregate) and eligible(out, tables):
                out = split(out)
        memo[id(n)] = out
        return out

    return visit(plan)


def _value_type(t: SqlType) -> bool:
    return t.base not in _NOT_VALUES


def eligible(node: Aggregate, tables) -> bool:
    """Does the rule apply to ``node`` (module docstring)?"""
    if not any(a.distinct for a in node.aggs):
        return False
    grows = None   # (whether the input only gains rows: asked once, when a MIN or MAX needs it)
    for a in node.aggs:
        if running_extreme(a):
            grows = insert_only(node.input, tables) if grows is None else grows
            if not grows:
                return False
        elif a.func not in INVERTIBLE or a.params or a.filter is not None:
            return False
        if a.func in ("SUM", "AVG") and a.args[0].type.base in FLOATS:
            return False
        if a.distinct and (len(a.args) != 1 or not _value_type(a.args[0].type) or not cannot_fail(a.args[0].sql)):
            return False
    if not all(_value_type(k.type) for k in node.keys):
        return False
    return not event_time_under(node, tables)


def _value_sets(node: Aggregate) -> List[Expr]:
    """The argument of each value set, in the order of the calls that first name them."""
    sets: List[Expr] = []
    for a in node.aggs:
        if a.distinct and a.args[0] not in sets:
            sets.append(a.args[0])
    return sets


def _null(t: SqlType) -> Expr:
    return Expr(typed_null(t), t.with_nullable(True))


def split(node: Aggregate) -> Aggregate:
    """``node`` over the union of its rows and its value sets' DISTINCT rows (module docstring)."""
    source = node.input
    fields = source.fields
    width, k = len(fields), len(node.keys)
    sets = _value_sets(node)
    set_types = [arg.type.with_nullable(True) for arg in sets]
    set_names = tuple(f"{VALUE}{t}" for t in range(len(sets)))
    star = any(a.func == "COUNT_STAR" for a in node.aggs)
    keys = tuple(Expr(col(i), fields[i].type) for i in range(k))
    names = tuple(f.name for f in fields) + ((ONE,) if star else ()) + set_names

    rows = Project(source, tuple(Expr(col(i), f.type) for i, f in enumerate(fields))
                   + ((Expr("1", ONE_TYPE),) if star else ()) + tuple(_null(t) for t in set_types), names)
    branches = []
    for t, arg in enumerate(sets):
        value = arg.sql if column_index(arg.sql) is not None else f"({arg.sql})"
        values = tuple(arg if u == t else _null(ty) for u, ty in enumerate(set_types))
        branches.append(Project(Filter(source, Expr(f"{value} IS NOT NULL", BOOLEAN)), keys + values,
                                tuple(f.name for f in fields[:k]) + set_names))
    distinct = Distinct(branches[0] if len(branches) == 1 else UnionAll(tuple(branches)))
    padded = Project(distinct, keys + tuple(_null(f.type) for f in fields[k:])
                     + ((_null(ONE_TYPE),) if star else ())
                     + tuple(Expr(col(k + t), ty) for t, ty in enumerate(set_types)), names)
    union = UnionAll((rows, padded))

    first_value = width + star
    aggs = []
    for a in node.aggs:
        if a.distinct:
            t = sets.index(a.args[0])
            aggs.append(AggCall(a.func, (Expr(col(first_value + t), set_types[t]),), False, None, a.type))
        elif a.func == "COUNT_STAR":
            aggs.append(AggCall("COUNT", (Expr(col(width), ONE_TYPE),), False, None, a.type))
        else:
            aggs.append(a)
    return Aggregate(union, node.keys, tuple(aggs), node.names)
