"""Run one fuzz program on the engine and check it against DuckDB after every step.

1. Views are classified one by one (``compile_program`` over the tables and the views kept so far, DuckDB's
   ``CREATE VIEW`` over the same): both accept -> kept; the engine rejects what DuckDB accepts -> "unsupported"
   (counted, not a failure); the engine accepts what DuckDB rejects -> failure ``accepts_invalid``; the
   compiler raising something outside the error hierarchy -> failure ``compiler_crash``.
2. The kept views run in one pipeline, every view listened to.  Each step's changes go through
   ``execute``, ``input_pandas`` (object or nullable dtypes), ``input_json`` or ``input_csv`` (every third step of
   several input calls in one ``Pipeline.transaction()``, in programs generated since transactions exist), and into the model (Python lists of rows).  After each step: the pipeline must not have failed, each table's contents must equal
   the model's, and every view (its change stream integrated, and for a materialized view an ad-hoc query) must
   equal DuckDB's recomputation over the model as bags with exact multiplicities (:func:`tests.support.oracle.diff`).
   Where DuckDB's recomputation fails at run time, the engine must have recorded a row error instead (for the
   view or one it reads), and the views reading a view with row errors are not compared (``_reads_errors``).
   A Spark step that fails and is re-run on the driver is a failure (``spark_fallback``).
"""
from __future__ import annotations

import contextlib

import json
import math
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import duckdb
import pandas as pd
import sqlglot
from sqlglot import exp

from tests.support.oracle import bag, bag_from_changes, diff

from sqlengine.udf import python_signatures

from . import udfs
from .program import Op, Program, View, category, decode, literal

FAILURES = ("accepts_invalid", "compiler_crash", "failed_pipeline", "input_rejected", "wrong_table", "wrong_view",
            "query_error", "row_error_not_recorded", "spark_fallback")


@dataclass
class Outcome:
    """What running one program gave: ``failure`` (a kind of :data:`FAILURES`) or None, and counts."""
    failure: Optional[str] = None
    detail: str = ""
    view: Optional[str] = None
    step: Optional[int] = None
    views_checked: int = 0
    unsupported: List[str] = field(default_factory=list)   # engine messages for views DuckDB accepts
    invalid: int = 0                                        # views both reject
    duck_runtime_errors: int = 0
    unrepresentable: int = 0                                # view checks left out: no Python form of a value
    rows_compared: int = 0                                  # expected rows over all view checks
    skipped_after_row_errors: int = 0                       # view checks left out (see _reads_errors)
    steps_run: int = 0
    steps_on_spark: int = 0                                 # engine steps (a step without changes runs none)
    steps_on_driver: int = 0

    def signature(self) -> Optional[str]:
        """The kind of failure, and for a wrong result which of extra, missing and negative-weight rows it has
        (what shrinking keeps, so that a reduction does not slide to another bug of the same kind)."""
        if self.failure in ("wrong_view", "wrong_table"):
            parts = [p for p in ("extra rows", "missing rows", "negative weights") if p in self.detail]
            return f"{self.failure}: {', '.join(parts)}"
        if self.failure in ("failed_pipeline", "spark_fallback", "input_rejected", "query_error"):
            names = re.findall(r"(\w+(?:Exception|Error)):", self.detail)   # the innermost one named last
            return f"{self.failure}: {names[-1] if names else ''}"
        return self.failure


