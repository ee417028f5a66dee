"""Spark's backend: the operators' delta rules as lazy Spark plans.

``SparkBackend.lower(op, ins, reads)`` builds the lazy Spark plan of one op's change for one step (its kind's,
:mod:`sqlengine.executor.ops`), from the changes of its inputs (``ins``: DataFrames; an input of an op that
skips unchanged inputs whose change is empty this step is ``None``) and the state it reads (``reads``:
integrals as of the previous step, as unconsolidated unions of runs - every rule is linear or bilinear in
them, or consolidates them first).

The plans are the rules of :mod:`sqlengine.executor.delta_rules`, the ones the driver runs on DuckDB,
compiled to Spark SQL by sqlglot's transpiler plus the DuckDB meanings it does not carry over
(:func:`_to_spark_semantics`), and run by ``spark.sql`` over the inputs registered as temporary views for
the time Spark takes to analyze the query (:meth:`SparkBackend.rule`).  An op kind without a module raises
``UnsupportedError``.
"""
from __future__ import annotations

import itertools
import re
import threading
from functools import lru_cache, reduce
from typing import Dict, List, Optional, Sequence

import sqlglot
from sqlglot import exp
from pyspark.sql import DataFrame

from planner.bind import DIALECT
from planner.circuit import Op
from planner.semantics import nonzero_number

from sqlengine.executor import ops
from sqlengine.executor.backends import duckdb_eval, duckdb_text
from sqlengine.executor.backends.python_calls import register_spark

_TEXT = (exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT)


def _dow(x: exp.Expression) -> exp.Expression:       # Spark DAYOFWEEK: Sunday = 1 .. Saturday = 7
    return exp.Anonymous(this="DAYOFWEEK", expressions=[x])


_MICROS = {"HOUR": 3600000000, "MINUTE": 60000000, "SECOND": 1000000, "MILLISECOND": 1000}


def _boundaries_between(unit: str, a: exp.Expression, b: exp.Expression):
    """DuckDB's ``date_diff(unit, a, b)``: the unit boundaries crossed from ``a`` to ``b`` (Spark's DATEDIFF
    counts whole units: from 2024-02-29 to 2024-03-01 is 1 month in DuckDB, 0 in Spark; a week is 7 of the day
    boundaries crossed), or None where both agree (MICROSECOND)."""
    x, y = a.sql(dialect="spark"), b.sql(dialect="spark")
    unit = unit.rstrip("S") if unit.endswith("S") and unit != "S" else unit
    if unit in ("YEAR", "QUARTER", "MONTH"):
        per = {"YEAR": ("1", None), "QUARTER": ("4", "QUARTER"), "MONTH": ("12", "MONTH")}[unit]

        def index(v):
            return f"YEAR({v})" if per[1] is None else f"(YEAR({v}) * {per[0]} + {per[1]}({v}))"
        text = f"({index(y)} - {index(x)})"
    elif unit == "DAY":
        text = f"DATEDIFF(CAST({y} AS DATE), CAST({x} AS DATE))"
    elif unit == "WEEK":   # DuckDB: the day boundaries crossed, over 7 (toward zero)
        text = f"(DATEDIFF(CAST({y} AS DATE), CAST({x} AS DATE)) DIV 7)"
    elif unit in _MICROS:
        m = _MICROS[unit]

        def floor_div(v):
            u = f"UNIX_MICROS(CAST({v} AS TIMESTAMP))"
            return f"(({u} - PMOD({u}, {m})) DIV {m})"
        text = f"({floor_div(y)} - {floor_div(x)})"
    else:
        return None
    return exp.Paren(this=sqlglot.parse_one(f"CAST({text} AS BIGINT)", read="spark"))


def _int_literal(x: exp.Expression, ok) -> bool:
    value = x.this if isinstance(x, exp.Neg) else x
    if not (isinstance(value, exp.Literal) and value.is_int):
        return False
    return ok(-int(value.this) if isinstance(x, exp.Neg) else int(value.this))


