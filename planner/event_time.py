"""Event-time clauses of CREATE TABLE, taken out of the statement before sqlglot parses it.

Two spellings declare a table's event-time column and its lateness:

* Feldera, a column constraint: ``date_time TIMESTAMP LATENESS INTERVAL 4 SECONDS`` (also
  ``INTERVAL '4' SECOND``, ``INTERVAL '4 seconds'``, ``INTERVAL '1:30' MINUTE TO SECOND``);
* Flink, a table element: ``WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND`` (the column minus
  a constant interval, or the column itself: lateness 0).

sqlglot parses neither, so :func:`strip_event_time` removes them from the statement's tokens (which keep
their offsets into the program, so later errors still point into the user's SQL) and returns them as
:class:`EventTimeClause` values; ``program.table_def`` checks them against the columns.

>>> from sqlglot.dialects.dialect import Dialect
>>> sql = "CREATE TABLE bid (price INT, ts TIMESTAMP LATENESS INTERVAL '4' SECOND)"
>>> tokens, clauses = strip_event_time(Dialect.get_or_raise("duckdb").tokenizer().tokenize(sql), sql)
>>> " ".join(t.text for t in tokens)
'CREATE TABLE bid ( price INT , ts TIMESTAMP )'
>>> clauses[0].column, clauses[0].lateness
('ts', 4000000)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import List, Optional, Sequence, Tuple

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, ParseError as SqlglotParseError
from sqlglot.tokens import Token, TokenType

from .scope import DIALECT
from .errors import ParseError, UnsupportedError

# fixed-length units, in microseconds (months and years have no fixed length)
MICROS = {"microsecond": 1, "millisecond": 1000, "second": 10 ** 6, "minute": 60 * 10 ** 6,
          "hour": 3600 * 10 ** 6, "day": 86400 * 10 ** 6}
_SPAN_ORDER = ("day", "hour", "minute", "second")
_UNIT_ALIASES = {"us": "microsecond", "ms": "millisecond", "s": "second", "sec": "second", "secs": "second",
                 "min": "minute", "mins": "minute", "h": "hour", "hr": "hour", "hrs": "hour", "d": "day"}


def unit_micros(unit: str) -> Optional[int]:
    """Microseconds of one ``unit`` (``SECONDS``, ``second``, ``ms``...), None if it has no fixed length."""
    u = unit.lower()
    u = _UNIT_ALIASES.get(u, u)
    if u not in MICROS and u.endswith("s"):
        u = u[:-1]
    return MICROS.get(u)


def _number(text: str) -> Optional[Decimal]:
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        return None


def _exact(value: Decimal) -> Optional[int]:
    return int(value) if value == value.to_integral_value() else None


def interval_micros(e: exp.Expression) -> Optional[int]:
    """A fixed-length INTERVAL literal in microseconds (may be negative), None if it is not one.

    >>> from sqlglot import parse_one
    >>> [interval_micros(parse_one(s, read="duckdb")) for s in ("INTERVAL 4 SECONDS", "INTERVAL '4 seconds'",
    ...     "INTERVAL '1:30' MINUTE TO SECOND", "INTERVAL '1' MONTH", "INTERVAL '1.5' SECOND")]
    [4000000, 4000000, 90000000, None, 1500000]
    """
    if not isinstance(e, exp.Interval) or not isinstance(e.this, exp.Literal):
        return None
    text = str(e.this.this).strip()
    unit = e.args.get("unit")
    if isinstance(unit, exp.IntervalSpan):
        first, last = unit.this.name.lower().rstrip("s"), unit.expression.name.lower().rstrip("s")
        if first not in _SPAN_ORDER or last not in _SPAN_ORDER:
            return None
        units = _SPAN_ORDER[_SPAN_ORDER.index(first):_SPAN_ORDER.index(last) + 1]
        sign = -1 if text.startswith("-") else 1
        parts = re.split(r"[\s:]+", text.lstrip("+-"))
        if len(units) < 1 or len(parts) != len(units):
            return None
        total = Decimal(0)
        for p, u in zip(parts, units):
            n = _number(p)
            if n is None or n < 0 or (u != "second" and n != n.to_integral_value()):
                return None
            total += n * MICROS[u]
        out = _exact(total)
        return None if out is None else sign * out
    if unit is not None:
        per = unit_micros(unit.name)
        n = _number(text)
        if per is None or n is None:
            return None
        return _exact(n * per)
    # INTERVAL '4 seconds', INTERVAL '1 hour 30 minutes'
    words = text.split()
    if not words or len(words) % 2:
        return None
    total = Decimal(0)
    for value, u in zip(words[::2], words[1::2]):
        n, per = _number(value), unit_micros(u)
        if n is None or per is None:
            return None
        total += n * per
    return _exact(total)


@dataclass(frozen=True)
class EventTimeClause:
    """One event-time declaration of a CREATE TABLE.

    kind:      ``LATENESS`` (Feldera's column constraint) or ``WATERMARK`` (Flink's table element)
    column:    the column's name as written; ``quoted``: whether it was a quoted identifier
    column_at: offset of the column's name (in the column definition, or after WATERMARK FOR)
    at:        offset of the clause's first word (LATENESS or WATERMARK)
    lateness:  in microseconds, >= 0
    """

    kind: str
    column: str
    quoted: bool
    column_at: int
    at: int
    lateness: int


_UNIT_WORDS = {w for u in MICROS for w in (u, u + "s")} | {"month", "months", "year", "years", "week", "weeks"}


def _is_word(t: Token, word: str) -> bool:
    return t.token_type not in (TokenType.STRING, TokenType.IDENTIFIER) and t.text.upper() == word


def _is_name(t: Token) -> bool:
    return t.token_type in (TokenType.VAR, TokenType.IDENTIFIER) or (
        t.token_type != TokenType.STRING and re.fullmatch(r"[A-Za-z_]\w*", t.text) is not None)


def _show(t: Token, sql: str) -> str:
    return "'" + sql[t.start:t.end + 1] + "'"


def _parse_expression(tokens: Sequence[Token], sql: str) -> exp.Expression:
    """One expression from ``tokens`` (which keep their offsets into ``sql``)."""
    p = Dialect.get_or_raise(DIALECT).parser(error_level=ErrorLevel.IMMEDIATE)
    try:
        trees = [t for t in p.parse(list(tokens), sql) if t is not None]
    except SqlglotParseError:
        trees = []
    if len(trees) != 1 or isinstance(trees[0], exp.Command):
        raise ParseError("syntax error: cannot read this expression", sql=sql, offset=tokens[0].start)
    return trees[0]


def _lateness(tokens: Sequence[Token], i: int, end: int, sql: str) -> Tuple[int, int]:
    """(microseconds, index after the interval) of the INTERVAL literal at ``tokens[i]`` (after LATENESS)."""
    after_lateness = tokens[i - 1]
    if i >= end or tokens[i].token_type != TokenType.INTERVAL:
        found = f", found {_show(tokens[i], sql)}" if i < end else ""
        raise ParseError(f"syntax error: expected an INTERVAL after LATENESS{found}", sql=sql,
                         offset=tokens[i].start if i < end else after_lateness.end + 1)
    j = i + 1
    if j < end and tokens[j].token_type in (TokenType.DASH, TokenType.PLUS):
        j += 1
    if j >= end or tokens[j].token_type not in (TokenType.NUMBER, TokenType.STRING):
        raise ParseError("syntax error: expected the INTERVAL's value after INTERVAL", sql=sql,
                         offset=tokens[j].start if j < end else tokens[i].end + 1)
    j += 1
    if j < end and tokens[j].token_type != TokenType.STRING and tokens[j].text.lower() in _UNIT_WORDS:
        j += 1
        if j + 1 < end and _is_word(tokens[j], "TO") and tokens[j + 1].text.lower() in _UNIT_WORDS:
            j += 2
    e = _parse_expression(tokens[i:j], sql)
    micros = interval_micros(e)
    if micros is None:
        raise UnsupportedError(f"LATENESS {sql[tokens[i].start:tokens[j - 1].end + 1]} is not supported: the lateness "
                               "must be an INTERVAL of fixed length (days or smaller units)", sql=sql,
                               offset=tokens[i].start)
    if micros < 0:
        raise UnsupportedError("a negative LATENESS is not supported", sql=sql, offset=tokens[i].start)
    return micros, j


def _watermark(tokens: Sequence[Token], s: int, e: int, sql: str) -> EventTimeClause:
    """``WATERMARK FOR col AS col [- INTERVAL ...]`` in ``tokens[s:e]``."""
    col_i, as_i = s + 2, s + 3
    if col_i >= e or not _is_name(tokens[col_i]):
        raise ParseError("syntax error: expected a column name after WATERMARK FOR", sql=sql,
                         offset=tokens[col_i].start if col_i < e else tokens[s + 1].end + 1)
    if as_i >= e or tokens[as_i].token_type != TokenType.ALIAS:
        raise ParseError(f"syntax error: expected AS after WATERMARK FOR {tokens[col_i].text}", sql=sql,
                         offset=tokens[as_i].start if as_i < e else tokens[col_i].end + 1)
    if as_i + 1 >= e:
        raise ParseError("syntax error: expected an expression after AS", sql=sql, offset=tokens[as_i].end + 1)
    c = tokens[col_i]
    quoted = c.token_type == TokenType.IDENTIFIER
    expr = _parse_expression(tokens[as_i + 1:e], sql)

    def same_column(x: exp.Expression) -> bool:
        while isinstance(x, exp.Paren):
            x = x.this
        if not isinstance(x, exp.Column) or x.table:
            return False
        ident = x.this
        if quoted or (isinstance(ident, exp.Identifier) and ident.quoted):
            return ident.this == c.text and bool(ident.quoted) == quoted
        return ident.this.lower() == c.text.lower()

    body = expr.this if isinstance(expr, exp.Paren) else expr
    lateness: Optional[int] = None
    if same_column(body):
        lateness = 0
    elif isinstance(body, exp.Sub) and same_column(body.this):
        lateness = interval_micros(body.expression)
    if lateness is None or lateness < 0:
        written = sql[tokens[as_i + 1].start:tokens[e - 1].end + 1]
        raise UnsupportedError(f"WATERMARK FOR {c.text} AS {written} is not supported: the watermark must be the "
                               f"column minus a constant INTERVAL ({c.text} - INTERVAL '4' SECOND) or the column "
                               "itself", sql=sql, offset=tokens[as_i + 1].start)
    return EventTimeClause("WATERMARK", c.text, quoted, c.start, tokens[s].start, lateness)


def _elements(tokens: Sequence[Token], open_i: int) -> Tuple[List[Tuple[int, int]], int]:
    """The (start, end) token ranges of the comma-separated elements inside the parenthesis at ``open_i``,
    and the index of the closing parenthesis (``len(tokens)`` if unclosed)."""
    out = []
    depth = 0
    start = open_i + 1
    for i in range(open_i, len(tokens)):
        t = tokens[i].token_type
        if t == TokenType.L_PAREN:
            depth += 1
        elif t == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                out.append((start, i))
                return out, i
        elif t == TokenType.COMMA and depth == 1:
            out.append((start, i))
            start = i + 1
    out.append((start, len(tokens)))
    return out, len(tokens)


def strip_event_time(tokens: List[Token], sql: str) -> Tuple[List[Token], Tuple[EventTimeClause, ...]]:
    """A CREATE TABLE statement's tokens without its event-time clauses, and those clauses (in order).
    Other statements come back unchanged."""
    if len(tokens) < 2 or tokens[0].token_type != TokenType.CREATE:
        return tokens, ()
    table_i = next((i for i, t in enumerate(tokens[:6]) if t.token_type == TokenType.TABLE), None)
    if table_i is None:
        return tokens, ()
    open_i = next((i for i in range(table_i + 1, len(tokens)) if tokens[i].token_type == TokenType.L_PAREN), None)
    if open_i is None:
        return tokens, ()
    elements, _ = _elements(tokens, open_i)
    drop: set = set()
    clauses: List[EventTimeClause] = []
    for n, (s, e) in enumerate(elements):
        if s >= e:
            continue
        if _is_word(tokens[s], "WATERMARK") and s + 1 < e and tokens[s + 1].token_type == TokenType.FOR:
            clauses.append(_watermark(tokens, s, e, sql))
            drop.update(range(s, e))
            # with the comma that separates it from its neighbour
            if n > 0:
                drop.add(s - 1)
            elif e < len(tokens) and tokens[e].token_type == TokenType.COMMA:
                drop.add(e)
            continue
        depth = 0
        for k in range(s, e):
            t = tokens[k].token_type
            depth += (t == TokenType.L_PAREN) - (t == TokenType.R_PAREN)
            if depth == 0 and k > s + 1 and tokens[k].token_type == TokenType.VAR and _is_word(tokens[k], "LATENESS"):
                micros, after = _lateness(tokens, k + 1, e, sql)
                name = tokens[s]
                clauses.append(EventTimeClause("LATENESS", name.text, name.token_type == TokenType.IDENTIFIER,
                                               name.start, tokens[k].start, micros))
                drop.update(range(k, after))
                break
    if not clauses:
        return tokens, ()
    return [t for i, t in enumerate(tokens) if i not in drop], tuple(clauses)


__all__ = ["EventTimeClause", "MICROS", "interval_micros", "strip_event_time", "unit_micros"]
