"""Typing bound expressions, and rewrites that keep DuckDB's meaning when the expression runs on Spark.

Programs are written in DuckDB's dialect and checked against DuckDB, but run on
Spark, whose semantics differ for a few operations on typed values.  Where the
difference depends on operand types, it is fixed here, at bind time, by
rewriting into an equivalent DuckDB expression that Spark evaluates the same way:

* ``date - date`` is a number of days (Spark: an interval) -> ``date_diff('day', b, a)``;
* ``date +/- interval`` is a TIMESTAMP (Spark: a DATE) -> the date is cast to TIMESTAMP first;
* ``a / b`` with a DECIMAL operand is a DOUBLE, divided in DOUBLE (Spark: a DECIMAL of at most 6 digits after
  the point, 0.444444 for ``1 / 2.25``) -> both operands cast to DOUBLE, which is what DuckDB does;
* ``a % b`` with a DOUBLE or REAL operand is NaN where ``b`` is 0 (Spark: an error) -> ``CASE WHEN b = 0 AND a IS
  NOT NULL THEN NaN ELSE a % b END``;
* a DOUBLE or REAL cast to DECIMAL fails for NaN and the infinities (Spark: NULL) -> marked
  ``CAST(CAST(x AS DOUBLE) AS DECIMAL(p, s))``, which Spark lowers to a cast that raises for them;
* a finite DOUBLE beyond REAL's range cast to REAL fails (Spark: infinity) -> marked ``CAST(CAST(x AS DOUBLE) AS
  REAL)``, which Spark lowers to a cast that raises for it;
* FLOOR / CEIL of a DOUBLE or REAL is a float (Spark: a BIGINT) -> ``CASE`` over NaN, infinities, zeros and
  values beyond 2^52, else the BIGINT cast back (:func:`_float_round`);
* a DOUBLE or REAL as text (``CAST(x AS VARCHAR)``, and an operand of ``||`` or CONCAT) is DuckDB's shortest
  text (``1e+20``, ``inf``; Spark: ``1.0E20``, ``Infinity``) -> marked ``CAST(CAST(x AS DOUBLE) AS VARCHAR)``, a
  UDF on Spark (``sqlengine.executor.backends.duckdb_text``);
* ``CAST(x AS <integer>)`` rounds (Spark truncates): a DECIMAL half away from zero
  -> ``CAST(ROUND(x) AS <integer>)``, a DOUBLE or REAL half to even -> ``CAST(ROUND_EVEN(x, 0) AS ...)``.

Type-independent differences (day-of-week numbering, EPOCH) are fixed when
lowering to Spark SQL (``sqlengine.executor.backends.spark.spark_rule``).
"""
from __future__ import annotations

import re
from typing import Sequence, Tuple

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.annotate_types import annotate_types

from .function_types import value_type
from .column_check import storable
from .decimal_types import decimal_type
from .nested_types import (DUCKDB_BASES, canonical_value, duckdb_bind_error, duckdb_type, from_duckdb_name,
                           involves_nested, json_brackets, mark_duckdb, nested_syntax, parenthesized_arrows,
                           read_json_columns, variant_casts)
from .logical import col
from .types import UNKNOWN, SqlType

DIALECT = "duckdb"
T = exp.DataType.Type
FLOATING = {T.DOUBLE, T.FLOAT}
TEXT = {T.VARCHAR, T.TEXT, T.CHAR, T.NVARCHAR, T.NCHAR}
INTEGRAL = {T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.INT128, T.UTINYINT, T.USMALLINT, T.UINT, T.UBIGINT}


def _is(node: exp.Expression, types) -> bool:
    t = getattr(node, "type", None)
    return t is not None and t.this in types


def _round_type(annotator, e: exp.Round) -> exp.Round:
    """DuckDB's ROUND keeps its argument's type (a DECIMAL stays a DECIMAL: ``CAST(ROUND(d, 1) * 3 AS INT)`` then
    rounds half away from zero); sqlglot's DuckDB types it DOUBLE."""
    annotator._set_type(e, e.this.type)
    return e


def _date_operand(x: exp.Expression) -> bool:
    """A DATE, or a string literal that DuckDB reads as one beside a DATE (``'2024-02-29' - d``)."""
    return _is(x, {T.DATE}) or (isinstance(x, exp.Literal) and x.is_string)