def _duckdb_substring(s: exp.Expression, start: exp.Expression, length: exp.Expression) -> exp.Expression:
    """DuckDB's ``SUBSTRING(s, start, length)``: the characters at positions [a, a + length) (or [a + length, a)
    for a negative length), a = start, counted from the end for a negative start, and 0 for 0; Spark's reads a
    start of 0 as 1 and a negative length as none."""
    sql = lambda e: e.sql(dialect="spark")  # noqa: E731
    n = f"CHAR_LENGTH({sql(s)})"
    a = f"(CASE WHEN {sql(start)} > 0 THEN {sql(start)} WHEN {sql(start)} < 0 THEN {n} + {sql(start)} + 1 ELSE 0 END)"
    lo = f"GREATEST(CASE WHEN {sql(length)} >= 0 THEN {a} ELSE {a} + {sql(length)} END, 1)"
    hi = f"LEAST(CASE WHEN {sql(length)} >= 0 THEN {a} + {sql(length)} ELSE {a} END, {n} + 1)"
    text = (f"CASE WHEN {sql(s)} IS NULL OR {sql(start)} IS NULL OR {sql(length)} IS NULL THEN NULL "
            f"WHEN {hi} > {lo} THEN SUBSTRING({sql(s)}, {lo}, {hi} - {lo}) ELSE '' END")
    return exp.Paren(this=sqlglot.parse_one(text, read="spark"))


