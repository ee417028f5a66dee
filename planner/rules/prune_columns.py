"""``prune_columns``: every operator's change and state carry only the columns something downstream reads.

Walking down from the view's root with the set of columns its consumers read, each node keeps what is
needed and renumbers its expressions:

* a Project drops the expressions nobody reads (only those that cannot fail on a row: a row whose
  expression fails stays out of its view, so ``CAST(s AS INT)`` is kept even when unused);
* a join, a window and an aggregate that reads its input's contents (MIN/MAX, DISTINCT aggregates) keep
  their input's rows as state (an integral): when that input has columns no consumer reads, a narrowing
  Project is inserted below the operator, so the state holds only the columns used above it or by the
  operator's own keys, conditions and calls;
* a table (Scan) is stored whole anyway (tables are queryable), so a join or window reads it as it is and
  no narrowed copy is made; a Project that only picks columns of a table, below such an operator, is
  removed for the same reason (the operator reads the table's own state).  An append-only table that is not
  materialized (``planner.circuit.streamable``) is the exception: it keeps no rows unless an operator reads
  it whole, so it is narrowed like any input (Nexmark's bids: a join keeps 3 of their 7 columns);
* DISTINCT, INTERSECT/EXCEPT and the view's own output need all their columns; UNION ALL branches are
  pruned alike; a relation keeps at least one column (``EXISTS (SELECT 1 ...)`` reads none).

A subplan that occurs several times (a CTE read twice, the same subquery written twice) is one operator
in the circuit; it is pruned once, to the union of what its consumers read, so it stays shared.  Each
inserted Project is one more (linear) operator per step: the price of the smaller state.

Another view's plan inside this one (``FROM other_view``) is shared with that view, not pruned; above it,
a narrowing Project is inserted as above, except when that view is materialized (its contents are
stored anyway).  Aggregates keep all their calls (a SUM that leaves BIGINT's range is a row error that
removes its group) and windows all their calls.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, FrozenSet, List, Sequence, Tuple

from ..circuit import aggregate_mode, streamable
from ..logical import (Aggregate, Distinct, Expr, Filter, Join, Node, OneRow, Project, Recursive, Scan,
                       SetOp, UnionAll, Unnest, Window, col)
from .exprs import cannot_fail, column_index, refs, remap
from .tree import width

Mapping = Dict[int, int]


def _identity(n: int) -> Mapping:
    return {i: i for i in range(n)}


def _refs_all(exprs: Sequence[Expr]) -> FrozenSet[int]:
    out: FrozenSet[int] = frozenset()
    for e in exprs:
        out |= refs(e.sql)
    return out


def _select(node: Node, m: Mapping, cols: Sequence[int], like: Node = None) -> Tuple[Node, Mapping]:
    """``node`` narrowed to the old columns ``cols`` (in order), found at ``m[c]``; names and types from
    ``like`` (the original node) when given.  No Project when it is that already."""
    if width(node) == len(cols) and all(m[c] == j for j, c in enumerate(cols)):
        return node, {c: j for j, c in enumerate(cols)}
    src = like.fields if like is not None else None
    exprs, names = [], []
    for c in cols:
        f = node.fields[m[c]]
        exprs.append(Expr(col(m[c]), src[c].type if src is not None else f.type))
        names.append(src[c].name if src is not None else f.name)
    return Project(node, tuple(exprs), tuple(names)), {c: j for j, c in enumerate(cols)}


class _Pruner:
    """Two walks over the plan's distinct subplans (equal subplans are one: the circuit shares them, so
    they are pruned alike, to the union of what their consumers read): first the columns each one must
    produce, from the root down; then the pruned subplans, with the map from old to new column positions."""

    def __init__(self, plan: Node, ctx):
        barrier_ids = ctx.view_plan_ids() if ctx is not None else frozenset()
        stored_ids = ctx.materialized_view_plan_ids() if ctx is not None else frozenset()
        self.streams = {n for n, t in (ctx.tables if ctx is not None else {}).items() if streamable(t)}
        self.canon: Dict[int, Node] = {}         # id of a node -> the first equal node seen
        self.barriers = set()                     # ids of canonical nodes that are other views' plans
        self.stored_views = set()
        seen: Dict[Node, Node] = {}
        order: List[Node] = []                    # canonical nodes, children before parents

        def visit(n: Node) -> Node:
            c = self.canon.get(id(n))
            if c is not None:
                return c
            c = seen.get(n)
            if c is None:
                c = seen[n] = n
                if id(n) not in barrier_ids:
                    for k in n.inputs:
                        visit(k)
                order.append(c)
            self.canon[id(n)] = c
            if id(n) in barrier_ids:
                self.barriers.add(id(c))
            if id(n) in stored_ids:
                self.stored_views.add(id(c))
            return c

        visit(plan)
        self.needs: Dict[int, set] = {id(c): set() for c in order}
        self.needs[id(self.canon[id(plan)])] = set(range(width(plan)))
        for c in reversed(order):   # parents before children
            if not self.needs[id(c)] and width(c):
                self.needs[id(c)].add(0)   # joins, windows and unions lower no relation without columns
            if id(c) not in self.barriers:
                for child, cols in self.child_needs(c, frozenset(self.needs[id(c)])):
                    self.needs[id(self.canon[id(child)])] |= cols
        self.memo: Dict[int, Tuple[Node, Mapping]] = {}

    def need(self, node: Node) -> List[int]:
        return sorted(self.needs[id(self.canon[id(node)])])

    @staticmethod
    def child_needs(n: Node, needed: FrozenSet[int]):
        """(child, columns of it that ``n`` reads) when ``n`` must produce ``needed``."""
        if isinstance(n, Filter):
            return [(n.input, needed | refs(n.predicate.sql))]
        if isinstance(n, Project):
            keep = [e for i, e in enumerate(n.exprs) if i in needed or not cannot_fail(e.sql)]
            return [(n.input, _refs_all(keep))]
        if isinstance(n, UnionAll):
            return [(b, needed) for b in n.branches]
        if isinstance(n, (Distinct, SetOp)):
            return [(c, frozenset(range(width(c)))) for c in n.inputs]
        if isinstance(n, Aggregate):
            args = [a for c in n.aggs for a in c.args] + [c.filter for c in n.aggs if c.filter is not None]
            return [(n.input, _refs_all(list(n.keys) + args))]
        if isinstance(n, Window):
            w = width(n.input)
            return [(n.input, frozenset(i for i in needed if i < w) |
                     _refs_all(list(n.partition) + list(n.calls)))]
        if isinstance(n, Unnest):   # (not pruned: it reads every column of its input)
            return [(n.input, frozenset(range(width(n.input))))]
        if isinstance(n, Join):
            nl = width(n.left)
            res = refs(n.residual.sql) if n.residual is not None else frozenset()
            need_l = frozenset(i for i in needed | res if i < nl) | _refs_all(n.left_keys)
            need_r = frozenset(i - nl for i in needed | res | _refs_all(n.right_keys) if i >= nl)
            return [(n.left, need_l), (n.right, need_r)]
        return []

    def stored(self, node: Node) -> bool:
        """Whether ``node``'s contents are kept anyway (a table, a materialized view's plan)."""
        if isinstance(node, Scan):
            return node.table not in self.streams
        return id(self.canon.get(id(node), node)) in self.stored_views

    def state_input(self, original: Node) -> Tuple[Node, Mapping]:
        """The pruned input ``original`` of an operator that keeps its input as state: a stored relation is
        read as it is (also through a Project that only picks its columns), anything else is narrowed to the
        columns its consumers read."""
        node, m = self.prune(original)
        cols = self.need(original)
        if isinstance(node, Project) and self.stored(node.input) and \
                all(column_index(e.sql) is not None for e in node.exprs):
            return node.input, {c: column_index(node.exprs[m[c]].sql) for c in cols}
        if self.stored(node) or width(node) == len(cols):
            return node, m
        return _select(node, m, cols)

    def prune(self, node: Node) -> Tuple[Node, Mapping]:
        c = self.canon[id(node)]
        hit = self.memo.get(id(c))
        if hit is None:
            if id(c) in self.barriers or isinstance(c, (Scan, OneRow, Recursive)):   # (a Recursive: all its columns)
                hit = (c, _identity(width(c)))
            elif isinstance(c, Unnest):   # all its columns, its input pruned inside
                child = self.exact(c.input)
                hit = (c if child is c.input else replace(c, input=child), _identity(width(c)))
            else:
                hit = getattr(self, f"prune_{type(c).__name__}")(c, frozenset(self.needs[id(c)]))
            self.memo[id(c)] = hit
        return hit

    def exact(self, node: Node) -> Node:
        """``node`` pruned inside, with exactly its own columns (for consumers that need them all)."""
        out, m = self.prune(node)
        return _select(out, m, list(range(width(node))), like=node)[0]

    # ------------------------------------------------------------------ linear nodes
    def prune_Filter(self, node: Filter, needed):
        child, m = self.prune(node.input)
        if child is node.input:
            return node, m
        return Filter(child, remap(node.predicate, m)), m

    def prune_Project(self, node: Project, needed):
        keep = [i for i, e in enumerate(node.exprs) if i in needed or not cannot_fail(e.sql)]
        child, m = self.prune(node.input)
        out = {i: j for j, i in enumerate(keep)}
        if child is node.input and len(keep) == len(node.exprs):
            return node, out
        return Project(child, tuple(remap(node.exprs[i], m) for i in keep), tuple(node.names[i] for i in keep)), out

    def prune_UnionAll(self, node: UnionAll, needed):
        cols = sorted(needed)
        pruned = [self.prune(b) for b in node.branches]
        maps = [{c: m[c] for c in cols} for _, m in pruned]
        if all(mp == maps[0] for mp in maps) and len({width(b) for b, _ in pruned}) == 1:
            branches = tuple(b for b, _ in pruned)
            return (node if all(a is b for a, b in zip(branches, node.branches)) else UnionAll(branches)), maps[0]
        branches = tuple(_select(b, m, cols)[0] for b, m in pruned)
        return UnionAll(branches), {c: j for j, c in enumerate(cols)}

    # ------------------------------------------------------------------ nodes that need all their columns
    def prune_Distinct(self, node: Distinct, needed):
        child = self.exact(node.input)
        return (node if child is node.input else Distinct(child)), _identity(width(node))

    def prune_SetOp(self, node: SetOp, needed):
        left, right = self.exact(node.left), self.exact(node.right)
        out = node if left is node.left and right is node.right else replace(node, left=left, right=right)
        return out, _identity(width(node))

    # ------------------------------------------------------------------ stateful nodes
    def prune_Aggregate(self, node: Aggregate, needed):
        child, m = self.prune(node.input)
        need = self.need(node.input)
        # the engine groups by the input's first columns (keys are c0 .. c(k-1)); an aggregate that reads
        # its input's contents (recompute mode) keeps it narrow
        if any(m[i] != i for i in range(len(node.keys))) or \
                (aggregate_mode(node) == "recompute" and width(child) > len(need)):
            child, m = _select(child, m, need)
        if child is node.input:
            return node, _identity(width(node))
        aggs = tuple(replace(a, args=tuple(remap(x, m) for x in a.args),
                             filter=remap(a.filter, m) if a.filter is not None else None) for a in node.aggs)
        return replace(node, input=child, keys=tuple(remap(k, m) for k in node.keys), aggs=aggs), \
            _identity(width(node))

    def prune_Window(self, node: Window, needed):
        w = width(node.input)
        child, m = self.state_input(node.input)
        w2 = width(child)
        out = {i: m[i] for i in self.need(node.input)}
        out.update({w + j: w2 + j for j in range(len(node.calls))})
        if child is node.input:
            return node, out
        return replace(node, input=child, partition=tuple(remap(p, m) for p in node.partition),
                       calls=tuple(remap(c, m) for c in node.calls)), out

    def prune_Join(self, node: Join, needed):
        nl = width(node.left)
        left, lm = self.state_input(node.left)
        right, rm = self.state_input(node.right)
        nl2 = width(left)
        jm = {i: lm[i] for i in self.need(node.left)}
        jm.update({nl + i: nl2 + rm[i] for i in self.need(node.right)})
        out = {i: jm[i] for i in needed} if node.kind in ("semi", "anti") else jm
        if left is node.left and right is node.right:
            return node, out
        return replace(node, left=left, right=right, left_keys=tuple(remap(k, lm) for k in node.left_keys),
                       right_keys=tuple(remap(k, jm) for k in node.right_keys),
                       residual=remap(node.residual, jm) if node.residual is not None else None), out


def prune_columns(plan: Node, ctx=None) -> Node:
    return _Pruner(plan, ctx).exact(plan)
