"""The pass manager: runs the rules of ``RULES`` in order over a view's bound plan.

After every rule it checks that the view's output (column names and types) is unchanged and that the plan
is valid (:func:`check_plan`), raising :class:`~planner.errors.InternalError` naming the rule.  It times
each rule and can record the plan after each one (``Program.explain(view, passes=True)`` prints them).

Rules are switched off with ``SQLENGINE_RULES`` in the environment when a program is compiled:
``off`` (none run: the plan is what the binder made), ``-prune_columns,-fold_constants`` (all but
those), or ``push_down_filters,prune_columns`` (only those); or with a :class:`Context`'s ``disabled``.

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE t (a INT, b INT, c INT); CREATE TABLE u (a INT, d INT);"
...     "CREATE VIEW v AS SELECT * FROM (SELECT t.b, u.d FROM t JOIN u ON t.a = u.a) s WHERE b > 1 AND TRUE")
>>> trace = []
>>> plan = optimize(p.views["v"].bound, Context(), trace=trace)
>>> [r.rule for r in trace]
['fold_constants', 'push_down_filters', 'merge_filters', 'fold_constants', 'order_joins', 'distinct_aggregates', 'prune_columns', 'merge_projects', 'remove_noop_projects']
>>> print(format_plan(plan))
Project c1 AS b, c3 AS d  -> (b INT, d INT)
  Join ON c0 = c2  -> (a INT, b INT, a INT, d INT)
    Project c0 AS a, c1 AS b  -> (a INT, b INT)
      Filter c1 > 1  -> (a INT, b INT, c INT)
        Scan t  -> (a INT, b INT, c INT)
    Scan u  -> (a INT, d INT)
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from ..errors import InternalError
from ..logical import (Aggregate, Distinct, Expr, Filter, Join, Node, OneRow, Project, Recursive, Scan, SetOp,
                       UnionAll, Unnest, Window, format_plan)
from .exprs import column_index, refs
from .fold_constants import fold_constants
from .merge_filters import merge_filters
from .merge_projects import merge_projects
from .order_joins import order_joins
from .prune_columns import prune_columns
from .push_down_filters import push_down_filters
from .remove_noop_projects import remove_noop_projects
from .aggregate_contents import aggregate_contents
from .distinct_aggregates import distinct_aggregates
from .share_table_state import share_table_state

Rule = Callable[[Node, "Context"], Node]

# The rules, in the order they run.  Each entry says why it sits where it does.
RULES: Tuple[Rule, ...] = (
    # First: a predicate that folds to TRUE disappears and one that folds to FALSE is recognized before
    # filters move; pushdown then sees simple conjuncts (``x AND TRUE`` is one conjunct, not two).
    fold_constants,
    # Before pruning (it decides which columns a filter needs where it ends up) and before any join
    # reordering (conjuncts pushed into joins become the join keys an order is chosen from).
    push_down_filters,
    # After pushdown: merges what stayed stacked, e.g. filters that could not move past each other's
    # operators (pushdown already merges the filters it moves).
    merge_filters,
    # Again after pushdown: a predicate rewritten through a projection can become constant
    # (``c0 = 'x'`` over ``'x' AS c0`` is ``'x' = 'x'``).
    fold_constants,
    # After pushdown (the equalities it moved into joins are the join graph's edges) and before pruning
    # (the narrowing Projects pruning puts between joins would end a join region).
    order_joins,
    # After pushdown (a filter over the aggregate's input is applied before both of the branches it makes) and
    # before pruning (the branch of the group's rows keeps only the columns the other calls read).
    distinct_aggregates,
    # After every rule that moves or rewrites expressions: it needs the final place of every expression
    # to know which columns each operator's state must keep, and renumbers them.
    prune_columns,
    # After pruning, whose narrowing Projects (and the binder's column picks, e.g. a NOT IN subquery's
    # SELECT list under its NULL flags) it folds into the Project above; before remove_noop_projects, so a
    # Project it leaves computing nothing is removed.
    merge_projects,
    # Last: pruning and the binder's aliasing leave Projects that compute nothing.
    remove_noop_projects,
)


@dataclass
class Context:
    """What the rules may read: the program's tables and the views defined before this one, and options.

    ``disabled``: names of rules not to run (``"*"``: none runs).  ``options``: free-form settings for rules
    (e.g. a per-view option of a join-ordering rule)."""

    tables: Mapping[str, Any] = field(default_factory=dict)
    views: Mapping[str, Any] = field(default_factory=dict)
    disabled: FrozenSet[str] = frozenset()
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **kw) -> "Context":
        """A context whose ``disabled`` comes from ``SQLENGINE_RULES`` (see the module docstring)."""
        return cls(disabled=disabled_by_env(os.environ.get("SQLENGINE_RULES", "")), **kw)

    def enabled(self, rule: Rule) -> bool:
        return "*" not in self.disabled and rule.__name__ not in self.disabled

    def view_plan_ids(self) -> FrozenSet[int]:
        """Identities of the plans of other views, which a view's plan contains as they are (``FROM v``):
        shared with that view, so rules leave them alone."""
        return frozenset(id(v.plan) for v in self.views.values())

    def materialized_view_plan_ids(self) -> FrozenSet[int]:
        return frozenset(id(v.plan) for v in self.views.values() if v.materialized)


def disabled_by_env(value: str) -> FrozenSet[str]:
    """``SQLENGINE_RULES`` -> the disabled rule names.

    >>> sorted(disabled_by_env("off")), sorted(disabled_by_env("-prune_columns")), sorted(disabled_by_env(""))
    (['*'], ['prune_columns'], [])
    >>> sorted(disabled_by_env("push_down_filters"))[2:4]
    ['fold_constants', 'merge_filters']
    """
    value = value.strip()
    if value.lower() in ("", "on", "all"):
        return frozenset()
    if value.lower() in ("off", "none", "0"):
        return frozenset({"*"})
    names = [v.strip() for v in value.split(",") if v.strip()]
    known = {r.__name__ for r in RULES} | {share_table_state.__name__, aggregate_contents.__name__}   # the circuit's
    off = {n[1:] for n in names if n.startswith("-")}
    on = {n for n in names if not n.startswith("-")}
    unknown = (off | on) - known
    if unknown:
        raise ValueError(f"SQLENGINE_RULES names unknown rules {sorted(unknown)}; rules: {', '.join(sorted(known))}")
    return frozenset(off | (known - on if on else set()))


@dataclass(frozen=True)
class PassRecord:
    """One rule's run: its name, seconds taken, and the plan after it (None when it was disabled)."""

    rule: str
    seconds: float
    plan: Optional[Node]


