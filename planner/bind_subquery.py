"""Binding subqueries in expressions: decorrelation into joins.

* ``[NOT] EXISTS (...)`` and ``x IN (...)`` in WHERE become semi and anti joins,
  correlated by equalities (join keys) plus residual conditions.
* ``x NOT IN (SELECT y ...)`` follows SQL's three-valued logic: a row is kept
  when the subquery is empty, or when ``x`` is not NULL, no ``y`` equals it and
  no ``y`` is NULL.  Two flags (empty, has NULL) come from a global aggregate
  over the subquery, deduplicated so that they change only when a flag flips.
* A scalar subquery ``(SELECT agg(...) FROM ...)`` becomes a join with a
  relation of at most one row per correlation key: uncorrelated, a cross join
  with the one-row aggregate; correlated by equalities, the subquery grouped by
  its inner correlation expressions, joined on them.  A key without inner rows
  gets the aggregate's value over no rows (COUNT 0, others NULL).

The binder class mixes this in; it provides ``bind_from``, ``bind_query``,
``bind_scalar``, ``try_resolve`` and the error helpers.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from sqlglot import exp

from .bind_window import find_windows
from .logical import AggCall, Aggregate, Distinct, Expr, Filter, Join, Node, Project, col
from .scope import Rel, Scope, is_subquery_predicate, split_and
from .typecheck import check_types, type_name, types_meet
from .types import BIGINT, BOOLEAN, SqlType
from .user_functions import UserAggregate

COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
# expression nodes through which NULL propagates: an aggregate over no rows (NULL) makes the result NULL
NULL_PROPAGATING = (exp.Column, exp.Literal, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod,
                    exp.Neg, exp.Cast, exp.DataType, exp.Identifier)


def scalar_subqueries(e: exp.Expression) -> List[exp.Subquery]:
    """The scalar subqueries in ``e`` (not the query of an IN, not under EXISTS, not nested in another)."""
    if isinstance(e, exp.Subquery):
        return [e]
    out: List[exp.Subquery] = []
    for child in e.iter_expressions():
        if isinstance(child, exp.Subquery) and not (isinstance(e, exp.In) and e.args.get("query") is child):
            out.append(child)
        elif not isinstance(child, (exp.Exists, exp.Select, exp.Subquery)):
            out.extend(scalar_subqueries(child))
    return out


ZERO_OVER_NO_ROWS = (exp.Count, exp.RegrCount)   # the aggregates that are 0, not NULL, over no rows


def empty_value(value: exp.Expression) -> Tuple[exp.Expression, bool]:
    """The value of an aggregate expression over no rows, and whether that is simply NULL."""
    def fn(n):
        if isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc):
            n = n.this
        if isinstance(n, ZERO_OVER_NO_ROWS):
            return exp.Literal.number(0)
        if isinstance(n, UserAggregate):   # a Python aggregate over no rows: finish(create()), from an empty list
            return exp.Cast(this=exp.Anonymous(this=n.this.name, expressions=[exp.Null()]),
                            to=exp.DataType.build(n.args["returns"].name, dialect="duckdb"))
        if isinstance(n, exp.AggFunc):
            return exp.Null()
        return n

    has_count = any(isinstance(n, ZERO_OVER_NO_ROWS) for n in value.walk())
    plain = all(isinstance(n, NULL_PROPAGATING + (exp.AggFunc, exp.Filter, exp.Where, exp.Distinct))
                and not isinstance(n, UserAggregate) for n in value.walk())
    return value.copy().transform(fn), plain and not has_count


def only_inner_rows(value: exp.Expression, mark: exp.Column) -> exp.Expression:
    """``value`` with each aggregate over the rows where ``mark`` is not NULL: the inner rows of a LEFT JOIN, not
    the NULL row that stands for a domain value without any (``COUNT('x')``, ``MAX(1)`` or a Python aggregate
    would count it)."""
    def fn(n):
        if isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc):
            cond = exp.and_(exp.Paren(this=n.expression.this.copy()), mark.copy().is_(exp.null()).not_())
            return exp.Filter(this=n.this.copy(), expression=exp.Where(this=cond))
        if isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Filter):
            return exp.Filter(this=n.copy(), expression=exp.Where(this=mark.copy().is_(exp.null()).not_()))
        return n
    return value.copy().transform(fn)


class SubqueryBinder:
    """Mixin for :class:`planner.bind.Binder`."""

    # ------------------------------------------------------------------ shared
    def split_correlated(self, q: exp.Select, ctes):
        """Bind the subquery's FROM alone; split its WHERE into local and correlated conjuncts."""
        inner = q.copy()
        inner.set("where", None)
        for key in ("group", "having", "distinct", "order"):
            inner.set(key, None)
        inner_plan, inner_scope, _ = self.bind_from(inner, ctes)
        local, correlated = [], []
        for w in split_and(q.args["where"].this) if q.args.get("where") else []:
            if is_subquery_predicate(w) or scalar_subqueries(w):
                local.append(w)   # a nested subquery: bound with the subquery's own FROM
                continue
            self.check_scalar(w, allow_agg=False, clause="a subquery's WHERE")
            cols = list(w.find_all(exp.Column))
            (local if all(self.try_resolve(x, inner_scope) is not None for x in cols) else correlated).append(w)
        return inner_plan, inner_scope, local, correlated

    def nested_scope(self, inner_scope, outer_scope):
        width = outer_scope.width
        nested = Scope([Rel(r.alias, r.names, r.types, r.offset + width) for r in inner_scope.rels],
                       parent=outer_scope)
        nested.hidden = set(inner_scope.hidden)
        return nested

    def correlated_sides(self, w: exp.Expression, nested, width: int):
        """``outer_expr = inner_expr`` (either order) as ASTs (outer, inner), else None."""
        if not isinstance(w, exp.EQ):
            return None

        def side(e):
            pos = [self.resolve(x, nested) for x in e.find_all(exp.Column)]
            if not pos:
                return None
            return "outer" if all(p < width for p in pos) else "inner" if all(p >= width for p in pos) else None

        a, b = w.this, w.expression
        sa, sb = side(a), side(b)
        if {sa, sb} == {"inner", "outer"}:   # (a join key: its sides are bound apart, so their types meet here)
            check_types(self.substituted(w, nested), nested.types(), self.sql)
        if (sa, sb) == ("inner", "outer"):
            return b, a
        if (sa, sb) == ("outer", "inner"):
            return a, b
        return None

    def check_key_types(self, left: Expr, right: Expr, at: exp.Expression) -> None:
        """``left = right`` as a join key (IN's probe and the subquery's column): their types must meet."""
        if not types_meet(left.type, right.type):
            raise self.bind_error(f"cannot compare {type_name(left.type)} with {type_name(right.type)}", at)

    # ------------------------------------------------------------------ IN / EXISTS
    def bind_subquery_predicate(self, c: exp.Expression, plan: Node, scope, ctes) -> Node:
        """``[NOT] EXISTS (...)`` and ``x [NOT] IN (...)`` in WHERE, decorrelated into semi or anti joins."""
        negate = isinstance(c, exp.Not)
        pred = c.this if negate else c
        if isinstance(pred, exp.In):
            probe, q = pred.this, pred.args["query"]
        else:
            probe, q = None, pred.this
        q = q.this if isinstance(q, exp.Subquery) else q
        width = scope.width
        if not isinstance(q, exp.Select):
            if probe is not None and not negate:
                sub_plan, _ = self.bind_query(q, ctes)
                return self.in_join(plan, scope, probe, sub_plan, q)
            raise self.unsupported(f"{type(q).__name__.upper()} in a subquery predicate", q)
        inner_plan, inner_scope, local, correlated = self.split_correlated(q, ctes)
        nested = self.nested_scope(inner_scope, scope)
        if not correlated:
            sub_plan, _names = self.bind_query(q, ctes)
            if probe is None:
                return Join(plan, sub_plan, (), (), None, "anti" if negate else "semi")
            if negate:
                return self.not_in(plan, scope, probe, sub_plan, q)
            return self.in_join(plan, scope, probe, sub_plan, q)
        if negate and probe is not None:
            raise self.unsupported("correlated NOT IN subquery (use NOT EXISTS)", c)
        if any(q.args.get(k) for k in ("group", "having", "distinct", "limit")) or \
                any(self.find_aggs(e) for e in q.expressions):
            raise self.unsupported("correlated IN or EXISTS subquery with aggregation, DISTINCT or LIMIT", q)
        sub_plan = inner_plan
        if local:
            sub_plan = Filter(sub_plan, self.bind_scalar(exp.and_(*local), inner_scope))
        lkeys, rkeys, residual = [], [], []
        if probe is not None:
            if len(q.expressions) != 1:
                raise self.bind_error("IN subquery must select exactly one column", q)
            lkeys.append(self.bind_scalar(probe, scope))
            rkeys.append(self.bind_scalar(q.expressions[0], nested))
            self.check_key_types(lkeys[0], rkeys[0], probe)
        for w in correlated:
            sides = self.correlated_sides(w, nested, width)
            if sides is None:
                residual.append(w)
            else:
                lkeys.append(self.bind_scalar(sides[0], nested))
                rkeys.append(self.bind_scalar(sides[1], nested))
        res = self.bind_scalar(exp.and_(*residual), nested) if residual else None
        return Join(plan, sub_plan, tuple(lkeys), tuple(rkeys), res, "anti" if negate else "semi")

    def in_join(self, plan: Node, scope, probe, sub_plan: Node, q) -> Node:
        if len(sub_plan.fields) != 1:
            raise self.bind_error(f"IN subquery returns {len(sub_plan.fields)} columns, expected 1", q)
        key = self.bind_scalar(probe, scope)
        self.check_key_types(key, Expr(col(scope.width), sub_plan.fields[0].type), probe)
        return Join(plan, sub_plan, (key,), (Expr(col(scope.width), sub_plan.fields[0].type),), None, "semi")

    def not_in(self, plan: Node, scope, probe, sub_plan: Node, q) -> Node:
        """``probe NOT IN (uncorrelated subquery)`` with NULL semantics (see the module docstring)."""
        if len(sub_plan.fields) != 1:
            raise self.bind_error(f"NOT IN subquery returns {len(sub_plan.fields)} columns, expected 1", q)
        width = scope.width
        names = tuple(f.name for f in plan.fields)
        nulls = Project(sub_plan, (Expr("CASE WHEN c0 IS NULL THEN 1 ELSE 0 END", SqlType("INT")),), ("isnull",))
        stats = Aggregate(nulls, (), (AggCall("COUNT_STAR", (), False, None, BIGINT.with_nullable(False)),
                                      AggCall("SUM", (Expr("c0", SqlType("INT")),), False, None, BIGINT)),
                          ("n", "nulls"))
        flags = Distinct(Project(stats, (Expr("c0 = 0", BOOLEAN), Expr("COALESCE(c1, 0) > 0", BOOLEAN)),
                                 ("is_empty", "has_null")))
        key = self.bind_scalar(probe, scope)
        self.check_key_types(key, Expr("c0", sub_plan.fields[0].type), probe)
        joined = Join(plan, flags, (), (), None, "inner")
        kept = Filter(joined, Expr(f"c{width} OR (({key.sql}) IS NOT NULL AND NOT c{width + 1})", BOOLEAN))
        anti = Join(kept, sub_plan, (key,), (Expr(col(width + 2), sub_plan.fields[0].type),), None, "anti")
        return Project(anti, tuple(Expr(col(i), f.type) for i, f in enumerate(plan.fields)), names)

    # ------------------------------------------------------------------ scalar subqueries
    def attach_scalar_subqueries(self, plan: Node, scope, e: exp.Expression, ctes,
                                 conjunct: bool = False) -> Tuple[Node, exp.Expression]:
        """Join every scalar subquery of ``e`` to ``plan`` (extending ``scope``); returns ``e`` rewritten
        to read their values.  ``conjunct``: ``e`` is a top-level WHERE conjunct, so a subquery that is a
        direct operand of a comparison may use an inner join (no row of a NULL comparison survives)."""
        e = e.copy()
        for sq in scalar_subqueries(e):
            strict = conjunct and sq.parent is e and isinstance(e, COMPARISONS)
            plan, ref = self.attach_scalar(plan, scope, sq, ctes, strict)
            if sq is e:
                e = ref
            else:
                sq.replace(ref)
        return plan, e

    def scalar_select(self, sq: exp.Subquery, single: bool = False) -> Tuple[exp.Select, exp.Expression]:
        """The subquery's SELECT and its value: an aggregate without GROUP BY; with ``single``, also a plain value
        (``(SELECT b FROM u WHERE ...)``: its rows' one value, see :meth:`attach_scalar`)."""
        q = sq.this
        if not isinstance(q, exp.Select):
            raise self.unsupported(f"{type(q).__name__.upper()} as a scalar subquery", sq)
        if len(q.expressions) != 1 or isinstance(q.expressions[0], exp.Star):
            raise self.bind_error("a scalar subquery must select exactly one column", sq)
        value = q.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        plain = single and not self.find_aggs(value) and not any(
            q.args.get(k) for k in ("group", "having", "distinct", "limit", "offset")) and not find_windows(value)
        if not plain and (q.args.get("group") is not None or not self.find_aggs(value) or
                          q.args.get("limit") is not None):
            raise self.unsupported("scalar subquery that is not an aggregate without GROUP BY, nor one value per "
                                   "row without GROUP BY, DISTINCT or LIMIT" if single else
                                   "scalar subquery that is not an aggregate without GROUP BY "
                                   "(it could return several rows)", sq)
        return q, value

    def attach_scalar(self, plan: Node, scope, sq: exp.Subquery, ctes, strict: bool):
        q, value = self.scalar_select(sq, single=True)
        inner_plan, inner_scope, local, correlated = self.split_correlated(q, ctes)
        width = scope.width
        alias = self.subquery_alias(scope)
        single = not self.find_aggs(value)
        if single:   # one value per row: MIN of it, and how many rows; a row with more than one fails (an error)
            for c in value.find_all(exp.Column):
                if self.try_resolve(c, inner_scope) is None:
                    raise self.unsupported("outer column in a scalar subquery's SELECT list", c)
            vtype = self.bind_scalar(value, inner_scope).type
            q = q.copy()
            q.set("expressions", [exp.Min(this=value.copy()).as_("__v"), exp.Count(this=exp.Star()).as_("__n")])
            value = exp.Min(this=value.copy())
        if not correlated:
            sub_plan, _ = self.bind_query(q, ctes)
            kind = "left" if q.args.get("having") is not None else "inner"
            plan = Join(plan, sub_plan, (), (), None, kind)
            names = ["__v", "__n"] if single else ["__v"]
            scope.rels.append(Rel(alias, names, [f.type for f in sub_plan.fields], width))
            ref = exp.column("__v", table=alias)
            return plan, (one_row(ref, alias, vtype) if single else ref)
        if q.args.get("having") is not None or q.args.get("distinct"):
            raise self.unsupported("correlated scalar subquery with HAVING or DISTINCT", sq)
        nested = self.nested_scope(inner_scope, scope)
        for c in value.find_all(exp.Column):
            if self.try_resolve(c, inner_scope) is None:
                raise self.unsupported("outer column in a scalar subquery's SELECT list", c)
        pairs = [self.correlated_sides(w, nested, width) for w in correlated]
        if any(p is None for p in pairs) and single:
            raise self.unsupported("scalar subquery that is not an aggregate, correlated by other than equalities "
                                   "(outer expression = inner expression)", sq)
        if any(p is None for p in pairs):
            return self.attach_scalar_general(plan, scope, value, inner_plan, inner_scope, local, correlated)
        empty, empty_is_null = empty_value(value)
        marker = not (strict and empty_is_null)
        inner = q.copy()
        inner.set("where", exp.Where(this=exp.and_(*local)) if local else None)
        items = [inner_key.copy().as_(f"__k{i}") for i, (_, inner_key) in enumerate(pairs)]
        items.append(value.copy().as_("__v"))
        if single:
            items.append(exp.Count(this=exp.Star()).as_("__n"))
        if marker:
            items.append(exp.true().as_("__m"))
        inner.set("expressions", items)
        inner.set("group", exp.Group(expressions=[inner_key.copy() for _, inner_key in pairs]))
        sub_plan, _ = self.bind_query(inner, ctes)
        lkeys = tuple(self.bind_scalar(outer_key, scope) for outer_key, _ in pairs)
        rkeys = tuple(Expr(col(width + i), sub_plan.fields[i].type) for i in range(len(pairs)))
        plan = Join(plan, sub_plan, lkeys, rkeys, None, "left" if marker else "inner")
        names = [f"__k{i}" for i in range(len(pairs))] + ["__v"] + (["__n"] if single else []) + \
            (["__m"] if marker else [])
        scope.rels.append(Rel(alias, names, [f.type for f in sub_plan.fields], width))
        ref = exp.column("__v", table=alias)
        if marker and not empty_is_null:
            ref = exp.Case(ifs=[exp.If(this=exp.column("__m", table=alias).is_(exp.Null()), true=empty)],
                           default=ref)
        return plan, (one_row(ref, alias, vtype) if single else ref)

    @staticmethod
    def subquery_alias(scope) -> str:
        return f"__sq{sum(1 for r in scope.rels if (r.alias or '').startswith('__sq'))}"

    def attach_scalar_general(self, plan: Node, scope, value: exp.Expression, inner_plan: Node, inner_scope,
                              local, correlated):
        """A scalar subquery correlated by arbitrary conditions, decorrelated over the domain of the outer
        columns it uses: D = DISTINCT outer columns; D LEFT JOIN inner ON the correlated conditions, grouped
        by D (a D row without inner rows is a group over no rows: COUNT 0, others NULL); joined back to the
        outer rows on the domain columns, NULL-safely."""
        width = scope.width
        nested = self.nested_scope(inner_scope, scope)
        types = scope.types()
        oc: List[int] = []
        for w in correlated:
            for c in w.find_all(exp.Column):
                if self.try_resolve(c, inner_scope) is None:
                    p = self.resolve(c, nested)
                    if p not in oc:
                        oc.append(p)
        m = len(oc)
        dnames = [f"__d{i}" for i in range(m)]
        dom = Distinct(Project(domain_source(plan, oc), tuple(Expr(col(p), types[p]) for p in oc), tuple(dnames)))
        if local:
            inner_plan = Filter(inner_plan, self.bind_scalar(exp.and_(*local), inner_scope))
        wi = len(inner_plan.fields)
        inner_m = Project(inner_plan, tuple(Expr(col(j), f.type) for j, f in enumerate(inner_plan.fields))
                          + (Expr("TRUE", BOOLEAN),), tuple(f.name for f in inner_plan.fields) + ("__m",))
        scope_j = Scope([Rel("__dom", dnames, [types[p] for p in oc], 0)]
                        + [Rel(r.alias, r.names, r.types, r.offset + m) for r in inner_scope.rels]
                        + [Rel("__mark", ["__m"], [BOOLEAN], m + wi)])
        scope_j.hidden = {(i + 1, n) for i, n in inner_scope.hidden}

        def to_domain(w):
            w = w.copy()
            for c in list(w.find_all(exp.Column)):
                if self.try_resolve(c, inner_scope) is None:
                    c.replace(exp.column(f"__d{oc.index(self.resolve(c, nested))}", table="__dom"))
            return w

        lkeys, rkeys, residual = [], [], []
        for w in map(to_domain, correlated):
            sides = None
            if isinstance(w, exp.EQ):
                ra, rb = self.rels_of(w.this, scope_j), self.rels_of(w.expression, scope_j)
                if ra == {0} and rb and 0 not in rb:
                    sides = (w.this, w.expression)
                elif rb == {0} and ra and 0 not in ra:
                    sides = (w.expression, w.this)
            if sides is None:
                residual.append(w)
            else:
                lkeys.append(self.bind_scalar(sides[0], scope_j))
                rkeys.append(self.bind_scalar(sides[1], scope_j))
        res = self.bind_scalar(exp.and_(*residual), scope_j) if residual else None
        joined = Join(dom, inner_m, tuple(lkeys), tuple(rkeys), res, "left")
        counted = only_inner_rows(value, exp.column("__m", table="__mark"))
        keys = [exp.column(d, table="__dom") for d in dnames]
        items = [(k, d) for k, d in zip(keys, dnames)] + [(counted, "__v")]
        agg_plan, exprs = self.bind_grouped(joined, scope_j, items, keys, [], None)
        grouped = Project(agg_plan, tuple(exprs), tuple(dnames) + ("__v",))
        plan = Join(plan, grouped, tuple(Expr(col(p), types[p]) for p in oc),
                    tuple(Expr(col(width + i), types[p]) for i, p in enumerate(oc)), None, "inner", null_safe=True)
        alias = self.subquery_alias(scope)
        scope.rels.append(Rel(alias, dnames + ["__v"], [f.type for f in grouped.fields], width))
        return plan, exp.column("__v", table=alias)

    def late_scalar(self, sq: exp.Subquery, ctes, index: int):
        """An uncorrelated scalar subquery evaluated after grouping: (placeholder column, plan, join kind)."""
        q, _ = self.scalar_select(sq)
        _, _, _, correlated = self.split_correlated(q, ctes)
        if correlated:
            raise self.unsupported("correlated scalar subquery in the SELECT list or HAVING of a grouped query",
                                   sq)
        sub_plan, _ = self.bind_query(q, ctes)
        kind = "left" if q.args.get("having") is not None else "inner"
        return exp.column("__v", table=f"__late{index}"), sub_plan, kind