def _sub_type(annotator, e: exp.Sub) -> exp.Sub:
    """DuckDB's ``date - date`` is a BIGINT (days), also with a string literal on one side; sqlglot types it
    DATE, which then made ``(d - d) - (d - d)`` look like dates too."""
    e = _DUCKDB_METADATA[exp.Sub]["annotator"](annotator, e)
    a, b = e.this, e.expression
    if _date_operand(a) and _date_operand(b) and (_is(a, {T.DATE}) or _is(b, {T.DATE})):
        annotator._set_type(e, exp.DataType.build("BIGINT"))
    return e


def _with_decimals(annotate):
    """``annotate``, then DuckDB's type where a DECIMAL operand makes it differ (:mod:`planner.decimal_types`)."""
    def annotator(self, e):
        e = annotate(self, e)
        t = decimal_type(e)
        if t is not None:
            self._set_type(e, t)
        return e
    return annotator


_DUCKDB_METADATA = Dialect.get_or_raise(DIALECT).EXPRESSION_METADATA
_METADATA = {**_DUCKDB_METADATA, exp.Round: {"annotator": _round_type}, exp.Sub: {"annotator": _sub_type}}
_METADATA.update({k: {**_METADATA[k], "annotator": _with_decimals(_METADATA[k]["annotator"])} for k in
                  (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.Case, exp.If, exp.Coalesce, exp.Greatest, exp.Least,
                   exp.Literal)})


def _annotate(e: exp.Expression, types: Sequence[SqlType]) -> exp.Expression:
    q = exp.select(e.copy().as_("r")).from_("t")
    for c in q.find_all(exp.Column):
        c.set("table", exp.to_identifier("t"))
    schema = {col(i): t.sql for i, t in enumerate(types) if t.sql != "UNKNOWN"}
    q = annotate_types(q, schema={"t": schema} if schema else None, dialect=DIALECT, expression_metadata=_METADATA)
    return q.expressions[0].this


def nonzero_number(x: exp.Expression) -> bool:
    """Is ``x`` a number literal other than 0 (a division or remainder by it cannot be one by zero)?"""
    return isinstance(x, exp.Literal) and x.is_number and float(x.this) != 0


def _divides(x: exp.Expression) -> bool:
    """Whether ``x`` is a ``/`` with a DECIMAL operand, which DuckDB computes in DOUBLE (the rewrite below casts
    its operands), though sqlglot types it DECIMAL: a CAST of it to an integer rounds half to even (fuzz seed
    69123: ``CAST(1.50 / -3.00 AS INT)`` is 0 in DuckDB, and was rounded half away from zero to -1)."""
    while isinstance(x, exp.Paren):
        x = x.this
    return isinstance(x, exp.Div) and not isinstance(x, exp.IntDiv) and any(
        _is(y, {T.DECIMAL}) or _decimal_literal(y) for y in (x.this, x.expression))


def _decimal_literal(x: exp.Expression) -> bool:
    """``2.5`` or ``-2.5``: DuckDB types a literal with a point as DECIMAL."""
    while isinstance(x, (exp.Neg, exp.Paren)):
        x = x.this
    return isinstance(x, exp.Literal) and not x.is_string and "." in x.this and "e" not in x.this.lower()


def _float_round(n: exp.Expression) -> exp.Expression:
    """FLOOR / CEIL of a float as a float, as DuckDB gives (Spark: a BIGINT, 0 for NaN, an overflow from 2^63):
    NaN, infinities, zeros and values from 2^52 up (integers already) are themselves; CEIL of a value in (-1, 0)
    is -0.0; else the integral BIGINT result cast back."""
    x, width = _r(n.this), ("REAL" if _is(n.this, {T.FLOAT}) else "DOUBLE")
    itself = exp.or_(exp.Anonymous(this="ISNAN", expressions=[x.copy()]),
                     exp.GTE(this=exp.Abs(this=x.copy()), expression=exp.Literal.number(4503599627370496)),
                     exp.EQ(this=x.copy(), expression=exp.Literal.number(0)))
    ifs = [exp.If(this=itself, true=x.copy())]
    if isinstance(n, exp.Ceil):
        ifs.append(exp.If(this=exp.and_(exp.GT(this=x.copy(), expression=exp.Literal.number(-1)),
                                        exp.LT(this=x.copy(), expression=exp.Literal.number(0))),
                          true=exp.cast(exp.Literal.string("-0.0"), width)))
    return exp.Case(ifs=ifs, default=exp.cast(type(n)(this=x.copy()), width))


