"""``fold_constants``: evaluate what does not depend on the row, keeping DuckDB's meaning and result type.

* ``x AND TRUE`` -> ``x``, ``x OR FALSE`` -> ``x`` (``x`` a predicate or a BOOLEAN column);
  ``x AND FALSE`` -> ``FALSE``, ``x OR TRUE`` -> ``TRUE`` (only when ``x`` cannot fail: a row whose
  expression fails stays out of its view, so a failing ``x`` must still be evaluated);
  ``NOT TRUE`` -> ``FALSE``, ``NOT NULL`` -> ``CAST(NULL AS BOOLEAN)``;
* comparisons of literals (numbers, strings, booleans, and CASTs of literals that certainly succeed:
  ``CAST('5' AS INT) > 3`` -> ``TRUE``), and ``literal IS [NOT] NULL``;
* a searched CASE drops its WHEN branches whose condition is FALSE or NULL, and ends at one whose condition
  is TRUE (``CASE WHEN TRUE THEN a ELSE b END`` -> ``a``), when every branch has the same certain type (so
  the result type cannot change);
* integer literal arithmetic (``+ - *``) within INTEGER's range: a bare literal where it is compared,
  ``CAST(n AS INT)`` elsewhere (DuckDB types ``1 + 2`` as INTEGER, but a bare ``3`` adapts to the other
  operand: ``tinyint_col + 3`` is a TINYINT that can overflow where ``tinyint_col + (1 + 2)`` cannot);
* ``CAST(<integer literal> AS VARCHAR)`` -> the string.

On the plan: ``Filter(TRUE)`` is dropped, ``Filter(NULL)`` becomes ``Filter(FALSE)`` (kept: an empty
relation of the same columns), a join residual ``TRUE`` is dropped.

sqlglot's ``optimizer.simplify`` is used for its safe parts only (``eval_boolean`` for comparing literals):
as a whole it would fold ``2147483647 + 1`` to a BIGINT where DuckDB raises an INT32 overflow, rewrite
``x + 1 = 3`` to ``x = 2`` (a row where ``x + 1`` overflows would no longer fail), turn
``CAST('2024-01-01' AS DATE) + INTERVAL 1 DAY`` (a TIMESTAMP in DuckDB) into a DATE, and change the type
of a CASE by dropping branches.  Window calls and aggregate arguments are left alone.

>>> from planner.types import SqlType
>>> B, I = SqlType("BOOLEAN"), SqlType("INT")
>>> fold_expr(Expr("c0 > 1 AND TRUE", B), [I]).sql
'c0 > 1'
>>> fold_expr(Expr("c0 AND (1 < 2)", B), [B]).sql
'c0'
>>> fold_expr(Expr("c0 > CAST('5' AS INT) + 1", B), [I]).sql
'c0 > 6'
>>> fold_expr(Expr("c0 + (1 + 2)", I), [SqlType("TINYINT")]).sql
'c0 + CAST(3 AS INT)'
>>> fold_expr(Expr("CASE WHEN 1 = 2 THEN c0 WHEN c0 > 0 THEN c1 ELSE NULL END", I), [I, I]).sql
'CASE WHEN c0 > 0 THEN c1 ELSE NULL END'
>>> fold_expr(Expr("CASE WHEN 1 = 2 THEN c0 ELSE c0 + 1 END", I), [I]).sql   # type of c0 + 1 not certain
'CASE WHEN FALSE THEN c0 ELSE c0 + 1 END'
>>> fold_expr(Expr("CAST(c0 AS INT) > 1 OR TRUE", B), [SqlType("VARCHAR")]).sql   # may fail: kept
'CAST(c0 AS INT) > 1 OR TRUE'
"""
from __future__ import annotations

import re
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Optional, Sequence, Tuple

from sqlglot import exp
from sqlglot.optimizer.simplify import eval_boolean

from ..logical import Expr, Filter, Join, Node, Project
from ..types import SqlType
from .exprs import cannot_fail, generated, positional, sql_of, tree
from .tree import rebuild