MORE_THAN_ONE_ROW = " rows returned by a subquery used as an expression (at most one may be)"


def one_row(ref: exp.Expression, alias: str, vtype) -> exp.Expression:
    """A plain scalar subquery's value ``ref`` where its rows numbered ``alias.__n`` <= 1, else a failing cast of
    a text that says so (the row goes to the error relation; DuckDB's ``error()`` is volatile, which TRY refuses)."""
    text = exp.DPipe(this=exp.Cast(this=exp.column("__n", table=alias), to=exp.DataType.build("VARCHAR")),
                     expression=exp.Literal.string(MORE_THAN_ONE_ROW))
    # (through VARCHAR, which both executors cast to any type: the value is never reached)
    failing = exp.Cast(this=exp.Cast(this=text, to=exp.DataType.build("INT")), to=exp.DataType.build("VARCHAR"))
    fail = exp.Cast(this=failing, to=exp.DataType.build(vtype.sql, dialect="duckdb"))
    return exp.Case(ifs=[exp.If(this=exp.GT(this=exp.column("__n", table=alias), expression=exp.Literal.number(1)),
                                true=fail)], default=ref)


def domain_source(plan: Node, oc: List[int]) -> Node:
    """The plan whose distinct values of columns ``oc`` are a scalar subquery's outer domain: ``plan`` below
    the joins that earlier scalar subqueries of the same clause attached to it.  Such a join keeps every
    left row (LEFT JOIN with at most one match; or the NULL-safe inner join with the domain's groups, which
    hold every value of the left's domain columns) and keeps the left columns at their positions, so the
    distinct values of ``oc`` are the same below it.  Two subqueries over the same outer columns thus get
    structurally equal domains, which the circuit shares."""
    while isinstance(plan, Join) and plan.kind == "left" or \
            isinstance(plan, Join) and plan.kind == "inner" and plan.null_safe and _is_domain_groups(plan):
        if any(p >= len(plan.left.fields) for p in oc):
            break
        plan = plan.left
    return plan


