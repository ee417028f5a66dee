"""Rebuilding immutable plans: a node with new children, and bottom-up rewrites that visit a shared
subplan once."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, Tuple

from ..logical import Node


def with_inputs(node: Node, new: Tuple[Node, ...]) -> Node:
    """``node`` with its children replaced by ``new`` (the node itself when they are the same objects)."""
    if all(a is b for a, b in zip(node.inputs, new)) and len(new) == len(node.inputs):
        return node
    if hasattr(node, "branches"):
        return replace(node, branches=tuple(new))
    if hasattr(node, "left"):
        return replace(node, left=new[0], right=new[1])
    return replace(node, input=new[0])


def rebuild(node: Node, fn: Callable[[Node], Node]) -> Node:
    """Apply ``fn`` bottom-up: children first, then the node with its new children.  A subplan shared
    by several parents (the same object) is rewritten once."""
    memo: Dict[int, Node] = {}

    def visit(n: Node) -> Node:
        hit = memo.get(id(n))
        if hit is not None:
            return hit
        kids = n.inputs
        out = with_inputs(n, tuple(visit(k) for k in kids)) if kids else n
        out = fn(out)
        memo[id(n)] = out
        return out

    return visit(node)


def width(node: Node) -> int:
    return len(node.fields)
