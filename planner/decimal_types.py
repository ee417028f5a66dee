"""DuckDB's result types for arithmetic and choices over DECIMAL operands (sqlglot keeps the first operand's).

A view's declared column types are DuckDB's: a sink's table, an aggregate's stored state and a Python
function's parameter are made from them, so ``DECIMAL(10, 2) - DECIMAL(18, 4)`` typed ``DECIMAL(10, 2)`` rounded
``-3.0001`` to ``-3.00`` where the type was applied.  The rules, from DuckDB's binder (an integer operand is a
``DECIMAL(3|5|10|19|38, 0)`` by its width, a literal ``1.25`` a ``DECIMAL(3, 2)``; a DOUBLE or REAL beside a
DECIMAL makes the result that float):

* ``+ -``: scale ``max(s)``, width ``max(max(s) + max(w - s), max(w)) + 1``, at most 38;
* ``*``: scale ``s1 + s2``, width ``w1 + w2``: 18 when that passes 18 but neither operand does (DuckDB checks
  the product for overflow instead), at most 38;
* ``%`` and a choice between values (CASE, COALESCE, IF, GREATEST, LEAST): the narrowest DECIMAL holding both,
  scale ``max(s)``, width ``max(w - s) + max(s)``; past 38 digits the scale gives way.

>>> from sqlglot import parse_one
>>> from planner.types import SqlType
>>> def typed(sql, *types):
...     from planner.rules.exprs import type_of
...     return type_of(sql, [SqlType(t) for t in types]).sql
>>> typed("c0 - c1", "DECIMAL(10, 2)", "DECIMAL(18, 4)")
'DECIMAL(19, 4)'
>>> typed("c0 * c1", "DECIMAL(10, 2)", "DECIMAL(18, 4)"), typed("c0 * c1", "DECIMAL(10, 2)", "BIGINT")
('DECIMAL(18, 6)', 'DECIMAL(29, 2)')
>>> typed("c0 + 1.5", "DECIMAL(10, 2)"), typed("c0 % 3", "DECIMAL(10, 2)"), typed("c0 + c1", "DECIMAL(10, 2)", "REAL")
('DECIMAL(11, 2)', 'DECIMAL(12, 2)', 'REAL')
>>> typed("COALESCE(c0, CAST(1 AS DECIMAL(38, 37)))", "DECIMAL(10, 2)")
'DECIMAL(38, 30)'
>>> typed("1.25"), typed("0.001"), typed("10000000000")
('DECIMAL(3, 2)', 'DECIMAL(4, 3)', 'BIGINT')
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from sqlglot import exp

T = exp.DataType.Type
MAX_WIDTH = 38
_INT_WIDTH = {T.TINYINT: 3, T.SMALLINT: 5, T.INT: 10, T.BIGINT: 19, T.INT128: 38, T.UTINYINT: 3, T.USMALLINT: 5,
              T.UINT: 10, T.UBIGINT: 20}
Decimal = Tuple[int, int]


def literal_type(e: exp.Literal) -> Optional[exp.DataType]:
    """DuckDB's type of a number literal: ``1.25`` a ``DECIMAL(3, 2)`` (every digit counts), an integer the
    narrowest of INTEGER, BIGINT and HUGEINT (a ``DECIMAL(38, 0)`` here); None for others (``1e2``, text)."""
    if e.is_string or not e.is_number:
        return None
    text = e.this.lstrip("+-")
    if "e" in text.lower():
        return None
    if "." in text:
        whole, _, frac = text.partition(".")
        width = max(len(whole) + len(frac), len(frac) + 1)
        return exp.DataType.build(f"DECIMAL({width}, {len(frac)})") if width <= MAX_WIDTH else None
    v = int(text)
    if v < 2 ** 31:
        return exp.DataType.build("INT")
    if v < 2 ** 63:
        return exp.DataType.build("BIGINT")
    return exp.DataType.build("DECIMAL(38, 0)") if v < 10 ** 38 else None


def _decimal(t: Optional[exp.DataType]) -> Optional[Decimal]:
    """``(width, scale)`` of a DECIMAL or integer type; None for any other."""
    if t is None:
        return None
    if t.this == T.DECIMAL:
        params = [p.this.this if isinstance(p.this, exp.Literal) else p.name for p in t.expressions]
        try:
            w, s = (int(params[0]), int(params[1]) if len(params) > 1 else 0) if params else (18, 3)
        except (ValueError, TypeError):
            return None
        return w, s
    if t.this in _INT_WIDTH:
        return _INT_WIDTH[t.this], 0
    return None


def _build(w: int, s: int) -> exp.DataType:
    return exp.DataType.build(f"DECIMAL({w}, {s})")


def add_sub(a: Decimal, b: Decimal) -> Decimal:
    scale = max(a[1], b[1])
    width = max(scale + max(a[0] - a[1], b[0] - b[1]), a[0], b[0]) + 1
    return min(width, MAX_WIDTH), scale


def multiply(a: Decimal, b: Decimal) -> Decimal:
    width, scale = a[0] + b[0], a[1] + b[1]
    if width > 18 and max(a[0], b[0]) <= 18 and scale < 18:
        width = 18
    return min(width, MAX_WIDTH), scale


def common(ds: List[Decimal]) -> Decimal:
    """The narrowest DECIMAL holding every one of ``ds`` (the scale gives way past 38 digits)."""
    whole, scale = max(w - s for w, s in ds), max(s for _, s in ds)
    if whole + scale > MAX_WIDTH:
        scale = max(MAX_WIDTH - whole, 0)
    return min(whole + scale, MAX_WIDTH), scale


def result_type(types: List[Optional[exp.DataType]], combine: Callable[[List[Decimal]], Decimal]
                ) -> Optional[exp.DataType]:
    """The type of an operation over operands of ``types`` where one is a DECIMAL and all are numbers (NULLs
    aside): DOUBLE beside a DOUBLE, FLOAT beside a REAL, else ``combine`` of the operands' DECIMALs; None
    where the rule does not apply."""
    known = [t for t in types if t is not None and t.this not in (T.NULL, T.UNKNOWN)]
    if not any(t.this == T.DECIMAL for t in known):
        return None
    if any(t.this == T.DOUBLE for t in known) and all(t.this == T.DOUBLE or _decimal(t) or t.this == T.FLOAT
                                                      for t in known):
        return exp.DataType.build("DOUBLE")
    if any(t.this == T.FLOAT for t in known) and all(t.this == T.FLOAT or _decimal(t) for t in known):
        return exp.DataType.build("FLOAT")
    ds = [_decimal(t) for t in known]
    if any(d is None for d in ds):
        return None
    return _build(*combine(ds))


def _binary(combine: Callable[[Decimal, Decimal], Decimal]) -> Callable[[List[Decimal]], Decimal]:
    def fold(ds: List[Decimal]) -> Decimal:
        out = ds[0]
        for d in ds[1:]:
            out = combine(out, d)
        return out
    return fold


ARITHMETIC: Dict[type, Callable[[List[Decimal]], Decimal]] = {
    exp.Add: _binary(add_sub), exp.Sub: _binary(add_sub), exp.Mul: _binary(multiply), exp.Mod: common}


def choice_values(e: exp.Expression) -> Optional[List[exp.Expression]]:
    """The values a CASE, IF, COALESCE, GREATEST or LEAST picks among; None for other nodes."""
    if isinstance(e, exp.Case):
        return [i.args.get("true") for i in e.args.get("ifs") or []] + \
            ([e.args["default"]] if e.args.get("default") is not None else [])
    if isinstance(e, exp.If):
        return [e.args.get("true")] + ([e.args["false"]] if e.args.get("false") is not None else [])
    if isinstance(e, (exp.Coalesce, exp.Greatest, exp.Least)):
        return [e.this] + list(e.expressions)
    return None


def decimal_type(e: exp.Expression) -> Optional[exp.DataType]:
    """DuckDB's type of ``e`` (its operands already typed) where a DECIMAL operand makes it differ from
    sqlglot's; None where sqlglot's stands."""
    if isinstance(e, exp.Literal):
        return literal_type(e)
    if type(e) in ARITHMETIC:
        return result_type([e.this.type, e.expression.type], ARITHMETIC[type(e)])
    values = choice_values(e)
    if values is not None and all(v is not None for v in values):
        return result_type([v.type for v in values], common)
    return None


__all__ = ["literal_type", "add_sub", "multiply", "common", "result_type", "decimal_type"]