def _ieee_div(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """``a / b`` as DuckDB divides (in DOUBLE, IEEE 754), where Spark's ``/`` by zero raises (ANSI) or is NULL:
    ``COALESCE(TRY_DIVIDE(a, b), CASE WHEN b = 0 THEN a * +-inf END)``, the infinity's sign the zero's own
    (-0.0); ``a * inf`` is +-inf, or NaN for a = 0 and a = NaN, as ``a / 0`` is, and NULL where ``a`` or ``b``
    is."""
    negative = exp.Like(this=exp.cast(b.copy(), "STRING"), expression=exp.Literal.string("-%"))
    inf = exp.If(this=negative, true=exp.cast(exp.Literal.string("-Infinity"), "DOUBLE"),
                 false=exp.cast(exp.Literal.string("Infinity"), "DOUBLE"))
    by_zero = exp.Case(ifs=[exp.If(this=exp.EQ(this=b.copy(), expression=exp.Literal.number(0)),
                                   true=exp.Mul(this=a.copy(), expression=exp.Paren(this=inf)))])
    return exp.Coalesce(this=exp.Anonymous(this="TRY_DIVIDE", expressions=[a, b]), expressions=[by_zero])


def _int_index(i: exp.Expression) -> Optional[int]:
    """The value of an integer constant (as sqlglot keeps a list index: shifted to 0-based), else None."""
    if isinstance(i, exp.Neg):
        inner = _int_index(i.this)
        return None if inner is None else -inner
    return int(i.this) if isinstance(i, exp.Literal) and i.is_int else None


def _is_ordered_list(n: exp.Expression) -> bool:
    """Is ``n`` the ordered LIST of ``planner.aggregate_functions.ordered_list``?"""
    return isinstance(n, exp.Filter) and isinstance(n.this, exp.ArrayAgg) and isinstance(n.this.this, exp.Order)


def _array_agg(n: exp.Filter) -> str:
    """DuckDB's ``ARRAY_AGG([DISTINCT] x ORDER BY k d NULLS LAST|FIRST, ...) FILTER (WHERE c)``
    (``planner.aggregate_functions.ordered_list``) on Spark, as Spark SQL text: the rows' (keys, value) as
    structs (each distinct one once), sorted by a comparator of the keys, then their values (Spark's
    ``collect_list`` drops NULLs and keeps no order); NULL over no rows, as in DuckDB."""
    order = n.this.this
    value = order.this
    distinct = isinstance(value, exp.Distinct)
    if distinct:
        value = value.expressions[0]
    value = value.transform(_to_spark_semantics).sql(dialect="spark")
    keys = [(o.this.transform(_to_spark_semantics).sql(dialect="spark"), bool(o.args.get("desc")),
             bool(o.args.get("nulls_first"))) for o in order.expressions]
    cond = n.expression.this.transform(_to_spark_semantics).sql(dialect="spark")
    fields = ", ".join(f"'k{i}', {k}" for i, (k, _, _) in enumerate(keys))
    rows = f"COLLECT_LIST(NAMED_STRUCT({fields}, 'v', {value})) FILTER (WHERE {cond})"
    if distinct:   # (-0.0 is 0.0 and NaN is NaN to ARRAY_DISTINCT, as to DuckDB's DISTINCT)
        rows = f"ARRAY_DISTINCT({rows})"
    compare = "0"
    for i, (_, desc, nulls_first) in reversed(list(enumerate(keys))):
        lo, hi = ("1", "-1") if desc else ("-1", "1")
        first, last = ("-1", "1") if nulls_first else ("1", "-1")
        a, b = f"l.k{i}", f"r.k{i}"
        compare = (f"CASE WHEN {a} IS NULL AND {b} IS NULL THEN {compare} WHEN {a} IS NULL THEN {first} WHEN {b} IS "
                   f"NULL THEN {last} WHEN {a} < {b} THEN {lo} WHEN {a} > {b} THEN {hi} ELSE {compare} END")
    return f"(CASE WHEN SIZE({rows}) > 0 THEN TRANSFORM(ARRAY_SORT({rows}, (l, r) -> {compare}), s -> s.v) END)"


def _map_agg(n: exp.MapFromEntries) -> exp.Expression:
    """``planner.aggregate_functions.last_per_key`` of an ordered LIST of (key, value) entries on Spark: of each
    key's run of entries, the last (Spark's index is 0-based; an index past the end fails under ANSI: the CASE
    reads the next entry only before the last)."""
    entries = _array_agg(n.this.this)
    text = (f"MAP_FROM_ENTRIES(FILTER({entries}, (e, i) -> CASE WHEN i = SIZE({entries}) - 1 THEN TRUE "
            f"ELSE {entries}[i + 1].key <> e.key END))")
    return sqlglot.parse_one(text, read="spark")


_INTEGER_TYPES = (exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
                  exp.DataType.Type.BIGINT)


def _to_spark_semantics(n: exp.Expression) -> exp.Expression:
    """DuckDB meanings that sqlglot's transpiler does not carry over (type-dependent ones are fixed by the
    planner, see ``planner.semantics``): division by zero (:func:`_ieee_div`), day-of-week numbering, EPOCH,
    WEEK, ROUND_EVEN."""
    if isinstance(n, exp.Bracket) and isinstance(n.this, exp.Array) and len(n.expressions) == 1 and \
            not isinstance(n.expressions[0], exp.Slice) and \
            not (isinstance(n.expressions[0], exp.Literal) and n.expressions[0].is_string):
        # a list made in the expression (of scalars: no DuckDB UDF), indexed: DuckDB counts from 1, a negative
        # index from the end, and gives NULL out of range and at 0; sqlglot writes Spark's 0-based [] (which
        # fails out of range and reads a negative index otherwise), shifting a constant index by one and an
        # expression not at all.  So: DuckDB's index, looked up 1-based (an index DuckDB rounds, as a cast does)
        arr = n.this.transform(_to_spark_semantics)
        k = _int_index(n.expressions[0])
        if k is not None:
            k += 1
            return exp.Null() if k == 0 else exp.Anonymous(this="TRY_ELEMENT_AT", expressions=[
                arr, exp.Literal.number(k)])
        i = exp.Paren(this=n.expressions[0].transform(_to_spark_semantics))
        outside = sqlglot.parse_one("__i = 0 OR __i < -2147483647 OR __i > 2147483647", read="spark").transform(
            lambda x: i.copy() if isinstance(x, exp.Column) and x.name == "__i" else x)
        at = exp.Anonymous(this="TRY_ELEMENT_AT", expressions=[arr, exp.cast(exp.Round(this=i.copy()), "INT")])
        return exp.Case(ifs=[exp.If(this=outside, true=exp.Null())], default=at)
    if _is_ordered_list(n):
        return sqlglot.parse_one(_array_agg(n), read="spark")
    if isinstance(n, exp.MapFromEntries) and isinstance(n.this, exp.ArrayFilter) and _is_ordered_list(n.this.this):
        return _map_agg(n)
    if isinstance(n, exp.ArrayAgg) and isinstance(n.this, exp.Order):   # a Python aggregate's rows, in one order
        return exp.Anonymous(this="ARRAY_SORT", expressions=[
            exp.ArrayAgg(this=n.this.this.transform(_to_spark_semantics))])
    if isinstance(n, exp.Cast) and n.to.this in _TEXT and isinstance(n.this, exp.Cast) and \
            n.this.to.this in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT):   # (planner.semantics._as_text)
        udf = duckdb_text.REAL_TEXT if n.this.to.this == exp.DataType.Type.FLOAT else duckdb_text.DOUBLE_TEXT
        return exp.Anonymous(this=udf, expressions=[n.this.transform(_to_spark_semantics)])
    if isinstance(n, exp.Cast) and n.to.this == exp.DataType.Type.DECIMAL and isinstance(n.this, exp.Cast) and \
            n.this.to.this == exp.DataType.Type.DOUBLE:   # (planner.semantics): NaN and inf fail, as in DuckDB
        x = n.this.this.transform(_to_spark_semantics)
        bad = exp.or_(exp.Anonymous(this="ISNAN", expressions=[exp.cast(x.copy(), "DOUBLE")]),
                      exp.EQ(this=exp.Abs(this=exp.cast(x.copy(), "DOUBLE")),
                             expression=exp.cast(exp.Literal.string("Infinity"), "DOUBLE")))
        fail = exp.Anonymous(this="RAISE_ERROR", expressions=[exp.Literal.string(
            "Conversion Error: a NaN or an infinity cannot be cast to DECIMAL")])
        guarded = exp.Case(ifs=[exp.If(this=bad, true=fail)], default=exp.cast(x, "DOUBLE"))
        return exp.Cast(this=guarded, to=n.to.copy())
    if isinstance(n, exp.Cast) and n.to.this == exp.DataType.Type.FLOAT and isinstance(n.this, exp.Cast) and \
            n.this.to.this == exp.DataType.Type.DOUBLE:   # (planner.semantics): a finite DOUBLE beyond REAL fails
        x = exp.cast(n.this.this.transform(_to_spark_semantics), "DOUBLE")
        real = exp.cast(x.copy(), "FLOAT")
        inf = exp.cast(exp.Literal.string("Infinity"), "DOUBLE")
        bad = exp.and_(exp.NEQ(this=exp.Abs(this=x.copy()), expression=inf.copy()),
                       exp.EQ(this=exp.Abs(this=exp.cast(real.copy(), "DOUBLE")), expression=inf))
        fail = exp.Anonymous(this="RAISE_ERROR", expressions=[exp.Literal.string(
            "Conversion Error: a DOUBLE beyond REAL's range cannot be cast to REAL")])
        return exp.Case(ifs=[exp.If(this=bad, true=fail)], default=real)
    if isinstance(n, exp.DateDiff) and n.args.get("unit") is not None:   # (the rules are DuckDB's: boundaries)
        boundary = _boundaries_between(n.args["unit"].name.upper(), n.expression.transform(_to_spark_semantics),
                                       n.this.transform(_to_spark_semantics))
        if boundary is not None:
            return boundary
    if isinstance(n, exp.Extract) and n.this.name.upper() in ("SECOND", "SECONDS", "MILLISECOND", "MILLISECONDS",
                                                               "MICROSECOND", "MICROSECONDS"):
        t = n.expression.transform(_to_spark_semantics)   # DuckDB: whole seconds, and ms / us within the minute
        if n.this.name.upper().startswith("SECOND"):
            return exp.Anonymous(this="SECOND", expressions=[t])
        micros = sqlglot.parse_one(f"PMOD(UNIX_MICROS(CAST({t.sql(dialect='spark')} AS TIMESTAMP)), 60000000)",
                                   read="spark")
        if n.this.name.upper().startswith("MILLI"):
            return exp.Paren(this=exp.IntDiv(this=micros, expression=exp.Literal.number(1000)))
        return micros
    if isinstance(n, (exp.Ln, exp.Log)):   # DuckDB: NaN below 0, -inf at 0 (Spark: NULL); LOG(x) is base 10
        two = isinstance(n, exp.Log) and n.args.get("expression") is not None
        x = (n.expression if two else n.this).transform(_to_spark_semantics)
        if isinstance(n, exp.Ln):
            inner = exp.Ln(this=x)
        else:
            inner = exp.Log(this=n.this.transform(_to_spark_semantics) if two else exp.Literal.number(10), expression=x)
        return exp.Case(ifs=[
            exp.If(this=exp.LT(this=x.copy(), expression=exp.Literal.number(0)),
                   true=exp.cast(exp.Literal.string("NaN"), "DOUBLE")),
            exp.If(this=exp.EQ(this=x.copy(), expression=exp.Literal.number(0)),
                   true=exp.cast(exp.Literal.string("-Infinity"), "DOUBLE"))],
            default=inner)
    if isinstance(n, exp.Sign):   # DuckDB: SIGN(NaN) is 0 (Spark: NaN)
        x = n.this.transform(_to_spark_semantics)
        return exp.Case(ifs=[exp.If(this=exp.Anonymous(this="ISNAN", expressions=[exp.cast(x.copy(), "DOUBLE")]),
                                    true=exp.Literal.number(0))], default=exp.Sign(this=x))
    if isinstance(n, exp.Window) and isinstance(n.this, exp.Avg) and not isinstance(n.this.this, exp.Distinct):
        # AVG(x) OVER w as SUM / COUNT in DOUBLE, as DuckDB averages (Spark's AVG of a DECIMAL keeps 6 digits)
        x = n.this.this.transform(_to_spark_semantics)

        def over(f: exp.Expression) -> exp.Expression:
            w = n.copy()
            w.set("this", f)
            return w
        return exp.Paren(this=exp.Div(this=exp.cast(over(exp.Sum(this=x.copy())), "DOUBLE"),
                                      expression=exp.Nullif(this=over(exp.Count(this=x.copy())),
                                                            expression=exp.Literal.number(0))))
    if isinstance(n, exp.Substring) and n.args.get("length") is not None and not (
            _int_literal(n.args["start"], lambda v: v != 0) and _int_literal(n.args["length"], lambda v: v >= 0)):
        return _duckdb_substring(*(n.args[k].transform(_to_spark_semantics) for k in ("this", "start", "length")))
    if isinstance(n, exp.WithinGroup) and isinstance(n.this, exp.Mode):   # the least of the most frequent
        x = n.expression.expressions[0].this.transform(_to_spark_semantics)
        return exp.Anonymous(this="MODE", expressions=[x, exp.true()])
    if isinstance(n, exp.Anonymous) and n.name.upper() == "ROW":   # DuckDB's ROW(a, b): a struct
        return exp.Struct(expressions=[x.transform(_to_spark_semantics) for x in n.expressions])
    if isinstance(n, exp.PercentileCont):   # QUANTILE_CONT(x, f): Spark's exact, interpolated PERCENTILE
        return exp.Anonymous(this="PERCENTILE", expressions=[n.this.transform(_to_spark_semantics), n.expression])
    if isinstance(n, exp.PercentileDisc) and isinstance(n.this, exp.Cast) and n.this.to.this in _INTEGER_TYPES:
        # QUANTILE_DISC of an integer (marked by delta_rules): the value at 0-based index max(ceil(n * f) - 1, 0)
        # of the sorted non-NULL values, picked exactly (DuckDB's and PostgreSQL's discrete quantile)
        values = exp.Anonymous(this="ARRAY_SORT", expressions=[exp.ArrayAgg(this=n.this.transform(_to_spark_semantics))])
        size = exp.Anonymous(this="SIZE", expressions=[values.copy()])
        index = exp.Greatest(this=exp.Sub(this=exp.Ceil(this=exp.Mul(this=size, expression=n.expression.copy())),
                                          expression=exp.Literal.number(1)), expressions=[exp.Literal.number(0)])
        return exp.Anonymous(this="TRY_ELEMENT_AT", expressions=[values, exp.cast(exp.Add(
            this=index, expression=exp.Literal.number(1)), "INT")])
    if isinstance(n, exp.PercentileDisc):   # QUANTILE_DISC(x, f): a value of the column, as its type
        key = exp.Ordered(this=n.this.transform(_to_spark_semantics))
        return exp.WithinGroup(this=exp.Anonymous(this="PERCENTILE_DISC", expressions=[n.expression]),
                               expression=exp.Order(expressions=[key]))
    if isinstance(n, exp.Div) and not nonzero_number(n.expression):   # (a replaced node is not walked into)
        return _ieee_div(*(x.transform(_to_spark_semantics) for x in (n.this, n.expression)))
    unit = n.name.upper() if isinstance(n, exp.Extract) else None
    unit = {"DAYOFWEEK": "DOW", "WEEKDAY": "DOW", "DAYOFWEEKISO": "ISODOW", "DAYOFWEEK_ISO": "ISODOW"}.get(unit, unit)
    if unit == "DOW" or isinstance(n, exp.DayOfWeek):           # DuckDB: Sunday = 0 .. Saturday = 6
        return exp.Paren(this=exp.Sub(this=_dow(n.expression if unit else n.this), expression=exp.Literal.number(1)))
    if unit == "ISODOW" or isinstance(n, exp.DayOfWeekIso):     # Monday = 1 .. Sunday = 7
        x = n.expression if unit else n.this
        return exp.Paren(this=exp.Add(this=exp.Mod(this=exp.Paren(this=exp.Add(this=_dow(x), expression=exp.Literal.number(5))),
                                                   expression=exp.Literal.number(7)),
                                      expression=exp.Literal.number(1)))
    if unit == "EPOCH":
        micros = exp.Anonymous(this="UNIX_MICROS", expressions=[exp.cast(n.expression, "TIMESTAMP")])
        return exp.Paren(this=exp.Div(this=micros, expression=exp.Literal.number("1000000.0")))
    if isinstance(n, exp.Anonymous) and n.name.upper() == "ROUND_EVEN":
        return exp.Anonymous(this="BROUND", expressions=list(n.expressions))
    if isinstance(n, exp.Week) or unit == "WEEK":               # ISO week in both
        return exp.Anonymous(this="WEEKOFYEAR", expressions=[n.expression if unit else n.this])
    return n


