"""Ad-hoc queries over the last committed step, run by DuckDB.

A snapshot loads the materialized tables and views of one committed step
into a private in-memory DuckDB (consolidated, rows repeated by weight), then
locks it down: no file or network access, no configuration changes.  Queries
are checked before they run: one read-only SELECT over the pipeline's own
materialized relations, nothing else.
"""
from __future__ import annotations

import logging
import threading
from typing import Dict, List, Sequence, Tuple

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from planner.bind import name_of, position_of
from planner.interval_literals import ReadDuckDB
from planner.nested_types import empty_map_literals
from planner.types import SqlType, plane_sql
from planner.errors import BindError, ParseError, UnsupportedError

from sqlengine import nested, private_duckdb
from sqlengine.executor.backends.python_calls import register_duckdb
from sqlengine.zset import W, consolidate_arrow, expand_arrow

QUERY_ROOTS = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery)
FORBIDDEN = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Command, exp.Alter, exp.Set,
             exp.Pragma, exp.Copy, exp.Attach, exp.Detach, exp.Use, exp.Merge, exp.TruncateTable,
             exp.Install, exp.Into)


def check_query(sql: str, relations: Dict[str, bool]) -> exp.Expression:
    """Parse and vet an ad-hoc query.  ``relations``: name -> materialized? (None: an append-only table that is
    not stored)"""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        stmts = [empty_map_literals(s) for s in sqlglot.parse(sql, read=ReadDuckDB) if s is not None]
    except sqlglot.errors.ParseError as e:
        raise ParseError(f"syntax error in query: {str(e).splitlines()[0]}") from None
    if len(stmts) != 1:
        raise UnsupportedError(f"an ad-hoc query must be exactly one SELECT statement, got {len(stmts)}")
    q = stmts[0]
    if not isinstance(q, QUERY_ROOTS):
        raise UnsupportedError(f"only SELECT queries are allowed here, not {q.key.upper()} "
                               "(use input_* or execute() to change tables)", sql=sql, offset=position_of(q))
    ctes = {name_of(c.args["alias"].this) for c in q.find_all(exp.CTE)}
    for n in q.walk():
        if isinstance(n, FORBIDDEN):
            raise UnsupportedError(f"{n.key.upper()} is not allowed in an ad-hoc query", sql=sql,
                                   offset=position_of(n))
        if isinstance(n, exp.Table):
            if not isinstance(n.this, exp.Identifier) or n.args.get("db") or n.args.get("catalog"):
                raise UnsupportedError(f"table function or external source {n.sql()} is not allowed in an "
                                       "ad-hoc query", sql=sql, offset=position_of(n))
            name = name_of(n.this)
            if name in ctes:
                continue
            if name not in relations:
                raise BindError(f"unknown table or view '{name}'. Queryable: "
                                f"{', '.join(sorted(k for k, m in relations.items() if m)) or '(none)'}",
                                sql=sql, offset=position_of(n))
            if relations[name] is None:
                raise BindError(f"table '{name}' is append-only and not stored (no view keeps its rows); declare "
                                "it WITH ('materialized' = 'true') to query it", sql=sql, offset=position_of(n))
            if not relations[name]:
                raise BindError(f"view '{name}' is not materialized; declare it CREATE MATERIALIZED VIEW "
                                "to query it", sql=sql, offset=position_of(n))
        if isinstance(n, exp.Anonymous) and n.name.lower().startswith(("read_", "glob", "getenv", "sniff")):
            raise UnsupportedError(f"function {n.name} is not allowed in an ad-hoc query", sql=sql,
                                   offset=position_of(n))
    return q


class Snapshot:
    """Materialized relations loaded into a private DuckDB, each as of the step its runs belong to.

    Relations are loaded when a query first needs them and reloaded only when their runs change, so a
    query after a step reloads just the relations that step changed.  The caller loads all relations of
    one query from one committed step (see ``Pipeline._run_query``)."""

    def __init__(self, functions=None):
        """``functions``: the program's Python functions (``planner.user_functions``), which queries may call."""
        self.con = private_duckdb.connect()
        register_duckdb(self.con, functions or {})
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self.lock = threading.RLock()
        self.loaded: Dict[str, tuple] = {}    # relation -> signature (its run paths) of the loaded contents

    def needs(self, name: str, signature: tuple) -> bool:
        return self.loaded.get(name) != signature

    def load(self, name: str, signature: tuple, t: pa.Table, interval_columns: Sequence[Tuple[str, str]] = ()
             ) -> None:
        """Load relation ``name``; ``interval_columns``: (name, SQL type) of its columns that are or hold
        INTERVALs (text on the data plane), which queries see as INTERVALs."""
        select = "*"
        if interval_columns:
            casts = [(c.replace('"', '""'), t) for c, t in interval_columns]
            select = "* REPLACE (" + ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in casts) + ")"
        with self.lock:
            self.con.register("__load", t)
            try:
                self.con.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT {select} FROM __load')
            finally:
                self.con.unregister("__load")
            self.loaded[name] = signature

    def run(self, q: exp.Expression) -> pa.Table:
        text = q.sql(dialect="duckdb")
        with self.lock:
            try:
                result = self.con.sql(text).to_arrow_table()
            except duckdb.Error as e:
                raise BindError(f"query failed: {str(e).splitlines()[0]}") from None
        return _intervals_as_text(result)


def _intervals_as_text(t: pa.Table) -> pa.Table:
    """A query's INTERVALs (also inside nested values) as DuckDB's text of them, as the engine gives intervals
    everywhere (files, Parquet and JSON have no interval of months, days and microseconds)."""
    held = [i for i, f in enumerate(t.schema) if nested.holds(f.type, lambda x: x == pa.month_day_nano_interval())]
    if not held:
        return t
    con = private_duckdb.cursor()
    try:
        rel = con.from_arrow(t)
        items = [f'CAST("{n}" AS {plane_sql(SqlType(str(ty)))}) AS "{n}"' if i in held else f'"{n}"'
                 for i, (n, ty) in enumerate(zip((c.replace('"', '""') for c in t.column_names), rel.types))]
        out = rel.project(", ".join(items)).to_arrow_table()
    finally:
        con.close()
    return out.rename_columns(t.column_names)


def load_relation(runs: pa.Table, names: List[str]) -> pa.Table:
    """Consolidated contents of a relation from its runs (concatenated), rows repeated by weight, SQL column
    names."""
    t = consolidate_arrow(runs) if runs.num_rows else runs
    t = expand_arrow(t.filter(pa.compute.greater(t.column(W), 0))) if t.num_rows else t.drop_columns([W])
    return t.rename_columns(names)
