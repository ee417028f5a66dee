"""Each operator's delta rule, written once: SQL over named relations, in the planner's dialect (DuckDB's).

An op's change in a step is the union (all) of the :class:`Term` s its rule gives.  A term reads named
relations: the op's input changes and the state it reads, each a Z-set of positional columns
``c0..c(n-1)`` plus the weight :data:`W`.  The names, per op kind:

* map: ``D``;
* join: ``DL``, ``DR`` (changes; a side that did not change has none) and ``LOLD``, ``ROLD`` (integrals as
  of the previous step);
* set operation: ``D0``, ``D1``, ``LOLD``, ``ROLD``;
* distinct, window, aggregate: ``D`` and ``S``; accumulating aggregate: ``D`` (partial sums), then ``P``
  (the partial sums) and ``S`` (its state).

Both executors run the same text: the driver through DuckDB over Arrow tables
(:mod:`sqlengine.executor.backends.duckdb`), Spark through sqlglot's transpiler over DataFrames registered as
views (:mod:`sqlengine.executor.backends.spark`).  Each adds only a compiler for its dialect and, on the driver,
Arrow fast paths for the shapes where they pay (:mod:`sqlengine.executor.arrow_ops`).

The rules use what both engines accept: ``SEMI``/``ANTI JOIN``, ``IS NOT DISTINCT FROM``, explicit column
lists (no ``BY NAME``, ``EXCLUDE`` or ``GROUP BY ALL``), ``UNNEST(range(n))`` (Spark: ``explode``).  State
reads may hold more rows than the change's keys touch (the driver prunes them by key hash, see
:mod:`sqlengine.state.cache`): every rule matches keys exactly itself.

``x`` renders a planner expression inside a rule: as is, or under ``TRY`` where the driver records the
rows on which it fails instead of failing the step (:mod:`sqlengine.executor.row_errors`).

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE t (k INT, v INT); CREATE VIEW v AS SELECT DISTINCT k FROM t")
>>> op = next(o for o in p.circuit.ops if o.kind == "distinct")
>>> print(distinct_sql(op.node))   # doctest: +NORMALIZE_WHITESPACE
WITH g AS (SELECT c0, SUM(o) AS o, SUM(__w) AS n FROM (SELECT x.c0, x.__w, x.__w AS o FROM S x SEMI JOIN
 (SELECT DISTINCT c0 FROM D q) t ON x.c0 IS NOT DISTINCT FROM t.c0 UNION ALL SELECT c0, __w, 0::BIGINT AS o
 FROM D) u GROUP BY c0) SELECT c0, ((CASE WHEN n > 0 THEN 1 ELSE 0 END) - (CASE WHEN o > 0 THEN 1 ELSE 0
 END))::BIGINT AS __w FROM g WHERE ((CASE WHEN n > 0 THEN 1 ELSE 0 END) - (CASE WHEN o > 0 THEN 1 ELSE 0
 END))::BIGINT != 0
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, List, Optional, Sequence, Tuple

import sqlglot
from sqlglot import exp

from planner import aggregate_functions
from planner.bind import DIALECT
from planner.bind_window import total_order
from planner.circuit import FLOATS
from planner.errors import UnsupportedError
from planner.logical import Aggregate, Filter, Join, Project, Unnest, Window, col
from planner.nested_types import ORDERED_OTHERWISE, marked, sort_key
from planner.types import typed_null

from sqlengine.executor.arrow_ops import column_index
from sqlengine.executor.ops import accumulators as acc
from sqlengine.zset import W

AGG_FUNCS = {"COUNT", "SUM", "AVG", "MIN", "MAX", "STDDEV_SAMP", "STDDEV_POP", "VAR_SAMP", "VAR_POP"}


def as_is(sql: str) -> str:
    return sql


def under_try(sql: str) -> str:
    return f"TRY({sql})"


Render = Callable[[str], str]


@dataclass(frozen=True)
class Term:
    """One term of a rule: ``sql`` over named relations.  ``join``: the term is the inner join (keys and
    residual) of relations ``(left, right)``, which the driver may run on Arrow instead."""

    sql: str
    join: Optional[Tuple[str, str]] = None


# ---------------------------------------------------------------- pieces
def cols(n: int, start: int = 0) -> List[str]:
    return [col(i) for i in range(start, start + n)]


def one_zero(fields, n: int) -> List[str]:
    """The first ``n`` columns of an op that emits one row for values SQL finds equal (group keys, DISTINCT rows),
    a float one with its zeros made 0.0: -0.0 and 0.0 are one group, and which of the two a GROUP BY returns
    depends on the order of the rows, so what the op emits and later retracts would differ (a Z-set keeps the
    sign of a zero, see ``sqlengine.zset.with_zero_signs``)."""
    return [f"({col(i)} + CAST(0 AS {f.type.base})) AS {col(i)}" if f.type.base in FLOATS else col(i)
            for i, f in zip(range(n), fields)]


def zero_sign(column: str) -> str:
    """Whether the float ``column`` is -0.0 (NULL unless it is a zero): grouped by beside the column where rows are
    summed per row, since GROUP BY makes -0.0 and 0.0 one value and a Z-set row keeps its own
    (``sqlengine.zset.with_zero_signs``)."""
    return f"CASE WHEN {column} = 0 THEN CAST({column} AS VARCHAR) LIKE '-%' END"


def listed(items: Sequence[str]) -> str:
    return ", ".join(items)


def null_safe_eq(a: str, b: str) -> str:
    return f"{a} IS NOT DISTINCT FROM {b}"


def _key(side: str, c: str, maps: Sequence[str] = ()) -> str:
    """Column ``c`` (of relation ``side``, if given) as a key: a MAP (of ``maps``) by its entries (canonical maps
    are sorted by key): Spark takes no DISTINCT of a MAP and compares none, and its GROUP BY of a MAP read from a
    file turns the MAP's NULL values into other values."""
    ref = f"{side}.{c}" if side else c
    return f"map_entries({ref})" if c in maps else ref