def _as_text(x: exp.Expression) -> exp.Expression:
    """A float as text, marked for Spark: ``CAST(CAST(x AS DOUBLE) AS VARCHAR)`` (REAL for a REAL), which
    ``sqlengine.executor.backends.spark`` lowers to a UDF that writes DuckDB's text (``1e+20``, ``inf``)."""
    width = "REAL" if _is(x, {T.FLOAT}) else "DOUBLE"
    return exp.cast(exp.cast(_r(x), width), "VARCHAR")


def _r(x: exp.Expression) -> exp.Expression:
    """A copy of ``x`` with the rewrites applied inside it (``transform`` does not walk into a node it replaced)."""
    return x.copy().transform(_rewrite)


def _rewrite(n: exp.Expression):
    if isinstance(n, exp.Sub) and _date_operand(n.this) and _date_operand(n.expression) and \
            (_is(n.this, {T.DATE}) or _is(n.expression, {T.DATE})):
        a, b = (exp.cast(_r(x), "DATE") if not _is(x, {T.DATE}) else _r(x) for x in (n.this, n.expression))
        return exp.DateDiff(this=a, expression=b, unit=exp.var("DAY"))
    if isinstance(n, (exp.Add, exp.Sub)):
        a, b = n.this, n.expression
        if _is(a, {T.DATE}) and isinstance(b, exp.Interval):
            return type(n)(this=exp.cast(_r(a), "TIMESTAMP"), expression=_r(b))
        if isinstance(n, exp.Add) and isinstance(a, exp.Interval) and _is(b, {T.DATE}):
            return exp.Add(this=_r(a), expression=exp.cast(_r(b), "TIMESTAMP"))
    if isinstance(n, exp.Div) and not isinstance(n, exp.IntDiv) and any(
            _is(x, {T.DECIMAL}) or _decimal_literal(x) for x in (n.this, n.expression)):
        return exp.Div(this=exp.cast(_r(n.this), "DOUBLE"), expression=exp.cast(_r(n.expression), "DOUBLE"))
    if isinstance(n, exp.Mod) and any(_is(x, FLOATING) for x in (n.this, n.expression)) and \
            not nonzero_number(n.expression):
        a, b = _r(n.this), _r(n.expression)
        by_zero = exp.and_(exp.EQ(this=b.copy(), expression=exp.Literal.number(0)),
                           exp.not_(exp.Is(this=a.copy(), expression=exp.Null())))
        return exp.Case(ifs=[exp.If(this=by_zero, true=exp.cast(exp.Literal.string("nan"), "DOUBLE"))],
                        default=exp.Mod(this=exp.Paren(this=a), expression=exp.Paren(this=b)))
    if isinstance(n, (exp.Floor, exp.Ceil)) and not n.args.get("decimals") and _is(n.this, FLOATING):
        return _float_round(n)
    if isinstance(n, exp.Cast) and n.to.this in TEXT and _is(n.this, FLOATING):
        return _as_text(n.this)
    if isinstance(n, exp.Cast) and n.to.this == T.DECIMAL and _is(n.this, FLOATING):
        return exp.Cast(this=exp.cast(_r(n.this), "DOUBLE"), to=n.to.copy())   # (marked for Spark: NaN, inf)
    if isinstance(n, exp.Cast) and n.to.this == T.FLOAT and _is(n.this, {T.DOUBLE}):
        return exp.Cast(this=exp.cast(_r(n.this), "DOUBLE"), to=n.to.copy())   # (marked for Spark: overflow)
    if isinstance(n, (exp.DPipe, exp.Concat)) and any(_is(x, FLOATING) for x in n.iter_expressions()):
        out = n.copy()
        for key, value in list(out.args.items()):
            if isinstance(value, list):
                out.set(key, [_as_text(v) if _is(v, FLOATING) else _r(v) for v in value])
            elif isinstance(value, exp.Expression):
                out.set(key, _as_text(value) if _is(value, FLOATING) else _r(value))
        return out
    if isinstance(n, exp.Cast) and n.to.this in INTEGRAL and (_is(n.this, {T.DECIMAL}) or _decimal_literal(n.this)) \
            and not _divides(n.this):
        return exp.Cast(this=exp.Round(this=_r(n.this)), to=n.to.copy())
    if isinstance(n, exp.Cast) and n.to.this in INTEGRAL and (_is(n.this, FLOATING) or _divides(n.this)):
        even = exp.Anonymous(this="ROUND_EVEN", expressions=[_r(n.this), exp.Literal.number(0)])
        return exp.Cast(this=even, to=n.to.copy())
    return n


