"""Binding window functions, ORDER BY ... LIMIT (top-k) queries, and the TUMBLE / HOP table functions.

Window calls of one SELECT that share a PARTITION BY become one :class:`Window`
node, whose output appends a column per call; the SELECT list then reads those
columns.  ``ORDER BY ... LIMIT k [OFFSET m]`` is a window without partitions:
``ROW_NUMBER() OVER (ORDER BY ...)`` kept where it falls in ``(m, m + k]``.

``TUMBLE(rel, ts, size [, offset])`` and ``HOP(rel, ts, slide, size [, offset])`` in FROM add
``window_start`` and ``window_end`` (TIMESTAMP) to each row of ``rel``; HOP repeats a row once per
window that contains it.  A row whose time is NULL is in no window.  Both are linear (a projection; HOP a union of size/slide projections).

The binder class mixes this in.
"""
from __future__ import annotations

import functools
import re
from typing import Dict, List, Optional, Tuple

import sqlglot
from sqlglot import exp

from .errors import UnsupportedError
from .logical import Expr, Filter, Node, Project, UnionAll, Window, col
from .nested_types import DUCKDB_MARK
from .scope import Rel, name_of
from .typecheck import keep_position
from .types import BIGINT, SqlType

MICROS = {"microsecond": 1, "millisecond": 1000, "second": 10 ** 6, "minute": 60 * 10 ** 6,
          "hour": 3600 * 10 ** 6, "day": 86400 * 10 ** 6}

RANKING = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile)
DOUBLE_RESULT = (exp.PercentRank, exp.CumeDist, exp.Avg)
VALUE_OF_ARG = (exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue, exp.Min, exp.Max)
WINDOW_FUNCTIONS = RANKING + DOUBLE_RESULT + VALUE_OF_ARG + (exp.Sum, exp.Count)
# The arguments of parsed nodes read here (planner.parsed_nodes rejects any other that is set).
WINDOW_ARGS = frozenset({"this", "partition_by", "order", "spec", "over", "first"})   # bind_window_call
ORDERED_ARGS = frozenset({"this", "desc", "nulls_first"})                            # bind_top_k
LIMIT_ARGS = frozenset({"expression", "limit_options"})                              # limit_value
LIMIT_OPTIONS_ARGS = frozenset({"rows"})        # LIMIT n ROWS; PERCENT and WITH TIES are rejected
FETCH_ARGS = frozenset({"direction", "count", "limit_options"})                      # bind_select: rejected
# calls whose result depends on the order among rows that tie on ORDER BY (RANK, RANGE frames and whole-partition
# aggregates treat peers alike and do not)
ORDER_SENSITIVE = (exp.RowNumber, exp.Ntile, exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue)


@functools.lru_cache(maxsize=1024)   # lowered every step: parse each call once
def total_order(call: str, width: int) -> str:
    """A window call (DuckDB SQL over c0..c<width-1>) whose result must not depend on how ties are ordered, with
    every input column appended to its ORDER BY as a tiebreaker.

    The executors compute a window's changes as its results over the touched partitions after a step minus
    before it, each evaluated afresh: a tie ordered one way in one evaluation and the other way in the next
    would retract rows that were never emitted.  With a total order the result is a function of the rows (rows
    equal in every column stay peers, and any order of equal rows gives the same multiset).  Applied when the
    window is lowered, after projection pruning, so the tiebreakers are the columns the window's input keeps.

    >>> total_order("LAG(c1) OVER (PARTITION BY c0 ORDER BY c1)", 3)
    'LAG(c1) OVER (PARTITION BY c0 ORDER BY c1, c0, c2)'
    >>> total_order("RANK() OVER (ORDER BY c1)", 3)
    'RANK() OVER (ORDER BY c1)'
    """
    import sqlglot
    w = sqlglot.parse_one(call, read="duckdb")
    if not isinstance(w, exp.Window):
        return call
    spec = w.args.get("spec")
    rows_frame = spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS"
    if not (isinstance(w.this, ORDER_SENSITIVE) or rows_frame):
        return call
    order = w.args.get("order")
    items = list(order.expressions) if order is not None else []
    present = {o.this.sql(dialect="duckdb") for o in items}
    items += [exp.Ordered(this=exp.column(col(i))) for i in range(width) if col(i) not in present]
    w.set("order", exp.Order(expressions=items))
    return w.sql(dialect="duckdb")


