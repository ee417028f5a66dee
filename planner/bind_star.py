"""Binding the SELECT list's star forms into ordinary select items.

* ``*`` and ``t.*``, with DuckDB's ``EXCLUDE (a, t.b)``, ``REPLACE (expr AS a)`` and ``RENAME (a AS b)``;
* ``COLUMNS('regex')`` (the visible columns whose name the regular expression matches, anywhere in the name,
  as DuckDB's ``regexp_matches``) and ``COLUMNS(*)``, alone or inside an expression: ``MAX(COLUMNS('x.*'))``
  is one item per matching column, named after the column as DuckDB names it.

Each expands to (expression, output name) pairs before anything else is bound, so the rest of the binder
and both executors see only plain columns.  The binder class mixes this in.
"""
from __future__ import annotations

import re
from typing import List, Optional, Tuple

from sqlglot import exp

from .errors import BindError, UnsupportedError
from .scope import LATERAL_PREFIX, name_of
from .typecheck import keep_position

# The arguments of a parsed ``*`` read here (planner.parsed_nodes rejects any other that is set, e.g. ILIKE).
STAR_ARGS = frozenset({"except_", "replace", "rename"})
COLUMNS_ARGS = frozenset({"this"})

Item = Tuple[exp.Expression, str]


def is_star(e: exp.Expression) -> bool:
    """``*`` or ``t.*``."""
    return isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))


def located(node: exp.Expression) -> Optional[int]:
    """Character offset of the earliest token under ``node``, or under its nearest enclosing node that has one
    (sqlglot keeps positions on identifiers and literals, not on keywords such as ``*``)."""
    n: Optional[exp.Expression] = node
    while n is not None:
        starts = [m["start"] for m in (getattr(x, "_meta", None) for x in n.walk()) if m and "start" in m]
        if starts:
            return min(starts)
        n = n.parent
    return None


def _outside_subqueries(e: exp.Expression):
    return e.walk(prune=lambda x: isinstance(x, (exp.Subquery, exp.Select)) and x is not e)


