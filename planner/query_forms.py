"""Query forms written as the forms the binder knows, before binding (pure rewrites of the parsed query).

* Named windows: ``WINDOW w AS (PARTITION BY k ORDER BY t)`` and ``OVER w`` / ``OVER (w ORDER BY x)``: each
  window that names one takes its PARTITION BY, and its ORDER BY and frame unless it gives its own.
* ``VALUES`` in FROM: ``(VALUES (1, 'a'), (2, 'b')) v(x, y)`` is ``(SELECT 1 AS x, 'a' AS y UNION ALL SELECT 2,
  'b') v`` (columns ``col0, col1, ...`` without a column list, as in DuckDB).
* ``a SEMI JOIN b ON c`` / ``a ANTI JOIN b ON c`` (DuckDB's): ``WHERE [NOT] EXISTS (SELECT 1 FROM b WHERE c)``,
  where the other joins of the FROM are inner or LEFT joins (a filter after them is then the same as one before).
* ``t, LATERAL (SELECT ... FROM u WHERE u.k = t.k [AND ...] [ORDER BY ... LIMIT n]) s`` (also ``[LEFT] JOIN
  LATERAL (...) s ON ...``): the subquery as a derived table with its correlation columns (and, with LIMIT, a
  ROW_NUMBER per correlation key) joined on them; correlated by equalities with outer columns qualified by
  their relation, no aggregates.
* DuckDB's UNNEST in the SELECT list (``SELECT id, unnest(tags) AS tag FROM o``): a ``CROSS JOIN UNNEST`` after
  the FROM, whose element the item reads (a row with a NULL or empty list gives no row, as in DuckDB); one
  UNNEST per SELECT, which has no GROUP BY, aggregate or window function (DuckDB unnests after those).  Its
  column is hidden from ``*``.
* ``x op ANY (SELECT y ...)`` (also SOME) and ``x op ALL (SELECT y ...)`` in WHERE or HAVING, outside NOT (where
  NULL and FALSE both drop the row): ``EXISTS (SELECT 1 FROM (SELECT y ...) s(v) WHERE x op s.v)`` and
  ``NOT EXISTS (... WHERE NOT COALESCE(x op s.v, FALSE))``.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT SUM(x) OVER w FROM t WINDOW w AS (PARTITION BY k)", read="duckdb")
>>> rewrite(q, "").sql(dialect="duckdb")
'SELECT SUM(x) OVER (PARTITION BY k) FROM t'
"""
from __future__ import annotations

from sqlglot import exp

from .scope import LATERAL_PREFIX
from .errors import UnsupportedError
from .scope import position_of


def rewrite(q: exp.Expression, sql: str) -> exp.Expression:
    q = q.copy()
    for select in list(q.find_all(exp.Select)):
        _inline_named_windows(select)
        _semi_anti_as_exists(select, sql)
        _lateral_as_join(select, sql)
        _select_list_unnest(select, sql)
    for values in list(q.find_all(exp.Values)):
        if isinstance(values.parent, (exp.From, exp.Join)):
            values.replace(_values_as_union(values))
    for i, node in enumerate(list(q.find_all(exp.Any, exp.All))):
        _quantified_as_exists(node, i, sql)
    return q


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _outer_names(select: exp.Select, before: int):
    """The names of the relations of ``select``'s FROM before join ``before``."""
    items = [select.args["from_"].this] + [j.this for j in (select.args.get("joins") or [])[:before]]
    return {i.alias_or_name.lower() for i in items if isinstance(i, (exp.Table, exp.Subquery))}