_RELATION = re.compile(r"__rel_(\w+?)__")


_PROPAGATING = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT,
                exp.LTE, exp.DPipe)


def _simple(e: exp.Expression) -> bool:
    """A column or a constant (in parentheses, or a negative number): nothing that can fail."""
    while isinstance(e, exp.Paren) or isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal):
        e = e.this
    return isinstance(e, (exp.Column, exp.Literal, exp.Null, exp.Boolean))


def _right_operands_evaluated(tree: exp.Expression) -> exp.Expression:
    """``tree`` with the right operand of each NULL-propagating operator (arithmetic, comparisons, ``||``) that
    is computed evaluated even where the left one is NULL: Spark's generated code skips it then (the result is
    NULL either way), but DuckDB evaluates it, so a value it fails on (a failed cast, an overflow) fails the
    row there; on Spark it must fail the step (which then runs on the driver and records the row error), not
    pass silently.  ``a OP b`` becomes ``CASE WHEN b IS NULL THEN NULL ELSE a OP b END`` (the same value;
    Spark evaluates ``b`` once); likewise ``NULLIF(a, b)``, which compares ``a = b``.  Not in join conditions
    (an equi-join must stay one) nor over a subquery."""
    skip = {id(x) for j in tree.find_all(exp.Join) if j.args.get("on") is not None for x in j.args["on"].walk()}

    def force(n: exp.Expression) -> exp.Expression:
        if id(n) in skip or not isinstance(n, _PROPAGATING + (exp.Nullif,)) or _simple(n.expression) or \
                (isinstance(n.this, exp.Literal) and not isinstance(n.this, exp.Null)) or \
                n.expression.find(exp.Select, exp.Subquery) is not None:
            return n
        op = n.copy()
        op.set("this", n.this.copy().transform(force))
        op.set("expression", n.expression.copy().transform(force))
        # (NULLIF(a, b) is a where b is NULL; Spark compares a = b, skipping b where a is NULL)
        when_null = op.this.copy() if isinstance(n, exp.Nullif) else exp.Null()
        return exp.Case(ifs=[exp.If(this=exp.Is(this=op.expression.copy(), expression=exp.Null()), true=when_null)],
                        default=op)
    return tree.transform(force, copy=False)


