"""Compile-time check that every column reaching a plan node has a type the executors can hash and store.

The executors keep view outputs, GROUP BY keys, join keys, DISTINCT rows, window partitions and aggregate
arguments as Arrow and Parquet columns, and hash them; they handle the column types of
:data:`planner.types.SUPPORTED_COLUMN_TYPES` only.  A value of another type (an unsigned integer or a UNION
inside a nested value, a MAP keyed by an INTERVAL, or one whose type the planner cannot tell) would compile and
then fail the pipeline's first step, so :func:`check_column_types` rejects the view instead, naming the view,
the column and its type, at the expression that computes it.  An INTERVAL is stored as its exact text, while
DuckDB compares intervals by their normalized value, so it is a value only (also inside a nested value): not a
key, an order, a DISTINCT or set-operation column, nor an aggregate's argument (but COUNT's).  Inside an expression any DuckDB value may
occur (``len(string_split(v, ','))`` is a BIGINT column).
"""
from __future__ import annotations

import re
from typing import Dict, Iterator, Optional, Tuple

from sqlglot import exp

from .errors import BindError, UnsupportedError
from .logical import Aggregate, Distinct, Expr, Join, Node, Project, Recursive, SetOp, Window, walk
from .typecheck import type_name, types_meet
from .types import SUPPORTED_COLUMN_TYPES, SqlType, contains, element_type, map_types, struct_fields

STORABLE = {"BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL", "REAL", "DOUBLE", "VARCHAR", "DATE",
            "TIMESTAMP", "JSON", "TIME", "BLOB", "UUID", "INTERVAL"}
_PASS_THROUGH = re.compile(r"c\d+|NULL")   # a column of the input (checked there), or an untyped NULL


def storable(t: SqlType) -> bool:
    """Whether the executors can store a column of type ``t`` (a nested one: if they can store its parts; not a
    MAP keyed by an INTERVAL)."""
    try:
        if t.base == "ARRAY":
            return storable(element_type(t))
        if t.base == "MAP":
            k, v = map_types(t)
            return k is not None and v is not None and storable(k) and storable(v) and not contains(k, "INTERVAL")
        if t.base == "STRUCT":
            return all(p is not None and storable(p) for _, p in struct_fields(t))
    except Exception:   # a DuckDB type name sqlglot cannot read back (UNION, ...)
        return False
    return t.base in STORABLE


def _kind(t: SqlType) -> str:
    """``VARCHAR[] (a LIST)``, ``INTERVAL``, ... : the type as the message shows it."""
    if t.sql == "UNKNOWN":
        return "UNKNOWN (the planner cannot tell it)"
    if t.sql.endswith("]"):
        return f"{t.sql} (a LIST)"
    for nested in ("STRUCT", "MAP", "UNION"):
        if t.base == nested:
            return f"{t.sql} (a {nested})"
    return t.sql


def _advice(t: SqlType) -> str:
    if t.sql == "UNKNOWN":
        return "CAST it to one of these types"
    if contains(t, "INTERVAL"):
        return ("use a number instead, e.g. date_diff('second', a, b) or EXTRACT(EPOCH FROM a - b), or add the "
                "interval to a TIMESTAMP")
    if t.sql.endswith("]") or t.base in ("STRUCT", "MAP", "UNION"):
        return "CAST it to a nested type whose parts are of these types, or take a value out of it"
    return "CAST it to one of these types"


def _stored(node: Node) -> Iterator[Tuple[str, Expr]]:
    """(column name, expression) of the values ``node`` computes and stores or hashes."""
    if isinstance(node, Project):
        yield from zip(node.names, node.exprs)
    elif isinstance(node, Aggregate):
        yield from zip(node.names, node.keys)
    elif isinstance(node, Window):
        yield from (("PARTITION BY", e) for e in node.partition)
        yield from zip(node.names, node.calls)
    elif isinstance(node, Join):
        yield from (("join key", e) for e in node.left_keys + node.right_keys)


def _origin(e: Expr, origins: Dict[str, exp.Expression]) -> Optional[exp.Expression]:
    """The SQL expression bound to ``e``, or else to the largest bound expression inside it."""
    if e.sql in origins:
        return origins[e.sql]
    inside = [s for s in origins if s in e.sql and not _PASS_THROUGH.fullmatch(s)]
    return origins[max(inside, key=len)] if inside else None


