"""UNNEST in FROM: ``FROM o CROSS JOIN UNNEST(o.tags) AS t(tag)``, ``..., UNNEST(o.items) WITH ORDINALITY AS
i(sku, qty, n)``, ``LEFT JOIN UNNEST(o.tags) AS t(tag) ON TRUE`` and ``FROM UNNEST([1, 2]) AS t(x)``.

Each UNNEST is an :class:`~planner.logical.Unnest` over the rows of the FROM items before it (it may read their
columns: it is lateral, as in PostgreSQL, DuckDB, Flink and Feldera).  The element of an ARRAY is one column;
an element ROW is its fields, one column each, when the alias names as many columns as it has fields (two or
more); a MAP is unnested into its entries' key and value.  An UNNEST comes after the tables it reads; tables,
views and subqueries joined after it are joined to the unnested rows (``FROM o, UNNEST(o.items) AS i(sku, qty)
JOIN product p ON p.sku = i.sku``).
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

from sqlglot import exp

from .errors import UnsupportedError
from .logical import Expr, Filter, Join, Node, OneRow, Unnest
from .bind_subquery import scalar_subqueries
from .scope import Rel, Scope, is_comma, is_subquery_predicate, joining, name_of, split_and
from .types import BIGINT, SqlType, element_type, map_types, struct_fields


def has_unnest(select: exp.Select) -> bool:
    from_ = select.args.get("from") or select.args.get("from_")
    items = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
    return any(isinstance(i, exp.Unnest) for i in items)


class UnnestBinder:
    """Mixin of :class:`planner.bind.Binder`: FROM clauses with UNNEST."""

    def bind_unnests(self, select: exp.Select, ctes) -> Tuple[Node, Scope, list]:
        """The FROM items before the first UNNEST are joined as any FROM clause; each item after it, in order:
        an UNNEST over the rows so far, or a JOIN of the rows so far with a table, view or subquery (its ON
        condition, and WHERE's conjuncts over the relations joined so far when no RIGHT or FULL JOIN follows,
        are its keys).  WHERE's other conjuncts filter the result."""
        from_ = select.args.get("from") or select.args.get("from_")
        joins = list(select.args.get("joins") or [])
        first = -1 if isinstance(from_.this, exp.Unnest) else \
            next(i for i, j in enumerate(joins) if isinstance(j.this, exp.Unnest))
        if first == -1:   # FROM UNNEST(...): over one row
            plan: Node = OneRow()
            scope = Scope([Rel("__one", [], [], 0)])
            items = [(from_.this, None)]
        else:
            prefix = select.copy()
            prefix.set("joins", [j.copy() for j in joins[:first]])
            prefix.set("where", None)
            plan, scope, _ = self.bind_from(prefix, ctes)
            items = []
        items += [(j.this, j) for j in joins[max(first, 0):]]
        later = [j for _, j in items if j is not None and not isinstance(j.this, exp.Unnest)]
        widen = not any((j.args.get("side") or "").upper() in ("RIGHT", "FULL") for j in later)
        comma = next((k for k, j in enumerate(joins) if is_comma(j)), None)
        for j in later:
            if (j.args.get("side") or "").upper() in ("RIGHT", "FULL") and comma is not None and \
                    comma < joins.index(j):
                raise UnsupportedError(
                    f"a {j.args['side'].upper()} JOIN after a comma and an UNNEST is not supported (a comma binds more "
                    "loosely than JOIN, so the join would pad rows for each row before the comma): write CROSS "
                    "JOIN instead of the comma, or join in a subquery", sql=self.sql, offset=self.position(j))
        steps = []   # (the Unnest node, over a placeholder input) or (rel index, side, right plan, ON conjuncts)
        for item, j in items:
            if isinstance(item, exp.Unnest):
                node, rel = self.bind_unnest(item, plan, scope, j is not None and self.unnest_outer(j))
                steps.append(node)
                scope = self.wider(scope, rel)
                if item.meta.get("select_list"):   # (planner.query_forms: hidden from *)
                    scope.hidden.update((len(scope.rels) - 1, c.lower()) for c in rel.names)
                continue
            side = self.join_after_unnest(j)
            right, alias, names = self.bind_from_item(item, ctes)
            scope = self.wider(scope, Rel(alias, names, [f.type for f in right.fields],
                                          sum(len(r.names) for r in scope.rels)))
            i = len(scope.rels) - 1
            on = split_and(j.args.get("on"))
            for c in on:
                self.check_scalar(c, allow_agg=False, clause="ON")
                if not self.rels_of(c, scope) <= set(range(i + 1)):
                    raise self.bind_error("a JOIN condition can only use the relations joined so far", c)
            steps.append((i, side, right, on))
        # WHERE's conjuncts over the relations joined so far join an inner JOIN after the UNNEST (its keys), as
        # in any FROM clause; resolved in the whole FROM's scope, so that an ambiguous name stays an error
        where = split_and(select.args["where"].this) if select.args.get("where") and later else []
        touched = [set() if is_subquery_predicate(c) or scalar_subqueries(c) else self.rels_of(c, scope)
                   for c in where] if widen else []
        used = [False] * len(touched)
        for step in steps:
            if isinstance(step, Unnest) or step[1] != "inner" or not widen:
                continue
            for c in joining(step[0], where, touched, used):
                self.check_scalar(c, allow_agg=False, clause="WHERE")
                step[3].append(c)
        moved = {ci for ci, u in enumerate(used) if u}
        for step in steps:
            if isinstance(step, Unnest):
                plan = dataclasses.replace(step, input=plan)
            else:
                i, side, right, on = step
                plan = Join(plan, right, *self.join_condition(on, scope, i), side)
        if moved:
            select = select.copy()
            rest = [c.copy() for ci, c in enumerate(where) if ci not in moved]
            select.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
        sub_preds, scalar, where = self.split_where(select, scope)
        if where:
            for c in where:
                self.check_scalar(c, allow_agg=False, clause="WHERE")
            plan = Filter(plan, self.bind_scalar(exp.and_(*where), scope))
        return self.finish_where(plan, scope, sub_preds, scalar, ctes), scope, []

    @staticmethod
    def wider(scope: Scope, rel: Rel) -> Scope:
        out = Scope(scope.rels + [rel], scope.parent)
        out.hidden, out.coalesced = scope.hidden, scope.coalesced
        return out

    def join_after_unnest(self, j: exp.Join) -> str:
        """The kind of a JOIN after an UNNEST: inner (a comma, CROSS JOIN, JOIN ... ON), left, right or full."""
        side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
        method = (j.args.get("method") or "").upper()
        if j.args.get("using") or method or kind not in ("", "CROSS", "INNER", "OUTER") or \
                isinstance(j.this, exp.Subquery) and j.this.meta.get("lateral"):
            what = "USING" if j.args.get("using") else f"{method} {kind} JOIN".strip()
            raise UnsupportedError(f"{what} after an UNNEST is not supported: write JOIN ... ON", sql=self.sql,
                                   offset=self.position(j))
        if side and not j.args.get("on"):
            raise self.bind_error(f"{side} JOIN needs an ON condition", j)
        return side.lower() or "inner"

    def unnest_outer(self, j: exp.Join) -> bool:
        """LEFT JOIN UNNEST ... ON TRUE keeps rows with nothing to unnest; CROSS JOIN, a comma and an inner
        JOIN ... ON TRUE do not."""
        side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
        on = j.args.get("on")
        if j.args.get("using") or (on is not None and not (isinstance(on, exp.Boolean) and on.this)) or \
                side in ("RIGHT", "FULL") or kind not in ("", "CROSS", "INNER", "OUTER"):
            raise UnsupportedError("UNNEST joins as CROSS JOIN UNNEST(...), a comma, or LEFT JOIN UNNEST(...) ON TRUE "
                                   "(filter the unnested rows in WHERE)", sql=self.sql, offset=self.position(j))
        return side == "LEFT"

    def position(self, node: exp.Expression):
        from .scope import position_of
        return position_of(node)

    def bind_unnest(self, u: exp.Unnest, plan: Node, scope: Scope, outer: bool) -> Tuple[Node, Rel]:
        if len(u.expressions) != 1:
            raise UnsupportedError("UNNEST of more than one array is not supported: unnest them one by one",
                                   sql=self.sql, offset=self.position(u))
        e = self.bind_scalar(u.expressions[0], scope)
        alias = u.args.get("alias")
        given = [name_of(c) for c in alias.columns] if alias is not None and alias.columns else []
        table = name_of(alias.this) if alias is not None and alias.this else None
        ordinal = u.args.get("offset")
        ordinality = bool(ordinal)
        if isinstance(ordinal, exp.Identifier) and given and len(given) < 2:
            given.append(name_of(ordinal))
        elif isinstance(ordinal, exp.Identifier):
            given.append(name_of(ordinal))
        t = e.type
        fields_of: Tuple[str, ...] = ()
        if t.base == "MAP":
            k, v = map_types(t)
            e = Expr(f"MAP_ENTRIES({e.sql})", SqlType(f"STRUCT(key {k.sql}, value {v.sql})[]"))
            names, types, fields_of = ["key", "value"], [k, v], ("key", "value")
        elif t.base == "ARRAY":
            elem = element_type(t)
            want = len(given) - (1 if ordinality else 0)
            if elem.base == "STRUCT" and want >= 2:
                fs = struct_fields(elem)
                if want != len(fs):
                    raise self.bind_error(f"UNNEST of a {elem.sql} ARRAY names {want} columns for its {len(fs)} "
                                          f"fields", alias)
                names, types, fields_of = [n for n, _ in fs], [ft for _, ft in fs], tuple(n for n, _ in fs)
            else:
                names, types = ["unnest"], [elem]
        else:
            raise self.bind_error(f"UNNEST takes an ARRAY or a MAP; {u.expressions[0].sql(dialect='duckdb')} is "
                                  f"{t.sql}", u.expressions[0])
        if ordinality:
            names, types = names + ["ordinality"], types + [BIGINT]
        if given:
            if len(given) > len(names):
                raise self.bind_error(f"UNNEST gives {len(names)} columns; the alias names {len(given)}", alias)
            names = given + names[len(given):]
        node = Unnest(plan, e, tuple(names), tuple(t.with_nullable(True) for t in types), fields_of, ordinality,
                      outer)
        return node, Rel(table, list(names), [x.with_nullable(True) for x in types],
                         sum(len(r.names) for r in scope.rels))