T = exp.DataType.Type
INT_RANGES = {T.TINYINT: 7, T.SMALLINT: 15, T.INT: 31, T.BIGINT: 63}
COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
PREDICATES = COMPARISONS + (exp.And, exp.Or, exp.Not, exp.Is, exp.In, exp.Between, exp.Like, exp.ILike,
                            exp.Boolean, exp.Exists, exp.NullSafeEQ, exp.NullSafeNEQ)
INT32 = 31


def _fits(n: int, bits: int) -> bool:
    return -(1 << bits) <= n < (1 << bits)


def _unparen(t: exp.Expression) -> exp.Expression:
    while isinstance(t, exp.Paren):
        t = t.this
    return t


def _is_true(t) -> bool:
    t = _unparen(t)
    return isinstance(t, exp.Boolean) and t.this is True


def _is_false(t) -> bool:
    t = _unparen(t)
    return isinstance(t, exp.Boolean) and t.this is False


def _is_null(t) -> bool:
    t = _unparen(t)
    if isinstance(t, exp.Cast) and t.to.this == T.BOOLEAN:
        t = _unparen(t.this)
    return isinstance(t, exp.Null)


def _bool_null() -> exp.Expression:
    return exp.Cast(this=exp.Null(), to=exp.DataType.build("BOOLEAN"))


def _int_literal(t) -> Optional[int]:
    """The value of an integer literal (``3``, ``-3``)."""
    t = _unparen(t)
    neg = isinstance(t, exp.Neg)
    if neg:
        t = _unparen(t.this)
    if isinstance(t, exp.Literal) and not t.is_string and re.fullmatch(r"\d+", t.this):
        return -int(t.this) if neg else int(t.this)
    return None


def _int_operand(t) -> Optional[int]:
    """The value of an INTEGER constant: an integer literal within INTEGER's range, or a CAST of a literal to
    INT that succeeds."""
    n = _int_literal(t)
    if n is not None:
        return n if _fits(n, INT32) else None
    t = _unparen(t)
    if isinstance(t, exp.Cast) and t.to.this == T.INT:
        v = literal_value(t)
        return int(v[1]) if v is not None else None
    return None


def literal_value(t) -> Optional[Tuple[str, object]]:
    """(kind, value) of a literal whose value is certain: a number, string or boolean literal, or a CAST of
    a literal to an integer type or VARCHAR that succeeds."""
    t = _unparen(t)
    if isinstance(t, exp.Boolean):
        return ("bool", t.this)
    if isinstance(t, exp.Literal):
        if t.is_string:
            return ("str", t.this)
        # exact numbers only: DuckDB compares a DOUBLE (1e20) with an integer as doubles
        if not re.fullmatch(r"\d{1,18}(\.\d{0,18})?", t.this):
            return None
        try:
            return ("num", Decimal(t.this))
        except InvalidOperation:  # pragma: no cover - the pattern is a decimal number
            return None
    if isinstance(t, exp.Neg):
        v = literal_value(t.this)
        return ("num", -v[1]) if v and v[0] == "num" else None
    if isinstance(t, exp.Cast):
        inner = _unparen(t.this)
        to = t.to.this
        if to in INT_RANGES and isinstance(inner, exp.Literal):
            text = inner.this.strip() if inner.is_string else inner.this
            if re.fullmatch(r"[+-]?\d+", text) and _fits(int(text), INT_RANGES[to]):
                return ("num", Decimal(int(text)))
        if to in (T.VARCHAR, T.TEXT):
            n = _int_literal(inner)
            if n is not None:
                return ("str", str(n))
            if isinstance(inner, exp.Literal) and inner.is_string:
                return ("str", inner.this)
    return None


def _boolish(t, types: Sequence[SqlType]) -> bool:
    """Whether ``t`` is certainly a BOOLEAN (so ``t AND TRUE`` can become ``t`` without changing a type)."""
    t = _unparen(t)
    if isinstance(t, exp.Not):
        return True
    if isinstance(t, PREDICATES):
        return True
    if isinstance(t, exp.Cast) and t.to.this == T.BOOLEAN:
        return True
    i = positional(t)
    return i is not None and i < len(types) and types[i].base == "BOOLEAN"


