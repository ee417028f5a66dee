"""``merge_projects``: a Project over a Project that only picks and renames columns of its input reads
those columns directly; one operator less per step.

``Project f(c0, c1) over Project c2 AS x, c0 AS y over N`` becomes ``Project f(c2, c0) over N``: the lower
Project evaluates nothing (each of its expressions is a bare column of ``N``, of that column's type), so
renumbering the upper one's columns computes the same rows.  The lower Project stays where something else
reads it (a shared subplan).  Decorrelated subqueries leave such pairs (``NOT IN``'s NULL flags over the
subquery's SELECT list), as does pruning.

Likewise an upper Project that only picks columns of a lower one (each at most once, of its type) computes the
lower one's picked expressions itself, when the expressions it leaves out cannot fail on a row (a failing
expression records its row, which dropping it would change).
"""
from __future__ import annotations

from ..logical import Node, Project
from .exprs import cannot_fail, column_index, remap
from .tree import with_inputs


def _picks(p: Project):
    """The input column of each expression of ``p``, when each is a bare column of its input's type."""
    out = []
    for e in p.exprs:
        i = column_index(e.sql)
        if i is None or e.type != p.input.fields[i].type:
            return None
        out.append(i)
    return out


def merge_projects(plan: Node, ctx=None) -> Node:
    barriers = ctx.view_plan_ids() if ctx is not None else frozenset()

    memo = {}

    def visit(n: Node) -> Node:
        hit = memo.get(id(n))
        if hit is not None:
            return hit
        if id(n) in barriers:   # another view's plan, shared with it as it is
            out = n
        else:
            out = with_inputs(n, tuple(visit(c) for c in n.inputs)) if n.inputs else n
            if isinstance(out, Project) and isinstance(out.input, Project) and id(out.input) not in barriers:
                picks = _picks(out.input)
                upper = _picks(out)
                if picks is not None:
                    out = Project(out.input.input, tuple(remap(e, lambda i: picks[i]) for e in out.exprs),
                                  out.names)
                elif upper is not None and len(set(upper)) == len(upper) and \
                        all(cannot_fail(e.sql) for i, e in enumerate(out.input.exprs) if i not in upper):
                    out = Project(out.input.input, tuple(out.input.exprs[i] for i in upper), out.names)
        memo[id(n)] = out
        return out

    return visit(plan)
