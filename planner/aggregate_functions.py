"""The aggregate functions beyond COUNT, SUM, AVG, MIN, MAX, STDDEV and VAR: what each takes and returns.

Each is recomputed per touched group from the group's stored rows (``planner.circuit.aggregate_mode``): none
can be updated from a running sum under deletes.  One whose value is a float computed by arithmetic (CORR,
COVAR, REGR, MEDIAN) retracts the row it emitted (``planner.circuit.keeps_output``).  Where DuckDB's result
depends on the order of the rows, the engine fixes one:

* ``ARG_MIN(a, b)`` / ``MIN_BY``: over the rows where neither ``a`` nor ``b`` is NULL (as DuckDB's), ``a`` of
  the row with the least ``b``; among rows with that ``b``, the least ``a`` (DuckDB takes the first row it
  meets).  ``ARG_MAX`` / ``MAX_BY``: the greatest ``b``, then the greatest ``a``.
* ``ANY_VALUE(x)`` is ``MIN(x)``: a value of the group, the same one whatever the order of the rows.
* ``MODE(x)``: the most frequent non-NULL value, the least of them on a tie (DuckDB's ``mode(x)`` takes one of
  them; ``MODE() WITHIN GROUP (ORDER BY x)`` is the same as the engine's).
* ``STRING_AGG(s, sep [ORDER BY k, ...])`` / ``LISTAGG``: the texts in the order of the keys, then of the texts
  themselves (without ORDER BY: in the texts' order); NULL texts are left out, and a key's NULLs come last.
* ``ARRAY_AGG(x [ORDER BY k, ...])`` / ``LIST``: the values (NULLs kept) in the order of the keys, then of the
  values themselves (without ORDER BY: in the values' order, NULLs last); NULL over no rows, as in DuckDB.
  ``ARRAY_AGG(DISTINCT x [ORDER BY x [DESC]])``: each value once (NULL too), in the values' order (PostgreSQL's
  rule: with DISTINCT, ORDER BY can only name the value).
* ``MAP_AGG(k, v [ORDER BY o, ...])`` (Trino's; DuckDB has none): a MAP of each non-NULL key to a value (NULLs
  kept), its entries sorted by key (the canonical form, ``sqlengine.nested``); rows with a NULL key are left out
  (as in Materialize), and NULL where no row has a key, as ARRAY_AGG over no rows.  A key given several values
  takes the value of the row last in the ORDER BY (as in Materialize's ``map_agg``), on a tie (or without ORDER
  BY) the greatest value, NULL only if all of them are (as Feldera's ``MAP(subquery)``: "the largest value
  wins"): a function of the group's rows, never of the order they came in.  Keys are of an exact scalar type: a
  REAL / DOUBLE key (-0.0 and 0.0 are one key to ``=``, NaN is none) and a nested one are rejected.

Spellings: ``EVERY`` is ``BOOL_AND``; ``COUNT_IF(p)`` is DuckDB's, a SUM of ``p`` as 1 and 0 (so NULL where
no row has a non-NULL ``p``); ``PERCENTILE_CONT(f) WITHIN GROUP (ORDER BY x)`` is ``QUANTILE_CONT(x, f)`` and
``PERCENTILE_DISC`` is ``QUANTILE_DISC``; ``MEDIAN(x)`` is ``QUANTILE_CONT(x, 0.5)``.  The quantiles take
integers and DOUBLEs (a DOUBLE result; DISC: the argument's type); DuckDB's over DECIMAL, REAL, text or dates
are rejected (Spark computes them in another type).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple, Type

from sqlglot import exp

from .nested_types import sort_key
from .types import INTEGERS, SqlType

NUMBERS = INTEGERS + ("REAL", "DOUBLE", "DECIMAL")
ORDERED = NUMBERS + ("VARCHAR", "DATE", "TIMESTAMP", "BOOLEAN")
LISTED = ORDERED + ("ARRAY", "STRUCT", "JSON")   # what ARRAY_AGG and MAP_AGG take as values (they order them)


@dataclass(frozen=True)
class AggregateFunction:
    name: str                        # the engine's name (rule SQL, plans)
    columns: int                     # arguments that are expressions over the rows
    accepts: Tuple[str, ...]         # base types the arguments may have (each)
    what: str                        # the arguments, for a message: "a number"
    result: Callable[[Sequence[SqlType]], SqlType]
    fraction: bool = False           # a constant fraction in [0, 1] follows the columns (QUANTILE_*)
    key: Optional[Tuple[Tuple[str, ...], str]] = None   # MAP_AGG: what its key (argument 1) may be, and its words
    typed: bool = False              # the arguments after the first (a FILTER's condition) give the result's type

    def argument(self, i: int) -> Tuple[Tuple[str, ...], str, bool]:
        """The base types argument ``i`` may have, how a message names them, and whether it may be of a type the
        planner cannot tell (an untyped NULL)."""
        if self.key is not None and i == 1:
            return self.key[0], self.key[1], False
        return self.accepts, self.what, not (self.typed and i > 0)


DOUBLE = SqlType("DOUBLE")
BOOLEAN = SqlType("BOOLEAN")
BIGINT = SqlType("BIGINT")


def _first(types: Sequence[SqlType]) -> SqlType:
    return types[0].with_nullable(True)


class MapAgg(exp.Expression, exp.AggFunc):
    """``MAP_AGG(k, v [ORDER BY ...])``, which sqlglot parses as a call of no class of its own: ``expressions``
    its arguments as written (:func:`as_engine_spells`; the binder checks them)."""
    arg_types = {"expressions": True}
    is_var_len_args = True


FUNCTIONS: Dict[Type[exp.Expression], AggregateFunction] = {
    exp.LogicalAnd: AggregateFunction("BOOL_AND", 1, ("BOOLEAN",), "a BOOLEAN", lambda t: BOOLEAN),
    exp.LogicalOr: AggregateFunction("BOOL_OR", 1, ("BOOLEAN",), "a BOOLEAN", lambda t: BOOLEAN),
    exp.BitwiseAndAgg: AggregateFunction("BIT_AND", 1, INTEGERS, "an integer", _first),
    exp.BitwiseOrAgg: AggregateFunction("BIT_OR", 1, INTEGERS, "an integer", _first),
    exp.BitwiseXorAgg: AggregateFunction("BIT_XOR", 1, INTEGERS, "an integer", _first),
    exp.ArgMin: AggregateFunction("ARG_MIN", 2, ORDERED, "values that can be ordered", _first),
    exp.ArgMax: AggregateFunction("ARG_MAX", 2, ORDERED, "values that can be ordered", _first),
    exp.Median: AggregateFunction("QUANTILE_CONT", 1, INTEGERS + ("DOUBLE",), "an integer or a DOUBLE",
                                  lambda t: DOUBLE),
    exp.PercentileCont: AggregateFunction("QUANTILE_CONT", 1, INTEGERS + ("DOUBLE",), "an integer or a DOUBLE",
                                          lambda t: DOUBLE, fraction=True),
    exp.PercentileDisc: AggregateFunction("QUANTILE_DISC", 1, INTEGERS + ("DOUBLE",), "an integer or a DOUBLE",
                                          _first, fraction=True),
    exp.CovarPop: AggregateFunction("COVAR_POP", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.CovarSamp: AggregateFunction("COVAR_SAMP", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.Corr: AggregateFunction("CORR", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrSlope: AggregateFunction("REGR_SLOPE", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrIntercept: AggregateFunction("REGR_INTERCEPT", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrR2: AggregateFunction("REGR_R2", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrAvgx: AggregateFunction("REGR_AVGX", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrAvgy: AggregateFunction("REGR_AVGY", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrSxx: AggregateFunction("REGR_SXX", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrSyy: AggregateFunction("REGR_SYY", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrSxy: AggregateFunction("REGR_SXY", 2, NUMBERS, "numbers", lambda t: DOUBLE),
    exp.RegrCount: AggregateFunction("REGR_COUNT", 2, NUMBERS, "numbers", lambda t: BIGINT.with_nullable(False)),
    exp.Mode: AggregateFunction("MODE", 1, ORDERED, "values that can be ordered", _first),
    exp.GroupConcat: AggregateFunction("STRING_AGG", 1, ("VARCHAR",), "text (cast it: CAST(x AS VARCHAR))",
                                       lambda t: SqlType("VARCHAR")),
    exp.ArrayAgg: AggregateFunction("ARRAY_AGG", 2, LISTED, "values that can be ordered (not a MAP)",
                                    lambda t: SqlType(t[1].sql + "[]"), typed=True),
    MapAgg: AggregateFunction("MAP_AGG", 3, LISTED, "values that can be ordered (not a MAP)",
                              lambda t: SqlType(f"MAP({t[1].sql}, {t[2].sql})"), typed=True,
                              key=(INTEGERS + ("DECIMAL", "VARCHAR", "DATE", "TIMESTAMP", "BOOLEAN"),
                                   "a key of an exact scalar type (an integer, DECIMAL, VARCHAR, DATE, TIMESTAMP or "
                                   "BOOLEAN)")),
}
BY_NAME = {f.name: f for f in FUNCTIONS.values()}
# spellings sqlglot parses as a function call of no class of its own, and what they are
ALIASES = {"EVERY": exp.LogicalAnd}


def as_engine_spells(tree: exp.Expression) -> exp.Expression:
    """``tree`` with ``EVERY(p)`` as ``BOOL_AND(p)``, ``MAP_AGG(...)`` as a :class:`MapAgg` and
    ``PERCENTILE_CONT(f) WITHIN GROUP (ORDER BY x)`` as ``QUANTILE_CONT(x, f)`` (and DISC), each keeping its
    position in the program; other WITHIN GROUP forms are left for the binder to reject."""
    def one(n: exp.Expression) -> exp.Expression:
        new = None
        if isinstance(n, exp.Anonymous) and n.name.upper() in ALIASES and len(n.expressions) == 1:
            new = ALIASES[n.name.upper()](this=n.expressions[0].copy())
        elif isinstance(n, exp.Anonymous) and n.name.upper() == "MAP_AGG":
            new = MapAgg(expressions=[as_engine_spells(a.copy()) for a in n.expressions])
        elif isinstance(n, exp.WithinGroup) and isinstance(n.this, exp.Mode) and n.this.this is None and \
                isinstance(n.expression, exp.Order) and len(n.expression.expressions) == 1 and \
                not n.expression.expressions[0].args.get("desc"):   # MODE() WITHIN GROUP (ORDER BY x)
            new = exp.Mode(this=n.expression.expressions[0].this.copy())
        elif isinstance(n, exp.WithinGroup) and isinstance(n.this, (exp.PercentileCont, exp.PercentileDisc)) and \
                isinstance(n.expression, exp.Order) and len(n.expression.expressions) == 1 and \
                not n.expression.expressions[0].args.get("desc") and n.this.args.get("expression") is None:
            new = type(n.this)(this=n.expression.expressions[0].this.copy(), expression=n.this.this.copy())
        if new is None:
            return n
        new.meta.update(n.meta)
        return new
    return tree.transform(one, copy=False)


def lookup(n: exp.Expression) -> Optional[AggregateFunction]:
    return FUNCTIONS.get(type(n))


RETRACTS = "'retract'"   # the last parameter of a call of a Python aggregate that has ``retract``


def retracts(a) -> bool:
    """Is ``a`` (an ``AggCall``) a call of a Python aggregate with ``retract(acc, *args)``, whose accumulator is
    kept per group and updated by each step's rows (``planner.circuit.aggregate_mode``: ``retract``)?"""
    return a.func == "UDAF" and RETRACTS in a.params