def _matching(x: str, t: str, names: Sequence[str], maps: Sequence[str] = ()) -> str:
    return " AND ".join(null_safe_eq(_key(x, c, maps), _key(t, c, maps)) for c in names)


def _grouped(fields, k: int) -> Tuple[List[str], List[str], str]:
    """An aggregate's first ``k`` columns (of ``fields``) as its group keys: (the MAP ones, the keys as selected,
    the GROUP BY clause): a MAP key grouped by its entries (:func:`_key`), a float one with its zeros made 0.0
    (:func:`one_zero`)."""
    keys = cols(k)
    maps = [c for c, f in zip(keys, fields) if f.type.base == "MAP"]
    selected = [f"map_from_entries(map_entries({c})) AS {c}" if c in maps else e
                for c, e in zip(keys, one_zero(fields, k))]
    return maps, selected, f" GROUP BY {listed(_key('', c, maps) for c in keys)}" if k else ""


def semi(rows: str, keys: Sequence[str], probe: str, columns: Sequence[str], maps: Sequence[str] = ()) -> str:
    """``columns`` of the rows of ``rows`` (a relation or a subquery) whose ``keys`` equal, NULL-safely, those
    of a row of ``probe``; all of them without keys.  A key of ``maps`` (a MAP) is compared by its entries
    (canonical maps are sorted by key): Spark takes no DISTINCT of a MAP and compares none."""
    if not keys:
        return f"SELECT {listed(columns)} FROM {rows} x"
    distinct = [f"{_key('', k, maps)} AS {k}" if k in maps else k for k in keys]   # (``t`` holds a MAP's entries)
    on = " AND ".join(null_safe_eq(_key("x", k, maps), f"t.{k}") for k in keys)
    return (f"SELECT {listed('x.' + c for c in columns)} FROM {rows} x SEMI JOIN "
            f"(SELECT DISTINCT {listed(distinct)} FROM {probe} q) t ON {on}")


@lru_cache(maxsize=4096)   # built every step: parse each once
def prefix_columns(sql: str, names: Tuple[str, ...], prefix: str) -> str:
    """``sql`` with its columns among ``names`` renamed ``prefix + name``."""
    e = sqlglot.parse_one(sql, read=DIALECT)
    names = set(names)
    for c in e.find_all(exp.Column):
        if c.name in names:
            c.set("this", exp.to_identifier(prefix + c.name))
    return e.sql(dialect=DIALECT)


def expanded(rows: str, columns: List[str], fields=()) -> str:
    """``columns`` of the rows of ``rows`` with positive consolidated weight, each repeated weight times.  A float
    column (``fields``: the columns' fields) is grouped by the sign of its zeros too: GROUP BY makes -0.0 and 0.0
    one value, and a row keeps its own (``sqlengine.zset.with_zero_signs``).  A MAP column is grouped by its
    entries: Spark 4's GROUP BY of a MAP read from a file turns its NULL values into other values."""
    if columns:
        sign = {c: (zero_sign(c), f.type.base) for c, f in zip(columns, fields) if f.type.base in FLOATS}
        maps = {c for c, f in zip(columns, fields) if f.type.base == "MAP"}
        out = [f"CASE WHEN {sign[c][0]} THEN CAST('-0.0' AS {sign[c][1]}) ELSE {c} END AS {c}" if c in sign else
               f"map_from_entries(map_entries({c})) AS {c}" if c in maps else c
               for c in columns]   # (Spark's GROUP BY makes a key's -0.0 0.0)
        keys = [f"map_entries({c})" if c in maps else c for c in columns]
        pos = (f"SELECT {listed(out)}, SUM({W})::BIGINT AS __n FROM {rows} "
               f"GROUP BY {listed(keys + [e for e, _ in sign.values()])} HAVING SUM({W}) > 0")
    else:
        pos = f"SELECT SUM({W})::BIGINT AS __n FROM {rows} HAVING SUM({W}) > 0"
    return f"SELECT {listed(columns) if columns else '1 AS __one'} FROM " \
           f"(SELECT *, UNNEST(range(__n)) AS __rep FROM ({pos}) p) e"


