"""Helpers the rules share for bound expressions (``Expr``: DuckDB SQL over positional columns ``c<i>``).

Expressions are parsed with sqlglot once per distinct SQL text (cached).  Rewrites edit the text itself,
token by token (renumbering ``c<i>``, substituting expressions, splitting and joining conjuncts), rather
than writing a parsed tree back: sqlglot's DuckDB generator does not always write what its parser reads
back (``UNIX_MICROS(x)``, which the binder writes for TUMBLE, comes back as ``EPOCH_US(x)``, a function
Spark does not have).  Where new text must be generated from a tree (:func:`generated`), it is used only
when parsing it gives that tree again.  A rewrite that changes nothing returns the very same ``Expr``, so a
rule that does not apply leaves the plan's text as it was.

>>> refs("c0 + c2 > 1 AND c0 < 'c9'")
frozenset({0, 2})
>>> remap(Expr("c3 > c1", BOOLEAN), {3: 0, 1: 1}).sql
'c0 > c1'
>>> substitute(Expr("c0 * 2 > c1", BOOLEAN), [Expr("c4 + 1", BIGINT), Expr("c2", BIGINT)]).sql
'(c4 + 1) * 2 > c2'
>>> [c.sql for c in conjuncts(Expr("(c0 > 1) AND (c1 = 2 AND c2 IS NULL)", BOOLEAN))]
['c0 > 1', 'c1 = 2', 'c2 IS NULL']
>>> conjoin([Expr("c0 > 1", BOOLEAN), Expr("c1 = 2 OR c2 = 3", BOOLEAN)]).sql
'c0 > 1 AND (c1 = 2 OR c2 = 3)'
>>> cannot_fail("c0 > 1 AND COALESCE(c1, 'x') = 'y'"), cannot_fail("CAST(c0 AS INT) > 1"), cannot_fail("CAST(NULL AS INT)")
(True, False, True)
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, FrozenSet, List, Mapping, Optional, Sequence, Union

from sqlglot import exp, parse_one
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from ..logical import Expr, col
from ..types import BIGINT, BOOLEAN, UNKNOWN, SqlType

DIALECT = "duckdb"
_COLUMN = re.compile(r"c(\d+)")


def column_index(sql: str) -> Optional[int]:
    """``i`` if ``sql`` is just the positional column ``c<i>``, else None."""
    m = _COLUMN.fullmatch(sql)
    return int(m.group(1)) if m else None


@lru_cache(maxsize=1 << 16)
def _tree(sql: str) -> exp.Expression:
    return parse_one(sql, read=DIALECT)


def tree(sql: str) -> exp.Expression:
    """A fresh (mutable) AST of ``sql``."""
    return _tree(sql).copy()


def sql_of(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)


def positional(node: exp.Expression) -> Optional[int]:
    """``i`` if the AST node is a reference to the positional column ``c<i>``."""
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        return column_index(node.name)
    return None


@lru_cache(maxsize=1 << 16)
def refs(sql: str) -> FrozenSet[int]:
    """The positional columns ``sql`` reads."""
    i = column_index(sql)
    if i is not None:
        return frozenset((i,))
    return frozenset(p for p in (positional(c) for c in _tree(sql).find_all(exp.Column)) if p is not None)


@lru_cache(maxsize=1 << 16)
def _tokens(sql: str):
    return tuple(Dialect.get_or_raise(DIALECT).tokenizer().tokenize(sql))


@lru_cache(maxsize=1 << 16)
def _column_spans(sql: str):
    """(start, end, i) of every positional column ``c<i>`` written in ``sql`` (not a function name, not
    after a dot, not in a string)."""
    toks = _tokens(sql)
    out = []
    for k, t in enumerate(toks):
        if t.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and _COLUMN.fullmatch(t.text):
            if k and toks[k - 1].token_type == TokenType.DOT:
                continue
            if k + 1 < len(toks) and toks[k + 1].token_type == TokenType.L_PAREN:
                continue
            out.append((t.start, t.end, int(t.text[1:])))
    return tuple(out)


def _replace_columns(sql: str, fn: Callable[[int], str]) -> str:
    pieces, last = [], 0
    for start, end, i in _column_spans(sql):
        pieces += [sql[last:start], fn(i)]
        last = end + 1
    pieces.append(sql[last:])
    return "".join(pieces)


def generated(node: exp.Expression) -> Optional[str]:
    """DuckDB SQL for ``node`` when parsing it gives ``node`` back, else None."""
    text = sql_of(node)
    try:
        return text if _tree(text) == node else None
    except Exception:  # sqlglot cannot read what it wrote
        return None


def remap(e: Expr, mapping: Union[Mapping[int, int], Callable[[int], int]]) -> Expr:
    """``e`` with every ``c<i>`` renamed ``c<mapping[i]>`` (the same object when nothing moves)."""
    get = mapping if callable(mapping) else mapping.__getitem__
    used = refs(e.sql)
    if all(get(i) == i for i in used):
        return e
    out = _replace_columns(e.sql, lambda i: col(get(i)))
    if refs(out) != frozenset(get(i) for i in used):   # pragma: no cover - the tokens are the columns
        raise ValueError(f"cannot renumber the columns of {e.sql}")
    return Expr(out, e.type)


def shift(e: Expr, by: int) -> Expr:
    """``e`` with every ``c<i>`` renamed ``c<i + by>``."""
    return remap(e, lambda i: i + by)


_SIMPLE = re.compile(r"c\d+|\d+(\.\d+)?|'[^']*'|TRUE|FALSE|NULL", re.I)


def substitute(e: Expr, exprs: Sequence[Expr]) -> Expr:
    """``e`` with every ``c<i>`` replaced by ``exprs[i]`` (parenthesized unless a column or literal): ``e``
    moved below the projection that computes ``exprs``."""
    used = refs(e.sql)
    if all(column_index(exprs[i].sql) == i for i in used):
        return e

    def value(i: int) -> str:
        text = exprs[i].sql
        return text if _SIMPLE.fullmatch(text) else f"({text})"

    return Expr(_replace_columns(e.sql, value), e.type)


def _unparen(t: exp.Expression) -> exp.Expression:
    while isinstance(t, exp.Paren):
        t = t.this
    return t


def _flat_and(t: exp.Expression) -> List[exp.Expression]:
    t = _unparen(t)
    if isinstance(t, exp.And):
        return _flat_and(t.this) + _flat_and(t.expression)
    return [t]


def _top_level(sql: str):
    """The tokens of ``sql`` outside parentheses and CASE ... END, with the text's outer parentheses removed:
    (tokens, [(token, is top level)])."""
    toks = list(_tokens(sql))
    while len(toks) >= 2 and toks[0].token_type == TokenType.L_PAREN and toks[-1].token_type == TokenType.R_PAREN:
        depth = 0
        for k, t in enumerate(toks):
            depth += t.token_type == TokenType.L_PAREN
            depth -= t.token_type == TokenType.R_PAREN
            if depth == 0:
                break
        if k != len(toks) - 1:
            break
        toks = toks[1:-1]
    depth, out = 0, []
    for t in toks:
        if t.token_type == TokenType.R_PAREN or t.token_type == TokenType.END:
            depth -= 1
        out.append((t, depth == 0))
        if t.token_type == TokenType.L_PAREN or t.token_type == TokenType.CASE:
            depth += 1
    return toks, out


def _pieces(sql: str, toks, cuts) -> List[str]:
    """The texts between the tokens at positions ``cuts``."""
    bounds = [-1] + list(cuts) + [len(toks)]
    return [sql[toks[a + 1].start:toks[b - 1].end + 1].strip() for a, b in zip(bounds, bounds[1:])]


@lru_cache(maxsize=1 << 16)
def _split_and(sql: str) -> Optional[tuple]:
    """The texts of the AND-ed terms of ``sql``, cut from the text at its top-level ANDs (not BETWEEN's),
    or None when that does not give the terms sqlglot reads."""
    parts = _flat_and(_tree(sql))
    if len(parts) == 1:
        return None
    toks, marked = _top_level(sql)
    cuts, between = [], 0
    for k, (t, top) in enumerate(marked):
        if not top:
            continue
        if t.token_type == TokenType.BETWEEN:
            between += 1
        elif t.token_type == TokenType.AND:
            if between:
                between -= 1
            else:
                cuts.append(k)
        elif t.token_type == TokenType.OR:
            return None
    texts: List[str] = []
    for x in (_pieces(sql, toks, cuts) if cuts else []):
        while isinstance(_tree(x), exp.Paren) and _unparen(_tree(x[1:-1].strip())) == _unparen(_tree(x)):
            x = x[1:-1].strip()
        inner = _split_and(x)
        texts += list(inner) if inner is not None else [x]
    if len(texts) != len(parts) or any(_unparen(_tree(x)) != p for x, p in zip(texts, parts)):
        return None
    return tuple(texts)


def conjuncts(e: Optional[Expr]) -> List[Expr]:
    """The AND-ed terms of a predicate (``[e]`` itself when it is not a conjunction)."""
    if e is None:
        return []
    texts = _split_and(e.sql)
    if texts is None:
        return [e]
    return [Expr(x, BOOLEAN) for x in texts]


def conjoin(parts: Sequence[Expr]) -> Optional[Expr]:
    """The AND of ``parts`` (None for none, the part itself for one)."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    text = " AND ".join(f"({p.sql})" if isinstance(_tree(p.sql), exp.Or) else p.sql for p in parts)
    return Expr(text, BOOLEAN)


def equality_sides(sql: str) -> Optional[tuple]:
    """The texts of ``a`` and ``b`` when ``sql`` is ``a = b``, else None."""
    t = _unparen(_tree(sql))
    if not isinstance(t, exp.EQ):
        return None
    toks, marked = _top_level(sql)
    eqs = [k for k, (tok, top) in enumerate(marked) if top and tok.token_type == TokenType.EQ]
    if len(eqs) != 1:
        return None
    a, b = _pieces(sql, toks, eqs)
    if _tree(a) != t.this or _tree(b) != t.expression:
        return None
    return a, b


# Expression nodes that cannot raise a row error whatever their (well-typed) operands: comparisons, boolean
# logic, NULL tests, CASE and COALESCE pick values.  Everything else (CAST, arithmetic that can overflow,
# ``//``, json_extract, ...) may fail on some row, and a row whose expression fails stays out of its view.
_SAFE = (exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.And, exp.Or, exp.Not,
         exp.Is, exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Between,
         exp.In, exp.Like, exp.ILike, exp.Coalesce, exp.Case, exp.If, exp.Upper, exp.Lower, exp.Length, exp.DPipe,
         exp.Concat, exp.Tuple, exp.DataType, exp.Substring)

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?")


def _valid_time_literal(n: exp.Cast) -> bool:
    """Whether ``n`` is a CAST of a string literal to DATE or TIMESTAMP that succeeds (a constant: it fails on
    every row or on none)."""
    import datetime
    if not isinstance(n.this, exp.Literal) or not n.this.is_string:
        return False
    text = n.this.this
    try:
        if n.to.this == exp.DataType.Type.DATE and _DATE.fullmatch(text):
            datetime.date.fromisoformat(text)
            return True
        if n.to.this in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ) and _TIMESTAMP.fullmatch(text):
            datetime.datetime.fromisoformat(text)
            return True
    except ValueError:
        return False
    return False