class Model:
    """Table contents as lists of decoded rows; a delete removes one bitwise-equal copy."""

    def __init__(self, program: Program):
        self.program = program
        self.rows: Dict[str, List[tuple]] = {t.name: [] for t in program.tables}

    @staticmethod
    def key(row) -> tuple:
        # a MAP's entries in key order: the engine's map equality does not depend on the order of its keys
        return tuple(repr(sorted(v.items()) if isinstance(v, dict) else v) for v in row)

    def insert(self, table: str, rows) -> None:
        self.rows[table].extend(tuple(r) for r in rows)

    def delete(self, table: str, rows) -> None:
        for r in rows:
            k = self.key(r)
            for i, have in enumerate(self.rows[table]):
                if self.key(have) == k:
                    del self.rows[table][i]
                    break

    def duck(self, views: List[View] = ()) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET threads = 1")
        for t in self.program.tables:
            con.execute(t.ddl(engine=False))
            if self.rows[t.name]:
                ph = ", ".join("?" for _ in t.columns)
                maps = [j for j, (_, ty) in enumerate(t.columns) if category(ty) == "map"]
                rows = [list(r) for r in self.rows[t.name]]
                for r in rows:   # (DuckDB's Python MAP: its keys and values)
                    for j in maps:
                        if r[j] is not None:   # in key order (DuckDB's map equality depends on the order)
                            keys = sorted(r[j])
                            r[j] = {"key": keys, "value": [r[j][k] for k in keys]}
                con.executemany(f"INSERT INTO {t.name} VALUES ({ph})", rows)
        udfs.register(con)
        for f in self.program.functions:
            con.execute(f)
        for v in views:
            con.execute(f"CREATE VIEW {v.name} AS {oracle_sql(v.sql)}")
        return con

    def delete_where(self, table: str, where: str) -> int:
        """Remove the rows ``where`` selects (DuckDB decides); raises duckdb.Error as DuckDB does."""
        con = self.duck()
        try:
            gone = {r[0] for r in con.execute(f"SELECT rowid FROM {table} WHERE {where}").fetchall()}
        finally:
            con.close()
        self.rows[table] = [r for i, r in enumerate(self.rows[table]) if i not in gone]
        return len(gone)


def classify(program: Program, out: Outcome) -> List[View]:
    """The views both the engine and DuckDB accept (step 1 of the module docstring); sets ``out.failure``."""
    from planner.errors import EngineError
    from planner.program import compile_program
    con = Model(program).duck()
    kept: List[View] = []
    try:
        for v in program.views:
            try:
                con.execute(f"CREATE VIEW {v.name} AS {oracle_sql(v.sql)}")
                duck_ok, duck_err = True, ""
            except duckdb.Error as e:
                duck_ok, duck_err = False, str(e).splitlines()[0]
            try:
                compile_program(program.sql(kept + [v]), functions=python_signatures(udfs.UDFS))
                engine_ok, engine_err = True, ""
            except EngineError as e:
                engine_ok, engine_err = False, f"{type(e).__name__}: {str(e).splitlines()[0]}"
            except Exception as e:  # noqa: BLE001 - any other exception is the finding
                out.failure, out.view = "compiler_crash", v.name
                out.detail = f"{type(e).__name__}: {e}"
                return kept
            if duck_ok and engine_ok:
                kept.append(v)
            elif duck_ok:
                out.unsupported.append(engine_err[:200])
                con.execute(f"DROP VIEW {v.name}")
            elif engine_ok:
                out.failure, out.view = "accepts_invalid", v.name
                out.detail = f"DuckDB rejects the view: {duck_err}"
                return kept
            else:
                out.invalid += 1
    finally:
        con.close()
    return kept


def _frame(program: Program, table: str, rows, nullable: bool) -> pd.DataFrame:
    """``rows`` (decoded) as a DataFrame: object columns, or pandas' nullable dtypes where they hold the values."""
    cols = program.table(table).columns
    data = {}
    for j, (name, ty) in enumerate(cols):
        vals = [r[j] for r in rows]
        c = category(ty)
        s = pd.Series([_value(v, ty) for v in vals] if c == "json" else vals, dtype=object)
        if nullable:
            if c == "int":
                s = pd.Series(pd.array(vals, dtype="Int64" if ty == "BIGINT" else "Int32"))
            elif c == "boolean":
                s = pd.Series(pd.array(vals, dtype="boolean"))
            elif c == "varchar":
                s = pd.Series(pd.array(vals, dtype="string"))
            elif c in ("double", "real") and not any(v is None or math.isnan(v) for v in vals):
                # (in a float column NaN is pandas' missing value, NULL: README, "Input values")
                s = pd.Series(vals, dtype="float64" if c == "double" else "float32")
            elif c == "timestamp":
                s = pd.Series(pd.to_datetime(pd.Series(vals, dtype=object)).astype("datetime64[us]"))
        data[name] = s
    return pd.DataFrame(data, columns=[n for n, _ in cols])


def _value(v, ty: str):
    """A value as the JSON and pandas paths give it: a JSON column's value is what its text spells."""
    return json.loads(v) if v is not None and category(ty) == "json" else _json_value(v)