def _unqualify(e: exp.Expression) -> exp.Expression:
    for c in e.find_all(exp.Column):
        c.set("table", None)
    return e


class NotTypable(Exception):
    """An expression over nested values that DuckDB cannot bind (its message)."""


def typed(e: exp.Expression, types: Sequence[SqlType]) -> Tuple[exp.Expression, SqlType]:
    """``e`` (over columns ``c<i>`` of the given types) with the rewrites above applied, and its type
    (:func:`planner.function_types.value_type`: UNKNOWN where it cannot be told; planner.column_check rejects
    the columns whose type is UNKNOWN or one the executors cannot store).  An expression over nested or JSON
    values is typed by DuckDB, and its value made canonical (:mod:`planner.nested_types`)."""
    out, t = _typed(variant_casts(read_json_columns(json_brackets(parenthesized_arrows(e), types), types), types),
                    types)
    if t.sql == "UNKNOWN" or t.base in DUCKDB_BASES or involves_nested(out, types) or nested_syntax(out):
        asked = duckdb_type(out, types)
        if asked is None and (involves_nested(out, types) or nested_syntax(out)):
            error = duckdb_bind_error(out, types)
            if error:   # (ABS of a LIST: DuckDB has no such function; a CAST around it would hide it)
                raise NotTypable(error)
        if asked is not None and asked.sql.strip('"') == "NULL":   # an untyped NULL: the planner's own type
            asked = None
        if asked is not None and _UNSIGNED.search(asked.sql):   # (len, cardinality: UBIGINT) as an engine type,
            signed = _UNSIGNED.sub(lambda m: _SIGNED[m.group(0)], asked.sql)   # also inside a LIST or STRUCT
            signed = from_duckdb_name(signed).sql   # (its canonical text: INT, not INTEGER)
            out, asked = exp.cast(out, exp.DataType.build(signed, dialect="duckdb")), SqlType(signed)
        if asked is not None:
            t = asked
        if not isinstance(out, exp.Column) and t.sql != "UNKNOWN" and t.base in DUCKDB_BASES:
            try:
                out = canonical_value(out, t)
            except Exception:   # a type sqlglot cannot read back: planner.column_check rejects it
                pass
        if not isinstance(out, exp.Column) and t.sql != "UNKNOWN" and storable(t) and asked is not None:
            out = mark_duckdb(out, t)   # (not over a Python function: DuckDB alone cannot call it)
    return out, t


_SIGNED = {"UTINYINT": "SMALLINT", "USMALLINT": "INT", "UINTEGER": "BIGINT", "UBIGINT": "BIGINT",
           "HUGEINT": "DECIMAL(38, 0)", "UHUGEINT": "DECIMAL(38, 0)"}   # (a top-level HUGEINT: from_duckdb_name)
_UNSIGNED = re.compile(r"\b(" + "|".join(_SIGNED) + r")\b")


def _typed(e: exp.Expression, types: Sequence[SqlType]) -> Tuple[exp.Expression, SqlType]:
    try:
        annotated = _annotate(e, types)
    except Exception:  # sqlglot cannot type every expression
        return e, UNKNOWN
    rewritten = annotated.transform(_rewrite)
    if rewritten.sql(dialect=DIALECT) != annotated.sql(dialect=DIALECT):
        try:
            annotated = _annotate(_unqualify(rewritten), types)
        except Exception:
            return _unqualify(rewritten), UNKNOWN
        rewritten = annotated
    return _unqualify(rewritten.copy()), value_type(rewritten, types)