def window_keys(w: exp.Window) -> List[exp.Expression]:
    """The PARTITION BY and ORDER BY expressions of ``w``."""
    order = w.args.get("order")
    return list(w.args.get("partition_by") or []) + ([o.this for o in order.expressions] if order else [])


def order_by_all(items: List[exp.Ordered], width: int) -> List[exp.Ordered]:
    """DuckDB's ``ORDER BY ALL [ASC|DESC] [NULLS ...]``: every output column, left to right, in that direction.

    >>> [o.sql(dialect="duckdb") for o in order_by_all([exp.Ordered(this=exp.var("ALL"), desc=True)], 2)]
    ['1 DESC', '2 DESC']
    """
    if len(items) != 1 or not (isinstance(items[0].this, exp.Var) and items[0].this.name.upper() == "ALL"):
        return items
    out = []
    for pos in range(1, width + 1):
        o = items[0].copy()
        o.set("this", keep_position(exp.Literal.number(pos), items[0]))
        out.append(o)
    return out


def find_windows(e: exp.Expression) -> List[exp.Window]:
    """Window calls in ``e``, not looking into subqueries."""
    return [n for n in e.walk(prune=lambda x: isinstance(x, (exp.Subquery, exp.Select)))
            if isinstance(n, exp.Window)]