def _json_value(v):
    if v is None or isinstance(v, (bool, int, float, str, list, dict)):
        return v
    if hasattr(v, "isoformat"):
        return v.isoformat(sep=" ") if hasattr(v, "hour") else v.isoformat()
    return str(v)


def _csv(t, rows) -> str:
    """``rows`` as CSV text with a header; NULL is an empty field, text is quoted."""
    def field(v):
        if v is None:
            return ""
        if isinstance(v, str):
            return '"' + v.replace('"', '""') + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, dict)):   # (a nested value: its JSON)
            return '"' + json.dumps(v).replace('"', '""') + '"'
        return repr(v) if isinstance(v, float) else str(_json_value(v))
    lines = [",".join(n for n, _ in t.columns)] + [",".join(field(v) for v in r) for r in rows]
    return "\n".join(lines) + "\n"


def _values_sql(program: Program, table: str, rows) -> str:
    cols = program.table(table).columns
    out = []
    for i, r in enumerate(rows):
        vals = []
        for v, (_, ty) in zip(r, cols):
            # (a literal -0.0 is the DECIMAL 0.0 negated: 0.0)
            plain = i % 2 == 0 and isinstance(v, float) and math.isfinite(v) and category(ty) == "double" and \
                math.copysign(1.0, v) > 0
            vals.append(repr(v) if plain else literal(v, ty))
        out.append(f"({', '.join(vals)})")
    return f"INSERT INTO {table} VALUES {', '.join(out)}"


def apply_op(p, program: Program, model: Model, op: Op) -> None:
    """Send ``op`` to pipeline ``p`` and apply it to ``model``."""
    t = program.table(op.table)
    dec = lambda rows: [tuple(decode(v, ty) for v, (_, ty) in zip(r, t.columns)) for r in rows]  # noqa: E731
    rows, new = dec(op.rows), dec(op.new_rows)
    if op.kind == "delete_where":
        try:
            model_err = None
            snapshot = list(model.rows[op.table])
            model.delete_where(op.table, op.where)
        except duckdb.Error as e:
            model_err = e
            model.rows[op.table] = snapshot
        try:
            p.execute(f"DELETE FROM {op.table} WHERE {op.where}")
        except Exception:
            if model_err is None:
                raise
        return
    via = op.via
    if via == "csv" and any(v == "" for r in rows + new for v in r):   # an empty CSV field is NULL
        via = "json"
    if via == "execute" and op.kind == "insert":
        p.execute(_values_sql(program, op.table, rows))
    elif via == "json":
        names = [n for n, _ in t.columns]
        types = [ty for _, ty in t.columns]
        recs = [{"delete" if op.kind != "insert" else "insert": dict(zip(names, map(_value, r, types)))} for r in rows]
        recs += [{"insert": dict(zip(names, map(_value, r, types)))} for r in new]
        p.input_json(op.table, recs, update_format="insert_delete")
    elif via == "csv":
        p.input_csv(op.table, _csv(t, rows), delete=op.kind != "insert")
        if new:
            p.input_csv(op.table, _csv(t, new))
    else:
        nullable = via == "pandas_nullable"
        p.input_pandas(op.table, _frame(program, op.table, rows, nullable), delete=op.kind != "insert")
        if new:
            p.input_pandas(op.table, _frame(program, op.table, new, nullable))
    if op.kind == "insert":
        model.insert(op.table, rows)
    else:
        model.delete(op.table, rows)
        model.insert(op.table, new)


# MAP_AGG(k, v) in DuckDB: each distinct non-NULL key with the greatest of its values (NULL if all are), by key;
# NULL where no row has a key
MAP_AGG = ("CASE WHEN COUNT({k}) > 0 THEN list_transform(list_sort(list_distinct(LIST({k}))), lambda __k: "
           "ROW(__k, list_max(list_transform(list_filter(LIST(struct_pack(k := {k}, v := {v})), "
           "lambda __e: __e.k = __k), lambda __e: __e.v)))) END")


