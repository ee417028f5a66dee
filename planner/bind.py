"""Binding: sqlglot ASTs of SELECT statements to logical plans.

Resolves table, view and column names (case-insensitively, as SQL does for
unquoted names), expands ``*``, splits join and WHERE conditions into
equi-join keys, pushed-down filters and residual predicates, and pulls
aggregate calls out of SELECT and HAVING.  Everything the incremental engine
cannot maintain is rejected here with :class:`UnsupportedError`, pointing at
the construct in the SQL text.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from sqlglot import exp

from . import aggregate_functions
from .bind_asof import AsofBinder
from .bind_recursive import RecursiveBinder
from .bind_unnest import UnnestBinder, has_unnest
from .nested_types import comparable_key
from .bind_star import StarBinder, located
from .bind_subquery import SubqueryBinder, rewrite_late, rewrite_subquery_predicates, scalar_subqueries
from .bind_window import WindowBinder, find_windows
from .errors import BindError, ParseError, UnsupportedError
from .semantics import NotTypable, typed
from .typecheck import NESTED, check_types, keep_position, type_class, type_name, types_meet
from .logical import (AggCall, Aggregate, Distinct, Expr, Field, Filter, Join, Node, OneRow, Project, Scan,
                      SetOp, UnionAll, col)
from .scope import (DIALECT, LATERAL_PREFIX, Rel, Scope, is_comma, is_subquery_predicate, joining,  # noqa: F401
                    name_of, position_of, split_and)   # (re-exported)
from .types import BIGINT, SqlType, from_sql_type, typed_null
from .user_functions import UserAggregate


@dataclass(frozen=True)
class TableDef:
    name: str
    fields: Tuple[Field, ...]
    primary_key: Tuple[str, ...] = ()
    # WITH ('connectors' = '<JSON>'): its text and the offset of its literal in the program (checked by connectors/)
    connectors: Optional[Tuple[str, int]] = field(default=None, compare=False)
    # event time (LATENESS / WATERMARK FOR): (the column's name as in ``fields``, lateness in microseconds)
    lateness: Optional[Tuple[str, int]] = field(default=None, compare=False)
    # WITH ('materialized' = 'true'): the table's contents are kept in full (never garbage-collected)
    materialized: bool = field(default=False, compare=False)
    # WITH ('append_only' = 'true'): inserts only (deletes are rejected); kept only where something reads it
    append_only: bool = field(default=False, compare=False)
    # FOREIGN KEY (cols) REFERENCES table (cols) / a column's REFERENCES: recorded, not enforced (as in Feldera)
    foreign_keys: Tuple["ForeignKey", ...] = field(default=(), compare=False)
    # DEFAULT <constant>: (column, value as Python, its SQL) for the columns an input row may leave out
    defaults: Tuple[Tuple[str, object, str], ...] = field(default=(), compare=False)

    def default(self, column: str):
        """The value an input row that leaves ``column`` out gets: its DEFAULT, else NULL."""
        return next((v for c, v, _ in self.defaults if c == column), None)

    def has_default(self, column: str) -> bool:
        return any(c == column for c, _, _ in self.defaults)


@dataclass(frozen=True)
class ForeignKey:
    columns: Tuple[str, ...]
    table: str
    referenced: Tuple[str, ...]   # () where the clause names no columns: the table's PRIMARY KEY
    offset: Optional[int] = None  # of the REFERENCES clause in the program


@dataclass(frozen=True)
class ViewDef:
    name: str
    plan: Node               # optimized (planner.rules)
    materialized: bool
    sql: str
    bound: Optional[Node] = field(default=None, compare=False, repr=False)   # as bound, before the rules
    options: Tuple[Tuple[str, str], ...] = ()   # WITH (...) options of the view, e.g. (('join_order', 'as_written'),)
    connectors: Optional[Tuple[str, int]] = field(default=None, compare=False)   # as for TableDef
    local: bool = field(default=False, compare=False)   # CREATE LOCAL VIEW: read by other views, no output

    @property
    def emit_final(self) -> Optional[str]:
        """The column named by ``WITH ('emit_final' = 'column')`` (as spelled in the plan), or None."""
        return dict(self.options).get("emit_final")



# Aggregate classes we maintain, with the name the engine uses for them.
AGGREGATES = {
    exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX",
    exp.Stddev: "STDDEV_SAMP", exp.StddevSamp: "STDDEV_SAMP", exp.StddevPop: "STDDEV_POP",
    exp.Variance: "VAR_SAMP", exp.VariancePop: "VAR_POP",
}
NUMERIC_AGGREGATES = {"SUM", "AVG", "STDDEV_SAMP", "STDDEV_POP", "VAR_SAMP", "VAR_POP"}
# DuckDB's functions of nested values (ARRAY, MAP, STRUCT, JSON) and of BINARY, TIME and UUID values that sqlglot
# keeps by name; on Spark they run
# as DuckDB runs them (sqlengine.executor.backends.spark).
NESTED_FUNCTIONS = {"struct_extract", "struct_pack", "row", "list_value", "list_extract", "list_element",
                    "list_contains", "list_has", "list_position", "list_indexof", "list_distinct", "list_sort",
                    "list_reverse_sort", "list_concat", "list_cat", "list_slice", "list_transform", "list_apply",
                    "list_filter", "list_reduce", "list_aggregate", "list_sum", "list_min", "list_max",
                    "list_count", "list_avg", "list_unique", "list_has_any", "list_has_all", "list_reverse",
                    "list_zip", "array_length", "array_position", "array_distinct", "array_sort", "array_concat",
                    "array_to_string", "array_slice", "array_reverse", "array_has", "array_transform",
                    "array_filter", "len", "cardinality", "flatten", "string_split", "str_split", "split",
                    "string_to_array", "range", "generate_series", "map", "map_keys",
                    "map_values", "map_entries", "map_from_entries", "map_extract", "map_contains_key",
                    "map_contains", "element_at", "map_concat", "json", "json_valid", "json_extract",
                    "json_extract_string", "json_extract_path", "json_extract_path_text", "json_value",
                    "json_array_length", "json_keys", "json_type", "json_object", "json_array",
                    "json_merge_patch", "json_contains", "json_exists", "to_json", "parse_json",
                    "json_serialize", "json_structure",
                    # BINARY, TIME and UUID values
                    "octet_length", "to_base64", "from_base64", "encode", "decode", "make_time"}
# Functions that sqlglot does not know by class but Spark and DuckDB share.
ANONYMOUS_OK = {"md5", "round_even", "repeat", "reverse", "strpos", "instr", "lpad", "rpad", "ltrim", "rtrim",
                "ascii", "chr", "sign", "ln", "log10", "pi", "least", "greatest", "nullif",
                "char_length", "character_length", "last_day", "dayofweek", "dayofmonth", "dayofyear",
                "week", "hour", "minute", "second", "year", "month", "day", "quarter"} | NESTED_FUNCTIONS
# The functions README.md's SQL reference lists (with ANONYMOUS_OK and AGGREGATES: the names an unknown
# function is compared with to suggest one).
DOCUMENTED_FUNCTIONS = {"upper", "lower", "length", "substring", "trim", "replace", "concat", "extract", "cast",
                        "coalesce", "date_trunc", "tumble", "hop", "row_number", "rank", "dense_rank", "ntile",
                        "percent_rank", "cume_dist", "lag", "lead", "first_value", "last_value", "nth_value",
                        "count", "sum", "avg", "min", "max", "stddev", "stddev_samp", "stddev_pop", "variance",
                        "var_samp", "var_pop", "grouping", "bool_and", "bool_or", "every", "bit_and", "bit_or",
                        "bit_xor", "count_if", "any_value", "arg_min", "arg_max", "min_by", "max_by", "median",
                        "quantile_cont", "quantile_disc", "percentile_cont", "percentile_disc", "covar_pop",
                        "covar_samp", "corr", "regr_slope", "regr_intercept", "regr_r2", "regr_count", "regr_avgx",
                        "regr_avgy", "regr_sxx", "regr_syy", "regr_sxy"}


# The table functions of FROM (README.md), with an example of each, for a call of one in an expression.
TABLE_FUNCTIONS = {"tumble": "TUMBLE(bid, date_time, INTERVAL '10' SECOND)",
                   "hop": "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
                   "session": "SESSION(bid, date_time, INTERVAL '10' SECOND, bidder)"}


def unknown_function_message(name: str) -> str:
    """``function UPPR is not supported; did you mean UPPER? ...`` (the closest known name, if any)."""
    known = DOCUMENTED_FUNCTIONS | ANONYMOUS_OK | {a.lower() for a in AGGREGATES.values()}
    if name.lower() in TABLE_FUNCTIONS:
        return (f"{name} is a table function: write it in FROM, e.g. SELECT window_start, COUNT(*) FROM "
                f"{TABLE_FUNCTIONS[name.lower()]} GROUP BY window_start (see docs/sql-reference.md, 'Supported constructs and functions')")
    close = [c for c in difflib.get_close_matches(name.lower(), sorted(known), n=2, cutoff=0.8) if c != name.lower()]
    hint = f"; did you mean {close[0].upper()}?" if close else "."
    return (f"function {name} is not supported{hint} See the function list in docs/sql-reference.md, "
            "'Supported constructs and functions'")


# The arguments of each parsed node that the binder reads (planner.parsed_nodes rejects any other that is set):
# bind_select, bind_from, bind_top_k
SELECT_ARGS = frozenset({"with_", "expressions", "distinct", "from_", "joins", "where", "group", "having", "order",
                         "limit", "offset", "qualify"})
# bind_query and bind_union: ORDER BY without LIMIT does not change a bag; LIMIT is rejected (check_no_limit)
SET_OP_ARGS = frozenset({"with_", "this", "expression", "distinct", "order", "limit", "offset"})
UNION_ARGS = SET_OP_ARGS | {"by_name"}
SUBQUERY_ARGS = frozenset({"this", "alias"})          # bind_query, bind_from_item
JOIN_ARGS = frozenset({"this", "on", "side", "kind", "using", "method"})   # bind_joins
TABLE_ARGS = frozenset({"this", "alias", "db", "catalog"})                 # bind_from_source (db, catalog: rejected)
COLUMN_ARGS = frozenset({"this", "table", "db", "catalog"})                # resolve (db: rejected)
GROUP_ARGS = frozenset({"expressions", "all"})                             # grouping_sets, group_by_all
DISTINCT_ARGS = frozenset({"expressions", "on"})                           # agg_call, bind_select (ON: rejected)


class Binder(SubqueryBinder, WindowBinder, AsofBinder, StarBinder, RecursiveBinder, UnnestBinder):
    """Binds the SELECT of one view against the tables and views defined before it."""

    def __init__(self, sql: str, tables: Dict[str, TableDef], views: Dict[str, ViewDef],
                 python_functions: frozenset = frozenset()):
        self.sql = sql
        self.tables = tables
        self.views = views
        self.python_functions = python_functions   # the user's Python functions' names (planner.user_functions)
        self.origins: Dict[str, exp.Expression] = {}   # bound SQL -> the expression it came from (column_check)

    # ------------------------------------------------------------------ errors
    def unsupported(self, what: str, node: exp.Expression) -> UnsupportedError:
        return UnsupportedError(f"{what} is not supported", sql=self.sql, offset=position_of(node))

    def bind_error(self, msg: str, node: exp.Expression) -> BindError:
        return BindError(msg, sql=self.sql, offset=position_of(node))

    # ------------------------------------------------------------------ queries
    def bind_query(self, q: exp.Expression, ctes: Dict[str, Node]) -> Tuple[Node, List[str]]:
        """Bind a query expression; returns its plan and output column names."""
        if isinstance(q, exp.Subquery):
            return self.bind_query(q.this, ctes)
        ctes = dict(ctes)
        with_ = q.args.get("with") or q.args.get("with_")
        if with_ is not None:
            for cte in with_.expressions:
                if with_.args.get("recursive") and any(name_of(t.this) == name_of(cte.args["alias"].this)
                                                       for t in cte.this.find_all(exp.Table)
                                                       if isinstance(t.this, exp.Identifier)):
                    ctes[name_of(cte.args["alias"].this)] = self.bind_recursive(cte, ctes)
                    continue
                plan, names = self.bind_query(cte.this, ctes)
                alias_cols = cte.args.get("alias") and cte.args["alias"].columns
                if alias_cols:
                    names = [name_of(c) for c in alias_cols]
                    plan = Project(plan, tuple(Expr(col(i), f.type) for i, f in enumerate(plan.fields)),
                                   tuple(names))
                ctes[name_of(cte.args["alias"].this)] = plan
        if isinstance(q, exp.Union):
            return self.bind_union(q, ctes)
        if isinstance(q, (exp.Intersect, exp.Except)):
            self.check_no_limit(q)
            left, names = self.bind_query(q.this, ctes)
            right, _ = self.bind_query(q.expression, ctes)
            if len(left.fields) != len(right.fields):
                raise self.bind_error(f"{q.key.upper()} branches have {len(left.fields)} and "
                                      f"{len(right.fields)} columns", q.expression)
            self.check_branch_types(left, right, q)
            return SetOp(left, right, q.key.lower(), not q.args.get("distinct")), names
        if isinstance(q, exp.Select):
            return self.bind_select(q, ctes)
        raise self.unsupported(f"{type(q).__name__} as a query", q)

    def check_no_limit(self, q: exp.Expression) -> None:
        for key, what in (("limit", "LIMIT"), ("offset", "OFFSET"), ("fetch", "FETCH")):
            if q.args.get(key) is not None:
                raise UnsupportedError(f"{what} in a view is not supported", sql=self.sql,
                                       offset=self.keyword_offset(what, q.args[key]))

    def keyword_offset(self, keyword: str, node: exp.Expression) -> Optional[int]:
        pos = position_of(node)
        if pos is None:
            return None
        found = self.sql.upper().rfind(keyword, 0, pos + 1)
        return found if found >= 0 else pos

    def bind_union(self, q: exp.Union, ctes) -> Tuple[Node, List[str]]:
        self.check_no_limit(q)
        left, names = self.bind_query(q.this, ctes)
        right, rnames = self.bind_query(q.expression, ctes)
        if q.args.get("by_name"):
            left, right, names = self.union_by_name(left, names, right, rnames)
        if len(left.fields) != len(right.fields):
            raise self.bind_error(f"UNION branches have {len(left.fields)} and {len(right.fields)} columns",
                                  q.expression)
        self.check_branch_types(left, right, q)
        branches = (left.branches if isinstance(left, UnionAll) else (left,)) + (right,)
        plan: Node = UnionAll(branches)
        if q.args.get("distinct"):
            plan = Distinct(plan)
        return plan, names

    def check_branch_types(self, left: Node, right: Node, q: exp.Expression) -> None:
        """A nested column beside a scalar one in a UNION, INTERSECT or EXCEPT (DuckDB binds it, then fails on
        every row) is an error at the right branch."""
        for i, (a, b) in enumerate(zip(left.fields, right.fields)):
            if NESTED in (type_class(a.type), type_class(b.type)) and not types_meet(a.type, b.type):
                right_q = q.expression
                at = right_q.expressions[i] if isinstance(right_q, exp.Select) and i < len(right_q.expressions) \
                    else right_q
                raise self.bind_error(f"{q.key.upper()} column {i + 1}: cannot combine {type_name(a.type)} with "
                                      f"{type_name(b.type)}", at)

    def union_by_name(self, left: Node, names: List[str], right: Node, rnames: List[str]):
        """``UNION [ALL] BY NAME``: both branches projected to the left's columns, then the right's other
        columns (names matched case-insensitively, as DuckDB does); a column a branch lacks is NULL there.
        (A branch's names are distinct already: the binder renames a repeated name ``k`` to ``k_1``.)"""
        types = {n.lower(): f.type for n, f in zip(rnames, right.fields)}
        types.update({n.lower(): f.type for n, f in zip(names, left.fields)})
        out = names + [n for n in rnames if n.lower() not in {m.lower() for m in names}]

        def padded(plan: Node, ns: List[str]) -> Node:
            index = {n.lower(): i for i, n in enumerate(ns)}
            exprs = []
            for n in out:
                t = types[n.lower()]
                if n.lower() in index:
                    exprs.append(Expr(col(index[n.lower()]), plan.fields[index[n.lower()]].type))
                else:
                    exprs.append(Expr(typed_null(t), t.with_nullable(True)))
            return Project(plan, tuple(exprs), tuple(out))

        return padded(left, names), padded(right, rnames), out

    def bind_from(self, select: exp.Select, ctes) -> Tuple[Node, Scope, List[exp.Expression]]:
        """FROM, JOINs and WHERE: returns the joined plan, its scope, and leftover conjuncts (none)."""
        if has_unnest(select):
            return self.bind_unnests(select, ctes)
        from_ = select.args.get("from") or select.args.get("from_")
        items = [from_.this] + [j.this for j in select.args.get("joins") or []] if from_ is not None else []
        rels: List[Rel] = [] if items else [Rel("__one", [], [], 0)]
        plans: List[Node] = [] if items else [OneRow()]
        offset = 0
        for item in items:
            plan, alias, names = self.bind_from_item(item, ctes)
            rels.append(Rel(alias, names, [f.type for f in plan.fields], offset))
            plans.append(plan)
            offset += len(names)
        scope = Scope(rels)
        for ri, item in enumerate(items):   # a LATERAL's correlation columns (planner.query_forms): not in its *
            if isinstance(item, exp.Subquery) and item.meta.get("lateral"):
                scope.hidden.update((ri, n.lower()) for n in rels[ri].names if n.startswith(LATERAL_PREFIX))
        sub_preds, scalar, where = self.split_where(select, scope)
        plan = self.bind_joins(select, plans, rels, scope, where)
        return self.finish_where(plan, scope, sub_preds, scalar, ctes), scope, []

    def split_where(self, select: exp.Select, scope: Scope):
        """WHERE's conjuncts: (subquery predicates, conjuncts with scalar subqueries, the others)."""
        where = split_and(select.args["where"].this) if select.args.get("where") else []
        sub_preds = [c for c in where if is_subquery_predicate(c)]
        where = [c if is_subquery_predicate(c) else rewrite_subquery_predicates(c, self, scope) for c in where]
        scalar = [c for c in where if not is_subquery_predicate(c) and scalar_subqueries(c)]
        where = [c for c in where if not is_subquery_predicate(c) and not scalar_subqueries(c)]
        return sub_preds, scalar, where

    def finish_where(self, plan: Node, scope: Scope, sub_preds, scalar, ctes) -> Node:
        """``plan`` under WHERE's subquery predicates and its conjuncts with scalar subqueries."""
        for c in sub_preds:
            plan = self.bind_subquery_predicate(c, plan, scope, ctes)
        rest = []
        for c in scalar:
            plan, c = self.attach_scalar_subqueries(plan, scope, c, ctes, conjunct=True)
            rest.append(c)
        if rest:
            plan = Filter(plan, self.bind_scalar(exp.and_(*rest), scope))
        return plan

    def bind_joins(self, select, plans, rels, scope, where) -> Node:
        on_clauses: List[List[exp.Expression]] = [[]]
        sides: List[str] = [""]
        for i, j in enumerate(select.args.get("joins") or [], start=1):
            side = (j.args.get("side") or "").upper()
            kind = (j.args.get("kind") or "").upper()
            method = (j.args.get("method") or "").upper()
            if method == "ASOF" and not kind and side in ("", "LEFT"):   # planner/bind_asof.py
                sides.append("asof " + side.lower())
                on_clauses.append(split_and(j.args.get("on")))
                continue
            if kind in ("SEMI", "ANTI", "ASOF", "LATERAL", "POSITIONAL") or method not in ("", "NATURAL"):
                raise self.unsupported(f"{(j.args.get('method') or '') + ' ' + (side + ' ' + kind).strip()} JOIN"
                                       .strip(), j)
            using = list(j.args.get("using") or [])
            if method == "NATURAL":   # USING the columns both sides have, as DuckDB
                if j.args.get("on") or using:
                    raise self.bind_error("NATURAL JOIN takes no ON or USING", j)
                right = {n.lower() for n in rels[i].names}
                seen = []
                for r in rels[:i]:
                    seen += [n.lower() for n in r.names if n.lower() in right and n.lower() not in seen]
                if not seen:
                    raise self.bind_error("NATURAL JOIN: the two sides have no column in common (write CROSS JOIN)", j)
                using = [keep_position(exp.to_identifier(n), j) for n in seen]
            elif side and not (j.args.get("on") or using):
                raise self.bind_error(f"{side} JOIN needs an ON or USING condition", j)
            sides.append(side.lower())
            on = split_and(j.args.get("on"))
            for u in using:
                name = name_of(u)
                left = [r for r in rels[:i] if name in [n.lower() for n in r.names]]
                if len(left) != 1 or name not in [n.lower() for n in rels[i].names]:
                    raise self.bind_error(f"USING column {name} must appear in exactly one relation on each side", u)
                on.append(keep_position(exp.EQ(this=self.qualified(left[0], name),
                                               expression=self.qualified(rels[i], name)), u))
                if side not in ("RIGHT", "FULL"):
                    scope.hidden.add((i, name))
                else:   # one column in DuckDB: the right's (RIGHT) or both coalesced (FULL); see star_columns
                    scope.coalesced.update({(rels.index(left[0]), name), (i, name)})
            on_clauses.append(on)
        if any(sides):
            return self.bind_outer_joins(select, plans, scope, sides, on_clauses, where)
        conjuncts = where + [c for on in on_clauses for c in on]
        for c in conjuncts:
            self.check_scalar(c, allow_agg=False, clause="WHERE or ON")
        # which relations each conjunct touches
        touched = [self.rels_of(c, scope) for c in conjuncts]
        used = [False] * len(conjuncts)
        # push single-relation conjuncts into their relation
        for ci, (c, rs) in enumerate(zip(conjuncts, touched)):
            if len(rs) == 1:
                (ri,) = rs
                e = self.bind_scalar(c, scope, base=rels[ri].offset)
                plans[ri] = Filter(plans[ri], e)
                used[ci] = True
        plan = plans[0]
        for i in range(1, len(plans)):
            plan = Join(plan, plans[i], *self.join_condition(joining(i, conjuncts, touched, used), scope, i))
        rest = [c for c, u in zip(conjuncts, used) if not u]
        if rest:
            plan = Filter(plan, self.bind_scalar(exp.and_(*rest), scope))
        return plan

    def bind_outer_joins(self, select, plans, scope: Scope, sides, on_clauses, where) -> Node:
        """FROM with outer joins: joined strictly left to right, each join with its own ON condition,
        WHERE on top (conditions cannot move across the NULL-padding side of an outer join).  A comma binds
        more loosely than JOIN: in ``a, b RIGHT JOIN c ON ...`` the RIGHT JOIN pads the rows of c unmatched in
        b, each then paired with every row of a (``comma_group``).  (An inner or LEFT JOIN after a comma gives
        the same rows either way.)"""
        for c in where + [c for on in on_clauses for c in on]:
            self.check_scalar(c, allow_agg=False, clause="WHERE or ON")
        joins = select.args.get("joins") or []
        commas = [i for i in range(1, len(plans)) if is_comma(joins[i - 1])]
        groups = list(zip([0] + commas, commas + [len(plans)]))   # (first, after last) relation between commas
        if any(s and any(sides[i] in ("right", "full") for i in range(s + 1, e)) for s, e in groups):
            plan = None
            for s, e in groups:
                g = self.comma_group(select, plans, scope, sides, on_clauses, s, e)
                plan = g if plan is None else Join(plan, g, (), (), None, "inner")
            if where:
                plan = Filter(plan, self.bind_scalar(exp.and_(*where), scope))
            return plan
        plan = plans[0]
        for i in range(1, len(plans)):
            for c in on_clauses[i]:
                if not self.rels_of(c, scope) <= set(range(i + 1)):
                    raise self.bind_error("a JOIN condition can only use the relations joined so far", c)
            if sides[i].startswith("asof"):
                plan = self.bind_asof(select.args["joins"][i - 1], plan, plans[i], scope, i, on_clauses[i],
                                      sides[i] == "asof left")
                continue
            plan = Join(plan, plans[i], *self.join_condition(on_clauses[i], scope, i), sides[i] or "inner")
        if where:
            plan = Filter(plan, self.bind_scalar(exp.and_(*where), scope))
        return plan

    def comma_group(self, select, plans, scope: Scope, sides, on_clauses, s: int, e: int) -> Node:
        """The relations ``s`` to ``e - 1`` of FROM, between two commas, joined left to right by their ON
        conditions, which may use only these relations; columns from relation ``s``'s on."""
        base = scope.rels[s].offset
        plan = plans[s]
        for i in range(s + 1, e):
            for c in on_clauses[i]:
                if not self.rels_of(c, scope) <= set(range(s, i + 1)):
                    raise self.unsupported("a JOIN condition that uses a relation before a comma, in a FROM with "
                                           "a RIGHT or FULL JOIN after the comma (write CROSS JOIN for the comma)", c)
            if sides[i].startswith("asof"):
                raise self.unsupported("ASOF JOIN after a comma, in a FROM with a RIGHT or FULL JOIN after it",
                                       select.args["joins"][i - 1])
            plan = Join(plan, plans[i], *self.join_condition(on_clauses[i], scope, i, base), sides[i] or "inner")
        return plan

    def join_condition(self, conds, scope: Scope, i: int, base: int = 0):
        """(left keys, right keys, residual) of the conditions joining relation ``i`` to those before it (in a
        join whose rows start at column ``base`` of the FROM's)."""
        lkeys, rkeys, residual = [], [], []
        for c in conds:
            pair = self.equi_pair(c, scope, i, base)
            if pair is not None:
                lkeys.append(pair[0])
                rkeys.append(pair[1])
            else:
                residual.append(c)
        res = self.bind_scalar(exp.and_(*residual), scope, base) if residual else None
        return tuple(lkeys), tuple(rkeys), res

    @staticmethod
    def qualified(rel: Rel, name: str) -> exp.Column:
        return exp.column(name, table=rel.alias) if rel.alias else exp.column(name)

    def equi_pair(self, c: exp.Expression, scope: Scope, i: int, base: int = 0):
        """If ``c`` is ``left_expr = right_expr`` with the right side only over relation i, bind both sides."""
        if not isinstance(c, exp.EQ):
            return None
        a, b = c.this, c.expression
        ra, rb = self.rels_of(a, scope), self.rels_of(b, scope)
        if rb == {i} and ra and max(ra) < i:
            pass
        elif ra == {i} and rb and max(rb) < i:
            a, b = b, a
        else:
            return None
        check_types(self.substituted(c, scope), scope.types(), self.sql)   # its sides are bound apart
        return comparable_key(self.bind_scalar(a, scope, base)), comparable_key(self.bind_scalar(b, scope, base))

    def rels_of(self, e: exp.Expression, scope: Scope) -> set:
        out = set()
        for c in self.field_access(e, scope).find_all(exp.Column):
            pos = self.resolve(c, scope)
            for ri, r in enumerate(scope.rels):
                if r.offset <= pos < r.offset + len(r.names):
                    out.add(ri)
        return out

    def bind_from_item(self, item: exp.Expression, ctes) -> Tuple[Node, Optional[str], List[str]]:
        alias_node = item.args.get("alias")
        alias = name_of(alias_node.this) if alias_node is not None and alias_node.this else None
        plan, alias, names = self.bind_from_source(item, alias, ctes)
        if alias_node is not None and alias_node.columns:
            renamed = [name_of(c) for c in alias_node.columns]
            if len(renamed) > len(names):
                raise self.bind_error(f"{len(renamed)} column aliases for {len(names)} columns", alias_node)
            names = renamed + names[len(renamed):]
            plan = Project(plan, tuple(Expr(col(i), f.type) for i, f in enumerate(plan.fields)), tuple(names))
        return plan, alias, names

    def bind_from_source(self, item: exp.Expression, alias: Optional[str], ctes):
        if isinstance(item, exp.Table):
            if item.args.get("db") or item.args.get("catalog"):
                raise self.unsupported("qualified table name " + item.sql(), item)
            if isinstance(item.this, exp.Anonymous) and item.this.name.lower() in ("tumble", "hop"):
                return self.bind_time_window(item.this, alias, ctes)
            if isinstance(item.this, exp.Anonymous) and item.this.name.lower() == "session":
                return self.bind_session(item.this, alias, ctes)
            if not isinstance(item.this, exp.Identifier):
                raise self.unsupported("table function " + item.sql(), item)
            name = name_of(item.this)
            if name in ctes:
                plan = ctes[name]
                return plan, alias or name, [f.name for f in plan.fields]
            if name in self.views:
                plan = self.views[name].plan
                return plan, alias or name, [f.name for f in plan.fields]
            if name in self.tables:
                t = self.tables[name]
                return Scan(t.name, t.fields), alias or name, [f.name for f in t.fields]
            if name in self.declared:
                raise self.unsupported(f"reading recursive view {name} before it is created (mutually recursive "
                                       f"views)", item)
            known = sorted(set(self.tables) | set(self.views) | set(ctes))
            raise self.bind_error(f"unknown table or view '{name}'. Known: {', '.join(known) or '(none)'}", item)
        if isinstance(item, exp.Subquery):
            plan, names = self.bind_query(item.this, ctes)
            return plan, alias, names
        inner_from = item.args.get("from") or item.args.get("from_") if isinstance(item, exp.Select) else None
        if inner_from is not None:   # FROM FROM t: sqlglot reads the second FROM as DuckDB's FROM-first query
            raise ParseError("syntax error: unexpected 'FROM'", sql=self.sql,
                             offset=self.keyword_offset("FROM", inner_from.this))
        raise self.unsupported(f"{type(item).__name__} in FROM", item)

    def bind_select(self, select: exp.Select, ctes) -> Tuple[Node, List[str]]:
        if select.args.get("fetch") is not None:
            raise UnsupportedError("FETCH in a view is not supported (use ORDER BY ... LIMIT)", sql=self.sql,
                                   offset=self.keyword_offset("FETCH", select.args["fetch"]))
        if isinstance(select.args.get("distinct"), exp.Distinct) and select.args["distinct"].args.get("on"):
            raise self.unsupported("DISTINCT ON", select.args["distinct"])
        if not select.expressions:   # (sqlglot reads ``SELECT FROM t``; DuckDB's parser rejects it)
            raise self.bind_error("SELECT without a selection list", select)
        self.check_columns_in_select_list(select)
        plan, scope, _ = self.bind_from(select, ctes)
        if select.args.get("qualify") is not None:   # the SELECT in a subquery, filtered on its QUALIFY column
            return self.bind_select(self.qualify_as_filter(select, scope), ctes)
        items = [(rewrite_subquery_predicates(e, self, scope), n) for e, n in self.expand_star(select.expressions, scope)]
        group = self.group_by_all(select.args.get("group"), items)
        having = select.args.get("having")
        if having is not None:
            having = exp.Having(this=rewrite_subquery_predicates(having.this, self, scope))
        has_agg = any(self.find_aggs(e) for e, _ in items) or (having is not None)
        windows = [w for e, _ in items for w in find_windows(e)]
        pre = None
        if windows and (group is not None or has_agg):   # group first, in a subquery; the windows over its rows
            return self.bind_select(self.windows_after_grouping(select, group, scope), ctes)
        if group is not None or has_agg:
            # scalar subqueries outside aggregate calls are joined after grouping ("late"), those inside
            # aggregate arguments before it
            late: list = []
            items = [(rewrite_late(self, e, ctes, late), n) for e, n in items]
            having = rewrite_late(self, having.this, ctes, late) if having is not None else None
            early = []
            for e, n in items:
                plan, e = self.attach_scalar_subqueries(plan, scope, e, ctes)
                early.append((e, n))
            if having is not None:
                plan, having = self.attach_scalar_subqueries(plan, scope, having, ctes)
            plan, exprs = self.bind_aggregate(plan, scope, early, group, having, late)
        else:
            if windows:
                plan, items = self.attach_windows(plan, scope, items)
            exprs = []
            for e, _ in items:
                plan, e = self.attach_scalar_subqueries(plan, scope, e, ctes)
                exprs.append(self.bind_scalar(e, scope))
            pre = (plan, exprs)
        names = unique_names([n for _, n in items])
        plan = Project(plan, tuple(exprs), tuple(names))
        if select.args.get("distinct"):
            plan = Distinct(plan)
        if select.args.get("limit") is not None or select.args.get("offset") is not None:
            distinct = bool(select.args.get("distinct"))
            plan = self.bind_top_k(select, plan, names, items, scope, hidden_ok=pre is not None and not distinct,
                                   pre=pre)
        return plan, names

    # ------------------------------------------------------------------ aggregates
    def find_aggs(self, e: exp.Expression) -> List[exp.Expression]:
        found = []
        for n in e.walk(prune=lambda x: isinstance(x, exp.Window) or
                        (isinstance(x, (exp.Subquery, exp.Select, exp.Exists)) and x is not e)):
            if isinstance(n, (exp.Subquery, exp.Select, exp.Exists, exp.Window)):
                continue
            if isinstance(n, exp.Grouping):
                continue
            if isinstance(n, exp.AggFunc) or (isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc)):
                outer = n.parent
                while outer is not None and outer is not e and not isinstance(outer, (exp.Select, exp.Subquery)):
                    if isinstance(outer, exp.AggFunc):
                        raise self.bind_error("aggregate calls cannot be nested", n)
                    outer = outer.parent
                if not (isinstance(n, exp.AggFunc) and isinstance(n.parent, exp.Filter)):
                    found.append(n)
        return found

    def called(self, n: exp.Expression) -> Tuple[str, Optional[int]]:
        """The name of function call ``n`` as the program spells it (``STRING_AGG``, not sqlglot's GROUP_CONCAT),
        and its offset."""
        meta = getattr(n, "_meta", None)
        if meta and "start" in meta and "end" in meta:
            return self.sql[meta["start"]:meta["end"] + 1], meta["start"]
        pos = position_of(n)
        m = re.search(r"(\w+)\s*\(\s*(DISTINCT\s+)?$", self.sql[:pos], re.IGNORECASE) if pos is not None else None
        if m:
            return m.group(1), m.start(1)
        return (n.sql_name() if isinstance(n, exp.Func) else type(n).__name__), pos

    def agg_call(self, n: exp.Expression, scope: Scope) -> Tuple[str, Tuple[exp.Expression, ...], bool,
                                                                  Tuple[str, ...]]:
        """(function, argument expressions (none for COUNT(*)), distinct, constant parameters) with
        FILTER folded into the arguments."""
        filt = None
        if isinstance(n, exp.Filter):
            filt = n.expression.this
            n = n.this
        func = AGGREGATES.get(type(n))
        if isinstance(n, UserAggregate):   # a Python aggregate: a condition (FILTER), then the arguments
            cond = filt.copy() if filt is not None else exp.true()
            return "UDAF", (cond, *n.expressions), False, (exp.Literal.string(n.this.name).sql(),
                                                           n.args["returns"].sql()) + \
                (aggregate_functions.RETRACTS,) * bool(n.args.get("retracts"))
        if func is None:
            if isinstance(n, exp.CountIf):   # COUNT_IF(p): DuckDB's is a SUM of p as 1 and 0 (NULL for no p)
                p = n.this
                n = exp.Sum(this=exp.Case(ifs=[exp.If(this=p.copy(), true=exp.Literal.number(1)),
                                               exp.If(this=exp.Not(this=exp.Paren(this=p.copy())),
                                                      true=exp.Literal.number(0))]))
                func = "SUM"
            elif isinstance(n, exp.AnyValue) or (isinstance(n, exp.IgnoreNulls) and isinstance(n.this, exp.AnyValue)):
                n = exp.Min(this=(n.this if isinstance(n, exp.AnyValue) else n.this.this).copy())
                func = "MIN"   # a value of the group that does not depend on the order of its rows
            else:
                return self.other_agg_call(n, filt)
        arg = n.this
        distinct = False
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise self.unsupported("DISTINCT over several arguments", arg)
            distinct = True
            arg = arg.expressions[0]
        if isinstance(arg, exp.Star):
            if func != "COUNT" or distinct:
                raise self.unsupported(f"{func}(*)", n)
            arg = None
            func = "COUNT_STAR"
        elif arg is None or n.args.get("expressions"):
            raise self.unsupported(f"{func} with these arguments", n)
        if filt is not None:
            if func == "COUNT_STAR":
                func, arg = "COUNT", exp.Literal.number(1)
            arg = exp.Case(ifs=[exp.If(this=filt.copy(), true=arg.copy())])
        return func, (() if arg is None else (arg,)), distinct, ()

    def other_agg_call(self, n: exp.Expression, filt) -> Tuple[str, Tuple[exp.Expression, ...], bool, Tuple[str, ...]]:
        """An aggregate of :mod:`planner.aggregate_functions`: its arguments checked for number and form."""
        if isinstance(n, exp.GroupConcat):
            return self.string_agg_call(n, filt)
        if isinstance(n, (exp.ArrayAgg, aggregate_functions.MapAgg)):
            return self.array_agg_call(n, filt)
        spec = aggregate_functions.lookup(n)
        name, at = self.called(n)
        if spec is None:
            raise UnsupportedError(f"aggregate function {name} is not supported", sql=self.sql, offset=at)
        args = [n.this] + ([n.expression] if n.args.get("expression") is not None else []) + \
            list(n.args.get("expressions") or [])
        args += [v for k, v in n.args.items() if k not in ("this", "expression", "expressions") and v]
        if any(isinstance(a, (exp.Distinct, exp.Order)) for a in args):
            raise self.unsupported(f"{name.upper()}(DISTINCT ...) or ORDER BY inside it", n)
        params: Tuple[str, ...] = ("0.5",) if isinstance(n, exp.Median) else ()
        if spec.fraction:
            if len(args) != 2:
                raise self.unsupported(f"{name.upper()} without a fraction (write {name.upper()}(x, 0.5))", n)
            value = args.pop()
            try:
                ok = isinstance(value, exp.Literal) and value.is_number and 0 <= float(value.this) <= 1
            except ValueError:
                ok = False
            if not ok:
                raise self.bind_error(f"the fraction of {name.upper()} must be a constant between 0 and 1", value)
            params = (value.this,)
        if len(args) != spec.columns:
            raise self.unsupported(f"{name.upper()} with {len(args)} argument{'s' if len(args) != 1 else ''} "
                                   f"(it takes {spec.columns})", n)
        if filt is not None:
            args = [exp.Case(ifs=[exp.If(this=filt.copy(), true=a.copy())]) for a in args]
        return spec.name, tuple(args), False, params

    def string_agg_call(self, n: exp.GroupConcat, filt) -> Tuple[str, Tuple[exp.Expression, ...], bool, Tuple[str, ...]]:
        """``STRING_AGG(s, sep [ORDER BY k [DESC], ...])`` / ``LISTAGG(s, sep) WITHIN GROUP (ORDER BY ...)``: the
        text and the order keys as arguments; the separator (a constant string, ',' if none) and each key's
        direction as parameters."""
        name, _ = self.called(n)
        arg, keys = n.this, []
        if isinstance(arg, exp.Order):
            arg, keys = arg.this, list(arg.expressions)
        if isinstance(arg, exp.Distinct):
            raise self.unsupported(f"{name.upper()}(DISTINCT ...)", n)
        sep = n.args.get("separator")
        if sep is not None and not (isinstance(sep, exp.Literal) and sep.is_string):
            raise self.bind_error(f"the separator of {name.upper()} must be a constant string", sep)
        if any(k.args.get("nulls_first") for k in keys):
            raise self.unsupported(f"NULLS FIRST in {name.upper()}'s ORDER BY", n)
        self.check_order_literals(keys, name.upper(), n)
        args = [arg] + [k.this for k in keys]
        if filt is not None:
            args = [exp.Case(ifs=[exp.If(this=filt.copy(), true=args[0].copy())])] + args[1:]
        sep_sql = (sep if sep is not None else exp.Literal.string(",")).sql(dialect=DIALECT)
        return "STRING_AGG", tuple(args), False, (sep_sql,) + tuple("DESC" if k.args.get("desc") else "ASC"
                                                                    for k in keys)

    def check_order_literals(self, keys: List[exp.Ordered], spelled: str, call: exp.Expression) -> None:
        """An aggregate's ORDER BY a constant that is not an integer (``'5'``, ``FALSE``, ``NULL``, ``1.5``) is an
        error, as in DuckDB ("has no effect"); an integer is a constant key, as there."""
        for k in keys:
            v = k.this.this if isinstance(k.this, exp.Neg) else k.this
            if isinstance(v, (exp.Boolean, exp.Null)) or (isinstance(v, exp.Literal) and (
                    v.is_string or not re.fullmatch(r"\d+", v.this))):
                raise self.bind_error(f"ORDER BY a constant that is not an integer in {spelled} has no effect "
                                      "(DuckDB rejects it)", k if position_of(k) is not None else call)

    def array_agg_call(self, n: exp.Expression, filt) -> Tuple[str, Tuple[exp.Expression, ...], bool, Tuple[str, ...]]:
        """``ARRAY_AGG([DISTINCT] x [ORDER BY k [DESC], ...]) [FILTER (WHERE p)]`` / ``LIST`` and ``MAP_AGG(k, v
        [ORDER BY ...]) [FILTER ...]``: the condition, (the map's key,) the value and the order keys as arguments,
        each order key's direction as a parameter (planner.aggregate_functions).  With DISTINCT the ORDER BY may
        only name the value (as in PostgreSQL)."""
        name, _ = self.called(n)
        spelled = name.upper()
        if isinstance(n, aggregate_functions.MapAgg):
            given = list(n.expressions)
            if len(given) != 2 or any(isinstance(a, exp.Distinct) for a in given):
                raise self.unsupported(f"{spelled} with these arguments (it takes a key and a value, and an "
                                       "ORDER BY)", n)
            lead, arg = given[:1], given[1]
        else:
            lead, arg = [], n.this
            if n.args.get("expressions"):
                arg = None
        keys: List[exp.Ordered] = []
        if isinstance(arg, exp.Order):
            arg, keys = arg.this, list(arg.expressions)
        distinct = isinstance(arg, exp.Distinct)
        if distinct:
            arg = arg.expressions[0] if len(arg.expressions) == 1 else None
            if arg is not None and any(k.this != arg for k in keys):
                other = next(k for k in keys if k.this != arg)
                raise self.unsupported(f"ORDER BY in {spelled}(DISTINCT x ...) other than by x itself", other)
        if arg is None or isinstance(arg, exp.Distinct):
            raise self.unsupported(f"{spelled} with these arguments (it takes one value, and an ORDER BY)", n)
        if any(k.args.get("nulls_first") for k in keys):
            raise self.unsupported(f"NULLS FIRST in {spelled}'s ORDER BY", n)
        self.check_order_literals(keys, spelled, n)
        cond = filt.copy() if filt is not None else exp.true()
        return aggregate_functions.lookup(n).name, (cond, *lead, arg, *[k.this for k in keys]), distinct, \
            tuple("DESC" if k.args.get("desc") else "ASC" for k in keys)

    def group_by_all(self, group: Optional[exp.Group], items) -> Optional[exp.Group]:
        """DuckDB's ``GROUP BY ALL``: by every SELECT item that reads a column and calls no aggregate (by their
        positions); with none, one group over all rows if the items call an aggregate."""
        if group is None or not group.args.get("all"):
            return group
        keys = [exp.Literal.number(i + 1) for i, (e, _) in enumerate(items)
                if not self.find_aggs(e) and any(True for _ in e.find_all(exp.Column))]
        if keys:
            return exp.Group(expressions=keys)
        if not any(self.find_aggs(e) for e, _ in items):
            start = located(group) or 0
            at = re.search(r"GROUP\s+BY\s+ALL", self.sql[start:], flags=re.IGNORECASE)
            raise UnsupportedError("GROUP BY ALL without a column or an aggregate in the SELECT list is not "
                                   "supported", sql=self.sql, offset=start + at.start() if at else start)
        return None

    def grouping_sets(self, group, items, scope: Scope) -> List[List[exp.Expression]]:
        """The grouping sets of a GROUP BY: plain items are in every set; ROLLUP, CUBE and GROUPING SETS
        multiply.  Items may be expressions, 1-based positions or select aliases."""
        select_exprs = [e for e, _ in items]
        aliases = {n.lower(): e for e, n in items}

        def key(g):
            if isinstance(g, exp.Paren):
                g = g.this
            if isinstance(g, exp.Neg) and isinstance(g.this, exp.Literal) and not g.this.is_string:
                raise self.bind_error(f"GROUP BY position -{g.this.this} is out of range", g)
            if isinstance(g, exp.Literal) and not g.is_string:
                k = int(g.this)
                if not 1 <= k <= len(select_exprs):
                    raise self.bind_error(f"GROUP BY position {k} is out of range", g)
                return select_exprs[k - 1]
            if isinstance(g, exp.Column) and not g.table and g.name.lower() in aliases \
                    and not self.try_resolve(g, scope):
                return aliases[g.name.lower()]
            return g

        sets: List[List[exp.Expression]] = [[]]
        for g in (group.expressions if group is not None else []):
            if isinstance(g, exp.Rollup):
                ks = [key(x) for x in g.expressions]
                options = [ks[:i] for i in range(len(ks), -1, -1)]
            elif isinstance(g, exp.Cube):
                ks = [key(x) for x in g.expressions]
                if len(ks) > 6:
                    raise self.unsupported("CUBE over more than 6 expressions", g)
                options = [[k for j, k in enumerate(ks) if mask >> (len(ks) - 1 - j) & 1]
                           for mask in range(2 ** len(ks) - 1, -1, -1)]
            elif isinstance(g, exp.GroupingSets):
                options = [[key(x) for x in s.expressions] if isinstance(s, exp.Tuple) else [key(s)]
                           for s in g.expressions]
            else:
                options = [[key(g)]]
            sets = [s + o for s in sets for o in options]
        return sets

    def bind_aggregate(self, plan: Node, scope: Scope, items, group, having, late=()):
        sets = self.grouping_sets(group, items, scope)
        if len(sets) == 1:
            return self.bind_grouped(plan, scope, items, sets[0], [], having, late)
        all_keys: List[exp.Expression] = []
        for s in sets:
            for k in s:
                if all(self.bind_scalar(k, scope).sql != self.bind_scalar(a, scope).sql for a in all_keys):
                    all_keys.append(k)
        branches = []
        for s in sets:
            bound = {self.bind_scalar(k, scope).sql for k in s}
            missing = [k for k in all_keys if self.bind_scalar(k, scope).sql not in bound]
            agg_plan, exprs = self.bind_grouped(plan, scope, items, s, missing, having, late)
            branches.append(Project(agg_plan, tuple(exprs), tuple(unique_names([n for _, n in items]))))
        union = UnionAll(tuple(branches))
        return union, [Expr(col(i), f.type) for i, f in enumerate(union.fields)]

    def bind_grouped(self, plan: Node, scope: Scope, items, key_nodes, missing, having, late=()):
        """One GROUP BY over ``key_nodes``; ``missing``: keys of other grouping sets, NULL here;
        ``late``: (placeholder table, plan, join kind) of scalar subqueries joined after grouping."""
        select_exprs = [e for e, _ in items]
        keys = [self.bind_scalar(g, scope) for g in key_nodes]
        missing_index = {self.bind_scalar(g, scope).sql: self.bind_scalar(g, scope).type for g in missing}
        key_index: Dict[str, int] = {}
        for i, k in enumerate(keys):
            key_index.setdefault(k.sql, i)
        # aggregate calls, deduplicated by their bound form
        calls: List[Tuple[str, Optional[Expr], bool]] = []
        call_index: Dict[Tuple, int] = {}

        def register(n):
            func, args, distinct, params = self.agg_call(n, scope)
            for arg in args:
                self.check_scalar(arg, allow_agg=False, clause="an aggregate argument")
            bargs = tuple(self.bind_scalar(arg, scope) for arg in args)
            if func in NUMERIC_AGGREGATES and bargs:
                self.check_numeric_argument(self.called(n.this if isinstance(n, exp.Filter) else n)[0].upper(),
                                            bargs[0], args[0], n)
            spec = aggregate_functions.BY_NAME.get(func)
            if spec is not None:
                for i, (arg, b) in enumerate(list(zip(args, bargs))[:spec.columns]):   # (order keys: any type)
                    accepts, what, loose = spec.argument(i)
                    untyped = b.type.sql == "UNKNOWN" or b.type.base == "NULL"
                    if b.type.base not in accepts and not (loose and untyped):
                        call = n.this if isinstance(n, exp.Filter) else n
                        shown = "an untyped NULL (CAST it)" if untyped else b.type.sql
                        raise self.bind_error(f"{self.called(call)[0].upper()} takes {what}, not {shown}",
                                              arg if position_of(arg) is not None else call)
            sig = (func, tuple(b.sql for b in bargs), distinct, params)
            if sig not in call_index:
                call_index[sig] = len(calls)
                calls.append((func, bargs, distinct, params))
            return call_index[sig]

        for e in select_exprs + ([having] if having is not None else []):
            for n in self.find_aggs(e):
                register(n)
        # pre-projection: keys, then each distinct aggregate argument
        pre: List[Expr] = list(keys)
        arg_pos: Dict[str, int] = {}
        for _, bargs, _, _ in calls:
            for barg in bargs:
                if barg.sql not in arg_pos:
                    arg_pos[barg.sql] = len(pre)
                    pre.append(barg)
        pre_names = tuple(f"k{i}" for i in range(len(keys))) + tuple(f"a{i}" for i in range(len(pre) - len(keys)))
        proj = Project(plan, tuple(pre), pre_names)
        pre_types = [e.type for e in pre]
        aggs = []
        for func, bargs, distinct, params in calls:
            args = tuple(Expr(col(arg_pos[b.sql]), b.type) for b in bargs)
            aggs.append(AggCall(func, args, distinct, None, self.agg_type(func, bargs, params), params))
        names = tuple(f"k{i}" for i in range(len(keys))) + tuple(f"agg{i}" for i in range(len(aggs)))
        agg_plan: Node = Aggregate(proj, tuple(Expr(col(i), pre_types[i]) for i in range(len(keys))),
                                   tuple(aggs), names)
        out_types = [k.type for k in keys] + [a.type for a in aggs]
        late_pos: Dict[str, int] = {}
        for name, sub_plan, kind in late:
            late_pos[name] = len(out_types)
            agg_plan = Join(agg_plan, sub_plan, (), (), None, kind)
            out_types.append(sub_plan.fields[0].type)

        def post(e: exp.Expression) -> Expr:
            def fn(n):
                if isinstance(n, exp.Column) and n.table in late_pos:
                    return exp.column(col(late_pos[n.table]))
                if any(c.table in late_pos for c in n.find_all(exp.Column)):
                    return n
                if isinstance(n, exp.Grouping):   # bit i set when argument i is not grouped in this set
                    args = n.expressions
                    bits = [int(self.bind_scalar(a, scope).sql not in key_index) for a in args]
                    return exp.Literal.number(sum(b << (len(bits) - 1 - i) for i, b in enumerate(bits)))
                if isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc) or isinstance(n, exp.AggFunc):
                    return exp.column(col(len(keys) + register(n)))
                if not list(n.find_all(exp.Column)):
                    return n
                if not self.find_aggs(n):
                    b = self.bind_scalar(n, scope)
                    if b.sql in key_index:
                        return exp.column(col(key_index[b.sql]))
                    if b.sql in missing_index:
                        t = missing_index[b.sql]
                        return exp.Null() if t.sql == "UNKNOWN" else exp.cast(exp.Null(), t.sql)
                    if isinstance(n, exp.Column):
                        raise self.bind_error(
                            f"column {n.sql()} must appear in GROUP BY or be used in an aggregate function", n)
                return n

            out = e.transform(lambda n: keep_position(fn(n), n))
            check_types(out, out_types, self.sql)
            out, t = self.typed(out, out_types, e)
            return self.bound(Expr(out.sql(dialect=DIALECT), t), e)

        if having is not None:
            agg_plan = Filter(agg_plan, post(having))
        n_calls = len(calls)
        exprs = [post(e) for e in select_exprs]
        if len(calls) != n_calls:  # pragma: no cover - every call was registered above
            raise AssertionError("aggregate registered late")
        return agg_plan, exprs

    def check_numeric_argument(self, spelled: str, b: Expr, arg: exp.Expression, call: exp.Expression) -> None:
        """SUM, AVG, STDDEV_* and VAR_* take a number (DuckDB's AVG of a DATE or TIMESTAMP and SUM of a BOOLEAN
        are not supported): anything else is an error at the argument."""
        base = b.type.base
        if base in aggregate_functions.NUMBERS or b.type.sql == "UNKNOWN" or base == "NULL":
            return
        hint = " (COUNT_IF(x) counts the TRUE values)" if base == "BOOLEAN" else \
            " (take the epoch, e.g. AVG(epoch(x)), and convert back)" if base in ("DATE", "TIMESTAMP", "TIME") else ""
        raise self.bind_error(f"{spelled} takes a number, not {b.type.sql}{hint}",
                              arg if position_of(arg) is not None else call)

    def agg_type(self, func: str, args: Sequence[Expr], params: Sequence[str] = ()) -> SqlType:
        if func == "UDAF":   # a Python aggregate: its declared type
            return from_sql_type(params[1].strip("'")).with_nullable(True)
        if func in aggregate_functions.BY_NAME:
            return aggregate_functions.BY_NAME[func].result([a.type for a in args])
        arg = args[0] if args else None
        if func in ("COUNT", "COUNT_STAR"):
            return BIGINT.with_nullable(False)
        if func.startswith(("STDDEV", "VAR")) or func == "AVG":
            return SqlType("DOUBLE") if not (arg and arg.type.base == "DECIMAL" and func == "AVG") else arg.type
        assert arg is not None
        if func == "SUM":
            if arg.type.base in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
                return BIGINT
            if arg.type.base == "DECIMAL":
                return SqlType("DECIMAL(38, " + arg.type.sql.split(",")[1].strip(" )") + ")")
        return arg.type.with_nullable(True)

    # ------------------------------------------------------------------ scalars
    def check_scalar(self, e: exp.Expression, allow_agg: bool, clause: str) -> None:
        for n in e.walk():
            if isinstance(n, exp.In) and n.args.get("query"):
                raise UnsupportedError("subquery in an expression is not supported", sql=self.sql,
                                       offset=self.keyword_offset("SELECT", n.args["query"]))
            if isinstance(n, (exp.Subquery, exp.Exists, exp.Select)):
                raise self.unsupported("subquery in an expression", n)
            if isinstance(n, exp.Window):
                raise self.unsupported("window function " + n.this.sql(), n)
            if isinstance(n, exp.AggFunc) and not allow_agg:
                raise self.bind_error(f"aggregate functions are not allowed in {clause}", n)
            if isinstance(n, exp.TimestampDiff) and self.called(n)[0].upper() == "TIMESTAMPDIFF":
                raise UnsupportedError("TIMESTAMPDIFF is not a DuckDB function: write date_diff('day', a, b) (the "
                                       "number of day boundaries from a to b; also 'second', 'hour', 'month', ...)",
                                       sql=self.sql, offset=self.called(n)[1])
            if isinstance(n, exp.Anonymous) and n.name.lower() not in ANONYMOUS_OK | self.python_functions:
                raise UnsupportedError(unknown_function_message(n.name), sql=self.sql, offset=position_of(n))
            if isinstance(n, exp.Placeholder) or isinstance(n, exp.Parameter):
                raise self.unsupported("query parameter", n)

    def try_resolve(self, c: exp.Column, scope: Scope) -> Optional[int]:
        table = name_of(c.args["table"]) if c.args.get("table") else None
        if table is not None and table.startswith("__outer"):   # bind_subquery.outer_ref: a pinned position
            s: Optional[Scope] = scope
            while s is not None and f"__outer{id(s)}" != table:
                s = s.parent
            return int(c.name[1:]) if s is not None else None
        name = c.name if isinstance(c.this, exp.Identifier) and c.this.quoted else c.name.lower()
        hits = []
        for ri, r in enumerate(scope.rels):
            if table is not None and r.alias != table:
                continue
            for j, n in enumerate(r.names):
                if (n == name or n.lower() == name.lower()) and \
                        (table is not None or (ri, n.lower()) not in scope.hidden):
                    hits.append(r.offset + j)
        if len(hits) > 1:
            raise self.bind_error(f"column reference '{c.sql()}' is ambiguous", c)
        if not hits and scope.parent is not None:
            return self.try_resolve(c, scope.parent)
        return hits[0] if hits else None

    def resolve(self, c: exp.Column, scope: Scope) -> int:
        if isinstance(c.this, exp.Star):
            raise self.unsupported("* in this position", c)
        if c.args.get("db"):
            raise self.unsupported("qualified column names with a schema", c)
        pos = self.try_resolve(c, scope)
        if pos is None:
            raise self.bind_error(f"unknown column '{c.sql()}'. Valid columns: {', '.join(scope.visible())}", c)
        return pos

    def bind_scalar(self, e: exp.Expression, scope: Scope, base: int = 0) -> Expr:
        """Bind a scalar expression: columns become ``c<pos - base>``; the type is inferred."""
        self.check_scalar(e, allow_agg=False, clause="this position")
        out = self.substituted(e, scope, base)
        types = scope.types()[base:]
        check_types(out, types, self.sql)
        out, t = self.typed(out, types, e)
        return self.bound(Expr(out.sql(dialect=DIALECT), t), e)

    def typed(self, out: exp.Expression, types, e: exp.Expression):
        """:func:`planner.semantics.typed`, its type errors at ``e``."""
        try:
            return typed(out, types)
        except NotTypable as x:
            raise self.bind_error(str(x), e) from None

    def bound(self, b: Expr, e: exp.Expression) -> Expr:
        """``b``, remembering that it came from ``e`` (for planner.column_check's messages)."""
        self.origins.setdefault(b.sql, e)
        return b

    def field_access(self, e: exp.Expression, scope: Scope) -> exp.Expression:
        """``e`` with ``r.x`` and ``t.r.x`` (which sqlglot reads as a column x of a table r) as the field x of
        the STRUCT column r, where no relation r is in scope: ``struct_extract(r, 'x')`` (of a JSON column:
        ``r['x']``)."""
        def fix(n):
            if not isinstance(n, exp.Column) or not n.args.get("table") or isinstance(n.this, exp.Star) or \
                    self.try_resolve(n, scope) is not None:
                return n
            parts = [p for p in (n.args.get("catalog"), n.args.get("db"), n.args.get("table")) if p is not None]
            for k in range(len(parts)):   # the longest prefix that names a column
                head = exp.Column(this=parts[k].copy(), table=parts[k - 1].copy() if k else None)
                pos = self.try_resolve(head, scope)
                base = scope.types()[pos].base if pos is not None else None
                if base in ("STRUCT", "JSON"):
                    out: exp.Expression = keep_position(head, n)
                    for f in parts[k + 1:] + [n.this]:
                        out = exp.Anonymous(this="struct_extract", expressions=[out, exp.Literal.string(f.name)]) \
                            if base == "STRUCT" else exp.Bracket(this=out, expressions=[exp.Literal.string(f.name)])
                    return keep_position(out, n)
            return n
        return e.transform(fix) if any(c.args.get("table") for c in e.find_all(exp.Column)) else e

    def substituted(self, e: exp.Expression, scope: Scope, base: int = 0) -> exp.Expression:
        """A copy of ``e`` whose columns are ``c<pos - base>`` (keeping their positions in the SQL text)."""
        e = self.field_access(e, scope)
        cols = list(e.find_all(exp.Column))
        positions = [self.resolve(c, scope) - base for c in cols]
        out = e.copy()
        if isinstance(out, exp.Column):
            out = keep_position(exp.column(col(positions[0])), out)
        for c, pos in zip(list(out.find_all(exp.Column)), positions):
            c.replace(keep_position(exp.column(col(pos)), c))
        return out


def unique_names(names: Sequence[str]) -> List[str]:
    out: List[str] = []
    seen: Dict[str, int] = {}
    for n in names:
        key = n.lower()
        if key in seen:
            seen[key] += 1
            n = f"{n}_{seen[key]}"
        else:
            seen[key] = 0
        out.append(n)
    return out