def _lateral_as_join(select: exp.Select, sql: str) -> None:
    for ji, j in enumerate(list(select.args.get("joins") or [])):
        if not isinstance(j.this, exp.Lateral):
            continue
        lat = j.this
        at = position_of(lat)

        def refuse(what: str) -> UnsupportedError:
            return UnsupportedError(f"LATERAL {what} is not supported", sql=sql, offset=at)
        sub = lat.this.this if isinstance(lat.this, exp.Subquery) else None
        alias = lat.args.get("alias")
        if not isinstance(sub, exp.Select) or alias is None or alias.columns:
            raise refuse("other than a subquery with an alias, (SELECT ...) AS name")
        aggregates = any(isinstance(n, exp.AggFunc) for e in sub.expressions for n in e.walk())
        if sub.args.get("from_") is None or (aggregates and not any(sub.args.get(k) for k in (
                "group", "having", "distinct", "limit", "offset", "with_", "qualify", "joins"))):
            _lateral_one_row(select, j, sub, alias.name, refuse)   # one row per outer row
            continue
        grouped = sub.args.get("group") is not None
        distinct = sub.args.get("distinct")
        if any(sub.args.get(k) for k in ("with_", "qualify")) or (aggregates and not grouped) or \
                (sub.args.get("having") is not None and not grouped) or \
                (distinct is not None and distinct.args.get("on") is not None) or \
                any(isinstance(n, exp.Window) for e in sub.expressions for n in e.walk()):
            raise refuse("with window functions, DISTINCT ON, a WITH, or aggregates without GROUP BY beside a LIMIT")
        if sub.args.get("limit") is not None and sub.args.get("order") is None:
            raise refuse("with LIMIT and no ORDER BY")
        outer = _outer_names(select, ji)

        def outer_columns(e: exp.Expression):
            return [c for c in e.find_all(exp.Column) if c.table and c.table.lower() in outer]
        keys, local = [], []
        for c in (_conjuncts(sub.args["where"].this) if sub.args.get("where") else []):
            if isinstance(c, exp.EQ):
                for inner_side, outer_side in ((c.this, c.expression), (c.expression, c.this)):
                    cols = list(outer_side.find_all(exp.Column))
                    if cols and len(outer_columns(outer_side)) == len(cols) and not outer_columns(inner_side):
                        keys.append((inner_side, outer_side))
                        break
                else:
                    local.append(c)
            else:
                local.append(c)
        rest = [e for e in sub.expressions] + local + \
            [sub.args[k] for k in ("order", "group", "having") if sub.args.get(k) is not None]
        if any(outer_columns(e) for e in rest):
            raise refuse("correlated other than by equalities `inner expression = outer column` in its WHERE")
        inner = sub.copy()
        for arg in ("order", "limit", "offset"):
            inner.set(arg, None)
        inner.set("where", exp.Where(this=exp.and_(*[c.copy() for c in local])) if local else None)
        extra = [exp.alias_(k.copy(), f"{LATERAL_PREFIX}k{i}") for i, (k, _) in enumerate(keys)]
        limit = sub.args.get("limit")
        if limit is not None:
            part = [k.copy() for k, _ in keys]
            extra.append(exp.alias_(exp.Window(this=exp.RowNumber(), partition_by=part or None,
                                               order=_order_of_items(sub)), f"{LATERAL_PREFIX}rn"))
        inner.set("expressions", [e.copy() for e in sub.expressions] + extra)
        if grouped:   # per outer row, the groups of its rows: grouped by the correlation keys too
            group = sub.args["group"].copy()
            group.set("expressions", list(group.expressions) + [k.copy() for k, _ in keys])
            inner.set("group", group)
        if limit is not None:
            n = limit.expression
            off = sub.args["offset"].expression if sub.args.get("offset") is not None else exp.Literal.number(0)
            rn = exp.column(f"{LATERAL_PREFIX}rn")
            inner = exp.select("*").from_(exp.Subquery(this=inner, alias=exp.TableAlias(
                this=exp.to_identifier(f"{LATERAL_PREFIX}rows")))).where(exp.and_(
                    exp.GT(this=rn, expression=off.copy()),
                    exp.LTE(this=rn.copy(), expression=exp.Add(this=off.copy(), expression=n.copy()))))
        derived = exp.Subquery(this=inner, alias=alias.copy())
        derived.meta["lateral"] = True
        derived.meta.update({k: v for k, v in lat.meta.items() if k in ("start", "end", "line", "col")})
        name = alias.name
        cond = [exp.EQ(this=exp.column(f"{LATERAL_PREFIX}k{i}", table=name), expression=o.copy())
                for i, (_, o) in enumerate(keys)]
        on = j.args.get("on")
        if on is not None and not (isinstance(on, exp.Boolean) and on.this is True):
            cond.append(on.copy())
        side = (j.args.get("side") or "").upper()
        if side not in ("", "LEFT") or (j.args.get("kind") or "").upper() not in ("", "CROSS", "INNER"):
            raise refuse(f"in a {side or j.args.get('kind')} JOIN (inner, comma, CROSS or LEFT joins)")
        new = exp.Join(this=derived, on=exp.and_(*cond) if cond else exp.true())
        if side:
            new.set("side", side)
        j.replace(new)


