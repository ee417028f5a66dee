"""INTERVAL columns: tables and views hold intervals (DuckDB's text of each on the data plane), compared with
DuckDB after every step on both executors; the positions where DuckDB compares intervals by their normalized
value (keys, orders, aggregates) are rejected at compile time."""
from __future__ import annotations

import datetime as dt
import re
import random

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from sqlengine import Pipeline
from sqlengine.errors import UnsupportedError
from sqlengine.intervals import interval_texts
from tests.support.differential import bag, delete_some, diff

SCHEMA = ("CREATE TABLE e (id INT, a TIMESTAMP, b TIMESTAMP, d INTERVAL);\n"
          "CREATE TABLE r (id INT, w INTERVAL NOT NULL);\n")
VIEWS = {
    "gaps": "SELECT id, b - a AS gap, d, a + d AS later, d > INTERVAL '1 hour' AS long, -d AS back, d * 2 AS twice, "
            "EXTRACT(DAY FROM d) AS days, d + INTERVAL '1 month' AS plus FROM e",
    "long_ones": "SELECT id, d FROM e WHERE d >= INTERVAL '1 day' OR d < INTERVAL '0 seconds'",
    "counted": "SELECT id % 2 AS k, COUNT(d) AS n, COUNT(*) AS m FROM e GROUP BY id % 2",
    "joined": "SELECT e.id, e.d, r.w, e.a + r.w AS due, COALESCE(e.d, r.w) AS either FROM e JOIN r ON e.id = r.id",
    "all_intervals": "SELECT d FROM e UNION ALL SELECT w FROM r",
    "spans": "SELECT id, CASE WHEN d IS NULL THEN b - a ELSE d END AS span FROM e WHERE id > 0",
    "literals": "SELECT id, a + INTERVAL '1 month ago' AS x, a + INTERVAL '-1 day 02:00:00' AS y, "
                "INTERVAL '1 day 2 hours' AS z FROM e WHERE a < TIMESTAMP '2024-02-29' + INTERVAL '1 day 2 hours'",
}
SPELLINGS = [None, "1 day", "24 hours", "1 month", "30 days", "-1 day 02:00:00", "00:00:00.000001", "2 years 3 months",
             "36:00:00", "1 month ago", dt.timedelta(days=2, seconds=7), dt.timedelta(microseconds=-5)]
STAMPS = [None, dt.datetime(2024, 1, 31), dt.datetime(2024, 2, 29, 12, 30), dt.datetime(1999, 12, 31, 23, 59, 59)]


def _row(rnd: random.Random):
    return [rnd.randrange(-1, 4), rnd.choice(STAMPS), rnd.choice(STAMPS), rnd.choice(SPELLINGS)]


def _literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v}'"
    if isinstance(v, dt.timedelta):
        return f"INTERVAL '{v.days} days {v.seconds} seconds {v.microseconds} microseconds'"
    return f"INTERVAL '{v}'" if isinstance(v, str) else str(v)


def _texts(t: pa.Table) -> list:
    """Rows of ``t`` with each interval column as DuckDB's text of it (the engine's form)."""
    cols = [interval_texts(c) if c.type == pa.month_day_nano_interval() else c for c in t.columns]
    return list(zip(*[c.to_pylist() for c in cols]))


def _expected(live_e, live_r, query: str):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(SCHEMA.replace("NOT NULL", ""))
    for row in live_e:   # (text through DuckDB's cast, a timedelta as DuckDB binds one: as the engine reads them)
        con.execute("INSERT INTO e VALUES (?, ?, ?, CAST(? AS INTERVAL))", row)
    for row in live_r:
        con.execute("INSERT INTO r VALUES (?, CAST(? AS INTERVAL))", row)
    got = con.sql(query).to_arrow_table()
    con.close()
    return bag(_texts(got))


