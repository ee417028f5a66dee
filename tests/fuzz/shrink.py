"""Reduce a failing fuzz program while its failure (the same kind) persists.

Greedy passes, repeated until none makes progress or the budget is spent: drop views, steps, changes, rows and
columns; then simplify view expressions (sqlglot: a node replaced by one of its children, a WHERE dropped).
"""
from __future__ import annotations

import copy
import time
from typing import Callable, Iterator, Optional

import sqlglot
from sqlglot import exp

from .program import Program
from .runner import run


def _variants_views(p: Program) -> Iterator[Program]:
    for i in range(len(p.views)):
        q = copy.deepcopy(p)
        del q.views[i]
        yield q


def _variants_tables(p: Program) -> Iterator[Program]:
    for i, t in enumerate(p.tables):
        if len(p.tables) > 1:
            q = copy.deepcopy(p)
            del q.tables[i]
            q.steps = [[o for o in s if o.table != t.name] for s in q.steps]
            yield q


def _variants_steps(p: Program) -> Iterator[Program]:
    for i in range(len(p.steps)):
        q = copy.deepcopy(p)
        del q.steps[i]
        yield q
    for i, step in enumerate(p.steps):
        for j in range(len(step)):
            q = copy.deepcopy(p)
            del q.steps[i][j]
            yield q


def _variants_rows(p: Program) -> Iterator[Program]:
    for i, step in enumerate(p.steps):
        for j, op in enumerate(step):
            for field in ("rows", "new_rows"):
                rows = getattr(op, field)
                if len(rows) > 1:   # halves first, then single rows
                    for lo, hi in ((0, len(rows) // 2), (len(rows) // 2, len(rows))):
                        q = copy.deepcopy(p)
                        del getattr(q.steps[i][j], field)[lo:hi]
                        yield q
                    for k in range(len(rows)):
                        q = copy.deepcopy(p)
                        del getattr(q.steps[i][j], field)[k]
                        yield q


def _variants_columns(p: Program) -> Iterator[Program]:
    for ti, t in enumerate(p.tables):
        if len(t.columns) < 2:
            continue
        for ci in range(len(t.columns)):
            q = copy.deepcopy(p)
            del q.tables[ti].columns[ci]
            for step in q.steps:
                for op in step:
                    if op.table == t.name:
                        op.rows = [r[:ci] + r[ci + 1:] for r in op.rows]
                        op.new_rows = [r[:ci] + r[ci + 1:] for r in op.new_rows]
            yield q


def _variants_values(p: Program) -> Iterator[Program]:
    """Each non-NULL value of a row replaced by NULL."""
    for i, step in enumerate(p.steps):
        for j, op in enumerate(step):
            for k, r in enumerate(op.rows + op.new_rows):
                for c, v in enumerate(r):
                    if v is not None:
                        q = copy.deepcopy(p)
                        o = q.steps[i][j]
                        o.rows = [list(x) for x in o.rows]
                        o.new_rows = [list(x) for x in o.new_rows]
                        (o.rows + o.new_rows)[k][c] = None
                        yield q


def _simpler_sql(sql: str) -> Iterator[str]:
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return
    nodes = [n for n in tree.walk() if n is not tree]
    for sel in [tree] + nodes:
        if isinstance(sel, exp.Select) and len(sel.expressions) > 1 and not any(
                isinstance(e, exp.Star) for e in sel.expressions) and sel.parent_select is None:
            for item in sel.expressions:
                yield _render(tree, item, None) if item is not tree else sql
    for n in nodes:
        if isinstance(n, exp.Where):
            yield _render(tree, n, None)
        elif isinstance(n, (exp.Binary, exp.Func, exp.Case, exp.Paren, exp.Not, exp.Neg, exp.If)) \
                and not isinstance(n, exp.AggFunc) and not isinstance(n.parent, (exp.Join, exp.Where, exp.Having)):
            for child in n.iter_expressions():
                if isinstance(child, exp.Expression) and not isinstance(child, (exp.DataType, exp.Var)):
                    yield _render(tree, n, child)


def _render(tree: exp.Expression, node: exp.Expression, replacement: Optional[exp.Expression]) -> str:
    """The SQL of ``tree`` with ``node`` replaced (None: removed); the original SQL if that cannot be written."""
    try:
        return _replaced(tree, node, replacement)
    except (ValueError, AttributeError, KeyError, IndexError, TypeError, sqlglot.errors.SqlglotError):
        return tree.sql(dialect="duckdb")


def _replaced(tree: exp.Expression, node: exp.Expression, replacement: Optional[exp.Expression]) -> str:
    path = []
    n = node
    while n is not tree:
        path.append((n.arg_key, n.index))
        n = n.parent
    t = tree.copy()
    target = t
    for key, idx in reversed(path):
        v = target.args[key]
        target = v[idx] if isinstance(v, list) else v
    if replacement is None:
        target.pop()
    else:
        target.replace(replacement.copy())
    return t.sql(dialect="duckdb")


def _variants_exprs(p: Program) -> Iterator[Program]:
    for i, v in enumerate(p.views):
        for s in _simpler_sql(v.sql):
            if s != v.sql:
                q = copy.deepcopy(p)
                q.views[i].sql = s
                yield q


PASSES = (_variants_views, _variants_tables, _variants_steps, _variants_rows, _variants_columns, _variants_exprs,
          _variants_values)


def shrink(program: Program, signature: str, budget_s: float = 300.0, spark=None,
           fails: Optional[Callable[[Program], bool]] = None) -> Program:
    """The smallest variant of ``program`` found within ``budget_s`` that still fails with ``signature``
    (:meth:`~tests.fuzz.runner.Outcome.signature`)."""
    fails = fails or (lambda q: run(q, spark=spark).signature() == signature)
    end = time.time() + budget_s
    best = program
    progress = True
    while progress and time.time() < end:
        progress = False
        for make in PASSES:
            changed = True
            while changed and time.time() < end:
                changed = False
                for q in make(best):
                    if time.time() >= end:
                        break
                    if fails(q):
                        best, changed, progress = q, True, True
                        break
    return best