def _order_of_items(sub: exp.Select) -> exp.Order:
    """``sub``'s ORDER BY for a window over its rows: a position (``ORDER BY 2``) or an alias of the SELECT list
    is the item's expression (in a window, a number is a constant and an alias is unknown)."""
    items = list(sub.expressions)
    aliases = {i.alias.lower(): i.this for i in items if isinstance(i, exp.Alias)}
    order = sub.args["order"].copy()
    for o in order.expressions:
        key = o.this
        if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit() and \
                1 <= int(key.this) <= len(items):
            item = items[int(key.this) - 1]
            o.set("this", (item.this if isinstance(item, exp.Alias) else item).copy())
        elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
            o.set("this", aliases[key.name.lower()].copy())
    return order


def _lateral_one_row(select: exp.Select, j: exp.Join, sub: exp.Select, name: str, refuse) -> None:
    """A LATERAL subquery of one row per outer row (no FROM: ``LATERAL (SELECT t.x * 2 AS y) s``; or aggregates
    without GROUP BY: ``LATERAL (SELECT COUNT(*) AS n FROM u WHERE u.k = t.k) s``) taken out of FROM: each
    reference ``s.col`` is the item's expression, or a scalar subquery of it (``*`` and ``s.*`` list them)."""
    if any(isinstance(e, exp.Star) for e in sub.expressions):
        raise refuse("SELECT * without FROM")
    side = (j.args.get("side") or "").upper()
    on = j.args.get("on")
    trivial = on is None or (isinstance(on, exp.Boolean) and on.this is True)
    if side not in ("", "LEFT") or (side and not trivial) or (j.args.get("kind") or "").upper() not in ("", "CROSS", "INNER"):
        raise refuse("of one row per outer row other than in a comma, CROSS, INNER or LEFT ... ON TRUE join")
    columns = {}
    for e in sub.expressions:
        col_name = e.alias_or_name
        value = e.this if isinstance(e, exp.Alias) else e
        if sub.args.get("from_") is not None:
            scalar = sub.copy()
            scalar.set("expressions", [value.copy()])
            value = exp.Subquery(this=scalar)
        columns[col_name.lower()] = (col_name, value)
    before = [x for x in [select.args["from_"].this] + [k.this for k in select.args.get("joins") or []]
              if x is not j.this]
    select.set("joins", [k for k in select.args.get("joins") or [] if k is not j] or None)
    if not trivial:
        select.set("where", exp.Where(this=exp.and_(on.copy(), select.args["where"].this)
                                      if select.args.get("where") else on.copy()))

    def put(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.table and n.table.lower() == name.lower():
            if isinstance(n.this, exp.Star):
                raise refuse(f"{name}.* inside an expression")
            if n.name.lower() not in columns:
                raise refuse(f"column {n.sql()}: {name} has {', '.join(c for c, _ in columns.values())}")
            return exp.Paren(this=columns[n.name.lower()][1].copy())
        if isinstance(n, exp.Column) and not n.table and n.name.lower() in columns:
            raise refuse(f"column {n.name} without its relation's name (write {name}.{n.name})")
        return n

    def named(e: exp.Expression) -> exp.Expression:   # s.col keeps its name, col
        if isinstance(e, exp.Column) and e.table and e.table.lower() == name.lower():
            return exp.Alias(this=e.transform(put), alias=exp.to_identifier(e.name, quoted=True))
        return e.transform(put)

    items = []
    for e in select.expressions:
        star = e.this if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) else e
        if isinstance(e, exp.Star) or (isinstance(star, exp.Star) and isinstance(e, exp.Column)
                                       and e.table.lower() == name.lower()):
            if isinstance(e, exp.Star):
                items += [exp.Column(this=exp.Star(), table=exp.to_identifier(x.alias_or_name)) for x in before]
            items += [exp.Alias(this=exp.Paren(this=v.copy()), alias=exp.to_identifier(c, quoted=True))
                      for c, v in columns.values()]
        else:
            items.append(named(e))
    select.set("expressions", items)
    for arg in ("where", "group", "having", "order"):
        if select.args.get(arg) is not None:
            select.set(arg, select.args[arg].transform(put))