def old_and_new(state: str, change: str, keys: List[str], every: List[str], maps: Sequence[str] = ()) -> str:
    """CTEs ``s_old`` (the rows of ``state`` whose ``keys`` a row of ``change`` has; ``maps``: the keys that are
    MAPs) and ``s_new`` (``s_old`` plus ``change``), over columns ``every``."""
    return (f"WITH s_old AS ({semi(state, keys, change, every, maps)}), "
            f"s_new AS (SELECT {listed(every)} FROM s_old UNION ALL SELECT {listed(every)} FROM {change})")


# ---------------------------------------------------------------- linear
def map_sql(node, x: Render = as_is) -> str:
    if isinstance(node, Filter):
        return f"SELECT * FROM D WHERE ({x(node.predicate.sql)})"
    if isinstance(node, Project):
        return f"SELECT {listed([f'({x(e.sql)}) AS {col(i)}' for i, e in enumerate(node.exprs)] + [W])} FROM D"
    if isinstance(node, Unnest):
        return unnest_sql(node, x)
    raise UnsupportedError(f"linear node {type(node).__name__} has no delta rule")


def unnest_sql(node: Unnest, x: Render = as_is) -> str:
    """Each row of D once per element of its array, the element (or its fields) and its position appended;
    outer: a row with a NULL or empty array once, with NULLs.  The array is computed once per row and unnested
    in the select list beside ``range`` for the positions (two UNNESTs of one length zip), not in a LATERAL
    join: DuckDB decorrelates a LATERAL by joining on the correlated values, and that join takes -0.0 for 0.0."""
    n = len(node.input.fields)
    values = [f"struct_extract(u.__v, '{f}')" for f in node.fields_of] if node.fields_of else ["u.__v"]
    if node.ordinality:
        values.append("u.__i")
    out = [f"u.{col(i)}" for i in range(n)] + [f"{v} AS {col(n + j)}" for j, v in enumerate(values)] + [f"u.{W}"]
    arr, pos = "a.__a", "range(1, len(a.__a) + 1)"
    if node.outer:
        arr = "CASE WHEN len(a.__a) > 0 THEN a.__a ELSE [NULL] END"
        pos = f"CASE WHEN len(a.__a) > 0 THEN {pos} ELSE [NULL::BIGINT] END"
    arrays = f"(SELECT {listed(cols(n) + [W])}, ({x(node.expr.sql)}) AS __a FROM D) a"
    return (f"SELECT {listed(out)} FROM (SELECT a.*, UNNEST({arr}) AS __v, UNNEST({pos}) AS __i "
            f"FROM {arrays}) u")


# ---------------------------------------------------------------- bilinear
def join_sql(node: Join, left: str, right: str, x: Render = as_is, residual: bool = True) -> str:
    """The inner join of Z-sets ``left`` and ``right`` (weights multiply); ``residual=False`` leaves the
    residual condition out."""
    nl, nr = len(node.left.fields), len(node.right.fields)
    r = f"SELECT {listed([f'{col(j)} AS {col(nl + j)}' for j in range(nr)] + [f'{W} AS __w2'])} FROM {right}"
    if node.left_keys:
        lk = [f"({x(k.sql)}) AS __lk{i}" for i, k in enumerate(node.left_keys)]
        rk = [f"({x(k.sql)}) AS __rk{i}" for i, k in enumerate(node.right_keys)]
        eq = null_safe_eq if node.null_safe else (lambda a, b: f"{a} = {b}")
        cond = " AND ".join(eq(f"l.__lk{i}", f"r.__rk{i}") for i in range(len(lk)))
        frm = f"(SELECT *, {listed(lk)} FROM {left}) l JOIN (SELECT *, {listed(rk)} FROM ({r}) r0) r ON {cond}"
    else:
        frm = f"{left} l CROSS JOIN ({r}) r"
    where = f" WHERE ({x(node.residual.sql)})" if node.residual is not None and residual else ""
    return f"SELECT {listed(cols(nl + nr))}, l.{W} * r.__w2 AS {W} FROM {frm}{where}"