def _certain_type(t, types: Sequence[SqlType]) -> Optional[str]:
    """The DuckDB type of a CASE branch when it is certain ('NULL' for a bare NULL), else None."""
    t = _unparen(t)
    if isinstance(t, exp.Null):
        return "NULL"
    if _boolish(t, types):
        return "BOOLEAN"
    i = positional(t)
    if i is not None:
        return types[i].sql if i < len(types) and types[i].sql != "UNKNOWN" else None
    if isinstance(t, exp.Literal) and t.is_string:
        return "VARCHAR"
    n = _int_literal(t)
    if n is not None:
        return "INT" if _fits(n, INT32) else None
    if isinstance(t, exp.Cast):
        return t.to.sql(dialect="duckdb").upper()
    return None


class _Folder:
    def __init__(self, types: Sequence[SqlType]):
        self.types = types
        self.made = set()   # ids of the nodes folding created

    def fold(self, t: exp.Expression) -> exp.Expression:
        """Fold bottom-up: children first."""
        for key, value in list(t.args.items()):
            if isinstance(value, exp.Expression):
                new = self.fold(value)
                if new is not value:
                    t.set(key, new)
            elif isinstance(value, list):
                items = [self.fold(v) if isinstance(v, exp.Expression) else v for v in value]
                if any(a is not b for a, b in zip(items, value)):
                    t.set(key, items)
        out = self.node(t)
        if out is not t:
            self.made.add(id(out))
        return out

    def node(self, t: exp.Expression) -> exp.Expression:
        if isinstance(t, exp.Paren) and id(t.this) in self.made and \
                isinstance(t.this, (exp.Boolean, exp.Null, exp.Literal, exp.Cast)) and not \
                (isinstance(t.this, exp.Literal) and t.this.this.startswith("-")):
            return t.this
        if isinstance(t, exp.And):
            return self.connector(t, stop=_is_false, keep=_is_true, stop_value=exp.false)
        if isinstance(t, exp.Or):
            return self.connector(t, stop=_is_true, keep=_is_false, stop_value=exp.true)
        if isinstance(t, exp.Not):
            if _is_true(t.this):
                return exp.false()
            if _is_false(t.this):
                return exp.true()
            if _is_null(t.this):
                return _bool_null()
            return t
        if isinstance(t, COMPARISONS):
            return self.comparison(t)
        if isinstance(t, exp.Is) and isinstance(t.expression, exp.Null):
            if _is_null(t.this):
                return exp.true()
            if literal_value(t.this) is not None:
                return exp.false()
            return t
        if isinstance(t, exp.Case) and t.args.get("this") is None:
            return self.case(t)
        if isinstance(t, (exp.Add, exp.Sub, exp.Mul)):
            return self.arithmetic(t)
        if isinstance(t, exp.Cast) and t.to.this in (T.VARCHAR, T.TEXT) and _int_literal(t.this) is not None:
            return exp.Literal.string(str(_int_literal(t.this)))
        return t

    def connector(self, t, stop, keep, stop_value) -> exp.Expression:
        a, b = t.this, t.expression
        if (stop(a) and cannot_fail(sql_of(b))) or (stop(b) and cannot_fail(sql_of(a))):
            return stop_value()
        if keep(a) and keep(b):
            return a.copy() if not isinstance(a, exp.Paren) else _unparen(a).copy()
        if keep(a) and _boolish(b, self.types):
            return b
        if keep(b) and _boolish(a, self.types):
            return a
        if (_is_null(a) and (keep(b) or _is_null(b))) or (_is_null(b) and keep(a)):
            return _bool_null()
        return t

    def comparison(self, t) -> exp.Expression:
        a, b = literal_value(t.this), literal_value(t.expression)
        if a is not None and b is not None and a[0] == b[0]:
            out = eval_boolean(t, a[1], b[1])
            if out is not None:
                return out
        if (_is_null(t.this) and (b is not None or cannot_fail(sql_of(t.expression)))) or \
                (_is_null(t.expression) and (a is not None or cannot_fail(sql_of(t.this)))):
            return _bool_null()
        return t

    def arithmetic(self, t) -> exp.Expression:
        a, b = _int_operand(t.this), _int_operand(t.expression)
        if a is None or b is None or not (_fits(a, INT32) and _fits(b, INT32)):
            return t
        # a bare literal where two literals meet (the parent folds further) or where it is compared
        n = a + b if isinstance(t, exp.Add) else a - b if isinstance(t, exp.Sub) else a * b
        if not _fits(n, INT32):
            return t   # DuckDB raises an INT32 overflow here: leave it to fail as it does
        lit = exp.Literal.number(n)
        if isinstance(t.parent, COMPARISONS) or isinstance(t.parent, (exp.Add, exp.Sub, exp.Mul)) and \
                _int_literal(t.parent.this if t.parent.expression is t else t.parent.expression) is not None:
            return lit
        return exp.Cast(this=lit, to=exp.DataType.build("INT"))

    def case(self, t: exp.Case) -> exp.Expression:
        ifs = t.args.get("ifs") or []
        default = t.args.get("default")
        branches = [i.args.get("true") for i in ifs] + ([default] if default is not None else [])
        kinds = {_certain_type(b, self.types) for b in branches}
        if None in kinds or len(kinds - {"NULL"}) != 1:
            return t   # the CASE's type might change
        (kind,) = kinds - {"NULL"}
        kept = []
        for i in ifs:
            cond = i.this
            if _is_false(cond) or _is_null(cond):
                continue
            if _is_true(cond):
                default = i.args.get("true")
                break
            kept.append(i)
        if len(kept) == len(ifs) and default is t.args.get("default"):
            return t
        if not kept:
            if default is None or _is_null(default):
                return exp.Cast(this=exp.Null(), to=exp.DataType.build(kind, dialect="duckdb"))
            if isinstance(_unparen(default), (exp.Literal, exp.Neg)):
                # a bare literal would adapt to its context (``tinyint_col + 2`` is a TINYINT); keep the type
                return exp.Cast(this=_unparen(default).copy(), to=exp.DataType.build(kind, dialect="duckdb"))
            return default.copy()
        return exp.Case(ifs=[k.copy() for k in kept], default=default.copy() if default is not None else None)