def _conjuncts(e: exp.Expression):
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]


def _simple(q: exp.Expression) -> bool:
    """A SELECT of one item whose rows are its FROM's filtered by its WHERE (no grouping, DISTINCT, LIMIT ...)."""
    return isinstance(q, exp.Select) and not any(q.args.get(k) for k in (
        "group", "having", "distinct", "limit", "offset", "order", "qualify", "with_", "windows")) \
        and not any(isinstance(n, (exp.AggFunc, exp.Window)) for n in q.expressions[0].walk())


def _outer_qualified(x: exp.Expression, cmp: exp.Expression):
    """``x`` with each unqualified column named by the enclosing SELECT's one FROM relation (so that moved into
    the subquery it still means the outer column); None if a column cannot be qualified (several relations)."""
    select = cmp.find_ancestor(exp.Select)
    frm = select.args.get("from_") if select is not None else None
    out = x.copy()
    columns = [c for c in out.find_all(exp.Column) if not c.table]
    if not columns:
        return out
    if frm is None or select.args.get("joins") or not isinstance(frm.this, exp.Table):
        return None
    name = frm.this.alias_or_name
    for c in columns:
        c.set("table", exp.to_identifier(name))
    return out


def _shadows(inner: exp.Expression, x: exp.Expression) -> bool:
    """Does a relation of the subquery's FROM have the name a column of ``x`` is qualified by?"""
    names = {t.alias_or_name.lower() for t in inner.find_all(exp.Table)}
    return any(c.table.lower() in names for c in x.find_all(exp.Column) if c.table)