def optimize(plan: Node, ctx: Optional[Context] = None, trace: Optional[List[PassRecord]] = None) -> Node:
    """Run every enabled rule of ``RULES`` on ``plan``; checks the schema and :func:`check_plan` after each."""
    ctx = ctx if ctx is not None else Context.from_env()
    schema = [(f.name, f.type) for f in plan.fields]
    for rule in RULES:
        name = rule.__name__
        if not ctx.enabled(rule):
            if trace is not None:
                trace.append(PassRecord(name, 0.0, None))
            continue
        start = time.perf_counter()
        out = rule(plan, ctx)
        took = time.perf_counter() - start
        got = [(f.name, f.type) for f in out.fields]
        if got != schema:
            raise InternalError(f"rule {name} changed the view's columns from "
                                f"({', '.join(f'{n} {t}' for n, t in schema)}) to ({', '.join(f'{n} {t}' for n, t in got)})")
        problem = check_plan(out)
        if problem is not None:
            raise InternalError(f"rule {name} made an invalid plan: {problem}\n{format_plan(out)}")
        if trace is not None:
            trace.append(PassRecord(name, took, out))
        plan = out
    return plan


def format_trace(bound: Node, trace: Sequence[PassRecord]) -> str:
    """The bound plan, then the plan after each rule with its time."""
    lines = ["-- bound plan", format_plan(bound)]
    last = bound
    for r in trace:
        if r.plan is None:
            lines.append(f"-- {r.rule}: disabled")
        elif r.plan is last:
            lines.append(f"-- after {r.rule} ({r.seconds * 1000:.2f} ms): unchanged")
        else:
            lines += [f"-- after {r.rule} ({r.seconds * 1000:.2f} ms)", format_plan(r.plan)]
            last = r.plan
    return "\n".join(lines)