def test_interval_columns_against_duckdb(make_pipeline, executor):
    rnd = random.Random(7)
    p = make_pipeline(SCHEMA + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in VIEWS.items()))
    live_e, live_r = [], []
    cols = ["id", "a", "b", "d"]
    for step in range(4 if executor == "driver" else 2):
        new = [_row(rnd) for _ in range(rnd.randrange(1, 7))]
        live_e += new
        via = step % 3
        if via == 0:
            p.input_pandas("e", pd.DataFrame(new, columns=cols, dtype=object))
        elif via == 1:
            p.input_json("e", [{c: (v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v)
                                for c, v in zip(cols, r)} for r in new if not isinstance(r[3], dt.timedelta)])
            live_e = [r for r in live_e if not (r in new and isinstance(r[3], dt.timedelta))]
        else:
            p.execute("INSERT INTO e VALUES " + ", ".join(f"({', '.join(_literal(v) for v in r)})" for r in new))
        ws = [[rnd.randrange(-1, 4), rnd.choice(SPELLINGS[1:])] for _ in range(rnd.randrange(0, 3))]
        if ws:
            live_r += ws
            p.input_pandas("r", pd.DataFrame(ws, columns=["id", "w"], dtype=object))
        if step:   # deleted with the same values (an interval's row is the text it was stored as)
            delete_some(p, "e", live_e, cols, rnd, 3)
        p.wait_for_idle()
        for name, q in VIEWS.items():
            problem = diff(bag(_texts(p.query_arrow(f"SELECT * FROM {name}"))), _expected(live_e, live_r, q))
            assert not problem, f"step {step}: view {name} differs from DuckDB: {problem}"
    assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error


def test_intervals_in_queries_outputs_and_after_a_restart(tmp_path):
    """Ad-hoc queries see INTERVAL columns as intervals (ordered and added as DuckDB does); callbacks and query
    results give DuckDB's text; the state survives a restart; a bad value is a row error naming the column."""
    sql = "CREATE TABLE t (id INT, d INTERVAL); CREATE MATERIALIZED VIEW v AS SELECT id, d, d * 3 AS d3 FROM t;"
    seen = []
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "s"))
    p.foreach_chunk("v", lambda chunk, _: seen.extend(chunk.to_pylist()), format="arrow")
    p.start()
    try:
        p.input_json("t", [{"id": 1, "d": "1 day"}, {"id": 2, "d": "36 hours"}, {"id": 3, "d": "2 months"}])
        p.wait_for_idle()
        assert [r["id"] for r in p.query("SELECT id FROM v ORDER BY d")] == [1, 2, 3]   # (by length, not text)
        assert [r["x"] for r in p.query("SELECT TIMESTAMP '2024-01-31' + d AS x FROM v ORDER BY id")] == [
            dt.datetime(2024, 2, 1), dt.datetime(2024, 2, 1, 12), dt.datetime(2024, 3, 31)]
        assert sorted(r["d3"] for r in p.query("SELECT d3 FROM v")) == ["108:00:00", "3 days", "6 months"]
        assert [r["x"] for r in p.query("SELECT d + INTERVAL '1 month ago' AS x FROM v WHERE id = 3")] == ["1 month"]
        assert sorted((r["id"], r["d"]) for r in seen) == [(1, "1 day"), (2, "36:00:00"), (3, "2 months")]
        with pytest.raises(Exception, match="not an INTERVAL"):
            p.input_json("t", [{"id": 4, "d": "soon"}])
    finally:
        p.stop()
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "s"))
    p.start()
    try:
        p.execute("INSERT INTO t VALUES (5, INTERVAL '90 minutes')")
        p.wait_for_idle()
        assert sorted((r["id"], r["d"]) for r in p.query("SELECT id, d FROM v")) == [
            (1, "1 day"), (2, "36:00:00"), (3, "2 months"), (5, "01:30:00")]
    finally:
        p.stop()


REJECTED = [
    ("SELECT d, COUNT(*) AS n FROM t GROUP BY d", "a GROUP BY key"),
    ("SELECT DISTINCT d FROM t", "DISTINCT"),
    ("SELECT d FROM t UNION SELECT d FROM t", "UNION"),
    ("SELECT MAX(d) AS m FROM t", "the argument of MAX"),
    ("SELECT a.id FROM t AS a JOIN t AS b ON a.d = b.d", "a join key"),
    ("SELECT id, ROW_NUMBER() OVER (PARTITION BY d ORDER BY id) AS n FROM t", "a PARTITION BY key"),
    ("SELECT id, RANK() OVER (ORDER BY d) AS n FROM t", "a window function's argument or ORDER BY"),
    ("SELECT id FROM t ORDER BY d LIMIT 2", "a window function's argument or ORDER BY"),
    ("SELECT COUNT(DISTINCT d) AS n FROM t", "COUNT(DISTINCT"),
    ("SELECT d FROM t INTERSECT SELECT d FROM t", "INTERSECT"),
]


