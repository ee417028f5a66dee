"""Recursive queries: ``WITH RECURSIVE r AS (base UNION [ALL] step)`` bound to a :class:`Recursive` node.

The node keeps the two parts as DuckDB SQL, which the executor iterates to a fixed point
(:mod:`sqlengine.executor.ops.recursive`): ``base`` reads only the relations of the program (tables, views,
the WITH's other CTEs); ``step`` reads them and the recursive relation once.  Each occurrence of a relation in
the SQL is renamed ``__o<k>`` (its alias kept, so ``e.src`` and ``edges.src`` still resolve), so that the
executor can give each occurrence the old or the new contents of its relation, or only their change: the
semi-naive evaluation of inserts and the delete-and-rederive (DRed) of deletes.  The recursive relation is
``__rec``.

What is accepted (else a compile error at the construct):

* the CTE is ``base UNION step`` (a set: the least fixed point, as DuckDB computes it) or ``base UNION ALL
  step`` (a bag: each iteration's new rows added, which terminates only where the derivations do);
* the step reads the recursive relation once, directly in its FROM or in an inner JOIN (linear recursion),
  with no GROUP BY, aggregate, window, DISTINCT ON, LIMIT or OFFSET over it, and not on the NULL side of an
  outer join: the step is then monotone in the recursive relation, and its fixed point is unique;
* the step's columns are cast to the base's types, as DuckDB does.

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE e (src INT, dst INT); CREATE VIEW reach AS WITH RECURSIVE r(a, b) AS "
...     "(SELECT src, dst FROM e UNION SELECT r.a, e.dst FROM r JOIN e ON r.b = e.src) SELECT * FROM r")
>>> node = p.views["reach"].plan
>>> node.describe(), node.step
('Recursive r (UNION) over e', 'SELECT r.a, e.dst FROM __rec AS r JOIN __o1 AS e ON r.b = e.src')
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from sqlglot import exp

from .logical import Field, Node, Recursive, Scan
from .scope import name_of
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


class RecursiveBinder:
    """Mixin for :class:`planner.bind.Binder`."""

    max_iterations: int = DEFAULT_MAX_ITERATIONS
    declared: Dict[str, Tuple[Field, ...]] = {}   # DECLARE RECURSIVE VIEW: the declared columns, by view name

    def bind_recursive(self, cte: exp.CTE, ctes: Dict[str, Node]) -> Node:
        alias = cte.args["alias"]
        name = name_of(alias.this)
        body = _unwrapped(cte.this)
        if not isinstance(body, exp.Union) or isinstance(body, (exp.Intersect, exp.Except)):
            raise self.unsupported("a recursive CTE that is not 'base UNION [ALL] step'", body)
        base, step = _unwrapped(body.this), _unwrapped(body.expression)
        refs = [t for t in _tables(step) if name_of(t.this) == name]
        if any(name_of(t.this) == name for t in _tables(base)):
            raise self.unsupported(f"a reference to {name} in the base of its recursion (the part before the last "
                                   f"UNION)", next(t for t in _tables(base) if name_of(t.this) == name))
        if not refs:
            raise self.bind_error(f"recursive CTE {name} does not read itself in its last UNION branch (make it a "
                                  f"plain CTE)", step)
        if len(refs) > 1:
            raise self.unsupported(f"reading {name} twice in one step of its recursion (non-linear recursion)",
                                   refs[1])
        if not isinstance(step, exp.Select) or not _monotone(refs[0], step):
            raise self.unsupported(f"reading {name} inside a subquery, an aggregate, a window, DISTINCT ON, "
                                   f"LIMIT, or on the NULL side of an outer join (a step that is not monotone in "
                                   f"{name})", refs[0])
        for n in body.walk():
            if isinstance(n, UserAggregate):
                raise self.unsupported("a Python aggregate function in a recursive CTE", n)
        base_plan, names = self.bind_query(base, ctes)
        if alias.columns:
            if len(alias.columns) != len(names):
                raise self.bind_error(f"recursive CTE {name} names {len(alias.columns)} columns but its base gives "
                                      f"{len(names)}", alias)
            names = [name_of(c) for c in alias.columns]
        fields = tuple(Field(n, f.type.with_nullable(True)) for n, f in zip(names, base_plan.fields))
        if name in self.declared:   # the declared types (the base's values must be of the same kind)
            for f, d in zip(fields, self.declared[name]):
                if f.type.base != d.type.base and not (f.type.base in NUMERIC and d.type.base in NUMERIC):
                    raise self.bind_error(f"column {d.name} of recursive view {name} is declared {d.type.sql}, but "
                                          f"the query gives {f.type.sql}", base)
            fields = tuple(Field(d.name, d.type.with_nullable(True)) for d in self.declared[name])
        placeholder = Scan(f"__recursive_{name}", fields)
        step_plan, _ = self.bind_query(step, {**ctes, name: placeholder})   # types and names checked
        if len(step_plan.fields) != len(fields):
            raise self.bind_error(f"the step of recursive CTE {name} gives {len(step_plan.fields)} columns, its base "
                                  f"{len(fields)}", step)
        relations: List[Node] = []
        columns: List[Tuple[str, ...]] = []
        index: Dict[str, int] = {}
        occurrences: List[int] = []
        monotone: List[bool] = []

        def renamed(part: exp.Expression) -> exp.Expression:
            part = part.copy()
            for t in _tables(part):
                rel = name_of(t.this)
                label = exp.TableAlias(this=exp.to_identifier(name_of(t.args["alias"].this)
                                                              if t.args.get("alias") else rel))
                if rel == name:
                    t.set("this", exp.to_identifier("__rec"))
                    t.set("alias", label)
                    continue
                if rel not in index:
                    plan, _, cols = self.bind_from_source(exp.Table(this=exp.to_identifier(rel)), None, ctes)
                    index[rel] = len(relations)
                    relations.append(plan)
                    columns.append(tuple(cols))
                monotone.append(_monotone(t, part))
                t.set("this", exp.to_identifier(f"__o{len(occurrences)}"))
                t.set("alias", label)
                occurrences.append(index[rel])
            return part

        base_sql = renamed(base).sql(dialect="duckdb")
        n_base = len(occurrences)
        step_sql = renamed(step).sql(dialect="duckdb")
        return Recursive(name=name, relations=tuple(relations), relation_columns=tuple(columns), base=base_sql,
                         step=step_sql, occurrences=tuple(occurrences), monotone=tuple(monotone),
                         base_occurrences=n_base, out_fields=fields, distinct=bool(body.args.get("distinct")),
                         max_iterations=self.max_iterations,
                         relation_names=tuple(sorted(index, key=index.get)))
