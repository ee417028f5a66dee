"""The type of a bound expression by DuckDB's rules, where sqlglot's annotation is missing or wrong.

sqlglot's ``annotate_types`` types most expressions, but leaves many functions without a type (``REPLACE``,
``lpad``, ``string_split``) and gets a few wrong for DuckDB (``ts - ts`` is an INTERVAL, not a TIMESTAMP).
:func:`value_type` corrects the annotation of an expression's top node:

* result types of the functions sqlglot does not type (:data:`NAMED`, :data:`CLASSES`);
* nested results (LIST, STRUCT, MAP) and INTERVAL / TIME keep their DuckDB name (``VARCHAR[]``), so that
  :mod:`planner.column_check` can reject them by name;
* a TIMESTAMP WITH TIME ZONE is read as a naive UTC TIMESTAMP (DuckDB's JSON is the engine's JSON).

Anything still untyped is ``UNKNOWN``.  ``tests/planner/test_types_at_compile_time.py`` compares these types with
DuckDB's for every function of DuckDB's catalogue that the binder accepts.

>>> from sqlglot import parse_one
>>> from .semantics import _annotate
>>> def t(sql, *types):
...     cols = [SqlType(x) for x in types]
...     return value_type(_annotate(parse_one(sql, read="duckdb"), cols), cols).sql
>>> t("lpad(c0, 3, 'x')", "VARCHAR"), t("string_split(c0, ',')", "VARCHAR"), t("c0 - c0", "TIMESTAMP")
('VARCHAR', 'VARCHAR[]', 'INTERVAL')
>>> t("nullif(round_even(c0, 1), 0)", "DOUBLE"), t("[c0, 2]", "INT"), t("json_extract(c0, '$.a')", "VARCHAR")
('DOUBLE', 'INT[]', 'JSON')
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

from sqlglot import exp

from .typecheck import INTERVAL, TIME, value_class
from .types import INTEGERS, UNKNOWN, SqlType, from_annotation

T = exp.DataType.Type
VARCHAR, BIGINT, DOUBLE, DATE = SqlType("VARCHAR"), SqlType("BIGINT"), SqlType("DOUBLE"), SqlType("DATE")

# annotated types read as one of the engine's column types
_READ_AS = {T.TIMESTAMPTZ: SqlType("TIMESTAMP"), T.TIMESTAMPLTZ: SqlType("TIMESTAMP")}


def _args(n: exp.Expression):
    return [n.this] + list(n.expressions) if isinstance(n.this, exp.Expression) else list(n.expressions)


def _first(n: exp.Expression, types) -> SqlType:
    args = _args(n)
    return value_type(args[0], types) if args else UNKNOWN


def _whole(n: exp.Expression, types) -> SqlType:
    """trunc / ceil / floor: an integer or floating argument keeps its type, a DECIMAL loses its scale."""
    t = _first(n, types)
    if t.base == "DECIMAL":
        return SqlType(f"DECIMAL({t.sql.split('(')[1].split(',')[0]}, 0)")
    return t if t.base in INTEGERS + ("DOUBLE", "REAL") else UNKNOWN


def _numeric_common(n: exp.Expression, types, values=None) -> SqlType:
    """least / greatest (CASE, COALESCE: ``values``): the arguments' type if they agree (NULLs aside), the
    wider integer, else DOUBLE over floats."""
    ts = [value_type(a, types) for a in (_args(n) if values is None else values) if not isinstance(a, exp.Null)]
    if not ts or any(t.sql == "UNKNOWN" for t in ts):
        return UNKNOWN
    if len({t.sql for t in ts}) == 1:
        return ts[0]
    if all(t.base in INTEGERS for t in ts):
        return max(ts, key=lambda t: INTEGERS.index(t.base))
    if all(t.base in INTEGERS + ("DOUBLE", "REAL") for t in ts):
        return DOUBLE
    return UNKNOWN


def _element(n: exp.Expression, types) -> SqlType:
    """``l[i]`` of a LIST ``l``: its element type (a slice ``l[i:j]`` is a LIST)."""
    t = value_type(n.this, types)
    if not t.sql.endswith("[]") or any(isinstance(e, exp.Slice) for e in n.expressions):
        return t if t.sql.endswith("[]") else UNKNOWN
    return SqlType(t.sql[:-2])


Rule = Callable[[exp.Expression, Sequence[SqlType]], SqlType]


def _const(t: SqlType) -> Rule:
    return lambda n, types: t


# Functions sqlglot keeps by name (bind.ANONYMOUS_OK): their result types in DuckDB.
NAMED: Dict[str, Rule] = {
    **{f: _const(VARCHAR) for f in ("md5", "reverse", "lpad", "rpad", "ltrim", "rtrim", "chr")},
    "repeat": _first,   # a string, or a list repeated
    **{f: _const(BIGINT) for f in ("strpos", "instr", "char_length", "character_length", "dayofweek", "dayofmonth",
                                   "dayofyear", "week", "hour", "minute", "second", "year", "month", "day",
                                   "quarter")},
    "ascii": _const(SqlType("INT")), "sign": _const(SqlType("TINYINT")),
    **{f: _const(DOUBLE) for f in ("ln", "log10", "pi")},
    "last_day": _const(DATE), "round_even": _first, "nullif": _first,
    "least": _numeric_common, "greatest": _numeric_common,
}
# sqlglot function classes it leaves untyped (or types otherwise than DuckDB): their result types in DuckDB.
# A list result is a LIST of VARCHAR.
_CLASS_RULES = {
    "Replace": _const(VARCHAR), "RegexpReplace": _const(VARCHAR), "RegexpExtract": _const(VARCHAR),
    "SplitPart": _const(VARCHAR), "Pad": _const(VARCHAR), "Left": _const(VARCHAR), "Right": _const(VARCHAR),
    "Hex": _const(VARCHAR), "Overlay": _const(VARCHAR), "JSONType": _const(VARCHAR), "Repeat": _first, "LowerHex": _const(VARCHAR), "JSONExtract": _const(SqlType("JSON")),
    "JSONExtractScalar": _const(VARCHAR), "Trunc": _whole, "Ceil": _whole, "Floor": _whole, "Nullif": _first,
    "Case": lambda n, types: _numeric_common(n, types, [i.args.get("true") for i in n.args.get("ifs") or []] +
                                             ([n.args["default"]] if n.args.get("default") else [])),
    "If": lambda n, types: _numeric_common(n, types, [n.args.get("true")] +
                                           ([n.args["false"]] if n.args.get("false") else [])),
    "Coalesce": _numeric_common,
    "Bracket": _element,
    "Split": _const(SqlType("VARCHAR[]")), "RegexpSplit": _const(SqlType("VARCHAR[]")),
    "JSONKeys": _const(SqlType("VARCHAR[]")), "RegexpExtractAll": _const(SqlType("VARCHAR[]")),
}
CLASSES: Dict[type, Rule] = {getattr(exp, k): v for k, v in _CLASS_RULES.items() if hasattr(exp, k)}


def _extract(n: exp.Expression, types: Sequence[SqlType]) -> SqlType:
    """EXTRACT from a NULL constant (``CAST(NULL AS TIMESTAMP)`` included) is a DOUBLE in DuckDB (it binds a NULL
    argument to another overload); from a value, the annotated type."""
    x = n.expression
    while isinstance(x, (exp.Cast, exp.Paren)):
        x = x.this
    return SqlType("DOUBLE") if isinstance(x, exp.Null) else UNKNOWN


CLASSES[exp.Extract] = _extract


def annotated_type(dt: Optional[exp.DataType]) -> SqlType:
    """An annotation as a column type: the engine's name, or DuckDB's name of a type it cannot store."""
    if dt is None or dt.this in (T.UNKNOWN, T.NULL):
        return UNKNOWN
    if dt.this in _READ_AS:
        return _READ_AS[dt.this]
    t = from_annotation(dt)
    if t.sql != "UNKNOWN":
        return t
    return SqlType(dt.sql(dialect="duckdb").upper())


def value_type(n: exp.Expression, types: Sequence[SqlType]) -> SqlType:
    """The type of the annotated expression ``n`` over columns ``c<i>`` of ``types`` (see the module doc)."""
    while isinstance(n, exp.Paren):
        n = n.this
    if isinstance(n, exp.Anonymous) and n.name.lower() in NAMED:
        return NAMED[n.name.lower()](n, types)
    rule = CLASSES.get(type(n))
    if rule is not None:
        t = rule(n, types)
        if t.sql != "UNKNOWN":
            return t
    if isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        cls = value_class(n, types)
        if cls == INTERVAL:
            return SqlType("INTERVAL")
        if cls == TIME:
            return SqlType("TIME")
    return annotated_type(getattr(n, "type", None))
