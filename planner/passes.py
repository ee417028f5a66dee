"""Plan rewrite passes: pure functions ``(plan) -> plan`` run in a fixed order.

The pass manager checks after every pass that the output schema is unchanged
and can record the plan after each pass (``trace``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, List, Optional, Tuple

from .errors import InternalError
from .logical import Expr, Filter, Node, format_plan
from .types import BOOLEAN


def rebuild(node: Node, fn: Callable[[Node], Node]) -> Node:
    """Apply ``fn`` bottom-up: children first, then the node with its new children."""
    kids = node.inputs
    if kids:
        new = tuple(rebuild(k, fn) for k in kids)
        if new != kids:
            node = _with_inputs(node, new)
    return fn(node)


def _with_inputs(node: Node, new: Tuple[Node, ...]) -> Node:
    names = {"input": 1, "left": 2, "branches": 0}
    if hasattr(node, "branches"):
        return replace(node, branches=new)
    if hasattr(node, "left"):
        return replace(node, left=new[0], right=new[1])
    return replace(node, input=new[0])


def merge_filters(plan: Node) -> Node:
    """Filter(Filter(x, a), b) -> Filter(x, (a) AND (b)): one pass over the rows instead of two."""

    def fn(n: Node) -> Node:
        if isinstance(n, Filter) and isinstance(n.input, Filter):
            inner = n.input
            return Filter(inner.input, Expr(f"({inner.predicate.sql}) AND ({n.predicate.sql})", BOOLEAN))
        return n

    return rebuild(plan, fn)


# Order matters only between passes that enable each other; there is one pass today.
PASSES: Tuple[Callable[[Node], Node], ...] = (merge_filters,)


def optimize(plan: Node, trace: Optional[List[str]] = None) -> Node:
    """Run every pass in ``PASSES``; checks the schema after each one."""
    for p in PASSES:
        out = p(plan)
        if [f.type for f in out.fields] != [f.type for f in plan.fields] or \
                [f.name for f in out.fields] != [f.name for f in plan.fields]:
            raise InternalError(f"pass {p.__name__} changed the schema")
        if trace is not None:
            trace.append(f"-- after {p.__name__}\n{format_plan(out)}")
        plan = out
    return plan