@pytest.mark.parametrize("view, what", REJECTED)
def test_intervals_are_not_keys_orders_or_aggregated(view, what):
    with pytest.raises(UnsupportedError) as err:
        Pipeline.from_sql(f"CREATE TABLE t (id INT, d INTERVAL);\nCREATE VIEW v AS {view};")
    assert what in err.value.message and "is an INTERVAL" in err.value.message, err.value.message
    assert err.value.line == 2, err.value


@pytest.mark.parametrize("sql, found", [
    ("CREATE TABLE t (d MAP(INTERVAL, INT));", "column type MAP(INTERVAL, INT) is not supported"),
    ("CREATE TABLE t (a TIMESTAMP); CREATE VIEW v AS SELECT MAP {a - a: 1} AS m FROM t;", "a view cannot hold"),
    ("CREATE TABLE t (d INTERVAL[]); CREATE VIEW v AS SELECT DISTINCT d FROM t;", "is an INTERVAL"),
    ("CREATE FUNCTION f(x INTERVAL) RETURNS INT LANGUAGE PYTHON AS 'm:f'; CREATE TABLE t (a INT);",
     "cannot take or return an INTERVAL"),
    ("CREATE FUNCTION f(x INTERVAL[]) RETURNS INT LANGUAGE PYTHON AS 'm:f'; CREATE TABLE t (a INT);",
     "cannot take or return an INTERVAL"),
])
def test_maps_keyed_by_intervals_nested_keys_and_python_functions_are_rejected(sql, found):
    with pytest.raises(UnsupportedError, match=re.escape(found)):
        Pipeline.from_sql(sql)


def test_a_python_function_of_intervals_is_rejected_where_it_is_declared():
    import sqlengine
    from sqlengine.errors import BindError
    with pytest.raises(BindError, match="cannot take or return an INTERVAL"):
        sqlengine.udf("INTERVAL", ["INT"])(lambda x: x)


# ---------------------------------------------------------------------- INTERVALs inside ARRAYs, ROWs and MAPs
NESTED_SCHEMA = "CREATE TABLE n (id INT, a TIMESTAMP, ds INTERVAL[], r ROW(d INTERVAL, k INT), m MAP(VARCHAR, INTERVAL));"
DUCK_NESTED = "CREATE TABLE n (id INT, a TIMESTAMP, ds INTERVAL[], r STRUCT(d INTERVAL, k INT), m MAP(VARCHAR, INTERVAL))"
NESTED_VIEWS = {
    "parts": "SELECT id, ds, r, m, [r.d, r.d * 2] AS l, {'x': ds[1]} AS s, a + ds[1] AS t1, "
             "list_transform(ds, lambda x: x * 2) AS dbl, m['k'] AS mk, cardinality(ds) AS n FROM n",
    "unnested": "SELECT id, x, a - x AS before FROM n CROSS JOIN UNNEST(n.ds) AS q(x)",
    "picked": "SELECT id, r.d AS d FROM n WHERE r.d > INTERVAL '1 hour' OR ds[1] IS NULL",
}
NESTED_SPELLINGS = ["1 day", "24:00:00", "1 month", "-1 day 02:00:00", "00:00:00.000001", "1 month ago", None]


def _nested_row(rnd: random.Random):
    pick = lambda: rnd.choice(NESTED_SPELLINGS)  # noqa: E731
    return [rnd.randrange(4), rnd.choice(STAMPS),
            rnd.choice([None, [], [pick()], [pick(), pick(), None]]),
            rnd.choice([None, {"d": pick(), "k": rnd.randrange(3)}]),
            rnd.choice([None, {}, {"k": pick()}, {"k": pick(), "j": pick()}])]