JOIN_KINDS = ("inner", "left", "right", "full", "semi", "anti")


def _check_exprs(what: str, exprs: Sequence[Optional[Expr]], width: int) -> Optional[str]:
    for e in exprs:
        if e is None:
            continue
        if not isinstance(e, Expr) or not isinstance(e.sql, str) or not e.sql:
            return f"{what}: {e!r} is not an expression"
        bad = sorted(i for i in refs(e.sql) if i >= width)
        if bad:
            return f"{what}: {e.sql} reads c{bad[0]}, but its input has {width} columns"
    return None


def check_node(n: Node) -> Optional[str]:
    """The first problem with one node (its own fields, not its children), or None."""
    name = f"{type(n).__name__} ({n.describe()[:120]})"
    if isinstance(n, (Scan, OneRow)):
        return None
    widths = [len(c.fields) for c in n.inputs]
    if isinstance(n, Filter):
        return _check_exprs(name, [n.predicate], widths[0])
    if isinstance(n, Project):
        if len(n.exprs) != len(n.names):
            return f"{name}: {len(n.exprs)} expressions but {len(n.names)} names"
        return _check_exprs(name, n.exprs, widths[0])
    if isinstance(n, Join):
        nl, nr = widths
        if n.kind not in JOIN_KINDS:
            return f"{name}: unknown join kind {n.kind!r}"
        if len(n.left_keys) != len(n.right_keys):
            return f"{name}: {len(n.left_keys)} left keys but {len(n.right_keys)} right keys"
        if n.null_safe and n.kind != "inner":
            return f"{name}: NULL-safe keys on a {n.kind} join"
        for k in n.right_keys:
            low = sorted(i for i in refs(k.sql) if i < nl)
            if low:
                return f"{name}: right key {k.sql} reads c{low[0]} of the left input"
        return _check_exprs(name + " left keys", n.left_keys, nl) or \
            _check_exprs(name + " right keys", n.right_keys, nl + nr) or \
            _check_exprs(name + " residual", [n.residual], nl + nr)
    if isinstance(n, Aggregate):
        if len(n.names) != len(n.keys) + len(n.aggs):
            return f"{name}: {len(n.names)} names for {len(n.keys)} keys and {len(n.aggs)} aggregates"
        for i, k in enumerate(n.keys):   # the engine groups by the input's first columns
            if column_index(k.sql) != i:
                return f"{name}: key {i} is {k.sql}, not c{i}"
        return _check_exprs(name, [a for c in n.aggs for a in c.args] + [c.filter for c in n.aggs], widths[0])
    if isinstance(n, Window):
        if len(n.calls) != len(n.names):
            return f"{name}: {len(n.calls)} calls but {len(n.names)} names"
        return _check_exprs(name, list(n.partition) + list(n.calls), widths[0])
    if isinstance(n, (UnionAll, SetOp)):
        if not widths or any(w != widths[0] for w in widths):
            return f"{name}: inputs of {widths} columns"
        return None
    if isinstance(n, (Distinct, Recursive)):   # (a Recursive's relations are not its children: not checked)
        return None
    if isinstance(n, Unnest):
        if len(n.names) != len(n.types):
            return f"{name}: {len(n.names)} names for {len(n.types)} types"
        return _check_exprs(name, [n.expr], widths[0])
    return f"unknown node {type(n).__name__}"


def check_plan(node: Node) -> Optional[str]:
    """The first problem in ``node``'s plan, or None when it is valid: every ``c<i>`` an expression reads is
    within its input's width (for a join: left row then right row; right keys read the right row), a join has
    as many left keys as right keys, names match expressions, an aggregate's keys are its input's first
    columns, union and set-operation inputs have equal widths.

    >>> from planner.logical import Field
    >>> from planner.types import SqlType
    >>> t = Scan("t", (Field("a", SqlType("INT")),))
    >>> check_plan(Filter(t, Expr("c1 > 0", SqlType("BOOLEAN"))))
    'Filter (Filter c1 > 0): c1 > 0 reads c1, but its input has 1 columns'
    """
    from ..logical import walk
    for n in walk(node):
        problem = check_node(n)
        if problem is not None:
            return problem
    return None