def oracle_sql(sql: str) -> str:
    """``sql`` as DuckDB is to compute what the engine does: ``ARG_MIN(a, b)`` (``ARG_MAX``, ``MIN_BY``,
    ``MAX_BY``) with ties in ``b`` broken by ``a``, ``ANY_VALUE(x)`` as ``MIN(x)`` and ``STRING_AGG`` ordered by
    its keys and then its text, ``ARRAY_AGG(DISTINCT x)`` ordered by ``x`` (where DuckDB's result depends on the
    order of the rows: ``planner.aggregate_functions``), ``EVERY`` as ``BOOL_AND`` (DuckDB has no EVERY), and
    ``MAP_AGG(k, v)`` (DuckDB has none) as the LIST of ``(key, greatest value)`` ROWs by key (:data:`MAP_AGG`:
    another way than the engine's to the same entries; a LIST of ROWs is what the engine's MAP reads as in Python).

    >>> oracle_sql("SELECT ARG_MAX(s, i), ANY_VALUE(s), EVERY(p) FROM t")
    'SELECT ARG_MAX(s, CASE WHEN NOT i IS NULL AND NOT s IS NULL THEN ROW(i, s) END), MIN(s), BOOL_AND(CAST(p AS BOOLEAN)) FROM t'
    """
    if not re.search(r"ARG_M|_BY\(|ANY_VALUE|EVERY|STRING_AGG|LISTAGG|MODE|PYCOUNTDISTINCT|PYRETRACTCOUNT|MAP_AGG|"
                     r"ARRAY_AGG\(DISTINCT", sql, re.IGNORECASE):
        return sql

    def one(n):
        if isinstance(n, (exp.ArgMin, exp.ArgMax)):
            a, b = n.this, n.expression
            key = exp.Anonymous(this="ROW", expressions=[b.copy(), a.copy()])
            cond = exp.and_(exp.not_(exp.Is(this=b.copy(), expression=exp.Null())),
                            exp.not_(exp.Is(this=a.copy(), expression=exp.Null())))
            return type(n)(this=a.copy(), expression=exp.Case(ifs=[exp.If(this=cond, true=key)]))
        if isinstance(n, exp.AnyValue):
            return exp.Min(this=n.this.copy())
        if isinstance(n, exp.IgnoreNulls) and isinstance(n.this, exp.AnyValue):
            return exp.Min(this=n.this.this.copy())
        if isinstance(n, exp.Mode) and n.this is not None:   # the least of the most frequent
            return exp.WithinGroup(this=exp.Mode(), expression=exp.Order(expressions=[exp.Ordered(this=n.this.copy())]))
        if isinstance(n, exp.Anonymous) and n.name.upper() == "EVERY":
            return exp.LogicalAnd(this=n.expressions[0].copy())
        if isinstance(n, exp.Anonymous) and n.name.upper() == "MAP_AGG" and len(n.expressions) == 2:
            k, v = (a.sql(dialect="duckdb") for a in n.expressions)
            return sqlglot.parse_one(MAP_AGG.format(k=k, v=v), read="duckdb")
        if isinstance(n, exp.ArrayAgg) and isinstance(n.this, exp.Distinct):   # in the values' order
            return exp.ArrayAgg(this=exp.Order(this=n.this.copy(), expressions=[
                exp.Ordered(this=n.this.expressions[0].copy(), nulls_first=False)]))
        if isinstance(n, exp.Anonymous) and n.name.upper() in ("PYCOUNTDISTINCT", "PYRETRACTCOUNT"):   # (udfs.py)
            return exp.Count(this=exp.Distinct(expressions=[n.expressions[0].copy()]))
        if isinstance(n, exp.GroupConcat):   # in the keys' order, then the text's
            text, keys = (n.this.this, list(n.this.expressions)) if isinstance(n.this, exp.Order) else (n.this, [])
            tie = [] if not list(text.find_all(exp.Column)) else [exp.Ordered(this=text.copy())]   # (no literal key)
            if not keys and not tie:
                return n
            order = exp.Order(this=text.copy(), expressions=[k.copy() for k in keys] + tie)
            return exp.GroupConcat(this=order, separator=(n.args.get("separator") or exp.Literal.string(",")).copy())
        return n
    try:
        return sqlglot.parse_one(sql, read="duckdb").transform(one).sql(dialect="duckdb")
    except sqlglot.errors.SqlglotError:   # (a view being shrunk may not parse: DuckDB says so)
        return sql