def _is_domain_groups(j: Join) -> bool:
    """``j`` is the join :meth:`SubqueryBinder.attach_scalar_general` makes: the outer plan joined NULL-safely
    on its domain columns with one group per domain value (a Project over an Aggregate over a LEFT JOIN from
    the Distinct domain), without a residual."""
    g = j.right
    if j.residual is not None or not isinstance(g, Project) or not isinstance(g.input, Aggregate):
        return False
    src = g.input.input
    while isinstance(src, Project):
        src = src.input
    return isinstance(src, Join) and src.kind == "left" and isinstance(src.left, Distinct) \
        and len(g.input.keys) == len(j.left_keys)


def has_subquery_predicate(e: exp.Expression) -> bool:
    """An IN (subquery) or EXISTS in ``e`` outside nested subqueries."""
    return any(isinstance(n, exp.Exists) or (isinstance(n, exp.In) and n.args.get("query") is not None)
               for n in e.walk(prune=lambda x: isinstance(x, (exp.Subquery, exp.Select)) and x is not e))


def _count_subquery(q: exp.Select, extra: Optional[exp.Expression]) -> exp.Expression:
    """``(SELECT COUNT(*) FROM <q's FROM> WHERE <q's WHERE> [AND extra])``."""
    c = q.copy()
    for key in ("order", "limit", "offset", "distinct"):
        c.set(key, None)
    where = c.args.get("where")
    conds = ([where.this] if where is not None else []) + ([extra] if extra is not None else [])
    c.set("where", exp.Where(this=exp.and_(*conds)) if conds else None)
    c.set("expressions", [exp.Count(this=exp.Star())])
    return exp.Subquery(this=c)


