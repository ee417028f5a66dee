"""``push_down_filters``: every conjunct of a filter moves as far down as it keeps its meaning.

Fewer rows reach the operators above, and the state of joins, aggregates, DISTINCT and windows holds
only the rows that can matter.  A filter's predicate is split into its AND-ed terms; each moves on its own:

* below a Project: rewritten over the projection's input (each ``c<i>`` replaced by the i-th expression;
  expressions are deterministic, since views reject non-deterministic functions);
* through an inner join: to the side whose columns it uses (right-side positions shifted down); a term
  that uses both sides becomes a join key when it is ``left expression = right expression``, else part of
  the join's residual; a term with no columns goes to the left side;
* through outer joins only to the preserved side: the left side of a LEFT JOIN, the right side of a RIGHT
  JOIN, neither for FULL (a filter over the NULL-padded side would keep rows the padding created);
* through semi and anti joins to the left side (their output is the left row);
* into every branch of a UNION ALL, and into both sides of INTERSECT/EXCEPT, when the columns it uses
  have the same type in every branch (``CAST(x AS VARCHAR)`` of an INT and of a DOUBLE differ);
* into the input of an Aggregate when it uses only group keys (rewritten over the key expressions; never
  for a global aggregate, which has one row even over no input);
* into the input of a DISTINCT;
* below a Window when it uses only columns the window is partitioned by (it removes whole partitions).

A join's own ON condition is split the same way: a term over one side only goes into that side where
that keeps the join's meaning (inner: either side; LEFT: the right side; RIGHT: the left side; SEMI: either
side; ANTI: the right side), and an equality between the two sides becomes a key (not for a join whose keys
match NULLs, ``IS NOT DISTINCT FROM``).

Not done: turning an outer join into an inner one when a filter above rejects the padded rows' NULLs;
moving a predicate into a subplan that is another view's plan (that view's operators and state are shared
as they are; the filter stays above).  A term that fails on a row (``CAST('x' AS INT)``) keeps the row out
wherever it is evaluated, so moving it changes no view, only which operator records the row error.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from ..logical import (Aggregate, Distinct, Expr, Filter, Join, Node, Project, SetOp, UnionAll, Unnest, Window)
from .exprs import column_index, conjoin, conjuncts, equality_sides, refs, shift, substitute, type_of
from .tree import width, with_inputs

Preds = Tuple[Expr, ...]


def _wrap(node: Node, preds: Sequence[Expr]) -> Node:
    return Filter(node, conjoin(list(preds))) if preds else node


def _equi_sides(p: Expr, nl: int) -> Optional[Tuple[str, str]]:
    """(left side, right side) of ``a = b`` with ``a`` over left columns only and ``b`` over right ones."""
    sides = equality_sides(p.sql)
    if sides is None:
        return None
    ra, rb = refs(sides[0]), refs(sides[1])
    if not ra or not rb:
        return None
    if max(ra) < nl <= min(rb):
        return sides
    if max(rb) < nl <= min(ra):
        return sides[1], sides[0]
    return None


# Where a term of a join's ON condition over one side only ("none": no columns) may go, by join kind;
# missing: it stays in the condition.  A term over the side whose rows are kept without a match (the
# left of a LEFT JOIN, the left of an ANTI JOIN) must stay: it decides matching, not which rows exist.
ON_TERM_GOES = {
    "inner": {"left": "left", "right": "right", "none": "left"},
    "left": {"right": "right", "none": "right"},
    "right": {"left": "left", "none": "left"},
    "full": {},
    "semi": {"left": "left", "right": "right", "none": "right"},
    "anti": {"right": "right", "none": "right"},
}


def _same_types(branches: Sequence[Node], cols) -> bool:
    for i in cols:
        ts = {b.fields[i].type.sql for b in branches}
        if len(ts) != 1 or "UNKNOWN" in ts:
            return False
    return True


class _Pusher:
    def __init__(self, ctx):
        self.barriers = ctx.view_plan_ids() if ctx is not None else frozenset()
        self.memo: Dict[Tuple[int, Tuple[str, ...]], Node] = {}

    def visit(self, node: Node, preds: Preds) -> Node:
        key = (id(node), tuple(p.sql for p in preds))
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._visit(node, preds)
        return hit

    def _visit(self, node: Node, preds: Preds) -> Node:
        if id(node) in self.barriers:
            return _wrap(node, preds)
        handler = getattr(self, f"push_{type(node).__name__}", None)
        if handler is None:   # Scan, OneRow
            return _wrap(node, preds)
        return handler(node, preds)

    def children(self, node: Node) -> Node:
        """``node`` with nothing pushed into it, its children visited."""
        return with_inputs(node, tuple(self.visit(c, ()) for c in node.inputs))

    # ------------------------------------------------------------------ linear nodes
    def push_Filter(self, node: Filter, preds: Preds) -> Node:
        own = conjuncts(node.predicate)
        out = self.visit(node.input, tuple(own) + preds)
        if not preds and isinstance(out, Filter) and out.input is node.input and \
                [c.sql for c in conjuncts(out.predicate)] == [c.sql for c in own]:
            return node   # nothing moved
        return out

    def push_Project(self, node: Project, preds: Preds) -> Node:
        moved = tuple(substitute(p, node.exprs) for p in preds)
        child = self.visit(node.input, moved)
        return node if child is node.input else replace(node, input=child)

    def push_UnionAll(self, node: UnionAll, preds: Preds) -> Node:
        used = set().union(*(refs(p.sql) for p in preds)) if preds else set()
        if preds and _same_types(node.branches, used):
            return replace(node, branches=tuple(self.visit(b, preds) for b in node.branches))
        return _wrap(self.children(node), preds)

    def push_SetOp(self, node: SetOp, preds: Preds) -> Node:
        used = set().union(*(refs(p.sql) for p in preds)) if preds else set()
        if preds and _same_types((node.left, node.right), used):
            return replace(node, left=self.visit(node.left, preds), right=self.visit(node.right, preds))
        return _wrap(self.children(node), preds)

    def push_Unnest(self, node: Unnest, preds: Preds) -> Node:
        """Below an UNNEST when it reads only the input row's columns (it keeps or drops all of a row's
        elements)."""
        w = width(node.input)
        down = tuple(p for p in preds if all(i < w for i in refs(p.sql)))
        child = self.visit(node.input, down)
        out = node if child is node.input else replace(node, input=child)
        return _wrap(out, [p for p in preds if p not in down])

    def push_Distinct(self, node: Distinct, preds: Preds) -> Node:
        child = self.visit(node.input, preds)
        return node if child is node.input else replace(node, input=child)

    # ------------------------------------------------------------------ stateful nodes
    def push_Aggregate(self, node: Aggregate, preds: Preds) -> Node:
        nk = len(node.keys)
        down = [p for p in preds if nk and all(i < nk for i in refs(p.sql))]
        stay = [p for p in preds if p not in down]
        child = self.visit(node.input, tuple(substitute(p, node.keys) for p in down))
        out = node if child is node.input else replace(node, input=child)
        return _wrap(out, stay)

    def push_Window(self, node: Window, preds: Preds) -> Node:
        parts = {column_index(p.sql) for p in node.partition} - {None}
        down = [p for p in preds if refs(p.sql) <= parts]
        stay = [p for p in preds if p not in down]
        child = self.visit(node.input, tuple(down))
        out = node if child is node.input else replace(node, input=child)
        return _wrap(out, stay)

    # ------------------------------------------------------------------ joins
    def push_Join(self, node: Join, preds: Preds) -> Node:
        nl = width(node.left)
        kind = node.kind
        to_left: List[Expr] = []
        to_right: List[Expr] = []
        stay: List[Expr] = []
        residual: List[Expr] = []
        lkeys, rkeys = list(node.left_keys), list(node.right_keys)
        types = [f.type for f in node.left.fields] + [f.type for f in node.right.fields]

        def side(p: Expr) -> str:
            r = refs(p.sql)
            if not r:
                return "none"
            if max(r) < nl:
                return "left"
            if min(r) >= nl:
                return "right"
            return "both"

        def as_key_or_residual(p: Expr) -> None:
            pair = _equi_sides(p, nl) if not node.null_safe else None
            if pair is None:
                residual.append(p)
                return
            a, b = pair
            lkeys.append(Expr(a, type_of(a, types)))
            rkeys.append(Expr(b, type_of(b, types)))

        # terms of the filter above the join
        for p in preds:
            s = side(p)
            if kind == "inner":
                if s in ("left", "none"):
                    to_left.append(p)
                elif s == "right":
                    to_right.append(p)
                else:
                    as_key_or_residual(p)
            elif kind in ("semi", "anti") or (kind == "left" and s in ("left", "none")):
                to_left.append(p)
            elif kind == "right" and s in ("right", "none"):
                to_right.append(p)
            else:
                stay.append(p)
        # terms of the join's own ON condition
        own = conjuncts(node.residual)
        for q in own:
            s = side(q)
            if s == "both":
                as_key_or_residual(q)
                continue
            dest = ON_TERM_GOES[kind].get(s)
            (to_left if dest == "left" else to_right if dest == "right" else residual).append(q)
        left = self.visit(node.left, tuple(to_left))
        right = self.visit(node.right, tuple(shift(p, -nl) for p in to_right))
        if left is node.left and right is node.right and len(lkeys) == len(node.left_keys) and \
                [r.sql for r in residual] == [r.sql for r in own]:
            out: Node = node
        else:
            out = replace(node, left=left, right=right, left_keys=tuple(lkeys), right_keys=tuple(rkeys),
                          residual=conjoin(residual) if [r.sql for r in residual] != [r.sql for r in own]
                          else node.residual)
        return _wrap(out, stay)


def push_down_filters(plan: Node, ctx=None) -> Node:
    return _Pusher(ctx).visit(plan, ())