def _arrow_of_duckdb_type(type_sql: str):
    """The data plane's Arrow type of a DuckDB type name (of a marked expression)."""
    from planner.nested_types import from_duckdb_name
    from sqlengine.types import arrow_type
    return arrow_type(from_duckdb_name(type_sql))


def spark_rule(sql: str) -> str:
    """A delta rule in Spark SQL, each relation it reads (not its own CTEs) named ``__rel_<name>__``."""
    return spark_rule_and_udfs(sql)[0]


@lru_cache(maxsize=None)
def spark_rule_and_udfs(sql: str):
    """:func:`spark_rule`, and the UDFs it calls that evaluate expressions with DuckDB (:mod:`.duckdb_eval`)."""
    tree = sqlglot.parse_one(sql, read=DIALECT)
    tree, udfs = duckdb_eval.extract(tree)
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for t in tree.find_all(exp.Table):
        if not t.alias:   # Spark reads `FROM D WHERE (x)` as `D` aliased `WHERE` with a column list `(x)`
            t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name)))
        if t.name not in ctes:
            t.set("this", exp.to_identifier(f"__rel_{t.name}__"))
    return _right_operands_evaluated(tree.transform(_to_spark_semantics)).sql(dialect="spark"), udfs


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.union(b), frames)


class SparkBackend:
    """Runs the delta rules on Spark; stateless apart from the SparkSession."""

    def __init__(self, spark, functions=None):
        """``functions``: the program's Python functions (``planner.user_functions``), registered on ``spark``."""
        self.spark = spark
        self._lock = threading.Lock()
        self._calls = itertools.count()
        self._tag = f"__sq{id(self) & 0xFFFFFF:x}"
        duckdb_text.register(spark)
        self.functions = functions or {}
        self.stats = None   # the engine's counters (sqlengine.executor.context.Stats), set by its owner
        register_spark(spark, functions or {})

    def rule(self, sql: str, **frames: DataFrame) -> DataFrame:
        """The plan of rule ``sql`` over ``frames``.  ``spark.sql`` analyzes eagerly, so the views it reads
        are dropped once it returns; their names are this lowerer's and this call's."""
        text, udfs = spark_rule_and_udfs(sql)
        if udfs:
            duckdb_eval.register(self.spark, udfs, _arrow_of_duckdb_type)
        with self._lock:
            n = next(self._calls)
            names: Dict[str, str] = {}
            for name in _RELATION.findall(text):
                if name not in names:
                    names[name] = f"{self._tag}_{n}_{name}"
                    frames[name].createOrReplaceTempView(names[name])
            try:
                return self.spark.sql(_RELATION.sub(lambda m: names[m.group(1)], text))
            finally:
                for view in names.values():
                    self.spark.catalog.dropTempView(view)

    def lower(self, op: Op, ins: List[DataFrame], reads: List[DataFrame], initial: bool = False) -> DataFrame:
        """The lazy plan of ``op``'s change on Spark: its kind's rule (:mod:`sqlengine.executor.ops`)."""
        return ops.of(op.kind).spark(self, op, ins, reads, initial)


def maps_as_entries(frames: Dict[str, DataFrame]) -> Dict[str, DataFrame]:
    """``frames`` with each MAP column as its entries (``map_entries``: an ARRAY of (key, value) ROWs), for the
    rules that compare whole rows (DISTINCT, set operations): Spark compares no MAP, and the engine's MAPs are
    canonical (sorted by key), so two are equal exactly when their entries are (:func:`entries_as_maps` turns
    the result back)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType
    out = {}
    for name, df in frames.items():
        if df is not None and any(isinstance(f.dataType, MapType) for f in df.schema.fields):
            df = df.select(*[F.map_entries(f.name).alias(f.name) if isinstance(f.dataType, MapType) else F.col(f.name)
                             for f in df.schema.fields])
        out[name] = df
    return out


def entries_as_maps(df: DataFrame, like: DataFrame) -> DataFrame:
    """``df`` with the columns that are MAPs in ``like`` (same names) made MAPs again."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType
    maps = {f.name for f in like.schema.fields if isinstance(f.dataType, MapType)}
    if not maps:
        return df
    return df.select(*[F.map_from_entries(c).alias(c) if c in maps else F.col(c) for c in df.columns])