def _quantified_as_exists(node: exp.Expression, i: int, sql: str) -> None:
    """``x op ANY / ALL (subquery)`` as [NOT] EXISTS (see the module's text)."""
    word = "ALL" if isinstance(node, exp.All) else "ANY"
    cmp = node.parent
    at = position_of(cmp if cmp is not None else node)
    if not isinstance(cmp, _COMPARISONS) or cmp.args.get("expression") is not node:
        raise UnsupportedError(f"{word} other than in a comparison `x op {word} (SELECT ...)` is not supported",
                               sql=sql, offset=at)
    inner = node.this
    while isinstance(inner, (exp.Paren, exp.Subquery)):
        inner = inner.this
    if not isinstance(inner, exp.Query):
        raise UnsupportedError(f"{word} over a list or an array is not supported (write x IN (...), or a subquery)",
                               sql=sql, offset=at)
    if isinstance(inner, exp.Select) and (len(inner.expressions) != 1 or isinstance(inner.expressions[0], exp.Star)):
        raise UnsupportedError(f"the subquery of {word} must return one column", sql=sql, offset=at)
    up = cmp.parent
    while isinstance(up, (exp.And, exp.Or, exp.Paren)):
        up = up.parent
    filtering = isinstance(up, (exp.Where, exp.Having))   # (a NULL is then as good as FALSE)
    left = _outer_qualified(cmp.this, cmp)
    if left is not None and _simple(inner) and not _shadows(inner, left):   # the subquery's own FROM and WHERE: it may be correlated
        item = inner.expressions[0]
        test = type(cmp)(this=left, expression=(item.this if isinstance(item, exp.Alias) else item).copy())
        sub = inner.copy()
        sub.set("expressions", [exp.Literal.number(1)])
    else:   # a derived table (uncorrelated: grouped, DISTINCT, a set operation, ...)
        alias = f"__quantified{i}"
        test = type(cmp)(this=cmp.this.copy(), expression=exp.column("v", table=alias))
        sub = exp.select("1").from_(exp.Subquery(this=inner.copy(), alias=exp.TableAlias(
            this=exp.to_identifier(alias), columns=[exp.to_identifier("v")])))

    def exists(condition: exp.Expression) -> exp.Exists:
        return exp.Exists(this=sub.copy().where(condition))

    if not filtering:   # under NOT, in the SELECT list, in a CASE: TRUE, FALSE or NULL, as SQL says
        unknown = exists(exp.Is(this=exp.Paren(this=test.copy()), expression=exp.Null()))
        decided, value = (exists(test.copy()), exp.true()) if word == "ANY" else \
            (exists(exp.Not(this=exp.Coalesce(this=test.copy(), expressions=[exp.true()]))), exp.false())
        other = exp.false() if word == "ANY" else exp.true()
        cmp.replace(exp.Paren(this=exp.Case(ifs=[exp.If(this=decided, true=value),
                                                 exp.If(this=unknown, true=exp.cast(exp.Null(), "BOOLEAN"))],
                                            default=other)))
        return
    if word == "ALL":
        test = exp.Not(this=exp.Coalesce(this=test, expressions=[exp.false()]))
    out = exists(test)
    cmp.replace(exp.Paren(this=exp.Not(this=out)) if word == "ALL" else out)


UNNESTED = f"{LATERAL_PREFIX}v"   # the column of a SELECT list's UNNEST (hidden from *, as a LATERAL's keys)


def _select_list_unnest(select: exp.Select, sql: str) -> None:
    def own(n: exp.Expression) -> bool:   # (not inside a subquery of the item)
        return n.find_ancestor(exp.Select) is select
    found = [(item, n) for item in select.expressions for n in item.walk()
             if isinstance(n, (exp.Explode, exp.Unnest)) and own(n)]
    if not found:
        return
    item, n = found[0]
    others = [x for e in select.expressions for x in e.walk() if own(x) and isinstance(x, (exp.AggFunc, exp.Window))]
    from_ = select.args.get("from") or select.args.get("from_")
    why = ("a second UNNEST in the SELECT list" if len(found) > 1 else
           "UNNEST in the SELECT list of a query without FROM" if from_ is None else
           "UNNEST in the SELECT list beside GROUP BY, an aggregate or a window function (DuckDB unnests their "
           "result)" if select.args.get("group") or select.args.get("having") or others else
           "UNNEST with options (recursive, max_depth)" if not isinstance(n, exp.Explode) or
           any(v for k, v in n.args.items() if k != "this") else None)
    if why is not None:
        raise UnsupportedError(f"{why} is not supported: write CROSS JOIN UNNEST(list) AS u(x) in FROM",
                               sql=sql, offset=position_of(found[1][1] if len(found) > 1 else n))
    name = f"{LATERAL_PREFIX}unnest"
    unnest = exp.Unnest(expressions=[n.this.copy()], alias=exp.TableAlias(this=exp.to_identifier(name),
                                                                          columns=[exp.to_identifier(UNNESTED)]))
    unnest.meta["select_list"] = True
    label = None if isinstance(item, exp.Alias) else item.sql(dialect="duckdb")   # (as the binder names it)
    element = exp.column(UNNESTED, table=name)
    n.replace(element)
    item = element if item is n else item
    if label is not None:
        item.replace(exp.alias_(item.copy(), label, quoted=True))
    select.append("joins", exp.Join(this=unnest, kind="CROSS"))