def _plane(con, query: str) -> list:
    """DuckDB's rows of ``query`` with every INTERVAL, at any depth, as DuckDB's text of it (the engine's form)."""
    rel = con.sql(query)
    items = [f'CAST("{c}" AS {re.sub(r"INTERVAL", "VARCHAR", str(t))})' for c, t in zip(rel.columns, rel.types)]
    return list(zip(*[c.to_pylist() for c in rel.project(", ".join(items)).to_arrow_table().columns]))


def _frozen(v):
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(x)) for k, x in v.items()))
    if isinstance(v, list) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v):   # a MAP's pairs: the
        return tuple(sorted((k, _frozen(x)) for k, x in v))                            # engine sorts its keys
    if isinstance(v, list):
        return tuple(_frozen(x) for x in v)
    return v


def test_intervals_inside_nested_values_against_duckdb(make_pipeline, executor):
    """An INTERVAL may be an ARRAY's element, a ROW's field or a MAP's value: held as DuckDB's text of it at any
    depth, read as an INTERVAL inside expressions (list_transform, access, UNNEST), on both executors."""
    rnd = random.Random(11)
    p = make_pipeline(NESTED_SCHEMA + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in NESTED_VIEWS.items()))
    cols = ["id", "a", "ds", "r", "m"]
    live = []
    for step in range(3 if executor == "driver" else 2):
        new = [_nested_row(rnd) for _ in range(rnd.randrange(1, 6))]
        live += new
        if step % 2:
            p.input_json("n", [{c: (v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v) for c, v in zip(cols, r)}
                               for r in new])
        else:
            p.input_pandas("n", pd.DataFrame(new, columns=cols, dtype=object))
        if step:
            delete_some(p, "n", live, cols, rnd, 2)
        p.wait_for_idle()
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(DUCK_NESTED)
        if live:
            src = pa.table({"id": pa.array([r[0] for r in live], pa.int32()),   # noqa: F841 (read by DuckDB)
                            "a": pa.array([r[1] for r in live], pa.timestamp("us")),
                            "ds": pa.array([r[2] for r in live], pa.list_(pa.string())),
                            "r": pa.array([r[3] for r in live], pa.struct([("d", pa.string()), ("k", pa.int32())])),
                            "m": pa.array([None if r[4] is None else list(r[4].items()) for r in live],
                                          pa.map_(pa.string(), pa.string()))})
            con.execute("INSERT INTO n SELECT id, a, CAST(ds AS INTERVAL[]), CAST(r AS STRUCT(d INTERVAL, k INT)), "
                        "CAST(m AS MAP(VARCHAR, INTERVAL)) FROM src")
        for name, q in NESTED_VIEWS.items():
            want = bag([_frozen(list(r)) for r in _plane(con, q)])
            got = bag([_frozen(list(r.values())) for r in p.query_arrow(f"SELECT * FROM {name}").to_pylist()])
            problem = diff(got, want)
            assert not problem, f"step {step}: view {name} differs from DuckDB: {problem}"
        con.close()
    assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error


def test_rows_whose_fields_are_named_by_keywords_hold_intervals(make_pipeline):
    """A ROW's fields named ``select`` and ``interval`` (SQL keywords): the types' SQL quotes them, so the view,
    and an ad-hoc query that gives the INTERVAL field as text, work."""
    p = make_pipeline('CREATE TABLE t (r ROW("select" INT, "interval" INTERVAL, v VARCHAR));'
                      'CREATE MATERIALIZED VIEW v AS SELECT r."select" AS s, r AS whole FROM t')
    p.input_json("t", [{"r": {"select": 1, "interval": "36:00:00", "v": "x"}}, {"r": None}])
    p.wait_for_idle()
    assert sorted(map(repr, p.query("SELECT * FROM v"))) == sorted(map(repr, [
        {"s": 1, "whole": {"select": 1, "interval": "36:00:00", "v": "x"}}, {"s": None, "whole": None}]))
    assert [r["i"] for r in p.query('SELECT r."interval" + INTERVAL 1 DAY AS i FROM t WHERE r IS NOT NULL')] == \
        ["1 day 36:00:00"]
