"""A sqllogictest runner for the engine.

Runs SQLite-style ``.test`` files (parsed by ``parse.py`` next to this file) through
``sqlengine.Pipeline``, using only the public API:

* ``statement ok`` records are applied to a *shadow* DuckDB database that holds the
  tables' current contents (CREATE TABLE, INSERT, DELETE, ...).  ``CREATE VIEW`` becomes a
  program view of the engine (renamed to a unique name, because the files drop and
  re-create views under the same name); ``DROP VIEW`` forgets it; ``CREATE INDEX`` is
  ignored (indexes do not change results).
* every ``query`` record becomes ``CREATE MATERIALIZED VIEW qN AS <query>`` of the engine.
  A top-level ORDER BY without LIMIT is removed from the view (a view is a bag; the
  record's sort mode, or for ``nosort`` an ORDER BY by position when the view is read,
  restores the order); ORDER BY ... LIMIT stays in the view.
* Queries are grouped in *segments*: maximal runs of records during which the tables'
  data does not change.  Each query is first compiled on its own with
  ``planner.program.compile_program`` (pure Python) to classify unsupported ones with
  their error message; all compilable views of a segment then go into **one** pipeline
  program.  When ``start()`` rejects a view (Spark analysis), that view is dropped with
  its reason and the pipeline is rebuilt.  The tables' rows are pushed with
  ``input_pandas``; each view is then read (``query_arrow("SELECT * FROM qN")``) and
  its change stream (``listen``) is integrated and must equal the contents.
* The formatted result (types I/R/T, sort modes, MD5 hashing: ``parse.py``) is compared
  with the record's expected values.  A mismatch is classified ``dialect`` when DuckDB,
  run on the same (rewritten) query, gives exactly the same wrong answer, and ``wrong``
  otherwise (a bug of the engine until shown otherwise).
* Differential phase (optional, cheap): a random third of each table's rows is deleted
  through ``input_pandas(..., delete=True)`` and then re-inserted; after each step every
  view (and its integrated change stream) is compared with DuckDB recomputing the query
  on the same data (the files' answers hold only for the original data).

Dialect choices (stated, applied identically to the engine and to the DuckDB oracle):
records are filtered by skipif/onlyif as database ``duckdb`` (like
``workloads/slt/run_duckdb.py``); SQLite's integer division is reproduced by rewriting
``a / b`` to ``a // b`` when sqlglot's type annotation says both operands are integers
(``run_duckdb.py`` uses ``SET integer_division = true`` for the same purpose); SQLite's
``FLOAT`` (8 bytes) is declared ``DOUBLE``; ``UNIQUE`` constraints are dropped from the
engine's table definitions (the shadow DuckDB enforces them on the data); ORDER BY keys
get SQLite's NULL order (NULLs first ascending).

Provenance: the ``.test`` files are verbatim copies of SQLite's sqllogictest scripts
(see ``SOURCES.md`` here); ``parse.py`` was written for the acceptance harness this
project is checked with and is copied unchanged.  This runner was written for the project.
"""
from __future__ import annotations

import math
import os
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import duckdb
import pandas as pd
import sqlglot
from sqlglot import exp

from sqlengine import BindError, EngineError, ParseError, Pipeline, UnsupportedError  # noqa: F401

from . import parse as slt

DBNAME = "duckdb"
HERE = os.path.dirname(os.path.abspath(__file__))
INT_TYPES = {getattr(exp.DataType.Type, n) for n in ("INT", "BIGINT", "SMALLINT", "TINYINT", "INT128", "UINT", "UBIGINT", "USMALLINT", "UTINYINT") if hasattr(exp.DataType.Type, n)}


def test_files() -> List[str]:
    return sorted(os.path.join(HERE, f) for f in os.listdir(HERE) if f.endswith(".test"))


# ------------------------------------------------------------------ outcomes

@dataclass
class Outcome:
    line: int
    sql: str
    status: str                 # pass | wrong | dialect | unsupported | error
    reason: str = ""            # unsupported/error: normalized reason; wrong: what differed
    detail: str = ""