class StarBinder:
    """Mixin for :class:`planner.bind.Binder`."""

    def expand_star(self, expressions, scope) -> List[Item]:
        """The SELECT list as (expression, output name) pairs, star forms expanded."""
        out: List[Item] = []
        for e in expressions:
            if is_star(e):
                out += self.star_items(e, scope)
                continue
            self.check_no_bare_star(e)
            if any(isinstance(n, exp.Columns) for n in _outside_subqueries(e)):
                out += self.columns_items(e, scope)
            elif isinstance(e, exp.Alias):
                out.append((e.this, e.alias))
            elif isinstance(e, exp.Column):
                out.append((e, e.name))
            else:
                out.append((e, e.sql(dialect="duckdb")))
        return out

    def check_no_bare_star(self, e: exp.Expression) -> None:
        """``*`` is a select item or COUNT's argument; DuckDB's ``* LIKE 'x%'`` (a star filter) is rejected."""
        for n in _outside_subqueries(e):
            if isinstance(n, exp.Star) and not isinstance(n.parent, (exp.Count, exp.Column, exp.Columns)):
                raise UnsupportedError("* in an expression is not supported (to pick columns by name, write "
                                       "COLUMNS('regex'))", sql=self.sql, offset=located(n))

    def check_columns_in_select_list(self, select: exp.Select) -> None:
        """COLUMNS(...) is expanded in the SELECT list only."""
        for key, value in select.args.items():
            if key == "expressions" or not isinstance(value, (exp.Expression, list)):
                continue
            for v in value if isinstance(value, list) else [value]:
                if not isinstance(v, exp.Expression):
                    continue
                for n in _outside_subqueries(v):
                    if isinstance(n, exp.Columns):
                        raise UnsupportedError("COLUMNS(...) outside the SELECT list is not supported", sql=self.sql,
                                               offset=located(n))

    # ------------------------------------------------------------------ * EXCLUDE / REPLACE / RENAME
    def star_columns(self, e: exp.Expression, scope) -> List[Tuple[object, str]]:
        """(relation, column name) of every column ``*`` or ``t.*`` stands for."""
        table = self.star_table(e)
        rels = [r for r in scope.rels if table is None or r.alias == table]
        if not rels:
            raise self.bind_error(f"unknown relation '{table}' in {table}.*", e)
        out = []
        for r in rels:
            ri = scope.rels.index(r)
            for n in r.names:
                if table is None and (ri, n.lower()) in scope.coalesced:
                    raise UnsupportedError(f"* over a RIGHT or FULL JOIN ... USING ({n}) (or a NATURAL one) is not "
                                           f"supported: list the columns, with COALESCE(a.{n}, b.{n}) AS {n} for "
                                           "the joined column", sql=self.sql, offset=located(e))
            # (a USING column merged away is still in t.*; a LATERAL's correlation column is in no *)
            out += [(r, n) for n in r.names if (ri, n.lower()) not in scope.hidden or
                    (table is not None and not n.startswith(LATERAL_PREFIX))]
        return out

    @staticmethod
    def star_table(e: exp.Expression) -> Optional[str]:
        return name_of(e.args["table"]) if isinstance(e, exp.Column) and e.args.get("table") else None

    def star_items(self, e: exp.Expression, scope) -> List[Item]:
        star = e.this if isinstance(e, exp.Column) else e
        cols = self.star_columns(e, scope)
        for c in star.args.get("except_") or []:
            hit = self.star_matches(c, cols, "EXCLUDE")
            cols = [rn for i, rn in enumerate(cols) if i not in hit]
        items = [(self.qualified(*rn), rn[1]) for rn in cols]
        changed = set()
        for key, word in (("replace", "REPLACE"), ("rename", "RENAME")):
            for a in star.args.get(key) or []:
                target = keep_position(exp.column(a.alias), a) if key == "replace" else a.this
                for i in self.star_matches(target, cols, word, a):
                    if i in changed:
                        raise self.bind_error(f"column {cols[i][1]} is in more than one of REPLACE and RENAME", a)
                    changed.add(i)
                    items[i] = (a.this if key == "replace" else items[i][0], a.alias)
        return items

    def star_matches(self, c: exp.Expression, cols, word: str, at: Optional[exp.Expression] = None) -> List[int]:
        """The indexes in ``cols`` (relation, name) of the columns an item of EXCLUDE / REPLACE / RENAME names."""
        if not isinstance(c, exp.Column):
            raise UnsupportedError(f"{c.sql(dialect='duckdb')} in a {word} list is not supported (name a column)",
                                   sql=self.sql, offset=located(c))
        table = name_of(c.args["table"]) if c.args.get("table") else None
        hit = [i for i, (r, n) in enumerate(cols) if n.lower() == c.name.lower() and (table is None or r.alias == table)]
        if not hit:
            raise self.bind_error(f"column {c.sql(dialect='duckdb')} in the {word} list is not a column of *. "
                                  f"Columns: {', '.join(n for _, n in cols)}", at if at is not None else c)
        return hit

    # ------------------------------------------------------------------ COLUMNS(...)
    def columns_items(self, e: exp.Expression, scope) -> List[Item]:
        """A select item with COLUMNS(...) in it: one item per column it stands for."""
        nodes = [n for n in _outside_subqueries(e) if isinstance(n, exp.Columns)]
        if len({n.sql(dialect="duckdb") for n in nodes}) > 1:
            raise self.bind_error("different COLUMNS(...) in one expression (DuckDB allows one)", nodes[1])
        arg = nodes[0].this
        if is_star(arg):
            cols = self.star_items(arg, scope)
        elif isinstance(arg, exp.Literal) and arg.is_string:
            cols = self.regex_columns(arg, scope)
        else:
            raise UnsupportedError("COLUMNS with a lambda or a list is not supported (write COLUMNS('regex'))",
                                   sql=self.sql, offset=located(nodes[0]))
        alias = e.alias if isinstance(e, exp.Alias) else None
        body = e.this if isinstance(e, exp.Alias) else e
        out: List[Item] = []
        for col_expr, name in cols:
            if isinstance(body, exp.Columns):
                item = keep_position(col_expr.copy(), body)
            else:
                item = body.copy()
                for n in [n for n in _outside_subqueries(item) if isinstance(n, exp.Columns)]:
                    n.replace(keep_position(col_expr.copy(), n))
            out.append((item, alias or name))
        return out

    def regex_columns(self, pattern: exp.Literal, scope) -> List[Item]:
        try:
            regex = re.compile(pattern.this)
        except re.error as err:
            raise BindError(f"invalid regular expression in COLUMNS: {err}", sql=self.sql,
                            offset=located(pattern)) from None
        cols = self.star_columns(exp.Star(), scope)
        hit = [(self.qualified(r, n), n) for r, n in cols if regex.search(n)]
        if not hit:
            raise self.bind_error(f"COLUMNS('{pattern.this}') matches no column. Columns: "
                                  f"{', '.join(n for _, n in cols)}", pattern)
        return hit