def step_function(name: str) -> str:
    """The SQL name of the function that applies a step's rows of a group to its stored accumulator of the
    Python aggregate ``name`` (``sqlengine.executor.backends.python_calls.step_call``)."""
    return f"__step_{name.strip(chr(39))}"


def ordered_list(value: str, cond: str, order: Sequence[str], distinct: bool = False) -> str:
    """DuckDB's LIST of ``value`` over the rows meeting ``cond``, sorted by ``order`` (``x ASC NULLS LAST``
    items; ``sqlengine.executor.backends.spark`` lowers this very form): ARRAY_AGG's, and MAP_AGG's entries."""
    return f"ARRAY_AGG({'DISTINCT ' if distinct else ''}{value} ORDER BY {', '.join(order)}) FILTER (WHERE {cond})"


def last_per_key(entries: str) -> str:
    """The MAP of a LIST of (key, value) STRUCTs sorted by key: of each key's run of entries, the last."""
    return (f"MAP_FROM_ENTRIES(LIST_FILTER({entries}, lambda __e, __i: CASE WHEN __i = LEN({entries}) THEN TRUE "
            f"ELSE ({entries})[__i + 1].key <> __e.key END))")


def call_sql(func: str, args: Sequence[str], params: Sequence[str], distinct: bool = False,
             nested: Sequence[bool] = ()) -> str:
    """The call of aggregate ``func`` (``distinct``: over distinct values) over argument columns ``args`` and
    constants ``params`` as the delta rules write it (DuckDB's dialect; ``sqlengine.executor.backends.spark``
    lowers it to Spark's), with the order fixed where DuckDB's result depends on the order of the rows (see the
    module's text).  ``nested``: which arguments are of a type Spark orders otherwise than DuckDB
    (``planner.nested_types.ORDERED_OTHERWISE``), ordered by their DuckDB sort keys."""
    nested = list(nested) + [False] * (len(args) - len(nested))
    by = [sort_key(a) if n else a for a, n in zip(args, nested)]   # what orders each argument
    if func in ("ARG_MIN", "ARG_MAX"):
        a, b = args
        return f"{func}({a}, CASE WHEN {b} IS NOT NULL AND {a} IS NOT NULL THEN ROW({b}, {a}) END)"
    if func in ("CORR", "REGR_SLOPE"):   # NaN for no variance in DuckDB (Spark: NULL)
        return (f"CASE WHEN REGR_COUNT({', '.join(args)}) > 0 THEN COALESCE({func}({', '.join(args)}), "
                f"CAST('nan' AS DOUBLE)) END")
    if func == "REGR_COUNT":
        return f"CAST(REGR_COUNT({', '.join(args)}) AS BIGINT)"
    if func == "MODE":   # the most frequent value, the least of those on a tie (Spark: MODE(x, TRUE))
        return f"MODE() WITHIN GROUP (ORDER BY {args[0]} ASC NULLS LAST)"
    if func == "UDAF":   # a Python aggregate over the group's rows (those meeting its FILTER, the others NULL), in
        cond, *cols = args   # DuckDB's order of the rows on both executors (Spark orders a NULL field first)
        row = f"CASE WHEN {cond} THEN ROW({', '.join(cols)}) END"
        return f"{params[0][1:-1]}({ordered_list(row, 'TRUE', [f'{sort_key(row)} ASC NULLS LAST'])})"
    if func == "ARRAY_AGG":   # in the keys' order, then the values': one order whatever the rows' order
        cond, value, *keys = args
        order = [f"{k} {d} NULLS LAST" for k, d in zip(by[2:], params)] + [f"{by[1]} ASC NULLS LAST"]
        return ordered_list(value, cond, order, distinct)
    if func == "MAP_AGG":   # by key, then in the ORDER BY's order, then the values' (NULL first): each key's last
        cond, key, value, *keys = args
        order = [f"{key} ASC"] + [f"{k} {d} NULLS LAST" for k, d in zip(by[3:], params)] + \
            [f"{by[2]} ASC NULLS FIRST"]
        entries = ordered_list(f"STRUCT_PACK(key := {key}, value := {value})", f"({cond}) AND {key} IS NOT NULL",
                               order)
        return last_per_key(entries)
    if func == "STRING_AGG":   # in the keys' order, then the text's: one order whatever the rows' order
        sep, directions = params[0], params[1:]
        keys = [f"{k} {d} NULLS LAST" for k, d in zip(by[1:], directions)] + [f"{args[0]} ASC NULLS LAST"]
        return f"STRING_AGG({args[0]}, {sep} ORDER BY {', '.join(keys)})"
    return f"{func}({', '.join(list(args) + list(params))})"