@dataclass
class FileResult:
    path: str
    records: int = 0
    queries: int = 0
    skipped: int = 0            # records excluded by skipif/onlyif
    statements: Counter = field(default_factory=Counter)
    outcomes: List[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    pipelines: int = 0
    duckdb_pass: int = 0        # queries DuckDB answers as expected (same rewrites), for context
    differential_views: int = 0  # views that passed the delete/re-insert phase (compared with DuckDB)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def reasons(self, status: str) -> Counter:
        return Counter(o.reason for o in self.outcomes if o.status == status)


_POS_RE = re.compile(r"\s*\(line \d+, column \d+\)")


def normalize_reason(err: BaseException) -> str:
    """A reason without positions, view names or long Spark details, for counting."""
    text = str(getattr(err, "message", None) or err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    text = _POS_RE.sub("", text)
    text = re.sub(r"\bq\d+\b", "qN", text)
    text = re.sub(r"\bslt_v\d+\b", "slt_vN", text)
    m = re.search(r"cannot run on Spark: (\[[A-Z_.]+\])?", text)
    if m:
        text = "Spark cannot run an expression: " + (m.group(1) or text[m.end():m.end() + 80])
    text = re.sub(r"'[^']{30,}'", "'...'", text)
    if not isinstance(err, EngineError):
        text = f"{type(err).__name__}: {text}"
    return text[:160]


# ------------------------------------------------------------------ SQL rewriting

def _dialectize_ddl(sql: str) -> Tuple[str, str]:
    """(DDL for the shadow DuckDB, DDL for the engine) of a CREATE TABLE."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    for dt in tree.find_all(exp.DataType):
        if dt.this == exp.DataType.Type.FLOAT:
            dt.set("this", exp.DataType.Type.DOUBLE)
    shadow = tree.sql(dialect="duckdb")
    for c in list(tree.find_all(exp.ColumnConstraint)):
        if isinstance(c.args.get("kind"), exp.UniqueColumnConstraint):
            c.pop()
    schema = tree.this
    if isinstance(schema, exp.Schema):
        for e in list(schema.expressions):
            if isinstance(e, (exp.UniqueColumnConstraint, exp.Constraint)) or \
                    (isinstance(e, exp.ColumnConstraint) and isinstance(e.args.get("kind"), exp.UniqueColumnConstraint)):
                e.pop()
    return shadow, tree.sql(dialect="duckdb")


def _rename_tables(tree: exp.Expression, view_map: Dict[str, str]) -> bool:
    changed = False
    for t in list(tree.find_all(exp.Table)):
        name = t.name.lower()
        if not t.args.get("db") and name in view_map:
            alias = t.alias
            t.set("this", exp.to_identifier(view_map[name]))
            if not alias:
                t.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
            changed = True
    return changed


def _integer_division(tree: exp.Expression, schema: Dict[str, Dict[str, str]]) -> bool:
    """Rewrite integer / integer to // (SQLite semantics), using sqlglot's type annotation."""
    divs = [d for d in tree.find_all(exp.Div, bfs=False)]
    if not divs:
        return False
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify
    try:
        copy = qualify(tree.copy(), schema=schema, dialect="duckdb", validate_qualify_columns=False, expand_alias_refs=False,
                       expand_stars=False, quote_identifiers=False)
        copy = annotate_types(copy, schema=schema)
    except Exception:
        return False
    cdivs = [d for d in copy.find_all(exp.Div, bfs=False)]
    if len(cdivs) != len(divs):
        return False
    changed = False
    for d, c in zip(divs, cdivs):
        lt, rt = c.this.type, c.expression.type
        if lt is not None and rt is not None and lt.this in INT_TYPES and rt.this in INT_TYPES:
            d.replace(exp.IntDiv(this=d.this, expression=d.expression))
            changed = True
    return changed


def _sqlite_null_order(tree: exp.Expression) -> None:
    """ORDER BY keys sort NULLs first ascending / last descending, as SQLite does."""
    order = tree.args.get("order")
    if order is None:
        return
    for o in order.expressions:
        if isinstance(o, exp.Ordered):
            o.set("nulls_first", not o.args.get("desc"))


@dataclass
class QueryPlan:
    """How one query record runs: the view text, how to read it, and the oracle's text."""
    view_sql: str                      # body of CREATE MATERIALIZED VIEW
    oracle_sql: str                    # what DuckDB runs (same semantics, with the ORDER BY)
    read_order: Optional[str] = None   # ORDER BY clause (by position / hidden column) for reading
    hidden: int = 0                    # trailing hidden ORDER BY columns to drop when reading
    has_limit: bool = False
    problem: Optional[str] = None      # a reason the runner cannot map the record


def plan_query(sql: str, view_map: Dict[str, str], schema: Dict[str, Dict[str, str]],
               sortmode: str) -> QueryPlan:
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except Exception:  # the engine reports its own parse error
        return QueryPlan(view_sql=sql, oracle_sql=sql)
    if tree is None or not isinstance(tree, exp.Query):
        return QueryPlan(view_sql=sql, oracle_sql=sql)
    _rename_tables(tree, view_map)
    _integer_division(tree, schema)
    _sqlite_null_order(tree)
    oracle_sql = tree.sql(dialect="duckdb")
    order = tree.args.get("order")
    has_limit = tree.args.get("limit") is not None or tree.args.get("offset") is not None
    plan = QueryPlan(view_sql=oracle_sql, oracle_sql=oracle_sql, has_limit=has_limit)
    if order is None:
        return plan
    need_order = sortmode == "nosort"
    if need_order:
        keys: List[str] = []
        selects = tree.selects if isinstance(tree, exp.Select) else tree.selects
        star = any(isinstance(s, exp.Star) or (isinstance(s, exp.Column) and isinstance(s.this, exp.Star))
                   for s in selects)
        hidden: List[exp.Expression] = []
        for o in order.expressions:
            key = o.this
            pos = None
            if isinstance(key, exp.Literal) and key.is_int:
                pos = int(key.this)
            elif not star:
                for i, s in enumerate(selects):
                    inner = s.this if isinstance(s, exp.Alias) else s
                    if (isinstance(key, exp.Column) and not key.table and s.alias_or_name.lower() == key.name.lower()) \
                            or inner == key:
                        pos = i + 1
                        break
            suffix = (" DESC" if o.args.get("desc") else " ASC") + \
                     (" NULLS FIRST" if not o.args.get("desc") else " NULLS LAST")
            if pos is not None:
                keys.append(f"{pos}{suffix}")
            else:
                hidden.append(key.copy())
                keys.append(f"__ord{len(hidden)}{suffix}")
        if hidden:
            if not isinstance(tree, exp.Select) or tree.args.get("distinct") or star:
                plan.problem = "runner: nosort ORDER BY key outside the select list of a DISTINCT/star/set query"
                return plan
            body = tree.copy()
            for k, h in enumerate(hidden, 1):
                body.select(exp.alias_(h, f"__ord{k}"), copy=False)
            if not has_limit:
                body.set("order", None)
            plan.view_sql = body.sql(dialect="duckdb")
            plan.hidden = len(hidden)
            plan.read_order = ", ".join(keys)
            return plan
        plan.read_order = ", ".join(keys)
    if not has_limit:
        body = tree.copy()
        body.set("order", None)
        plan.view_sql = body.sql(dialect="duckdb")
    return plan


# ------------------------------------------------------------------ results

def _pyval(v: Any, is_int: bool) -> Any:
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if is_int and isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _fmt_rows(rows: Sequence[Sequence[Any]], types: str) -> List[Tuple[str, ...]]:
    return [tuple(slt.format_value(v, types[j] if j < len(types) else "T") for j, v in enumerate(r)) for r in rows]


def _bag(rows, types) -> Counter:
    return Counter(_fmt_rows(rows, types))


def _values_text(rec: slt.Record) -> str:
    if rec.expected_hash is not None:
        return f"{rec.expected_count} values hashing to {rec.expected_hash}"
    return str((rec.expected_values or [])[:12])


# ------------------------------------------------------------------ the runner

@dataclass
class _Query:
    rec: slt.Record
    plan: QueryPlan
    tables: List[str]                    # tables it needs (through its views too)
    views: List[str]                     # unique program view names it needs, in definition order
    oracle_rows: Optional[list] = None   # DuckDB's result on the original data (None: DuckDB failed)
    oracle_error: Optional[str] = None
    name: str = ""
    index: int = 0                       # 1-based among the file's query records run


class FileRunner:
    def __init__(self, path: str, spark=None, max_queries: Optional[int] = None, differential: bool = True,
                 seed: int = 0, workdir: Optional[str] = None, dbname: str = DBNAME, query_lines=None,
                 skip_queries: int = 0, differential_queries: Optional[int] = None):
        self.path = path
        self.spark = spark
        self.max_queries = max_queries
        self.differential = differential
        self.rng = random.Random(f"{os.path.basename(path)}:{seed}")
        self.dbname = dbname
        self.query_lines = set(query_lines) if query_lines is not None else None
        self.skip_queries = skip_queries      # leading query records to leave out (statements still run)
        self.differential_queries = differential_queries  # differential phase only for the first N queries
        self.workdir = workdir
        self.result = FileResult(path)
        self.con = duckdb.connect()
        try:
            self.con.execute("SET error_on_division_by_zero = false")
        except duckdb.Error:
            pass
        self.tables: Dict[str, str] = {}       # name -> engine DDL
        self.views: Dict[str, str] = {}        # SLT view name -> unique name
        self.view_defs: Dict[str, Tuple[str, List[str], List[str]]] = {}  # unique -> (sql, tables, views)
        self.pending: List[_Query] = []
        self.nview = 0
        self.nquery = 0

    # ---- shadow database helpers
    def _schema(self) -> Dict[str, Dict[str, str]]:
        out: Dict[str, Dict[str, str]] = {}
        for name in list(self.tables) + list(self.view_defs):
            try:
                cols = self.con.execute(f"DESCRIBE SELECT * FROM {name}").fetchall()
                out[name] = {c[0]: c[1] for c in cols}
            except duckdb.Error:
                pass
        return out

    def _deps(self, sql: str) -> Tuple[List[str], List[str]]:
        """Tables and (unique) views a rewritten query refers to, transitively."""
        try:
            tree = sqlglot.parse_one(sql, read="duckdb")
            names = {t.name.lower() for t in tree.find_all(exp.Table)}
        except Exception:
            names = set()
        tables = [t for t in self.tables if t in names]
        views: List[str] = []
        for v in self.view_defs:  # in definition order
            if v in names:
                _, vt, vv = self.view_defs[v]
                for x in vv:
                    if x not in views:
                        views.append(x)
                views.append(v)
                tables += [t for t in vt if t not in tables]
        return tables, views

    def _run_oracle(self, sql: str):
        cur = self.con.execute(sql)
        return [list(r) for r in cur.fetchall()]

    # ---- records
    def run(self) -> FileResult:
        t0 = time.time()
        try:
            for rec in slt.parse_file(self.path):
                if rec.kind == "halt":
                    if rec.applies_to(self.dbname):
                        break
                    continue
                if rec.kind not in ("statement", "query"):
                    continue
                if not rec.applies_to(self.dbname):
                    self.result.skipped += 1
                    continue
                if rec.kind == "query":
                    if self.max_queries is not None and self.nquery >= self.skip_queries + self.max_queries:
                        break
                    self.nquery += 1
                    if self.nquery <= self.skip_queries or \
                            (self.query_lines is not None and rec.line not in self.query_lines):
                        continue
                self.result.records += 1
                try:
                    if rec.kind == "statement":
                        self._statement(rec)
                    else:
                        self._query(rec)
                except Exception as e:  # a runner bug must not hide the rest of the file
                    if rec.kind == "statement":
                        self.result.statements["runner error: " + normalize_reason(e)] += 1
                    else:
                        self.result.outcomes.append(Outcome(rec.line, rec.sql, "error", "runner: " + normalize_reason(e)))
            self._flush()
        finally:
            self.con.close()
            self.result.seconds = time.time() - t0
        return self.result

    def _statement(self, rec: slt.Record) -> None:
        sql = rec.sql.strip().rstrip(";")
        st = self.result.statements
        try:
            tree = sqlglot.parse_one(sql, read="duckdb")
        except Exception:
            tree = None
        if isinstance(tree, exp.Create) and tree.kind == "INDEX":
            st["ignored (CREATE INDEX)"] += 1
            return
        if isinstance(tree, exp.Create) and tree.kind == "VIEW":
            name = tree.this.name.lower()
            body = tree.expression
            self.nview += 1
            uniq = f"slt_v{self.nview}"
            p = plan_query(body.sql(dialect="duckdb"), self.views, self._schema(), "rowsort")
            try:
                self.con.execute(f"CREATE VIEW {uniq} AS {p.oracle_sql}")
            except duckdb.Error:
                st["CREATE VIEW failed in DuckDB"] += 1
                ok = False
            else:
                ok = True
            if ok != rec.expect_ok:
                st["unexpected outcome"] += 1
            if ok:
                tables, views = self._deps(p.oracle_sql)
                self.view_defs[uniq] = (p.view_sql if not p.has_limit else p.oracle_sql, tables, views)
                self.views[name] = uniq
                st["CREATE VIEW"] += 1
            return
        if isinstance(tree, exp.Drop) and tree.kind == "VIEW":
            existed = all([self.views.pop(n, None) is not None for n in _drop_names(tree)])
            if not existed and not tree.args.get("exists"):
                st["unexpected outcome" if rec.expect_ok else "DROP VIEW"] += 1
            else:
                st["DROP VIEW"] += 1
            return
        # everything else changes tables: it ends the segment
        if self.pending:
            self._flush()
        create_table = isinstance(tree, exp.Create) and tree.kind == "TABLE"
        run_sql = sql
        engine_ddl = None
        if create_table:
            try:
                run_sql, engine_ddl = _dialectize_ddl(sql)
            except Exception:
                pass
        elif tree is not None and not isinstance(tree, exp.Command):
            tree2 = tree.copy()
            if _integer_division(tree2, self._schema()):
                run_sql = tree2.sql(dialect="duckdb")
        try:
            self.con.execute(run_sql)
            ok = True
        except duckdb.Error:
            ok = False
        kind = (tree.key.upper() if tree is not None else "?") + (f" {tree.kind}" if create_table or isinstance(tree, exp.Drop) else "")
        if ok != rec.expect_ok:
            st["unexpected outcome"] += 1
        else:
            st[kind if rec.expect_ok else "statement error (as expected)"] += 1
        if ok and create_table:
            self.tables[tree.this.this.name.lower()] = engine_ddl or run_sql
        if ok and isinstance(tree, exp.Drop) and tree.kind == "TABLE":
            for n in _drop_names(tree):
                self.tables.pop(n, None)

    def _query(self, rec: slt.Record) -> None:
        self.result.queries += 1
        plan = plan_query(rec.sql.strip().rstrip(";"), self.views, self._schema(), rec.sortmode)
        tables, views = self._deps(plan.oracle_sql)
        q = _Query(rec, plan, tables, views)
        q.index = self.result.queries
        try:
            q.oracle_rows = self._run_oracle(plan.oracle_sql)
            if self.result is not None and q.oracle_rows is not None:
                vals = slt.format_rows(q.oracle_rows, rec.types, rec.sortmode)
                if (not q.oracle_rows or len(q.oracle_rows[0]) == len(rec.types)) and slt.check_query(rec, vals):
                    self.result.duckdb_pass += 1
        except duckdb.Error as e:
            q.oracle_error = str(e).splitlines()[0][:200]
        if plan.problem:
            self._outcome(q, "unsupported", plan.problem)
            return
        self.pending.append(q)

    def _outcome(self, q: _Query, status: str, reason: str = "", detail: str = "") -> None:
        self.result.outcomes.append(Outcome(q.rec.line, q.rec.sql, status, reason, detail))

    # ---- one segment: one pipeline with all compilable views
    def _program(self, queries: List[_Query]) -> str:
        tables: List[str] = []
        views: List[str] = []
        for q in queries:
            tables += [t for t in q.tables if t not in tables]
            views += [v for v in q.views if v not in views]
        parts = [self.tables[t] for t in tables]
        parts += [f"CREATE VIEW {v} AS {self.view_defs[v][0]}" for v in views]
        parts += [f"CREATE MATERIALIZED VIEW {q.name} AS {q.plan.view_sql}" for q in queries]
        return ";\n".join(parts) + ";\n"

    def _flush(self) -> None:
        queries, self.pending = self.pending, []
        if not queries:
            return
        from planner.program import compile_program
        ok: List[_Query] = []
        for i, q in enumerate(queries):
            q.name = f"q{i}"
            try:
                compile_program(self._program([q]))
            except EngineError as e:
                self._outcome(q, "unsupported", normalize_reason(e))
                continue
            except Exception as e:  # a crash of the compiler is a bug, not "unsupported"
                self._outcome(q, "error", normalize_reason(e))
                continue
            ok.append(q)
        lim = self.differential_queries
        if not self.differential or lim is None:
            groups = [(ok, self.differential)]
        else:
            groups = [([q for q in ok if q.index <= lim], True), ([q for q in ok if q.index > lim], False)]
        for group, diff in groups:
            self._run_group(group, diff)

    def _run_group(self, ok: List[_Query], differential: bool) -> None:
        while ok:
            try:
                self._run_pipeline(ok, differential)
                return
            except _DropViews as d:
                keep = []
                for q in ok:
                    if q.name in d.names:
                        self._outcome(q, "unsupported", d.reason)
                    else:
                        keep.append(q)
                ok = keep
            except Exception as e:
                for q in ok:
                    self._outcome(q, "error", "pipeline failed: " + normalize_reason(e))
                return

    def _run_pipeline(self, queries: List[_Query], differential: bool) -> None:
        self.result.pipelines += 1
        storage = tempfile.mkdtemp(prefix="slt-", dir=self.workdir)
        p = None
        try:
            try:
                p = Pipeline.from_sql(self._program(queries), name="slt", storage_dir=storage, spark=self.spark)
            except EngineError as e:
                names = {q.name for q in queries if e.line is not None and
                         self._program(queries).split("\n")[e.line - 1].startswith(f"CREATE MATERIALIZED VIEW {q.name} ")}
                if names:
                    raise _DropViews(names, normalize_reason(e))
                raise
            handlers = {q.name: p.listen(q.name) for q in queries}
            try:
                p.start()
            except UnsupportedError as e:
                m = re.search(r"\(in view ([^)]*)\)", e.message)
                names = {n.strip() for n in m.group(1).split(",")} if m else set()
                names &= {q.name for q in queries}
                if names:
                    raise _DropViews(names, normalize_reason(e))
                raise
            tables = []
            for q in queries:
                tables += [t for t in q.tables if t not in tables]
            data = {}
            for t in tables:
                cur = self.con.execute(f"SELECT rowid, * FROM {t}")
                cols = [d[0] for d in cur.description]
                rows = cur.fetchall()
                data[t] = (cols, rows)
                if rows:
                    p.input_pandas(t, pd.DataFrame([r[1:] for r in rows], columns=cols[1:], dtype=object))
            p.wait_for_idle(timeout_s=900)
            failed: Dict[str, Tuple[str, str, str]] = {}
            for q in queries:
                res = self._check_view(p, q, handlers[q.name], None)
                if res is not None:
                    failed[q.name] = res
            if differential and any(rows for _, rows in data.values()):
                self._differential(p, queries, handlers, data, failed)
            for q in queries:
                if q.name in failed:
                    self._outcome(q, *failed[q.name])
                else:
                    self._outcome(q, "pass")
        finally:
            if p is not None:
                try:
                    p.stop(force=True)
                except Exception:
                    pass
            shutil.rmtree(storage, ignore_errors=True)

    def _read(self, p: Pipeline, q: _Query):
        sql = f"SELECT * FROM {q.name}" + (f" ORDER BY {q.plan.read_order}" if q.plan.read_order else "")
        t = p.query_arrow(sql)
        n = t.num_columns - q.plan.hidden
        import pyarrow as pa
        is_int = [pa.types.is_integer(t.schema.field(i).type) for i in range(n)]
        cols = [t.column(i).to_pylist() for i in range(n)]
        return [list(r) for r in zip(*cols)] if cols else [], is_int

    def _stream(self, h, q: _Query, is_int: List[bool]) -> Counter:
        df = h.to_pandas()
        bag: Counter = Counter()
        if df is None or len(df) == 0:
            return bag
        names = [c for c in df.columns if c != "__weight"]
        n = len(names) - q.plan.hidden
        for rec in df.astype(object).itertuples(index=False):
            row = [_pyval(v, is_int[j] if j < len(is_int) else False) for j, v in enumerate(rec[:n])]
            w = int(rec[len(names)])
            bag[tuple(slt.format_value(v, q.rec.types[j] if j < len(q.rec.types) else "T")
                      for j, v in enumerate(row))] += w
        return +bag

    def _check_view(self, p: Pipeline, q: _Query, h, oracle) -> Optional[Tuple[str, str, str]]:
        """None when the view is right; else (status, reason, detail).  oracle None: the file's answer."""
        rows, is_int = self._read(p, q)
        rows = [[_pyval(v, is_int[j]) for j, v in enumerate(r)] for r in rows]
        rec = q.rec
        phase = "after deletes" if oracle == "deleted" else ("after re-insert" if oracle == "reinserted" else "")
        if rows and len(rows[0]) != len(rec.types):
            return ("wrong", f"{len(rows[0])} columns, the record says {len(rec.types)}", "")
        stream = self._stream(h, q, is_int)
        if stream != _bag(rows, rec.types):
            return ("wrong", "integrated change stream differs from the view's contents" +
                    (f" ({phase})" if phase else ""), f"stream {sorted(stream.items())[:6]} view {sorted(_bag(rows, rec.types).items())[:6]}")
        if oracle is None:
            values = slt.format_rows(rows, rec.types, rec.sortmode)
            if slt.check_query(rec, values):
                return None
            if q.oracle_rows is not None and slt.format_rows(q.oracle_rows, rec.types, rec.sortmode) == values:
                return ("dialect", "same result as DuckDB, not the recorded one", f"got {values[:12]}")
            return ("wrong", "result differs from the recorded answer" +
                    (" and from DuckDB" if q.oracle_rows is not None else " (DuckDB failed: %s)" % q.oracle_error),
                    f"got {values[:12]} ({len(values)} values), expected {_values_text(rec)}")
        return None

    def _differential(self, p: Pipeline, queries: List[_Query], handlers, data, failed) -> None:
        """Delete a random third of each table's rows, then re-insert them; compare with DuckDB."""
        chosen = {}
        for t, (cols, rows) in data.items():
            if not rows:
                continue
            k = max(1, len(rows) // 3)
            chosen[t] = (cols, self.rng.sample(rows, k))
        for t, (cols, pick) in chosen.items():
            p.input_pandas(t, pd.DataFrame([r[1:] for r in pick], columns=cols[1:], dtype=object), delete=True)
        p.wait_for_idle(timeout_s=900)
        self.con.execute("BEGIN TRANSACTION")
        try:
            for t, (cols, pick) in chosen.items():
                ids = ",".join(str(r[0]) for r in pick)
                self.con.execute(f"DELETE FROM {t} WHERE rowid IN ({ids})")
            deleted = {}
            for q in queries:
                if q.name in failed or q.plan.has_limit:
                    continue
                try:
                    deleted[q.name] = self._run_oracle(q.plan.oracle_sql)
                except duckdb.Error:
                    pass
        finally:
            self.con.execute("ROLLBACK")
        self._compare_phase(p, queries, handlers, deleted, failed, "after deleting a third of the rows")
        for t, (cols, pick) in chosen.items():
            p.input_pandas(t, pd.DataFrame([r[1:] for r in pick], columns=cols[1:], dtype=object))
        p.wait_for_idle(timeout_s=900)
        again = {q.name: q.oracle_rows for q in queries
                 if q.name not in failed and not q.plan.has_limit and q.oracle_rows is not None}
        self._compare_phase(p, queries, handlers, again, failed, "after re-inserting them")
        self.result.differential_views += sum(1 for q in queries if q.name in again and q.name in deleted
                                              and q.name not in failed)

    def _compare_phase(self, p, queries, handlers, expected, failed, phase) -> None:
        for q in queries:
            if q.name in failed or q.name not in expected:
                continue
            rows, is_int = self._read(p, q)
            rows = [[_pyval(v, is_int[j]) for j, v in enumerate(r)] for r in rows]
            got = _bag(rows, q.rec.types)
            want = _bag(expected[q.name], q.rec.types)
            stream = self._stream(handlers[q.name], q, is_int)
            if stream != got:
                failed[q.name] = ("wrong", f"integrated change stream differs from the view's contents ({phase})",
                                  f"stream-view {sorted((stream - got).items())[:4]} view-stream {sorted((got - stream).items())[:4]}")
            elif got != want:
                failed[q.name] = ("wrong", f"differs from DuckDB {phase}",
                                  f"engine-duckdb {sorted((got - want).items())[:4]} duckdb-engine {sorted((want - got).items())[:4]}")


def _drop_names(tree: exp.Drop) -> List[str]:
    tables = tree.args.get("tables") or ([tree.this] if tree.this is not None else [])
    return [t.name.lower() for t in tables]


class _DropViews(Exception):
    def __init__(self, names, reason):
        super().__init__(reason)
        self.names = set(names)
        self.reason = reason


def run_file(path: str, spark=None, **kw) -> FileResult:
    return FileRunner(path, spark=spark, **kw).run()