def join_rule(node: Join, dl: bool, dr: bool, x: Render = as_is) -> List[Term]:
    """d(A join B) = dA join B_old + dA join dB + A_old join dB (a side that did not change drops its terms),
    plus for outer, semi and anti joins the change of the rows without (or with) a match."""
    if node.kind in ("semi", "anti"):
        return [Term(padded_sql(node, dl, dr, True, "SEMI" if node.kind == "semi" else "ANTI", x))]
    out = []
    if dl:
        out.append(Term(join_sql(node, "DL", "ROLD", x), ("DL", "ROLD")))
        if dr:
            out.append(Term(join_sql(node, "DL", "DR", x), ("DL", "DR")))
    if dr:
        out.append(Term(join_sql(node, "LOLD", "DR", x), ("LOLD", "DR")))
    if node.kind in ("left", "full"):
        out.append(Term(padded_sql(node, dl, dr, True, "ANTI", x)))
    if node.kind in ("right", "full"):
        out.append(Term(padded_sql(node, dl, dr, False, "ANTI", x)))
    return out


def padded_sql(node: Join, dl: bool, dr: bool, left: bool, how: str, x: Render = as_is) -> str:
    """The change of one side's rows without (ANTI) or with (SEMI) a match in the other, recomputed (new
    minus old) for the join keys present in either change.  For outer joins the unmatched rows are padded
    with NULLs; semi and anti joins output the left columns only."""
    nl, nr = len(node.left.fields), len(node.right.fields)
    nk = len(node.left_keys)
    keys = [f"__k{i}" for i in range(nk)]
    lcols, rcols = cols(nl), cols(nr, nl)

    def lside(name):   # left rows with their key columns
        ks = [f"({x(k.sql)}) AS __k{i}" for i, k in enumerate(node.left_keys)]
        return f"SELECT {listed(lcols + [W] + ks)} FROM {name}"

    def rside(name):   # right rows renamed to joined positions, with their key columns
        ren = f"SELECT {listed([f'{col(j)} AS {col(nl + j)}' for j in range(nr)] + [W])} FROM {name}"
        ks = [f"({x(k.sql)}) AS __k{i}" for i, k in enumerate(node.right_keys)]
        return f"SELECT {listed(rcols + [W] + ks)} FROM ({ren}) r0"

    changes = ([f"SELECT {listed(keys)} FROM ({lside('DL')}) c" ] if dl else []) + \
              ([f"SELECT {listed(keys)} FROM ({rside('DR')}) c"] if dr else [])
    ctes = []
    if nk:
        ctes.append(f"touched AS (SELECT DISTINCT * FROM ({' UNION ALL '.join(changes)}) u)")

    def restrict(sql, columns):
        return semi(f"({sql})", keys, "touched", columns)

    a_cols, b_cols = (lcols, rcols) if left else (rcols, lcols)
    a_side, b_side = (lside, rside) if left else (rside, lside)
    a_old_src, b_old_src = ("LOLD", "ROLD") if left else ("ROLD", "LOLD")
    da, db = (dl, dr) if left else (dr, dl)
    a_all, b_all = a_cols + [W] + keys, b_cols + [W] + keys
    ctes += [f"a_old AS ({restrict(a_side(a_old_src), a_all)})", f"b_old AS ({restrict(b_side(b_old_src), b_all)})"]
    a_change, b_change = ("DL", "DR") if left else ("DR", "DL")
    a_new = f"SELECT {listed(a_all)} FROM a_old" + (f" UNION ALL {a_side(a_change)}" if da else "")
    b_new = f"SELECT {listed(b_all)} FROM b_old" + (f" UNION ALL {b_side(b_change)}" if db else "")
    ctes += [f"a_new AS ({a_new})", f"b_new AS ({b_new})"]
    b_data = b_cols + keys
    maps = [c for c, f in zip(b_cols, (node.right if left else node.left).fields) if f.type.base == "MAP"]

    def unmatched(a, b):
        # the other side's rows present (weight > 0): by key alone without a residual (a relation's rows have no
        # negative weight, so a key's sum is positive when one of its rows is), which never groups by a MAP or a
        # float of the rows; by the whole row when the residual reads it, or without keys
        # (a MAP of the row grouped by its entries, as every rule groups one: :func:`_key`)
        grouped = keys if node.residual is None and keys else b_data
        picked = [f"map_from_entries({_key('', c, maps)}) AS __b{c}" if c in maps else f"{c} AS __b{c}"
                  for c in grouped]
        pos = (f"SELECT {listed(picked)} FROM {b} GROUP BY {listed(_key('', c, maps) for c in grouped)} "
               f"HAVING SUM({W}) > 0")
        conds = [f"a.{k} = b.__b{k}" for k in keys]
        if node.residual is not None:
            conds.append(f"({prefix_columns(x(node.residual.sql), tuple(b_cols), '__b')})")
        return f"SELECT a.* FROM {a} a {how} JOIN ({pos}) b ON {' AND '.join(conds) or 'TRUE'}"

    def pad(sql, sign):
        if node.kind in ("semi", "anti"):
            items = lcols
        elif left:
            items = lcols + [f"{typed_null(f.type)} AS {c}" for f, c in zip(node.right.fields, rcols)]
        else:
            items = [f"{typed_null(f.type)} AS {c}" for f, c in zip(node.left.fields, lcols)] + rcols
        return f"SELECT {listed(items)}, {W} * {sign} AS {W} FROM ({sql}) m"

    return (f"WITH {listed(ctes)} {pad(unmatched('a_new', 'b_new'), 1)} "
            f"UNION ALL {pad(unmatched('a_old', 'b_old'), -1)}")