class WindowBinder:
    """Mixin for :class:`planner.bind.Binder`."""

    def qualify_as_filter(self, select: exp.Select, scope) -> exp.Select:
        """``SELECT items FROM ... QUALIFY cond`` as ``SELECT * EXCLUDE (__qualify) FROM (SELECT items, cond AS
        __qualify FROM ...) __qualified WHERE __qualify``, with DISTINCT, ORDER BY and LIMIT on the outer query (as
        DuckDB orders them: QUALIFY after the windows, before DISTINCT).  A name in ``cond`` that is no column of
        the FROM is the SELECT item of that alias (DuckDB's: a column first, then an alias)."""
        aliases = {e.alias.lower(): e.this for e in select.expressions if isinstance(e, exp.Alias)}

        def by_alias(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name.lower() in aliases \
                    and self.try_resolve(n, scope) is None:
                return keep_position(exp.Paren(this=aliases[n.name.lower()].copy()), n)
            return n

        cond = select.args["qualify"].this.copy().transform(by_alias)
        if not find_windows(cond) and not any(find_windows(e) for e in select.expressions):
            raise self.bind_error("QUALIFY needs a window function, in the SELECT list or in QUALIFY (filter with "
                                  "WHERE or HAVING otherwise)", select.args["qualify"].this)
        inner = select.copy()
        for arg in ("qualify", "distinct", "order", "limit", "offset"):
            inner.set(arg, None)
        inner.set("expressions", [e.copy() for e in select.expressions] + [exp.alias_(cond, "__qualify")])
        star = exp.Star(except_=[exp.column("__qualify")])
        outer = exp.Select(expressions=[star]).from_(exp.Subquery(this=inner, alias=exp.TableAlias(
            this=exp.to_identifier("__qualified")))).where(exp.column("__qualify"))
        for arg in ("distinct", "order", "limit", "offset"):
            if select.args.get(arg) is not None:
                outer.set(arg, select.args[arg].copy())
        return outer

    def windows_after_grouping(self, select: exp.Select, group, scope) -> exp.Select:
        """A grouped SELECT with window functions (``SELECT k, SUM(x), RANK() OVER (ORDER BY SUM(x)) FROM t GROUP
        BY k``) as the windows over a subquery that groups: ``SELECT __key0 AS k, __agg0 AS "sum(x)", RANK() OVER
        (ORDER BY __agg0) FROM (SELECT k AS __key0, SUM(x) AS __agg0 FROM t GROUP BY k) __grouped``.  Each
        aggregate call becomes a column of the subquery, and so does each group key, matched by the columns it
        reads (or its text); the output keeps its names, and ORDER BY / LIMIT / DISTINCT apply to the outer query."""
        items = self.expand_star(select.expressions, scope)
        sets = self.grouping_sets(group, items, scope)
        if len(sets) != 1:
            raise self.unsupported("window function with ROLLUP, CUBE or GROUPING SETS", find_windows(
                next(e for e, _ in items if find_windows(e)))[0])
        keys = sets[0]
        for k in keys:
            if find_windows(k):   # (GROUP BY ALL takes every item without an aggregate, as DuckDB)
                raise self.bind_error("a window function cannot be a GROUP BY key", find_windows(k)[0])
        key_text = {k.sql(dialect="duckdb"): i for i, k in enumerate(keys)}
        key_pos = {self.try_resolve(k, scope): i for i, k in enumerate(keys) if isinstance(k, exp.Column)}
        aggs: Dict[str, Tuple[int, exp.Expression]] = {}

        def grouped(n: exp.Expression) -> exp.Expression:
            if isinstance(n.parent, exp.Window) and n.arg_key == "this":   # the window's own function
                return n
            if isinstance(n, exp.AggFunc) and isinstance(n.parent, exp.Filter):
                return n
            if isinstance(n, exp.AggFunc) or (isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc)):
                i, _ = aggs.setdefault(n.sql(dialect="duckdb"), (len(aggs), n))
                return keep_position(exp.column(f"__agg{i}"), n)
            if isinstance(n, exp.Column):
                i = key_pos.get(self.try_resolve(n, scope))
                if i is None:
                    raise self.bind_error(f"column {n.sql()} must appear in the GROUP BY clause or be used in an "
                                          "aggregate function", n)
                return keep_position(exp.column(f"__key{i}"), n)
            if not isinstance(n, (exp.Window, exp.Literal, exp.Star)) and n.sql(dialect="duckdb") in key_text:
                return keep_position(exp.column(f"__key{key_text[n.sql(dialect='duckdb')]}"), n)
            return n

        outer_items = [exp.alias_(e.copy().transform(grouped), name, quoted=True) for e, name in items]
        inner = exp.Select(expressions=[exp.alias_(k.copy(), f"__key{i}") for i, k in enumerate(keys)] +
                           [exp.alias_(a.copy(), f"__agg{i}") for i, a in aggs.values()])
        for arg in ("from_", "joins", "where", "having"):
            if select.args.get(arg) is not None:
                inner.set(arg, select.args[arg].copy() if not isinstance(select.args[arg], list)
                          else [j.copy() for j in select.args[arg]])
        if keys:   # (positions and aliases resolved)
            inner.set("group", exp.Group(expressions=[k.copy() for k in keys]))
        if not inner.expressions:
            inner.set("expressions", [exp.alias_(exp.Literal.number(1), "__one")])
        outer = exp.Select(expressions=outer_items).from_(exp.Subquery(this=inner, alias=exp.TableAlias(
            this=exp.to_identifier("__grouped"))))
        for arg in ("distinct", "limit", "offset"):
            if select.args.get(arg) is not None:
                outer.set(arg, select.args[arg].copy())
        order = select.args.get("order")
        if order is not None:
            names = {name.lower() for _, name in items}
            outer.set("order", order.copy().transform(
                lambda n: n if isinstance(n, exp.Column) and not n.table and n.name.lower() in names
                and self.try_resolve(n, scope) is None else grouped(n)))
        return outer

    def bind_window_call(self, w: exp.Window, scope) -> Expr:
        func = w.this
        if not isinstance(func, WINDOW_FUNCTIONS):
            raise self.unsupported(f"window function {func.sql(dialect='duckdb')}", w)
        if any(isinstance(a, exp.Distinct) for a in func.iter_expressions()):
            raise self.unsupported("DISTINCT in a window function", w)
        if isinstance(func, exp.Filter) or w.args.get("first") or isinstance(func, exp.IgnoreNulls):
            raise self.unsupported("FILTER or IGNORE NULLS in a window function", w)
        if find_windows(func) or any(self.find_aggs(a) for a in func.iter_expressions()):
            raise self.bind_error("window and aggregate calls cannot be nested in a window function", w)
        for n in w.walk():
            if isinstance(n, (exp.Subquery, exp.Select, exp.Exists)):
                raise self.unsupported("subquery in a window function", n)
        out = self.field_access(w, scope).copy()
        # PARTITION BY and ORDER BY keys over nested values as bound: marked, so that Spark evaluates them as
        # DuckDB does (planner.nested_types.mark_duckdb)
        bound_keys = [self.bind_scalar(k, scope).sql for k in window_keys(out)]
        for c in list(out.find_all(exp.Column)):
            c.replace(exp.column(col(self.resolve(c, scope))))
        for k, b in zip(window_keys(out), bound_keys):
            if DUCKDB_MARK in b.lower():
                k.replace(sqlglot.parse_one(b, read="duckdb"))
        arg = func.this if isinstance(func.this, exp.Expression) and not isinstance(func.this, exp.Star) else None
        arg_type = self.bind_scalar(arg, scope).type if arg is not None else None
        if isinstance(func, (exp.Sum, exp.Avg)) and arg is not None:
            self.check_numeric_argument(func.sql_name().upper(), self.bind_scalar(arg, scope), arg, func)
        if isinstance(func, RANKING) or isinstance(func, exp.Count):
            t = BIGINT.with_nullable(False)
        elif isinstance(func, DOUBLE_RESULT):
            t = SqlType("DOUBLE")
        elif isinstance(func, exp.Sum):
            t = self.agg_type("SUM", [self.bind_scalar(arg, scope)])
        else:
            t = arg_type.with_nullable(True)
        return Expr(out.sql(dialect="duckdb"), t)

    def attach_windows(self, plan: Node, scope, items) -> Tuple[Node, list]:
        """One Window node per distinct PARTITION BY; window calls in ``items`` become column reads."""
        items = [(e.copy(), n) for e, n in items]
        groups: Dict[Tuple[str, ...], list] = {}
        for e, _ in items:
            for w in find_windows(e):
                part = tuple(self.bind_scalar(p, scope) for p in w.args.get("partition_by") or [])
                groups.setdefault(tuple(p.sql for p in part), []).append((w, part))
        refs: Dict[int, exp.Expression] = {}
        for sig, calls in groups.items():
            width = scope.width
            alias = f"__win{len([r for r in scope.rels if (r.alias or '').startswith('__win')])}"
            bound = [self.bind_window_call(w, scope) for w, _ in calls]
            names = tuple(f"{alias}_{i}" for i in range(len(bound)))
            plan = Window(plan, calls[0][1], tuple(bound), names)
            scope.rels.append(Rel(alias, list(names), [b.type for b in bound], width))
            for (w, _), name in zip(calls, names):
                refs[id(w)] = exp.column(name, table=alias)
        out = []
        for e, n in items:
            if id(e) in refs:
                e = refs[id(e)]
            else:
                for w in find_windows(e):
                    w.replace(refs[id(w)])
            out.append((e, n))
        return plan, out

    # ------------------------------------------------------------------ ORDER BY ... LIMIT
    def limit_value(self, node: Optional[exp.Expression], what: str) -> int:
        if node is None:
            return 0
        if isinstance(node, exp.Fetch):   # FETCH {FIRST | NEXT} [n] {ROW | ROWS} ONLY: LIMIT n (n = 1 if omitted)
            what = "FETCH FIRST"
        v = node.args.get("expression") if isinstance(node, (exp.Limit, exp.Offset)) else \
            node.args.get("count") or exp.Literal.number(1) if isinstance(node, exp.Fetch) else node
        if not (isinstance(v, exp.Literal) and not v.is_string and v.this.isdigit()):
            raise self.unsupported(f"{what} that is not a non-negative integer literal", node)
        return int(v.this)

    def fetch_offset(self, select: exp.Select) -> Optional[int]:
        """The offset of the FETCH keyword of ``select`` (sqlglot keeps no position for it)."""
        start = min((n.meta["start"] for n in select.walk() if getattr(n, "_meta", None) and "start" in n.meta),
                    default=0)
        found = re.compile(r"\bFETCH\b", re.IGNORECASE).search(self.sql, start)
        return found.start() if found else None

    def bind_top_k(self, select: exp.Select, plan: Node, names: List[str], items, scope,
                   hidden_ok: bool, pre: Optional[Tuple[Node, list]]) -> Node:
        """``ORDER BY ... LIMIT k OFFSET m`` over the SELECT's result ``plan`` (columns ``names``).
        ``pre``: (input plan, bound exprs) of the final projection, so ORDER BY may use expressions over
        the input that are not in the result (``hidden_ok``)."""
        limit, offset = select.args.get("limit"), select.args.get("offset")
        order = select.args.get("order")
        if order is None:
            if isinstance(limit, exp.Fetch):
                raise UnsupportedError("FETCH FIRST without ORDER BY (the rows kept would be arbitrary) is not "
                                       "supported", sql=self.sql, offset=self.fetch_offset(select))
            raise self.unsupported("LIMIT or OFFSET without ORDER BY (the rows kept would be arbitrary)",
                                   limit if limit is not None else offset)
        k = self.limit_value(limit, "LIMIT") if limit is not None else None
        m = self.limit_value(offset, "OFFSET")
        n = len(names)
        lowered = {nm.lower(): i for i, nm in enumerate(names)}
        item_sql = [e.sql(dialect="duckdb") for e, _ in items]
        hidden: List[Expr] = []
        keys = []
        for o in order_by_all(order.expressions, n):
            e = o.this
            if isinstance(e, exp.Literal) and not e.is_string:
                pos = int(e.this)
                if not 1 <= pos <= n:
                    raise self.bind_error(f"ORDER BY position {pos} is out of range", e)
                i = pos - 1
            elif isinstance(e, exp.Column) and not e.table and e.name.lower() in lowered:
                i = lowered[e.name.lower()]
            elif e.sql(dialect="duckdb") in item_sql:
                i = item_sql.index(e.sql(dialect="duckdb"))
            elif hidden_ok and pre is not None:
                hidden.append(self.bind_scalar(e, scope))
                i = n + len(hidden) - 1
            else:
                raise self.unsupported("ORDER BY expression that is not a column of the result "
                                       "(in a grouped or DISTINCT query with LIMIT)", e)
            ordered = o.copy()
            ordered.set("this", exp.column(col(i)))
            keys.append(ordered.sql(dialect="duckdb"))
        if hidden:
            base, exprs = pre
            plan = Project(base, tuple(exprs) + tuple(hidden),
                           tuple(names) + tuple(f"__o{i}" for i in range(len(hidden))))
        width = n + len(hidden)
        rn = Expr(f"ROW_NUMBER() OVER (ORDER BY {', '.join(keys)})", BIGINT.with_nullable(False))
        ranked = Window(plan, (), (rn,), ("__rn",))
        cond = f"c{width} > {m}" + (f" AND c{width} <= {m + k}" if k is not None else "")
        kept = Filter(ranked, Expr(cond, SqlType("BOOLEAN")))
        return Project(kept, tuple(Expr(col(i), f.type) for i, f in enumerate(plan.fields[:n])), tuple(names))


    # ------------------------------------------------------------------ TUMBLE / HOP
    def interval_micros(self, e: exp.Expression) -> int:
        """A fixed-length INTERVAL literal in microseconds (months and years have no fixed length)."""
        if isinstance(e, exp.Interval):
            text = e.this.this if isinstance(e.this, exp.Literal) else None
            unit = e.args.get("unit")
            unit = unit.name if unit is not None else None
            if text is not None and unit is None and len(str(text).split()) == 2:
                text, unit = str(text).split()
            if text is not None and unit is not None:
                u = unit.lower().rstrip("s")
                if u in MICROS and str(text).strip().isdigit() and int(text) > 0:
                    return int(text) * MICROS[u]
        raise self.unsupported("window size that is not a positive INTERVAL literal in days or smaller units", e)

    def bind_time_window(self, fn: exp.Anonymous, alias, ctes):
        """``TUMBLE(rel, ts, size [, offset])`` or ``HOP(rel, ts, slide, size [, offset])`` in FROM."""
        kind = fn.name.lower()
        args = list(fn.expressions)
        n_sizes = 1 if kind == "tumble" else 2
        if len(args) not in (2 + n_sizes, 3 + n_sizes) or not isinstance(args[0], exp.Column) \
                or not isinstance(args[1], exp.Column):
            raise self.bind_error(f"{kind.upper()} takes (table, time column, "
                                  f"{'size' if kind == 'tumble' else 'slide, size'} [, offset])", fn)
        table = exp.Table(this=args[0].this.copy())
        plan, _, names = self.bind_from_source(table, None, ctes)
        tcol = name_of(args[1].this)
        lowered = [n.lower() for n in names]
        if tcol not in lowered:
            raise self.bind_error(f"unknown column '{tcol}' in {kind.upper()}. Valid columns: {', '.join(names)}",
                                  args[1])
        ti = lowered.index(tcol)
        if plan.fields[ti].type.base not in ("TIMESTAMP", "UNKNOWN"):
            raise self.bind_error(f"{kind.upper()} needs a TIMESTAMP column; {tcol} is {plan.fields[ti].type}",
                                  args[1])
        sizes = [self.interval_micros(a) for a in args[2:2 + n_sizes]]
        offset = self.interval_micros(args[2 + n_sizes]) if len(args) > 2 + n_sizes else 0
        slide, size = (sizes[0], sizes[0]) if kind == "tumble" else sizes
        if size % slide:
            raise self.unsupported("HOP whose size is not a multiple of its slide", fn)
        plan = Filter(plan, Expr(f"c{ti} IS NOT NULL", SqlType("BOOLEAN")))   # no time, no window
        ts = f"UNIX_MICROS(c{ti})"
        last = f"({ts} - ((({ts} - {offset}) % {slide}) + {slide}) % {slide})"
        ts_type = SqlType("TIMESTAMP")
        cols = tuple(Expr(col(i), f.type) for i, f in enumerate(plan.fields))
        out_names = tuple(names) + ("window_start", "window_end")
        branches = []
        for i in range(size // slide):
            start = f"{last} - {i * slide}"
            branches.append(Project(plan, cols + (Expr(f"TIMESTAMP_MICROS({start})", ts_type),
                                                  Expr(f"TIMESTAMP_MICROS({start} + {size})", ts_type)),
                                    out_names))
        out = branches[0] if len(branches) == 1 else UnionAll(tuple(branches))
        return out, alias or kind, list(out_names)

    # ------------------------------------------------------------------ SESSION
    def bind_session(self, fn: exp.Anonymous, alias, ctes):
        """``SESSION(rel, ts, gap [, key, ...])`` in FROM: each row of ``rel`` (with a time) plus the
        ``window_start`` and ``window_end`` of its session, per key: a maximal run of rows whose consecutive
        times are less than ``gap`` apart; it starts at its first time and ends ``gap`` after its last.

        Written with window functions over ``rel`` (LAG marks where a session starts, a running SUM numbers
        the sessions, MIN/MAX over a session give its bounds), so it is maintained like them: a change to a
        key recomputes that key's sessions, which merge and split correctly under inserts, deletes and rows
        out of order."""
        import sqlglot

        args = list(fn.expressions)
        if len(args) < 3 or not isinstance(args[0], exp.Column) or not all(isinstance(a, exp.Column)
                                                                              for a in [args[1]] + args[3:]):
            raise self.bind_error("SESSION takes (table, time column, gap [, key column, ...])", fn)
        table = exp.Table(this=args[0].this.copy())
        plan, _, names = self.bind_from_source(table, None, ctes)
        lowered = [n.lower() for n in names]
        picked = []
        for a in [args[1]] + args[3:]:
            c = name_of(a.this)
            if c.lower() not in lowered:
                raise self.bind_error(f"unknown column '{c}' in SESSION. Valid columns: {', '.join(names)}", a)
            picked.append(names[lowered.index(c.lower())])
        t, keys = picked[0], picked[1:]
        if plan.fields[lowered.index(t.lower())].type.base not in ("TIMESTAMP", "UNKNOWN"):
            raise self.bind_error(f"SESSION needs a TIMESTAMP column; {t} is "
                                  f"{plan.fields[lowered.index(t.lower())].type}", args[1])
        gap = self.interval_micros(args[2])
        if {"__new", "__sid", "window_start", "window_end"} & set(lowered):
            raise self.unsupported("SESSION over a relation with a column named __new, __sid, window_start or "
                                   "window_end", fn)

        def q(n: str) -> str:
            return '"' + n.replace('"', '""') + '"'
        cols = ", ".join(q(n) for n in names)
        part = ("PARTITION BY " + ", ".join(q(k) for k in keys) + " ") if keys else ""
        # rows at the same time are ordered by their other columns, so that LAG and the running SUM are functions
        # of the rows (a window function's result must not depend on how ties happen to be ordered: the changes it
        # emits are the difference of two evaluations); equal rows are peers and get the same session
        order = ", ".join([q(t)] + [q(n) for n in names if n != t and n not in keys])
        by_session = "PARTITION BY " + ", ".join([q(k) for k in keys] + ["__sid"])
        g = f"INTERVAL '{gap}' MICROSECOND"
        ts = q(t)
        text = (f"SELECT {cols}, MIN({ts}) OVER ({by_session}) AS window_start, "
                f"MAX({ts}) OVER ({by_session}) + {g} AS window_end FROM ("
                f"SELECT {cols}, SUM(__new) OVER ({part}ORDER BY {order}) AS __sid FROM ("
                f"SELECT {cols}, CASE WHEN LAG({ts}) OVER ({part}ORDER BY {order}) IS NULL OR "
                f"{ts} - LAG({ts}) OVER ({part}ORDER BY {order}) >= {g} THEN 1 ELSE 0 END AS __new "
                f"FROM {q(name_of(args[0].this))} WHERE {ts} IS NOT NULL) AS __s1) AS __s2")
        out, out_names = self.bind_query(sqlglot.parse_one(text, read="duckdb"), ctes)
        return out, alias or "session", list(out_names)


__all__ = ["WindowBinder", "find_windows"]
