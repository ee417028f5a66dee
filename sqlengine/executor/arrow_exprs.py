"""Simple filters and projections evaluated in Arrow compute, where a DuckDB query would cost a millisecond of
planning per operator and step (see :mod:`sqlengine.executor.arrow_ops`).

Only expressions whose meaning in Arrow is DuckDB's, value for value, are taken; anything else is ``None`` and the
operator runs its rule on DuckDB:

* a comparison of a plain column with a constant: integers with an integer, text with text, a DATE with a DATE
  literal, a BOOLEAN with TRUE or FALSE, a DOUBLE with a number (NaN is greater than every number and equal to
  itself, as in DuckDB: Arrow's IEEE comparisons are corrected for it);
* ``IS [NOT] NULL``, ``AND``, ``OR`` and ``NOT`` (SQL's three-valued logic: Arrow's Kleene kernels), a plain
  BOOLEAN column;
* in a projection, ``+``, ``-`` and ``*`` of DOUBLE columns and numbers (IEEE arithmetic, the same bits in
  both), and a ROW's field (``customer.tier``).

>>> t = pa.table({"c0": [1, 5, None], "c1": [float("nan"), 0.25, 2.0], "c2": ["a", "b", None]})
>>> predicate("c0 > 2 OR c1 > 1")(t).to_pylist()
[True, True, True]
>>> predicate("c0 > 2 AND c1 < 1")(t).to_pylist()
[False, True, False]
>>> predicate("c0 < 2")(t).to_pylist()
[True, False, None]
>>> predicate("NOT c2 IS NULL AND c2 <> 'a'")(t).to_pylist()
[False, True, False]
>>> value("c1 * (1 - c1)")(t).to_pylist()
[nan, 0.1875, -2.0]
>>> predicate("c0 + 1 > 2") is None
True
>>> rows = pa.table({"c0": pa.array([{"tier": 2}, None], pa.struct([("tier", pa.int32())]))})
>>> value("__duckdb(CAST(STRUCT_EXTRACT(c0, 'tier') AS INT))")(rows).to_pylist()
[2, None]
"""
from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from planner.bind import DIALECT
from planner.nested_types import DUCKDB_MARK
from planner.types import from_sql_type

from sqlengine.types import arrow_type

Evaluator = Callable[[pa.Table], pa.Array]

_COMPARE = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater", exp.GTE: "greater_equal",
            exp.LT: "less", exp.LTE: "less_equal"}
_FLIP = {"equal": "equal", "not_equal": "not_equal", "greater": "less", "greater_equal": "less_equal",
         "less": "greater", "less_equal": "greater_equal"}
_ARITH = {exp.Add: "add", exp.Sub: "subtract", exp.Mul: "multiply"}


class _NotSimple(Exception):
    """The expression, or a column's type, is not one this module evaluates as DuckDB does."""


def predicate(sql: str) -> Optional[Evaluator]:
    """A function of a table giving the boolean mask of ``sql`` (a planner predicate over positional columns
    ``c<i>``), or None where this module does not take it; the function raises :class:`_NotSimple` (caught by
    :func:`filter_rows`) for a column type it does not take."""
    return _compiled(sql, True)


def value(sql: str) -> Optional[Evaluator]:
    """Like :func:`predicate`, for a projection's expression (DOUBLE arithmetic)."""
    return _compiled(sql, False)


def filter_rows(sql: str, t: pa.Table) -> Optional[pa.Table]:
    """The rows of ``t`` where ``sql`` is true, or None where this module does not evaluate it."""
    f = predicate(sql)
    if f is None:
        return None
    try:
        mask = f(t)
    except _NotSimple:
        return None
    return t.filter(mask)   # (a NULL drops the row, as WHERE does)


def project_values(sqls, t: pa.Table) -> Optional[list]:
    """The columns of expressions ``sqls`` over ``t``, or None where one is not evaluated here."""
    fs = [value(s) for s in sqls]
    if any(f is None for f in fs):
        return None
    try:
        return [f(t) for f in fs]
    except _NotSimple:
        return None