# ---------------------------------------------------------------- stateful
def setop_sql(node, d0: bool, d1: bool) -> str:
    """Multiplicities of the touched rows before and after, from both integrals; emits the difference."""
    cs = cols(len(node.fields))
    changes = [f"SELECT {listed(cs)} FROM D{i}" for i, d in enumerate((d0, d1)) if d]

    def tagged(rows, slot):
        return f"SELECT {listed(cs)}, " + listed([f"{W if i == slot else '0'}::BIGINT AS m{i}" for i in range(4)]) \
               + f" FROM {rows}"

    parts = [tagged(f"({semi(name, cs, 'touched', cs + [W])}) s{slot}", slot)
             for slot, name in ((0, "LOLD"), (1, "ROLD"))]
    parts += [tagged(f"D{i}", 2 + i) for i, d in enumerate((d0, d1)) if d]

    def mult(a, b):
        if node.op == "intersect":
            return f"LEAST({a}, {b})" if node.all else f"(CASE WHEN {a} > 0 AND {b} > 0 THEN 1 ELSE 0 END)"
        return f"GREATEST({a} - {b}, 0)" if node.all else f"(CASE WHEN {a} > 0 AND {b} <= 0 THEN 1 ELSE 0 END)"

    w = f"(GREATEST({mult('(m0 + m2)', '(m1 + m3)')}, 0) - GREATEST({mult('m0', 'm1')}, 0))::BIGINT"
    return (f"WITH touched AS (SELECT DISTINCT * FROM ({' UNION ALL '.join(changes)}) u), "
            f"g AS (SELECT {listed(cs)}, " + listed([f"SUM(m{i}) AS m{i}" for i in range(4)])
            + f" FROM ({' UNION ALL '.join(parts)}) v GROUP BY {listed(cs)}) "
            f"SELECT {listed(one_zero(node.fields, len(cs)))}, {w} AS {W} FROM g WHERE {w} != 0")


def distinct_sql(node) -> str:
    """+1 for rows whose weight turns positive, -1 for rows whose weight stops being positive."""
    cs = cols(len(node.fields))
    w = "((CASE WHEN n > 0 THEN 1 ELSE 0 END) - (CASE WHEN o > 0 THEN 1 ELSE 0 END))::BIGINT"
    old = semi("S", cs, "D", cs + [W, f"{W} AS o"])
    return (f"WITH g AS (SELECT {listed(cs)}, SUM(o) AS o, SUM({W}) AS n FROM ({old} UNION ALL "
            f"SELECT {listed(cs)}, {W}, 0::BIGINT AS o FROM D) u GROUP BY {listed(cs)}) "
            f"SELECT {listed(one_zero(node.fields, len(cs)))}, {w} AS {W} FROM g WHERE {w} != 0")


def distinct_grow_sql(node) -> str:
    """Over rows only inserted (``planner.circuit.grows``): +1 for the change's rows not among ``S``, the rows
    emitted before."""
    cs = cols(len(node.fields))
    new = f"SELECT DISTINCT {listed(cs)} FROM D WHERE {W} > 0"
    return (f"SELECT {listed('n.' + c for c in cs)}, CAST(1 AS BIGINT) AS {W} FROM ({new}) n "
            f"ANTI JOIN S x ON {_matching('n', 'x', cs)}")