def filters_as_case(sql: str) -> str:
    """``sql`` with each ``AGG(x) FILTER (WHERE c)`` written ``AGG(CASE WHEN c THEN x END)``: DuckDB evaluates an
    aggregate's argument on the rows its FILTER drops (an overflow there fails the query), the engine does not.

    >>> filters_as_case("SELECT SUM(x) FILTER (WHERE b) AS s FROM t")
    'SELECT SUM(CASE WHEN b THEN x END) AS s FROM t'
    """
    tree = sqlglot.parse_one(sql, read="duckdb")
    for f in list(tree.find_all(exp.Filter)):
        agg, cond = f.this, f.expression.this
        arg = agg.this
        inner = arg.expressions[0] if isinstance(arg, exp.Distinct) else arg
        value = exp.Literal.number(1) if isinstance(inner, exp.Star) else inner
        case = exp.Case(ifs=[exp.If(this=cond.copy(), true=value.copy())])
        if isinstance(arg, exp.Distinct):
            arg.set("expressions", [case])
        else:
            agg.set("this", case)
        f.replace(agg)
    return tree.sql(dialect="duckdb")


def fetch_rows(con, name: str) -> list:
    """The rows of relation ``name`` in DuckDB, an INTERVAL as DuckDB's text of it (the engine's form of one)."""
    cols = con.execute(f"DESCRIBE SELECT * FROM {name}").fetchall()
    picks = ['"' + c.replace('"', '""') + '"' for c, *_ in cols]
    picks = [f"CAST({q} AS VARCHAR)" if t == "INTERVAL" else q for q, (_, t, *_) in zip(picks, cols)]
    return con.execute(f"SELECT {', '.join(picks)} FROM {name}").fetchall()


def _expected_without_filter_errors(model: "Model", views: List[View], name: str):
    """DuckDB's result for view ``name`` with FILTERs written as CASE (:func:`filters_as_case`), and, where that
    still fails, with DuckDB's optimizer off; raises as DuckDB.  The optimizer may evaluate an expression on rows
    that never reach it: a filter pushed below a join is evaluated on rows the join drops (a CAST that overflows
    in the WHERE over ``v CROSS JOIN t`` fails on t's rows while v is empty); evaluated as written, it is not."""
    con = model.duck([View(v.name, filters_as_case(v.sql), v.materialized) for v in views])
    try:
        try:
            return bag(fetch_rows(con, name))
        except duckdb.Error:
            con.execute("PRAGMA disable_optimizer")
            return bag(fetch_rows(con, name))
    finally:
        con.close()


def _reads_errors(views: List[View], erred: set) -> set:
    """The views that hold, or read (through other views), a view with row errors on record.  Their rows can
    differ from DuckDB's: a row whose expression fails leaves the view, also where DuckDB never evaluates the
    expression (a column that a later view does not use)."""
    out = set(erred)
    for v in views:   # in definition order: a view reads only earlier ones
        if any(re.search(rf"\b{w}\b", v.sql) for w in out):
            out.add(v.name)
    return out


