"""``merge_filters``: Filter(Filter(x, a), b) -> Filter(x, a AND b), one pass over the rows instead of two.

>>> from planner.logical import Scan, Field, Filter, Expr, format_plan
>>> from planner.types import SqlType
>>> t = Scan("t", (Field("a", SqlType("INT")),))
>>> print(format_plan(merge_filters(Filter(Filter(t, Expr("c0 > 1", SqlType("BOOLEAN"))),
...                                        Expr("c0 < 5", SqlType("BOOLEAN"))), None)))
Filter c0 > 1 AND c0 < 5  -> (a INT)
  Scan t  -> (a INT)
"""
from __future__ import annotations

from ..logical import Filter, Node
from .exprs import conjoin, conjuncts
from .tree import rebuild


def merge_filters(plan: Node, ctx=None) -> Node:
    def fn(n: Node) -> Node:
        if isinstance(n, Filter) and isinstance(n.input, Filter):
            inner = n.input
            return Filter(inner.input, conjoin(conjuncts(inner.predicate) + conjuncts(n.predicate)))
        return n

    return rebuild(plan, fn)
