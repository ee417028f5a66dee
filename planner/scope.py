"""The binding context shared by the binder and its mixins: scopes, relations and small AST helpers.

:class:`Scope` is the columns visible to an expression (the :class:`Rel` of one FROM clause, and the
enclosing query's scope for correlated subqueries).  ``name_of``, ``position_of``, ``split_and`` and
``is_subquery_predicate`` read sqlglot ASTs; ``DIALECT`` is the SQL dialect of programs.  ``bind`` and the
mixins (``bind_subquery``, ``bind_window``, ``bind_asof``, ``bind_star``) import them from here, so no
module of the binder imports another in a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from sqlglot import exp

from .types import SqlType

# The columns a LATERAL subquery gets for its correlation (planner.query_forms), hidden from its *.
LATERAL_PREFIX = "__lateral_"

# The SQL dialect of programs (and of bound expressions): DuckDB's, which follows PostgreSQL.
DIALECT = "duckdb"


def position_of(node: exp.Expression) -> Optional[int]:
    """Character offset of the earliest token under ``node`` (None if unknown)."""
    best = None
    for n in node.walk():
        meta = getattr(n, "_meta", None)
        if meta and "start" in meta:
            if best is None or meta["start"] < best:
                best = meta["start"]
    return best


def name_of(ident) -> str:
    """Normalized (lower-case unless quoted) name of an identifier or table."""
    if isinstance(ident, exp.Identifier):
        return ident.this if ident.quoted else ident.this.lower()
    if isinstance(ident, exp.Table):
        return name_of(ident.this)
    return str(ident).lower()


@dataclass
class Rel:
    """One relation in a FROM clause: its alias, column names and position in the joined row."""

    alias: Optional[str]
    names: List[str]
    types: List[SqlType]
    offset: int


class Scope:
    """The columns visible to an expression: the relations of one FROM clause."""

    def __init__(self, rels: Sequence[Rel], parent: Optional["Scope"] = None):
        self.rels = list(rels)
        self.parent = parent       # the enclosing query's scope, for correlated subqueries
        self.hidden: set = set()   # (relation index, column name) merged away by JOIN ... USING
        self.coalesced: set = set()   # (relation index, column name) of a RIGHT / FULL JOIN ... USING

    @property
    def width(self) -> int:
        return (self.parent.width if self.parent else 0) + sum(len(r.names) for r in self.rels)

    def types(self) -> List[SqlType]:
        return (self.parent.types() if self.parent else []) + [t for r in self.rels for t in r.types]

    def visible(self) -> List[str]:
        return [f"{r.alias}.{n}" if r.alias else n for r in self.rels for n in r.names]


def is_subquery_predicate(e: exp.Expression) -> bool:
    """EXISTS (...), x IN (SELECT ...), or either under NOT: decorrelated into semi/anti joins."""
    if isinstance(e, exp.Not):
        return is_subquery_predicate(e.this)
    return isinstance(e, exp.Exists) or (isinstance(e, exp.In) and e.args.get("query") is not None)


def split_and(e: Optional[exp.Expression]) -> List[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, exp.And):
        return split_and(e.this) + split_and(e.expression)
    if isinstance(e, exp.Paren):
        return split_and(e.this)
    return [e]


def is_comma(j: exp.Join) -> bool:
    """Whether ``j`` is a comma in FROM (``FROM a, b``), which binds more loosely than any JOIN, rather than a
    JOIN.  (sqlglot gives both one node; a comma's has no arguments at all.)"""
    return not any(k != "this" for k in j.args)


def joining(i: int, conjuncts: List[exp.Expression], touched: List[set], used: List[bool]) -> List[exp.Expression]:
    """The conjuncts not used yet that join relation ``i`` to the relations before it (``touched``: the relations
    each reads; it reads ``i`` and none after it), marked used: the keys of the join that adds relation ``i``."""
    out = []
    for ci, (c, rs) in enumerate(zip(conjuncts, touched)):
        if not used[ci] and i in rs and rs <= set(range(i + 1)):
            used[ci] = True
            out.append(c)
    return out