def run(program: Program, spark=None, timeout_s: float = 60.0) -> Outcome:
    """Run ``program`` on the engine (``spark``: a session to run every step on; None: every step on the
    driver, Spark not started) and check it (module docstring)."""
    from planner.errors import InputError
    from sqlengine import Pipeline, RuntimeConfig
    out = Outcome()
    views = classify(program, out)
    if out.failure:
        return out
    kept = Program(program.tables, views, program.steps, program.seed, program.functions, program.transactions)
    storage = tempfile.mkdtemp(prefix="fuzz")
    p = None
    try:
        kw = {"spark": spark, "runtime_config": RuntimeConfig(placement={"local_step_rows": 0})} if spark is not None \
            else {"spark_conf": {"sqlengine.spark.start": "lazy"}}
        try:
            p = Pipeline.from_sql(kept.sql(), storage_dir=storage, udfs=udfs.UDFS, **kw)
            handlers = {v.name: p.listen(v.name) for v in views}
            p.start()
        except Exception as e:  # noqa: BLE001 - compiled, so any failure here is the finding
            out.failure, out.detail = "failed_pipeline", f"start: {type(e).__name__}: {str(e)[:500]}"
            return out
        model = Model(program)
        for si, step in enumerate(program.steps):
            out.step = si
            # every third step of several input calls (no execute()) in one Pipeline.transaction()
            together = program.transactions and len(step) > 1 and ((program.seed or 0) + si) % 3 == 0 and \
                all(op.via != "execute" and op.kind != "delete_where" for op in step)
            with (p.transaction() if together else contextlib.nullcontext()):
                for op in step:
                    try:
                        apply_op(p, program, model, op)
                    except InputError as e:
                        out.failure, out.detail = "input_rejected", f"{op.kind} via {op.via}: {str(e)[:500]}"
                        return out
                    except Exception as e:  # noqa: BLE001
                        out.failure = "failed_pipeline"
                        out.detail = f"{op.kind} via {op.via}: {type(e).__name__}: {str(e)[:500]}"
                        return out
            try:
                p.wait_for_idle(timeout_s=timeout_s)
            except Exception as e:  # noqa: BLE001
                out.failure, out.detail = "failed_pipeline", f"{type(e).__name__}: {str(e)[:500]}"
                return out
            out.steps_run += 1
            if check_step(p, kept, views, model, handlers, out):
                return out
            if spark is not None and p.engine.stats.spark_fallbacks:   # a Spark step failed and was re-run on the driver
                out.failure, out.detail = "spark_fallback", str(p.engine.stats.last_spark_error)[:500]
                return out
        out.step = None
        return out
    finally:
        if p is not None and p.engine is not None:
            out.steps_on_spark, out.steps_on_driver = p.engine.stats.steps_spark, p.engine.stats.steps_local
        if p is not None:
            try:
                p.stop(force=True)
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(storage, ignore_errors=True)


def check_step(p, program: Program, views: List[View], model: Model, handlers, out: Outcome) -> bool:
    """Check tables and views after one step; True (and ``out.failure`` set) on the first failure."""
    st = p.status()
    if st["error"]:
        out.failure, out.detail = "failed_pipeline", st["error"][:500]
        return True
    for t in program.tables:
        if p.program.circuit.stream(t.name):   # an append-only table nothing reads
            continue
        got = bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {t.name}"))
        want = bag(model.rows[t.name])
        problem = diff(got, want)
        if problem:
            out.failure, out.view, out.detail = "wrong_table", t.name, problem
            return True
    erred = _reads_errors(views, set(st["errors"]))
    con = model.duck(views)
    try:
        for v in views:
            try:
                want = bag(fetch_rows(con, v.name))
            except (ValueError, OverflowError):   # DuckDB's value has no Python form (a year after 9999)
                out.unrepresentable += 1
                continue
            except duckdb.Error as e:
                if v.name in erred:
                    out.duck_runtime_errors += 1
                    continue
                if "More than one row returned by a subquery" in str(e) and \
                        not bag_from_changes(handlers[v.name].to_pandas()):
                    # DuckDB fails the query even where no row reads the subquery (an empty outer table); the
                    # engine fails each row that reads it, and here none did
                    out.duck_runtime_errors += 1
                    continue
                try:
                    want = _expected_without_filter_errors(model, views, v.name)
                except (duckdb.Error, sqlglot.errors.SqlglotError):
                    out.duck_runtime_errors += 1
                    out.failure, out.view = "row_error_not_recorded", v.name
                    out.detail = (f"DuckDB: {str(e).splitlines()[0]}; the engine recorded no row error for the view "
                                  f"or the views it reads")
                    return True
            if v.name in erred:
                out.skipped_after_row_errors += 1
                continue
            out.views_checked += 1
            out.rows_compared += sum(want.values())
            problem = diff(bag_from_changes(handlers[v.name].to_pandas()), want)
            if problem:
                out.failure, out.view, out.detail = "wrong_view", v.name, f"change stream: {problem}"
                return True
            if v.materialized:
                try:
                    got = bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {v.name}"))
                except Exception as e:  # noqa: BLE001
                    out.failure, out.view, out.detail = "query_error", v.name, f"{type(e).__name__}: {str(e)[:300]}"
                    return True
                problem = diff(got, want)
                if problem:
                    out.failure, out.view, out.detail = "wrong_view", v.name, f"query: {problem}"
                    return True
    finally:
        con.close()
    return False