@lru_cache(maxsize=1 << 16)
def cannot_fail(sql: str) -> bool:
    """Whether evaluating ``sql`` can never fail on a row (so dropping or skipping it changes no result)."""
    if column_index(sql) is not None:
        return True
    for n in _tree(sql).walk():
        if isinstance(n, exp.Cast) and (n.to.this in (exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT)
                                        or _valid_time_literal(n) or isinstance(n.this, exp.Null)):
            continue
        if isinstance(n, exp.Neg) and isinstance(n.this, exp.Literal):
            continue
        if not isinstance(n, _SAFE) or (isinstance(n, exp.In) and n.args.get("query") is not None):
            return False
    return True


def type_of(sql: str, types: Sequence[SqlType]) -> SqlType:
    """Best-effort type of an expression over columns of ``types`` (as the binder infers it)."""
    i = column_index(sql)
    if i is not None:
        return types[i]
    from ..semantics import _annotate
    from ..types import from_annotation
    try:
        return from_annotation(_annotate(tree(sql), types).type)
    except Exception:  # sqlglot cannot type every expression
        return UNKNOWN


__all__ = ["column_index", "tree", "sql_of", "positional", "refs", "remap", "shift", "substitute", "conjuncts",
           "conjoin", "cannot_fail", "type_of", "BIGINT"]