@lru_cache(maxsize=1024)   # lowered every step: parse each call once
def ordered_as_duckdb(call: str, types: Tuple[str, ...]) -> str:
    """A window call (DuckDB SQL over columns of the base ``types``) whose ORDER BY keys of nested types are
    their DuckDB sort keys (``planner.nested_types.sort_key``), for Spark; a NULL value keeps a NULL key, so
    NULLS FIRST|LAST still applies to it.

    >>> print(ordered_as_duckdb("RANK() OVER (ORDER BY c1 DESC, c0)", ("INT", "ARRAY")))
    ... # doctest: +NORMALIZE_WHITESPACE
    RANK() OVER (ORDER BY __DUCKDB(CAST(CASE WHEN c1 IS NULL THEN NULL ELSE CREATE_SORT_KEY(c1, 'ASC NULLS LAST')
      END AS BLOB)) DESC, c0)
    """
    w = sqlglot.parse_one(call, read=DIALECT)
    order = w.args.get("order") if isinstance(w, exp.Window) else None
    if order is None:
        return call
    changed = False
    for o in order.expressions:
        x = o.this
        if marked(x):
            nested = x.expressions[0].to.this.name in ORDERED_OTHERWISE
            x = x.expressions[0]
        else:
            i = column_index(x.sql(dialect=DIALECT)) if isinstance(x, exp.Column) else None
            nested = i is not None and i < len(types) and types[i] in ORDERED_OTHERWISE
        if nested:
            o.set("this", sqlglot.parse_one(sort_key(x.sql(dialect=DIALECT)), read=DIALECT))
            changed = True
    return w.sql(dialect=DIALECT) if changed else call


def window_sql(node: Window, emitted: bool = False, spark: bool = False) -> str:
    """Recompute the window calls over the touched partitions: calls(old + d) - calls(old); with ``emitted``,
    calls(old + d) minus the touched partitions' rows in ``O``, what the op emitted before
    (``planner.circuit.keeps_output``).  ``spark``: nested ORDER BY keys ordered as DuckDB orders them
    (:func:`ordered_as_duckdb`)."""
    n = len(node.input.fields)
    cs = cols(n)
    if node.partition:
        pk = [f"({p.sql}) AS __p{i}" for i, p in enumerate(node.partition)]
        keys = [f"__p{i}" for i in range(len(pk))]
        old = semi(f"(SELECT *, {listed(pk)} FROM S)", keys, f"(SELECT {listed(pk)} FROM D)", cs + [W])
    else:
        old = f"SELECT {listed(cs + [W])} FROM S"
    calls = [total_order(c.sql, n) for c in node.calls]
    if spark:
        types = tuple(f.type.base for f in node.input.fields)
        calls = [ordered_as_duckdb(c, types) for c in calls]
    calls = [f"{c} AS {col(n + i)}" for i, c in enumerate(calls)]

    def compute(name, sign):
        return f"SELECT {listed(cs + calls)}, {sign}::BIGINT AS {W} FROM ({expanded(name, cs, node.input.fields)}) x"

    if emitted:   # the touched partitions' rows as emitted before, read from the op's own output ``O``
        outs = cols(n + len(node.calls))
        if node.partition:
            stored = semi(f"(SELECT *, {listed(pk)} FROM O)", keys, f"(SELECT {listed(pk)} FROM D)", outs + [W])
        else:
            stored = f"SELECT {listed(outs + [W])} FROM O"
        retract = f"SELECT {listed(outs)}, -{W} AS {W} FROM ({stored}) e"
    else:
        retract = compute("s_old", -1)
    return (f"WITH s_old AS ({old}), s_new AS (SELECT {listed(cs + [W])} FROM s_old UNION ALL "
            f"SELECT {listed(cs + [W])} FROM D) {compute('s_new', 1)} UNION ALL {retract}")


def _agg_call(a, k: int, i: int) -> str:
    if a.func == "COUNT_STAR":
        return f"COUNT(*) AS {col(k + i)}"
    if a.func in aggregate_functions.BY_NAME or a.func == "UDAF":
        args = [x.sql for x in a.args]
        if a.func == "QUANTILE_DISC" and a.args[0].type.base in aggregate_functions.INTEGERS:
            # an integer: the CAST to its own type tells the Spark lowering to pick the value exactly (Spark's
            # PERCENTILE_DISC goes through DOUBLE: 2^53 + 1 became 2^53)
            args[0] = f"CAST({args[0]} AS {a.args[0].type.sql})"
        nested = [x.type.base in ORDERED_OTHERWISE for x in a.args]
        return f"{aggregate_functions.call_sql(a.func, args, a.params, a.distinct, nested)} AS {col(k + i)}"
    if a.func not in AGG_FUNCS:
        raise UnsupportedError(f"aggregate {a.func} has no delta rule")
    call = f"{a.func}({'DISTINCT ' if a.distinct else ''}{a.args[0].sql})"
    if a.func in ("MIN", "MAX") and a.args[0].type.base in ORDERED_OTHERWISE:   # as DuckDB orders it, on Spark too
        call = f"ARG_{a.func}({a.args[0].sql}, {sort_key(a.args[0].sql)})"
    if a.func == "AVG" and a.args[0].type.base == "DECIMAL":   # an exact sum, divided in DOUBLE (as DuckDB does;
        d = "DISTINCT " if a.distinct else ""                     # Spark's AVG of a DECIMAL keeps 6 digits)
        call = f"CAST(SUM({d}{a.args[0].sql}) AS DOUBLE) / NULLIF(COUNT({d}{a.args[0].sql}), 0)"
    if a.func in ("STDDEV_POP", "VAR_POP"):   # one value: 0 in DuckDB even for inf or NaN (Spark: NaN)
        call = f"CASE WHEN COUNT({'DISTINCT ' if a.distinct else ''}{a.args[0].sql}) = 1 THEN CAST(0 AS DOUBLE) " \
               f"ELSE {call} END"
    return f"{call} AS {col(k + i)}"


