"""The Feldera and Flink spellings of nested types, in DuckDB's, at the token level (sqlglot's DuckDB parser
reads neither): ``INT ARRAY`` -> ``INT[]``, ``MAP<K, V>`` -> ``MAP(K, V)``.  ``ARRAY<T>``, ``T[]``,
``MAP(K, V)``, ``ROW(a T)`` and ``STRUCT(a T)`` it reads as they are.  The new tokens keep the offsets of the
ones they replace, so errors still point into the user's text.

>>> from sqlglot.dialects.dialect import Dialect
>>> def spelled(sql):
...     return " ".join(t.text for t in nested_type_spellings(Dialect.get_or_raise("duckdb").tokenize(sql)))
>>> spelled("CREATE TABLE t (a INT ARRAY ARRAY, m MAP<VARCHAR, MAP<INT, DECIMAL(5, 2) ARRAY>>, b INT)")
'CREATE TABLE t ( a INT [ ] [ ] , m MAP ( VARCHAR , MAP ( INT , DECIMAL ( 5 , 2 ) [ ] ) ) , b INT )'
>>> spelled("SELECT ARRAY[1, 2], x < 3 AND y > 2 FROM t")
'SELECT ARRAY [ 1 , 2 ] , x < 3 AND y > 2 FROM t'
"""
from __future__ import annotations

from typing import List, Optional

from sqlglot.parser import Parser
from sqlglot.tokens import Token, TokenType

_TYPE_END = set(Parser.TYPE_TOKENS) | {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.GT}
_NOT_SUFFIX = (TokenType.L_BRACKET, TokenType.L_PAREN, TokenType.LT)


def _like(t: Token, kind: TokenType, text: str) -> Token:
    return Token(kind, text, t.line, t.col, t.start, t.end)


def _matching_gt(tokens: List[Token], lt: int) -> Optional[int]:
    depth = 0
    for j in range(lt, len(tokens)):
        kind = tokens[j].token_type
        if kind == TokenType.LT:
            depth += 1
        elif kind == TokenType.GT:
            depth -= 1
            if depth == 0:
                return j
        elif kind in (TokenType.SEMICOLON,):
            return None
    return None


def nested_type_spellings(tokens: List[Token]) -> List[Token]:
    """``tokens`` with ``T ARRAY`` and ``MAP<K, V>`` in DuckDB's spelling (see the module doc)."""
    tokens = list(tokens)
    for i, t in enumerate(tokens):
        if t.token_type == TokenType.MAP and i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.LT:
            j = _matching_gt(tokens, i + 1)
            if j is not None:
                tokens[i + 1] = _like(tokens[i + 1], TokenType.L_PAREN, "(")
                tokens[j] = _like(tokens[j], TokenType.R_PAREN, ")")
    out: List[Token] = []
    for i, t in enumerate(tokens):
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if t.token_type == TokenType.ARRAY and out and out[-1].token_type in _TYPE_END and \
                (after is None or after.token_type not in _NOT_SUFFIX):
            out += [_like(t, TokenType.L_BRACKET, "["), _like(t, TokenType.R_BRACKET, "]")]
        else:
            out.append(t)
    return out
