"""Recursive queries bound to a :class:`Recursive` node: ``WITH RECURSIVE r AS (base UNION [ALL] step)``, and
the views of a group declared with ``DECLARE RECURSIVE VIEW`` that read each other.

Each recursive relation is a UNION [ALL] of branches: a branch that reads no recursive relation is a base, one
that reads one (once) is a step.  The node keeps the branches as DuckDB SQL, which the executor iterates to a
fixed point (:mod:`sqlengine.executor.ops.recursive`).  Each occurrence of a relation of the program in the
SQL is renamed ``__o<k>`` (its alias kept, so ``e.src`` and ``edges.src`` still resolve), so that the executor
can give each occurrence the old or the new contents of its relation, or only their change: the semi-naive
evaluation of inserts and the delete-and-rederive (DRed) of deletes.  The recursive relation a step reads is
``__rec``.

What is accepted (else a compile error at the construct):

* UNION (a set: the least fixed point, as DuckDB computes it) or UNION ALL (a bag: each iteration's new rows
  added, which terminates only where the derivations do), not both in one relation;
* a step reads a recursive relation once, directly in its FROM or in an inner JOIN (linear recursion), with no
  GROUP BY, aggregate, window, DISTINCT ON, LIMIT or OFFSET over it, and not on the NULL side of an outer join:
  the step is then monotone in it, and the fixed point is unique;
* a CTE's columns are typed by its bases (bound as one UNION, as DuckDB types its anchor), a declared view's
  by its declaration; each branch's columns are cast to them, as DuckDB does.

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE e (src INT, dst INT); CREATE VIEW reach AS WITH RECURSIVE r(a, b) AS "
...     "(SELECT src, dst FROM e UNION SELECT r.a, e.dst FROM r JOIN e ON r.b = e.src) SELECT * FROM r")
>>> node = p.views["reach"].plan
>>> node.describe(), node.steps
('Recursive r (UNION) over e', ((0, 0, 'SELECT r.a, e.dst FROM __rec AS r JOIN __o1 AS e ON r.b = e.src'),))
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from sqlglot import exp

from .errors import UnsupportedError
from .logical import Field, Node, Recursive, Scan
from .scope import name_of, position_of
from .user_functions import UserAggregate

DEFAULT_MAX_ITERATIONS = 1000
NUMERIC = ("TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL", "REAL", "DOUBLE")
# clauses of the step's SELECT that would aggregate or cut the recursive relation (not monotone in it)
_NOT_MONOTONE = (("group", "GROUP BY"), ("having", "HAVING"), ("limit", "LIMIT"), ("offset", "OFFSET"),
                 ("qualify", "QUALIFY"), ("fetch", "FETCH"))


def _tables(q: exp.Expression) -> List[exp.Table]:
    """The relations ``q`` reads by name (not the CTEs it defines itself, not table functions)."""
    inner = {name_of(c.args["alias"].this) for c in q.find_all(exp.CTE) if c.args.get("alias")}
    return [t for t in q.find_all(exp.Table) if isinstance(t.this, exp.Identifier) and name_of(t.this) not in inner]


def _monotone(t: exp.Table, part: exp.Expression) -> bool:
    """Is the occurrence ``t`` of a relation in ``part`` (a SELECT or a UNION of them) one whose new rows can
    only add rows to the part's result?  Yes when it is a FROM or inner JOIN item of a plain SELECT of
    ``part`` (a union's branch), or a LEFT JOIN's left side; not inside a subquery (NOT EXISTS, NOT IN, an
    aggregate's input can lose rows when it gains some)."""
    parent = t.parent
    if isinstance(parent, exp.From):
        select = parent.parent
        joins = select.args.get("joins") or []
        if any((j.args.get("side") or "").upper() in ("RIGHT", "FULL") or (j.args.get("kind") or "").upper() in
               ("ANTI",) for j in joins):
            return False
    elif isinstance(parent, exp.Join):
        if (parent.args.get("side") or "") or (parent.args.get("kind") or "").upper() in ("ANTI", "SEMI"):
            return False
        select = parent.parent
        if any((j.args.get("side") or "").upper() in ("RIGHT", "FULL") for j in select.args.get("joins") or []):
            return False
    else:
        return False
    if not isinstance(select, exp.Select):
        return False
    node = select
    while node is not part:   # only union branches between the SELECT and the part
        node = node.parent
        if not isinstance(node, exp.Union):
            return False
    if any(select.args.get(k) is not None for k, _ in _NOT_MONOTONE):
        return False
    if any(isinstance(n, (exp.AggFunc, exp.Window)) for e in select.expressions for n in e.walk()):
        return False
    return True


def _unwrapped(q: exp.Expression) -> exp.Expression:
    """``q`` without the parentheses around it (``(SELECT ...) UNION (SELECT ...)``)."""
    while isinstance(q, exp.Subquery) and not q.args.get("alias") and \
            not any(q.args.get(k) for k in ("order", "limit", "offset")):
        q = q.this
    return q


def _branches(body: exp.Expression) -> Tuple[List[exp.Expression], bool]:
    """The branches of a UNION [ALL] chain (a body that is no union: one branch, a bag) and whether it is UNION."""
    body = _unwrapped(body)
    if not isinstance(body, exp.Union):
        return [body], False
    distinct = bool(body.args.get("distinct"))
    out = []
    for side in (body.this, body.expression):
        side = _unwrapped(side)
        if isinstance(side, exp.Union):
            more, kind = _branches(side)
            if kind != distinct:
                raise UnsupportedError("UNION and UNION ALL mixed in one recursive query")
            out += more
        else:
            out.append(side)
    return out, distinct


class RecursiveBinder:
    """Mixin for :class:`planner.bind.Binder`."""

    max_iterations: int = DEFAULT_MAX_ITERATIONS
    declared: Dict[str, Tuple[Field, ...]] = {}   # DECLARE RECURSIVE VIEW: the declared columns, by view name

    def bind_recursive(self, cte: exp.CTE, ctes: Dict[str, Node]) -> Node:
        """A ``WITH RECURSIVE`` CTE: one recursive relation, typed by its branches that do not read it."""
        alias = cte.args["alias"]
        name = name_of(alias.this)
        body = _unwrapped(cte.this)
        if not isinstance(body, exp.Union) or isinstance(body, (exp.Intersect, exp.Except)):
            raise self.unsupported("a recursive CTE that is not 'base UNION [ALL] step'", body)
        columns = [name_of(c) for c in alias.columns] if alias.columns else None
        return self.bind_recursive_group([(name, body, columns, self.declared.get(name))], ctes)

    def bind_recursive_group(self, members, ctes: Dict[str, Node]) -> Recursive:
        """Recursive relations that may read each other: ``members`` is a list of (name, query, column names or
        None, declared fields or None)."""
        names = [m[0] for m in members]
        parsed = []
        for name, body, _, _ in members:
            try:
                branches, distinct = _branches(body)
            except UnsupportedError as e:
                raise UnsupportedError(e.message, sql=self.sql, offset=position_of(body)) from None
            for b in branches:
                for n in b.walk():
                    if isinstance(n, UserAggregate):
                        raise self.unsupported("a Python aggregate function in a recursive query", n)
            parsed.append((branches, distinct))
        # each relation's columns: declared, else its base's (bound as one UNION, as DuckDB types its anchor)
        columns: List[Tuple[Field, ...]] = []
        for (name, body, cols, declared), (branches, distinct) in zip(members, parsed):
            bases = [b for b in branches if not self._reads(b, names)]
            if not bases:
                if declared is None:
                    raise self.bind_error(f"recursive CTE {name} has no branch that does not read it (a base)", body)
                columns.append(tuple(Field(d.name, d.type.with_nullable(True)) for d in declared))
                continue
            anchor = bases[0]
            for b in bases[1:]:
                anchor = exp.Union(this=anchor, expression=b, distinct=distinct)
            plan, got = self.bind_query(anchor, ctes)
            if cols is not None and len(cols) != len(got):
                raise self.bind_error(f"recursive CTE {name} names {len(cols)} columns but its base gives "
                                      f"{len(got)}", body)
            if declared is not None:
                if len(declared) != len(got):
                    raise self.bind_error(f"recursive view {name} is declared with {len(declared)} columns but its "
                                          f"query gives {len(got)}", bases[0])
                for f, d in zip(plan.fields, declared):
                    if f.type.base != d.type.base and not (f.type.base in NUMERIC and d.type.base in NUMERIC):
                        raise self.bind_error(f"column {d.name} of recursive view {name} is declared {d.type.sql}, "
                                              f"but the query gives {f.type.sql}", bases[0])
                columns.append(tuple(Field(d.name, d.type.with_nullable(True)) for d in declared))
            else:
                columns.append(tuple(Field(n, f.type.with_nullable(True)) for n, f in zip(cols or got, plan.fields)))
        placeholders = {name: Scan(f"__recursive_{name}", cols) for name, cols in zip(names, columns)}
        relations: List[Node] = []
        relation_columns: List[Tuple[str, ...]] = []
        index: Dict[str, int] = {}
        occurrences: List[int] = []
        monotone: List[bool] = []

        def renamed(part: exp.Expression) -> str:
            part = part.copy()
            for t in _tables(part):
                rel = name_of(t.this)
                label = exp.TableAlias(this=exp.to_identifier(name_of(t.args["alias"].this)
                                                              if t.args.get("alias") else rel))
                if rel in names:
                    t.set("this", exp.to_identifier("__rec"))
                    t.set("alias", label)
                    continue
                if rel not in index:
                    plan, _, cols = self.bind_from_source(exp.Table(this=exp.to_identifier(rel)), None, ctes)
                    index[rel] = len(relations)
                    relations.append(plan)
                    relation_columns.append(tuple(cols))
                monotone.append(_monotone(t, part))
                t.set("this", exp.to_identifier(f"__o{len(occurrences)}"))
                t.set("alias", label)
                occurrences.append(index[rel])
            return part.sql(dialect="duckdb")

        bases: List[Tuple[str, ...]] = []
        steps: List[Tuple[int, int, str]] = []
        for i, ((name, body, _, _), (branches, _)) in enumerate(zip(members, parsed)):
            mine = []
            for b in branches:
                refs = self._reads(b, names)
                plan, _ = self.bind_query(b, {**ctes, **placeholders})   # names and types checked
                if len(plan.fields) != len(columns[i]):
                    raise self.bind_error(f"a branch of recursive {'view' if members[i][3] is not None else 'CTE'} "
                                          f"{name} gives {len(plan.fields)} columns, not {len(columns[i])}", b)
                if not refs:
                    mine.append(renamed(b))
                    continue
                if len(refs) > 1:
                    raise self.unsupported(f"reading {name_of(refs[1].this)} twice in one step of a recursion "
                                           "(non-linear recursion)", refs[1])
                if not isinstance(b, exp.Select) or not _monotone(refs[0], b):
                    what = name_of(refs[0].this)
                    raise self.unsupported(f"reading {what} inside a subquery, an aggregate, a window, DISTINCT ON, "
                                           f"LIMIT, or on the NULL side of an outer join (a step that is not monotone "
                                           f"in {what})", refs[0])
                steps.append((i, names.index(name_of(refs[0].this)), renamed(b)))
            bases.append(tuple(mine))
        return Recursive(name=", ".join(names), names=tuple(names), columns=tuple(columns),
                         distinct=tuple(d for _, d in parsed), bases=tuple(bases), steps=tuple(steps),
                         relations=tuple(relations), relation_columns=tuple(relation_columns),
                         relation_names=tuple(sorted(index, key=index.get)), occurrences=tuple(occurrences),
                         monotone=tuple(monotone), max_iterations=self.max_iterations)

    @staticmethod
    def _reads(branch: exp.Expression, names: List[str]) -> List[exp.Table]:
        return [t for t in _tables(branch) if name_of(t.this) in names]