def fold_expr(e: Expr, types: Sequence[SqlType]) -> Expr:
    """``e`` (over columns of ``types``) with its constant parts folded; the same object if nothing folds
    (or if the folded tree cannot be written as SQL that reads back the same)."""
    folder = _Folder(types)
    out = folder.fold(tree(e.sql))
    if not folder.made:
        return e
    text = generated(out)
    return e if text is None or text == e.sql else Expr(text, e.type)


def _types(n: Node):
    return [f.type for f in n.fields]


def fold_constants(plan: Node, ctx=None) -> Node:
    def fn(n: Node) -> Node:
        if isinstance(n, Filter):
            p = fold_expr(n.predicate, _types(n.input))
            t = _unparen(tree(p.sql))
            if _is_true(t):
                return n.input
            if _is_null(t):
                p = Expr("FALSE", p.type)
            return n if p is n.predicate else Filter(n.input, p)
        if isinstance(n, Project):
            types = _types(n.input)
            exprs = tuple(fold_expr(e, types) for e in n.exprs)
            return n if all(a is b for a, b in zip(exprs, n.exprs)) else replace(n, exprs=exprs)
        if isinstance(n, Join) and n.residual is not None:
            r = fold_expr(n.residual, _types(n.left) + _types(n.right))
            if _is_true(tree(r.sql)):
                r = None
            return n if r is n.residual else replace(n, residual=r)
        return n

    return rebuild(plan, fn)