def aggregate_sql(node: Aggregate, initial: bool = False, emitted: bool = False) -> str:
    """Recompute the touched groups from the integrated input: -agg(old) + agg(old + d); ``initial`` (the
    pipeline's first step, where a global aggregate emits its row for the empty input): agg(d).  With
    ``emitted``, the old rows are not recomputed: they are the touched groups' rows in ``O``, what the op
    emitted before (``planner.circuit.keeps_output``)."""
    k = len(node.keys)
    keys = cols(k)
    aggs = [_agg_call(a, k, i) for i, a in enumerate(node.aggs)]
    maps, selected, group = _grouped(node.input.fields, k)
    n_in = len(node.input.fields)

    def agg(name, weight):
        return (f"SELECT {listed(selected + aggs)}, {weight}::BIGINT AS {W} "
                f"FROM ({expanded(name, cols(n_in), node.input.fields)}) x{group}")

    if initial:
        return agg("D", 1)
    if emitted:   # the touched groups' rows as emitted before, read from the op's own output ``O``
        outs = cols(k + len(node.aggs))
        retract = f"SELECT {listed(outs)}, -{W} AS {W} FROM ({semi('O', keys, 'D', outs + [W], maps)}) e"
    else:
        retract = agg("s_old", -1)
    return f"{old_and_new('S', 'D', keys, cols(n_in) + [W], maps)} {agg('s_new', 1)} UNION ALL {retract}"


def retract_sql(node: Aggregate) -> str:
    """A retracting aggregate (``planner.circuit.aggregate_mode``: Python aggregates with ``retract``, and COUNTs;
    ``node`` is ``planner.incrementalize.kept_per_group``'s, whose hidden calls are a COUNT(*) and each Python
    aggregate's accumulator).  Per group of the change ``D``: its stored row in ``O`` (what the op emitted:
    keys, results, hidden count, pickled accumulators) retracted, and the row updated by ``D``'s rows (the
    counts added up; each accumulator given the group's rows by its step function,
    ``aggregate_functions.step_function``) inserted, unless the group's count falls to 0 (a global aggregate's
    one row stays)."""
    k = len(node.keys)
    keys = cols(k)
    n = len(node.aggs)
    states = [i for i, a in enumerate(node.aggs) if a.func == "UDAF_STATE"]
    count = n - len(states) - 1   # the hidden COUNT(*), after the visible calls
    udafs = [i for i, a in enumerate(node.aggs) if a.func == "UDAF"]
    d_cols = []
    for i, a in enumerate(node.aggs):
        if a.func == "COUNT_STAR":
            d_cols.append(f"SUM({W}) AS __d{i}")
        elif a.func == "COUNT":
            d_cols.append(f"SUM(CASE WHEN ({a.args[0].sql}) IS NOT NULL THEN {W} ELSE 0 END) AS __d{i}")
        elif a.func == "UDAF":
            cond, *args = [x.sql for x in a.args]
            row = f"ROW({listed([W] + args)})"
            d_cols.append(f"{aggregate_functions.ordered_list(row, cond, [f'{W} DESC'])} AS __d{i}")
        elif a.func != "UDAF_STATE":
            raise UnsupportedError(f"aggregate {a.func} is not kept per group")
    maps, selected, group = _grouped(node.input.fields, k)
    d = f"SELECT {listed(selected + d_cols)} FROM D{group}"
    outs = cols(k + n)
    on = _matching("d", "o", keys, maps) if k else "TRUE"
    steps = [f"{aggregate_functions.step_function(node.aggs[i].params[0])}(o.{col(k + s)}, d.__d{i}) AS __r{i}"
             for i, s in zip(udafs, states)]
    picked = [f"d.{c}" for c in keys] + [f"d.__d{i}" for i, a in enumerate(node.aggs) if a.func != "UDAF_STATE"]
    stored = f"(SELECT *, 1 AS __ow FROM ({expanded('O', outs, node.fields)}) x)"   # one row a group (O: runs)
    joined = (f"SELECT {listed(picked + [f'o.{c} AS __o{j}' for j, c in enumerate(outs)] + ['o.__ow'] + steps)} "
              f"FROM d LEFT JOIN {stored} o ON {on}")
    new = list(keys)
    for i, a in enumerate(node.aggs):
        if a.func in ("COUNT", "COUNT_STAR"):
            new.append(f"COALESCE(__o{k + i}, 0) + COALESCE(__d{i}, 0)")
        elif a.func == "UDAF":
            new.append(f"s.__r{i}.out")
        else:
            new.append(f"s.__r{udafs[states.index(i)]}.acc")
    exists = f" WHERE {new[k + count]} > 0" if k else ""
    return (f"WITH d AS ({d}), s AS ({joined}) "
            f"SELECT {listed([f'{e} AS {c}' for e, c in zip(new, outs)])}, CAST(1 AS BIGINT) AS {W} FROM s{exists} "
            f"UNION ALL SELECT {listed([f'__o{j} AS {c}' for j, c in enumerate(outs)])}, -__ow AS {W} FROM s "
            f"WHERE __ow IS NOT NULL")


