"""``remove_noop_projects``: drop projections that compute nothing; each is one operator less per step.

* A Project that returns its input's columns unchanged, in order (``c0, c1, ..., c(n-1)``), is removed.
  Its names and types are visible only where its columns reach the view's output without another
  Project or Aggregate in between (through Filter, Distinct, UNION ALL, INTERSECT/EXCEPT, joins,
  windows); there it is removed only when its names and types equal its input's, so the view's columns
  keep their names; the view's own root is never reduced to a table (its output stays an operator of
  its own).  (The binder makes such Projects for column aliases, ``FROM t AS x (a, b)``, and
  pruning leaves them.)
* A Project that only picks columns of a Project below it is merged into that one (it selects its
  expressions), when every expression it drops cannot fail on a row and the types agree.
"""
from __future__ import annotations

from typing import Dict, Tuple

from ..logical import Aggregate, Expr, Node, OneRow, Project, Scan
from .exprs import cannot_fail, column_index
from .tree import with_inputs


def _is_identity(p: Project) -> bool:
    return len(p.exprs) == len(p.input.fields) and all(column_index(e.sql) == i for i, e in enumerate(p.exprs))


def _merged(outer: Project) -> Node:
    inner = outer.input
    if not isinstance(inner, Project):
        return outer
    picks = [column_index(e.sql) for e in outer.exprs]
    if None in picks:
        return outer
    if any(not cannot_fail(e.sql) for i, e in enumerate(inner.exprs) if i not in picks):
        return outer
    if any(inner.exprs[i].type.sql != e.type.sql for i, e in zip(picks, outer.exprs)):
        return outer
    return Project(inner.input, tuple(Expr(inner.exprs[i].sql, e.type) for i, e in zip(picks, outer.exprs)),
                   outer.names)


def remove_noop_projects(plan: Node, ctx=None) -> Node:
    barriers = ctx.view_plan_ids() if ctx is not None else frozenset()
    memo: Dict[Tuple[int, bool], Node] = {}

    def visit(n: Node, visible: bool) -> Node:
        key = (id(n), visible)
        if key in memo:
            return memo[key]
        if id(n) in barriers:
            out = n
        else:
            below = False if isinstance(n, (Project, Aggregate)) else visible
            out = with_inputs(n, tuple(visit(c, below) for c in n.inputs))
            if isinstance(out, Project):
                out = _merged(out)
            if isinstance(out, Project) and _is_identity(out) and not (n is plan and isinstance(out.input, (Scan, OneRow))):
                same = [(f.name, f.type) for f in out.fields] == [(f.name, f.type) for f in out.input.fields]
                if not visible or same:
                    out = out.input
        memo[key] = out
        return out

    return visit(plan, True)
