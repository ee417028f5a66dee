"""Expressions over nested and JSON values on Spark, evaluated by DuckDB: an Arrow UDF per expression.

The planner marks each expression that reads or makes ARRAY, MAP, ROW or JSON values (or that only DuckDB
types: ``json_valid``, ``list_transform`` with a lambda, ...) as ``__duckdb(CAST(e AS T))``
(``planner.nested_types.mark_duckdb``; ``__duckdb`` is a macro that gives its argument).  Spark has no faithful translation of most of them (its ``size`` of
NULL, its 0-based ``element_at``, its JSON functions), so :func:`extract` replaces each marked expression by a
call of a UDF named after it, over the columns it reads, which evaluates the expression with DuckDB on each
Arrow batch (:func:`evaluator`) and returns type ``T``: the same meaning on both executors, by construction.

The functions that run on executors use only pyarrow, duckdb, the standard library and string constants,
and Spark pickles this module by value (:func:`register`), so a cluster's executors need not import the
engine.

>>> from sqlglot import parse_one
>>> tree = parse_one("SELECT __duckdb(CAST(len(D.c1) + 1 AS BIGINT)) AS c0 FROM D", read="duckdb")
>>> out, found = extract(tree)
>>> out.sql("duckdb").lower().startswith("select __duck_"), list(found.values())[0][:2]
(True, ('LENGTH(a0) + 1', 1))
>>> import pyarrow as pa
>>> evaluator("LENGTH(a0) + 1", pa.int64())(pa.array([[1, 2], None, []])).to_pylist()
[3, None, 1]
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from typing import Dict, Tuple

import pyarrow as pa
from sqlglot import exp

from planner.nested_types import CANONICAL_JSON, MARK_MACRO, marked   # (values: pickled with the functions)

_CONNECTIONS: Dict[int, object] = {}   # thread id -> its DuckDB connection (in each Python worker)


def extract(tree: exp.Expression) -> Tuple[exp.Expression, Dict[str, Tuple[str, int, str]]]:
    """``tree`` with each marked expression a UDF call over its columns, and the UDFs: name -> (DuckDB SQL of
    the expression over ``a0, a1, ...``, number of arguments, DuckDB name of the result type)."""
    found: Dict[str, Tuple[str, int, str]] = {}

    def one(n: exp.Expression):
        if not marked(n) or any(isinstance(x, (exp.AggFunc, exp.Window, exp.Select)) for x in n.walk()):
            return n
        cols, seen = [], {}
        body = n.expressions[0].this.copy()
        if isinstance(body, exp.Column):   # (replace() cannot replace the root)
            body = exp.Paren(this=body)
        for c in list(body.find_all(exp.Column)):
            key = c.sql(dialect="duckdb")
            if key not in seen:
                seen[key] = len(cols)
                cols.append(c.copy())
            c.replace(exp.column(f"a{seen[key]}"))
        sql = body.sql(dialect="duckdb")
        type_sql = n.expressions[0].to.sql(dialect="duckdb")
        if re.search(r"\b(TEXT|VARCHAR)\b", type_sql):   # text as DuckDB writes it (an INTERVAL's, also inside a
            sql = f"CAST({sql} AS {type_sql})"             # nested value: Arrow casts no interval to text)
        name = "__duck_" + hashlib.sha1(f"{sql}\x00{type_sql}".encode()).hexdigest()[:16]
        found[name] = (sql, len(cols), type_sql)
        return exp.Anonymous(this=name, expressions=cols or [exp.Literal.number(0)])   # (a constant: one argument)

    return tree.transform(one), found


def _json_text(v):
    return None if v is None else json.dumps(json.loads(v), sort_keys=True, separators=(",", ":"),
                                             ensure_ascii=False, allow_nan=False)


def _connection():
    con = _CONNECTIONS.get(threading.get_ident())
    if con is None:
        import duckdb
        from duckdb.func import ARROW
        con = duckdb.connect(":memory:")
        con.execute(MARK_MACRO)   # (marks left inside an expression)

        def canonical(a):
            a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
            a = a.storage if isinstance(a.type, pa.ExtensionType) else a
            return pa.array([_json_text(v) for v in a.cast(pa.string()).to_pylist()],
                            pa.string()).cast(pa.json_(pa.string()))
        con.create_function(CANONICAL_JSON, canonical, ["JSON"], "JSON", type=ARROW, side_effects=False,
                            exception_handling=duckdb.PythonExceptionHandling.DEFAULT)
        _CONNECTIONS[threading.get_ident()] = con
    return con


def _plain(a):
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if pa.types.is_large_string(a.type) or pa.types.is_string_view(a.type):
        return a.cast(pa.string())
    if pa.types.is_time(a.type) and a.type.unit != "us":   # Spark hands TIME as nanoseconds (DuckDB's TIME_NS)
        return a.cast(pa.time64("us"))
    if pa.types.is_timestamp(a.type) and (a.type.unit != "us" or a.type.tz is not None):
        return a.cast(pa.timestamp("us"))
    return a


def evaluator(sql: str, want: pa.DataType):
    """A function of Arrow arrays ``a0, a1, ...`` that evaluates ``sql`` over them with DuckDB, its result cast
    to ``want``.  DuckDB's errors are raised (a row error, as on the driver)."""
    def call(*arrays):
        con = _connection()
        n = len(arrays[0]) if arrays else 1
        t = pa.table({f"a{i}": _plain(a) for i, a in enumerate(arrays)}) if arrays else \
            pa.table({"__one": pa.nulls(1, pa.int8())})
        con.register("__t", t)
        try:
            out = con.sql(f"SELECT {sql} AS r FROM __t").to_arrow_table().column(0)
        finally:
            con.unregister("__t")
        out = _plain(out)
        if isinstance(out.type, pa.ExtensionType):
            out = out.storage
        if len(out) != n:
            raise ValueError(f"{len(out)} results for {n} rows")
        return out.cast(want) if out.type != want else out
    return call


_REGISTERED: Dict[int, set] = {}


def register(spark, udfs: Dict[str, Tuple[str, int, str]], arrow_of) -> None:
    """Register the UDFs of :func:`extract` on ``spark`` (once per session and name); ``arrow_of``: DuckDB type
    name -> the data plane's Arrow type."""
    todo = {k: v for k, v in udfs.items() if k not in _REGISTERED.setdefault(id(spark), set())}
    if not todo:
        return
    import warnings

    from pyspark import cloudpickle
    from pyspark.sql.functions import ArrowUDFType, arrow_udf
    from pyspark.sql.pandas.types import from_arrow_type
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for name, (sql, _, type_sql) in todo.items():
        want = arrow_of(type_sql)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            made = arrow_udf(evaluator(sql, want), from_arrow_type(want, prefer_timestamp_ntz=True),
                             ArrowUDFType.SCALAR)
        spark.udf.register(name, made)
        _REGISTERED[id(spark)].add(name)