@lru_cache(maxsize=1024)
def _compiled(sql: str, boolean: bool) -> Optional[Evaluator]:
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
        if boolean:
            return _boolean(tree)
        field = _struct_field(tree)
        return field if field is not None else _double(tree)
    except (_NotSimple, sqlglot.errors.SqlglotError):
        return None


def _unparen(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _column(e: exp.Expression) -> Optional[int]:
    e = _unparen(e)
    if isinstance(e, exp.Column) and not e.table and re.fullmatch(r"c\d+", e.name):
        return int(e.name[1:])
    return None


def _column_of(t: pa.Table, i: int) -> pa.Array:
    name = f"c{i}"
    if name not in t.column_names:
        raise _NotSimple("no such column")
    c = t.column(name)
    return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c


def _typed_column(i: int, test: Callable[[pa.DataType], bool], what: str) -> Evaluator:
    """Column ``c<i>``, which must be of the type ``test`` accepts (``what``)."""
    def column(t: pa.Table) -> pa.Array:
        c = _column_of(t, i)
        if not test(c.type):
            raise _NotSimple(f"not a {what} column")
        return c
    return column


def _boolean(e: exp.Expression) -> Evaluator:
    e = _unparen(e)
    if isinstance(e, (exp.And, exp.Or)):
        a, b = _boolean(e.this), _boolean(e.expression)
        kernel = pc.and_kleene if isinstance(e, exp.And) else pc.or_kleene
        return lambda t: kernel(a(t), b(t))
    if isinstance(e, exp.Not):
        inner = _unparen(e.this)
        if isinstance(inner, exp.Is):
            f = _is_null(inner)
            return lambda t: pc.invert(f(t))
        a = _boolean(inner)
        return lambda t: pc.invert(a(t))
    if isinstance(e, exp.Is):
        return _is_null(e)
    i = _column(e)
    if i is not None:
        return _typed_column(i, pa.types.is_boolean, "BOOLEAN")
    for cls, name in _COMPARE.items():
        if type(e) is cls:
            return _comparison(e, name)
    raise _NotSimple(type(e).__name__)


def _is_null(e: exp.Is) -> Evaluator:
    i = _column(e.this)
    if i is None or not isinstance(_unparen(e.expression), exp.Null):
        raise _NotSimple("IS of an expression")
    return lambda t: pc.is_null(_column_of(t, i))


def _constant(e: exp.Expression):
    """(kind, value) of a literal: 'int', 'number' (a decimal literal, as text), 'text', 'date', 'bool'."""
    e = _unparen(e)
    neg = False
    if isinstance(e, exp.Neg):
        neg, e = True, _unparen(e.this)
        if not (isinstance(e, exp.Literal) and not e.is_string):
            raise _NotSimple("minus of an expression")
    if isinstance(e, exp.Boolean) and not neg:
        return "bool", bool(e.this)
    if isinstance(e, exp.Literal):
        if e.is_string:
            return "text", e.this
        text = ("-" if neg else "") + e.this
        if re.fullmatch(r"-?\d+", text) and -2 ** 63 <= int(text) < 2 ** 63:
            return "int", int(text)
        if re.fullmatch(r"-?(\d+\.?\d*|\.\d+)", text) and len(re.sub(r"\D", "", text).lstrip("0")) <= 15:
            # DuckDB makes a DOUBLE of a DECIMAL literal as (its digits as an integer) / 10^scale: with at most
            # 15 digits both are exact doubles, so the quotient is the correctly rounded value, float(text)
            return "number", text
        raise _NotSimple("a number with an exponent, or too many digits")
    if isinstance(e, exp.Cast) and isinstance(_unparen(e.this), exp.Literal) and _unparen(e.this).is_string:
        to = e.args.get("to")
        if isinstance(to, exp.DataType) and to.this == exp.DataType.Type.DATE and \
                re.fullmatch(r"\d{4}-\d{2}-\d{2}", _unparen(e.this).this):
            return "date", dt.date.fromisoformat(_unparen(e.this).this)
    raise _NotSimple("not a constant")


def _comparison(e: exp.Expression, name: str) -> Evaluator:
    i, j = _column(e.this), _column(e.expression)
    if i is not None and j is None:
        kind, v = _constant(e.expression)
    elif j is not None and i is None:
        kind, v = _constant(e.this)
        i, name = j, _FLIP[name]
    else:
        raise _NotSimple("not a column beside a constant")
    kernel = getattr(pc, name)

    def compare(t: pa.Table) -> pa.Array:
        c = _column_of(t, i)
        ty = c.type
        if kind == "int" and pa.types.is_signed_integer(ty):
            return kernel(c, pa.scalar(v, pa.int64()))
        if kind == "text" and pa.types.is_string(ty):
            return kernel(c, pa.scalar(v, pa.string()))
        if kind == "date" and pa.types.is_date32(ty):
            return kernel(c, pa.scalar(v, pa.date32()))
        if kind == "bool" and pa.types.is_boolean(ty):
            return kernel(c, pa.scalar(v, pa.bool_()))
        if kind in ("int", "number") and pa.types.is_float64(ty):
            x = float(v)
            out = kernel(c, pa.scalar(x, pa.float64()))
            if name in ("greater", "greater_equal"):   # NaN is greater than every number in DuckDB
                out = pc.or_kleene(out, pc.is_nan(c))
            return out
        raise _NotSimple(f"{ty} beside a {kind} constant")
    return compare


def _struct_field(e: exp.Expression) -> Optional[Evaluator]:
    """``__duckdb(CAST(struct_extract(c<i>, 'f') AS T))``, a ROW's field (``customer.tier``), where the field is
    of type T: Arrow's ``struct_field`` (NULL where the ROW is NULL, as in DuckDB), else None."""
    if not (isinstance(e, exp.Anonymous) and e.name.upper() == DUCKDB_MARK.upper() and len(e.expressions) == 1):
        return None
    cast = e.expressions[0]
    if not (isinstance(cast, exp.Cast) and isinstance(cast.this, exp.StructExtract)):
        return None
    i, name = _column(cast.this.this), cast.this.expression
    if i is None or not (isinstance(name, exp.Literal) and name.is_string):
        return None
    try:
        want = arrow_type(from_sql_type(cast.to.sql(dialect="duckdb")))
    except ValueError:
        return None
    field = name.this

    def get(t: pa.Table) -> pa.Array:
        c = _column_of(t, i)
        if not pa.types.is_struct(c.type) or c.type.get_field_index(field) < 0 or \
                c.type.field(field).type != want:
            raise _NotSimple("not a ROW with that field of that type")
        return pc.struct_field(c, field)
    return get


def _double(e: exp.Expression) -> Evaluator:
    e = _unparen(e)
    i = _column(e)
    if i is not None:
        return _typed_column(i, pa.types.is_float64, "DOUBLE")
    for cls, name in _ARITH.items():
        if type(e) is cls:
            a, b = _double_operand(e.this), _double_operand(e.expression)
            if isinstance(a, pa.Scalar) and isinstance(b, pa.Scalar):
                raise _NotSimple("constant arithmetic")
            kernel = getattr(pc, name)
            return lambda t: kernel(a if isinstance(a, pa.Scalar) else a(t), b if isinstance(b, pa.Scalar) else b(t))
    raise _NotSimple(type(e).__name__)


def _double_operand(e: exp.Expression):
    """An evaluator of DOUBLE values, or a number (a constant, which DuckDB turns into a DOUBLE beside one)."""
    e = _unparen(e)
    if isinstance(e, (exp.Literal, exp.Neg)):
        kind, v = _constant(e)
        if kind in ("int", "number") and (kind == "number" or abs(v) < 2 ** 53):
            return pa.scalar(float(v), pa.float64())
        raise _NotSimple("not a number")
    return _double(e)