# accumulate mode: state rows are (keys, accumulators), added up on read (the layout: ops.accumulators)
def partial_sql(node: Aggregate) -> str:
    """Per-group additive summary of a change ``D``: its accumulators (``accumulators.partial_sql``)."""
    k = len(node.keys)
    group = f" GROUP BY {listed(cols(k))}" if k else ""
    return f"SELECT {listed(one_zero(node.input.fields, k) + acc.partial_sql(node))} FROM D{group}"


def output_sql(node: Aggregate, accs: List[str], initial: bool = False) -> str:
    """-final(old) + final(old + partial) for the groups of partial sums ``P``, from state ``S``.

    With group keys, in one pass over the state: the old totals of ``P``'s groups (one aggregation of the state
    rows of their keys), joined with ``P``'s, each group then emits its old row (weight -1) and its new one
    (+1) through a join with a two-row table.  A union of the two totals reads the state twice on Spark, which
    inlines a CTE at each use.  ``P`` holds one row per group (an aggregate's partial sums, ``partial_sql``), so
    it is joined as it is: grouping it again would cost Spark a shuffle of every group."""
    k = len(node.keys)
    keys = cols(k)
    sums = [acc.total_sql(c) for c in accs]

    def total(name, weight):
        g = f"SELECT {listed(keys + sums)} FROM {name}" + \
            (f" GROUP BY {listed(keys)} HAVING SUM({acc.COUNT}) != 0" if k else "")
        outs = [f"{e} AS {col(k + i)}" for i, e in enumerate(acc.final_sql(node))]
        return f"SELECT {listed(keys + outs)}, {weight}::BIGINT AS {W} FROM ({g}) g"

    if initial:
        return total("P", 1)
    if not k:   # one group
        return f"{old_and_new('S', 'P', keys, keys + accs)} {total('s_new', 1)} UNION ALL {total('s_old', -1)}"
    group = f" GROUP BY {listed(keys)}"
    joined = (f"SELECT {listed([f'p.{c}' for c in keys] + [f'o.{c} AS o{c}' for c in accs] + [acc.added_sql(c, 'o', 'p') for c in accs])}"
              f" FROM p LEFT JOIN o ON {_matching('p', 'o', keys)}")
    both = [f"CASE WHEN g.{W} = 1 THEN {new} ELSE {old} END AS {col(k + i)}"
            for i, (new, old) in enumerate(zip(acc.final_sql(node), acc.final_sql(node, "o")))]
    return (f"WITH o AS (SELECT {listed(keys + sums)} FROM ({semi('S', keys, 'P', keys + accs)}) x{group}), "
            f"p AS (SELECT {listed(keys + accs)} FROM P), j AS ({joined}) "
            f"SELECT {listed(keys + both)}, g.{W} FROM j CROSS JOIN (SELECT 1::BIGINT AS {W} UNION ALL "
            f"SELECT -1::BIGINT AS {W}) g WHERE CASE WHEN g.{W} = 1 THEN {acc.COUNT} != 0 ELSE o{acc.COUNT} != 0 END")


def merge_sql(node: Aggregate, accs: List[str]) -> str:
    """Runs ``R`` of an accumulating aggregate's state merged into one: per group, the sums of its
    accumulators.  A merge of some of the runs may hold a group whose partial count is 0 while its sums are
    not (over an outer join, a padded row turned into a matched one): only a group with every accumulator 0
    goes."""
    k = len(node.keys)
    group = f" GROUP BY {listed(cols(k))}" if k else ""
    keep = " OR ".join(f"COALESCE(SUM({c}), 0) != 0" for c in accs if not acc.extreme(c))
    merged = [f"{acc.extreme(c) or 'SUM'}({c}) AS {c}" for c in accs]
    return f"SELECT {listed(cols(k) + merged)} FROM R{group} HAVING {keep}"