def check_column_types(view: str, plan: Node, output: Tuple[str, ...], origins: Dict[str, exp.Expression],
                       sql: str, offset_of, default: Optional[int]) -> None:
    """Raise UnsupportedError at the first expression of ``plan`` (children first) computing a column whose
    type the executors cannot store.  ``origins``: bound expression text -> the SQL expression it came from;
    ``output``: the view's column names; ``offset_of``: the offset of a SQL expression; ``default``: the offset
    reported when no expression is found."""
    for node in walk(plan):
        if isinstance(node, Join):   # (keys bound one side at a time: a correlated subquery's, IN's)
            for a, b in zip(node.left_keys, node.right_keys):
                if not types_meet(a.type, b.type):
                    origin = _origin(a, origins) or _origin(b, origins)
                    raise BindError(f"view {view}: cannot compare {type_name(a.type)} with {type_name(b.type)}",
                                    sql=sql, offset=(offset_of(origin) if origin is not None else None) or default)
        _check_interval_keys(view, node, origins, sql, offset_of, default)
        for name, e in _stored(node):
            if storable(e.type) or _PASS_THROUGH.fullmatch(e.sql):
                continue
            origin = _origin(e, origins)
            what = f"column {name}" if node is _top(plan) and name in output else \
                f"the expression {_text(origin, sql) if origin is not None else e.sql}"
            raise UnsupportedError(
                f"view {view}: {what} has type {_kind(e.type)}, which a view cannot hold (its columns, keys and "
                f"aggregate arguments must be {', '.join(SUPPORTED_COLUMN_TYPES)}): {_advice(e.type)}", sql=sql,
                offset=(offset_of(origin) if origin is not None else None) or default)


_INTERVAL_ADVICE = ("DuckDB compares intervals by their normalized value ('24 hours' = '1 day') and the executors "
                    "hold an INTERVAL as its exact text, so an INTERVAL may be a view's value but not a key, an "
                    "order or an aggregate's argument: use a number there, e.g. EXTRACT(EPOCH FROM d) (its seconds, "
                    "a month counted as 30 days)")


def _interval_columns(sql: str, fields) -> bool:
    """Whether the bound expression ``sql`` reads a column ``c<i>`` of ``fields`` that is an INTERVAL."""
    return any(contains(fields[int(i)].type, "INTERVAL") for i in re.findall(r"\bc(\d+)\b", sql)
               if int(i) < len(fields))


def _check_interval_keys(view: str, node: Node, origins, sql: str, offset_of, default) -> None:
    """Reject an INTERVAL where rows are grouped, matched, ordered or aggregated by it."""
    def reject(what: str, e: Optional[Expr]) -> None:
        origin = _origin(e, origins) if e is not None else None
        raise UnsupportedError(f"view {view}: {what} is an INTERVAL; {_INTERVAL_ADVICE}", sql=sql,
                               offset=(offset_of(origin) if origin is not None else None) or default)
    if isinstance(node, Aggregate):
        for k in node.keys:
            if contains(k.type, "INTERVAL"):
                reject("a GROUP BY key", k)
        for a in node.aggs:
            for arg in a.args:
                if contains(arg.type, "INTERVAL") and a.func != "COUNT":
                    reject(f"the argument of {a.func}", arg)
                if contains(arg.type, "INTERVAL") and a.distinct:
                    reject("the argument of COUNT(DISTINCT ...)", arg)
    elif isinstance(node, Join):
        for k in node.left_keys + node.right_keys:
            if contains(k.type, "INTERVAL"):
                reject("a join key", k)
    elif isinstance(node, Window):
        for k in node.partition:
            if contains(k.type, "INTERVAL"):
                reject("a PARTITION BY key", k)
        for c in node.calls:
            if _interval_columns(c.sql, node.input.fields):
                reject("a window function's argument or ORDER BY", c)
    elif isinstance(node, (Distinct, SetOp, Recursive)):
        if any(contains(f.type, "INTERVAL") for f in node.fields):
            what = {Distinct: "a column of a DISTINCT (or of a UNION, which removes duplicates)",
                    SetOp: f"a column of an {getattr(node, 'op', '').upper()}",
                    Recursive: "a column of a recursive view"}[type(node)]
            reject(what, None)


def _text(node: exp.Expression, sql: str) -> str:
    """The text of a function call ``node`` as written in ``sql``; other expressions as sqlglot writes them
    (their first and last tokens are not recorded)."""
    if not (getattr(node, "_meta", None) and "start" in node.meta):
        return node.sql(dialect="duckdb")
    spans = [(n.meta["start"], n.meta["end"]) for n in node.walk()
             if getattr(n, "_meta", None) and "start" in n.meta and "end" in n.meta]
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    text = sql[start:end + 1]
    return text + ")" * max(0, text.count("(") - text.count(")"))


def _top(plan: Node) -> Node:
    """The node computing the view's output columns (under DISTINCT, filters and top-k)."""
    node = plan
    while not isinstance(node, (Project, Aggregate, Window, Join)) and len(node.inputs) == 1:
        node = node.inputs[0]
    return node
