"""UNNEST in FROM: ``FROM o CROSS JOIN UNNEST(o.tags) AS t(tag)``, ``..., UNNEST(o.items) WITH ORDINALITY AS
i(sku, qty, n)``, ``LEFT JOIN UNNEST(o.tags) AS t(tag) ON TRUE`` and ``FROM UNNEST([1, 2]) AS t(x)``.

Each UNNEST is an :class:`~planner.logical.Unnest` over the rows of the FROM items before it (it may read their
columns: it is lateral, as in PostgreSQL, DuckDB, Flink and Feldera).  The element of an ARRAY is one column;
an element ROW is its fields, one column each, when the alias names as many columns as it has fields (two or
more); a MAP is unnested into its entries' key and value.  UNNESTs come after the tables they read, with no
other JOIN after them (join the unnested rows in an enclosing query or another view).
"""
from __future__ import annotations

from typing import Tuple

from sqlglot import exp

from .errors import UnsupportedError
from .logical import Expr, Filter, Node, OneRow, Unnest
from .scope import Rel, Scope, name_of
from .types import BIGINT, SqlType, element_type, map_types, struct_fields


def has_unnest(select: exp.Select) -> bool:
    from_ = select.args.get("from") or select.args.get("from_")
    items = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
    return any(isinstance(i, exp.Unnest) for i in items)


class UnnestBinder:
    """Mixin of :class:`planner.bind.Binder`: FROM clauses with UNNEST."""

    def bind_unnests(self, select: exp.Select, ctes) -> Tuple[Node, Scope, list]:
        from_ = select.args.get("from") or select.args.get("from_")
        joins = list(select.args.get("joins") or [])
        first = -1 if isinstance(from_.this, exp.Unnest) else \
            next(i for i, j in enumerate(joins) if isinstance(j.this, exp.Unnest))
        for j in joins[first + 1:]:
            if not isinstance(j.this, exp.Unnest):
                raise UnsupportedError("a JOIN after UNNEST is not supported: write the UNNESTs last in FROM, and "
                                       "join the unnested rows in an enclosing query or another view", sql=self.sql,
                                       offset=self.keyword_offset("JOIN", j) or self.position(j))
        if first == -1:   # FROM UNNEST(...): over one row
            plan: Node = OneRow()
            scope = Scope([Rel("__one", [], [], 0)])
            unnests = [(from_.this, False)]
        else:
            prefix = select.copy()
            prefix.set("joins", [j.copy() for j in joins[:first]])
            prefix.set("where", None)
            plan, scope, _ = self.bind_from(prefix, ctes)
            unnests = []
        for j in joins[max(first, 0):]:
            unnests.append((j.this, self.unnest_outer(j)))
        for u, outer in unnests:
            plan, rel = self.bind_unnest(u, plan, scope, outer)
            wider = Scope(scope.rels + [rel], scope.parent)
            wider.hidden, wider.coalesced = scope.hidden, scope.coalesced
            scope = wider
        sub_preds, scalar, where = self.split_where(select, scope)
        if where:
            for c in where:
                self.check_scalar(c, allow_agg=False, clause="WHERE")
            plan = Filter(plan, self.bind_scalar(exp.and_(*where), scope))
        return self.finish_where(plan, scope, sub_preds, scalar, ctes), scope, []

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