def _simple_select(q) -> bool:
    return isinstance(q, exp.Select) and not any(q.args.get(k) for k in ("group", "having", "distinct", "limit",
                                                                           "offset", "with", "with_"))


def outer_ref(pos: int, scope) -> exp.Column:
    """A column reference to position ``pos`` of ``scope`` that no nested scope can capture."""
    return exp.column(f"p{pos}", table=f"__outer{id(scope)}")


def rewrite_subquery_predicates(e: exp.Expression, binder=None, scope=None) -> exp.Expression:
    """IN (subquery) and EXISTS that are not top-level WHERE conjuncts (under OR or NOT, in SELECT, ...) as
    COUNT scalar subqueries, keeping SQL's three-valued IN:
    ``x IN (q)`` is TRUE if some value of q equals x, FALSE if q is empty, NULL if x or some value of q is
    NULL, else FALSE."""
    def fn(n):
        if isinstance(n, exp.Exists):
            q = n.this.this if isinstance(n.this, exp.Subquery) else n.this
            if not _simple_select(q):
                q = exp.select("*").from_(exp.Subquery(this=q.copy(), alias=exp.TableAlias(this=exp.to_identifier("__e"))))
            return exp.GT(this=_count_subquery(q, None), expression=exp.Literal.number(0))
        if isinstance(n, exp.In) and n.args.get("query") is not None:
            q = n.args["query"]
            q = q.this if isinstance(q, exp.Subquery) else q
            x = n.this.copy()
            if binder is not None:   # pin x's columns to the outer query (the subquery may reuse its names)
                for c in list(x.find_all(exp.Column)):
                    ref = outer_ref(binder.resolve(c, scope), scope)
                    if c is x:
                        x = ref
                    else:
                        c.replace(ref)
            if _simple_select(q) and len(q.expressions) == 1 and not any(
                    isinstance(a, exp.AggFunc) for a in q.expressions[0].walk()):
                y = q.expressions[0]
                y = y.this if isinstance(y, exp.Alias) else y
            else:
                wrapped = exp.Subquery(this=q.copy(), alias=exp.TableAlias(
                    this=exp.to_identifier("__in"), columns=[exp.to_identifier("__y")]))
                q = exp.select("*").from_(wrapped)
                y = exp.column("__y", table="__in")
            match = _count_subquery(q, exp.EQ(this=y.copy(), expression=x.copy()))
            anyrow = _count_subquery(q, None)
            nulls = _count_subquery(q, exp.Is(this=y.copy(), expression=exp.Null()))
            zero = exp.Literal.number(0)
            return exp.Case(ifs=[
                exp.If(this=exp.GT(this=match, expression=zero), true=exp.true()),
                exp.If(this=exp.EQ(this=anyrow, expression=zero), true=exp.false()),
                exp.If(this=exp.or_(exp.Is(this=x.copy(), expression=exp.Null()),
                                    exp.GT(this=nulls, expression=zero.copy())),
                       true=exp.cast(exp.Null(), "BOOLEAN"))],
                default=exp.false())
        return n

    if not has_subquery_predicate(e):
        return e
    return e.copy().transform(fn)


def is_inside_aggregate(n: exp.Expression, root: exp.Expression) -> bool:
    p = n.parent
    while p is not None and p is not root.parent:
        if isinstance(p, exp.AggFunc):
            return True
        p = p.parent
    return False


def rewrite_late(binder, e: exp.Expression, ctes, late: list) -> exp.Expression:
    """Replace the scalar subqueries of ``e`` that are outside aggregate calls by placeholders; appends
    (placeholder name, plan, kind) to ``late``."""
    e = e.copy()
    for sq in scalar_subqueries(e):
        if is_inside_aggregate(sq, e):
            continue
        ref, plan, kind = binder.late_scalar(sq, ctes, len(late))
        late.append((ref.table, plan, kind))
        if sq is e:
            e = ref
        else:
            sq.replace(ref)
    return e


__all__ = ["SubqueryBinder", "scalar_subqueries", "rewrite_late", "empty_value", "rewrite_subquery_predicates"]