def _inline_named_windows(select: exp.Select) -> None:
    named = select.args.get("windows")
    if not named:
        return
    defs = {w.this.name.lower(): w for w in named if isinstance(w.this, exp.Identifier)}

    def inline(n: exp.Expression) -> exp.Expression:
        alias = n.args.get("alias") if isinstance(n, exp.Window) else None
        if alias is None or not n.args.get("over") or alias.name.lower() not in defs:
            return n
        base = defs[alias.name.lower()]
        out = n.copy()
        out.set("alias", None)
        for key in ("partition_by", "order", "spec"):
            if base.args.get(key) and not n.args.get(key):
                value = base.args[key]
                out.set(key, [v.copy() for v in value] if isinstance(value, list) else value.copy())
        return out

    for key in ("expressions", "order", "qualify"):
        value = select.args.get(key)
        if isinstance(value, list):
            select.set(key, [v.transform(inline) for v in value])
        elif isinstance(value, exp.Expression):
            select.set(key, value.transform(inline))
    select.set("windows", None)


def _values_as_union(values: exp.Values) -> exp.Expression:
    alias = values.args.get("alias")
    rows = [r.expressions if isinstance(r, exp.Tuple) else [r] for r in values.expressions]
    width = len(rows[0]) if rows else 0
    names = [c.name for c in alias.columns] if alias is not None and alias.columns else []
    names += [f"col{i}" for i in range(len(names), width)]
    query = None
    for row in rows:
        one = exp.select(*[exp.alias_(v.copy(), names[i]) for i, v in enumerate(row)])
        query = one if query is None else exp.union(query, one, distinct=False)
    out = exp.Subquery(this=query)
    if alias is not None and alias.this is not None:
        out.set("alias", exp.TableAlias(this=alias.this.copy()))
    return out


def _semi_anti_as_exists(select: exp.Select, sql: str) -> None:
    joins = select.args.get("joins") or []
    kinds = [str(j.args.get("kind") or "").upper() for j in joins]
    if not any(k in ("SEMI", "ANTI") for k in kinds):
        return
    for j, k in zip(joins, kinds):
        side = str(j.args.get("side") or "").upper()
        if k not in ("SEMI", "ANTI") and side in ("RIGHT", "FULL"):
            raise UnsupportedError("a SEMI or ANTI JOIN beside a RIGHT or FULL JOIN (write [NOT] EXISTS)", sql=sql,
                                   offset=position_of(j))
        if k in ("SEMI", "ANTI") and (j.args.get("using") or j.args.get("on") is None or side):
            raise UnsupportedError(f"{k} JOIN without ON (or with USING or a side)", sql=sql, offset=position_of(j))
    kept, conds = [], []
    for j, k in zip(joins, kinds):
        if k not in ("SEMI", "ANTI"):
            kept.append(j)
            continue
        inner = exp.select(exp.Literal.number(1)).from_(j.this.copy()).where(j.args["on"].copy())
        test = exp.Exists(this=inner)
        conds.append(exp.Not(this=test) if k == "ANTI" else test)
    select.set("joins", kept or None)
    where = select.args.get("where")
    cond = conds[0]
    for c in conds[1:]:
        cond = exp.and_(cond, c)
    select.set("where", exp.Where(this=exp.and_(exp.Paren(this=where.this.copy()), cond) if where else cond))
