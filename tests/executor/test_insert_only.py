"""Operators over rows that are only inserted (append-only tables, ``planner.circuit.insert_only``): MIN and MAX
kept as running extremes per group (accumulate mode), and DISTINCT keeping only the rows it emitted
(``mode="grow"``).  Each view against DuckDB after every step of random inserts, on both executors, the state
surviving a restart; over a table that takes deletes they keep their general forms.
"""
import datetime as dt
from decimal import Decimal

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

import sqlengine

from ..support.differential import maybe, run_program, runs_on, steps_strategy

SCHEMA = ("CREATE TABLE t (g INT, s VARCHAR, x BIGINT, d DECIMAL(6, 2), day DATE, y DOUBLE) "
          "WITH ('append_only' = 'true', 'materialized' = 'true');"
          "CREATE TABLE u (s VARCHAR, w INT) WITH ('append_only' = 'true', 'materialized' = 'true');")
COLUMNS = {"t": ["g", "s", "x", "d", "day", "y"], "u": ["s", "w"]}
TABLES = {
    "t": st.tuples(maybe(range(3)), maybe(["a", "b", "", "ab"]), maybe(range(-3, 4)),
                   maybe([Decimal("1.50"), Decimal("-0.25"), Decimal("0.00")]),
                   maybe([dt.date(2026, 1, 1), dt.date(1999, 12, 31)]), maybe([0.5, -1.0])),
    "u": st.tuples(maybe(["a", "b"]), maybe(range(3))),
}
VIEWS = [
    ("e_group", "SELECT g, MIN(x) AS lo, MAX(x) AS hi, MIN(s) AS ls, MAX(d) AS hd, MAX(day) AS last_day, "
                "COUNT(*) AS n, SUM(x) AS sx FROM t GROUP BY g", True),
    ("e_global", "SELECT MIN(d) AS ld, MAX(s) AS hs, COUNT(x) AS nx FROM t", True),
    ("e_filter", "SELECT s, MAX(x) FILTER (WHERE g > 0) AS hx, MIN(x) AS lx FROM t GROUP BY s HAVING MAX(x) > 0",
     False),
    # Nexmark q16's shape: a MAX beside counts over DISTINCT values
    ("e_q16", "SELECT g, MAX(s) AS hs, COUNT(*) AS n, COUNT(DISTINCT x) AS dx, "
              "COUNT(DISTINCT x) FILTER (WHERE d > 0) AS dxp FROM t GROUP BY g", True),
    ("e_join", "SELECT u.w, MAX(t.x) AS hx, MIN(t.day) AS fd FROM t JOIN u ON t.s = u.s GROUP BY u.w", False),
    # DISTINCT over duplicates and NULLs, and over a join
    ("e_distinct", "SELECT DISTINCT g, s, d, day FROM t", True),
    ("e_distinct_join", "SELECT DISTINCT u.w, t.g FROM t JOIN u ON t.s = u.s", False),
]


def inserts(steps):
    """The steps with their inserts only (the tables are append-only)."""
    out = [[op for op in step if op[1] == "insert"] for step in steps]
    return [s for s in out if s]


def test_the_extremes_accumulate(make_pipeline):
    p = make_pipeline(SCHEMA + "".join(f"CREATE VIEW {n} AS {q};" for n, q, *_ in VIEWS) +
                      "CREATE TABLE r (g INT, x INT); CREATE VIEW over_deletes AS SELECT g, MAX(x) AS m FROM r GROUP BY g;"
                      "CREATE VIEW of_floats AS SELECT g, MAX(y) AS m FROM t GROUP BY g;")
    modes = {}
    for name in [v[0] for v in VIEWS] + ["over_deletes", "of_floats"]:
        modes[name] = sorted({line.split("mode=")[1].split(")")[0].split(";")[0]
                              for line in p.explain(name).splitlines() if " aggregate " in line and "mode=" in line})
    aggregates = [v[0] for v in VIEWS if "distinct" not in v[0]]
    assert modes == {**{v: ["accumulate"] for v in aggregates}, "e_distinct": [], "e_distinct_join": [],
                     "over_deletes": ["recompute"], "of_floats": ["recompute"]}, modes
    distincts = [op for op in p.program.circuit.ops if op.kind == "distinct"]
    assert distincts and all(op.mode == "grow" for op in distincts)


@given(steps_strategy(TABLES, max_steps=4).map(inserts).filter(bool))
def test_running_extremes_against_duckdb(make_pipeline, executor, steps):
    if runs_on(executor, "running_extremes", examples=1):   # (one example on Spark: CI time)
        run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)


def test_the_extremes_survive_a_restart_and_merges(tmp_path):
    sql = ("CREATE TABLE t (g INT, x INT, s VARCHAR) WITH ('append_only' = 'true', 'materialized' = 'true');"
           "CREATE MATERIALIZED VIEW v AS SELECT g, MIN(x) AS lo, MAX(s) AS hs FROM t GROUP BY g;")
    store = str(tmp_path / "s")
    conf = {"sqlengine.spark.start": "lazy"}
    p = sqlengine.Pipeline.from_sql(sql, storage_dir=store, spark_conf=conf)
    p.start()
    for i in range(12):   # runs enough to be merged
        p.input_pandas("t", pd.DataFrame({"g": [i % 2], "x": [10 - i], "s": [f"s{i:02d}"]}))
        p.wait_for_idle()
    p.stop()
    q = sqlengine.Pipeline.from_sql(sql, storage_dir=store, spark_conf=conf)
    q.start()
    q.execute("INSERT INTO t VALUES (0, 5, 'a'), (2, 7, NULL)")
    q.wait_for_idle()
    assert sorted(tuple(r.values()) for r in q.query("SELECT * FROM v")) == \
        [(0, 0, "s10"), (1, -1, "s11"), (2, 7, None)]
    q.stop()


def test_steps_run_where_placed(make_pipeline, executor):
    """With every step on Spark, the running extremes are added and merged there: no step falls back."""
    from ..support.differential import statements_against_duckdb
    statements_against_duckdb(make_pipeline, SCHEMA, {
        "v": "SELECT g, MIN(x) AS lo, MAX(s) AS hs, MAX(day) AS d, COUNT(DISTINCT x) AS dx FROM t GROUP BY g",
        "w": "SELECT MAX(d) AS hd, MIN(s) AS ls FROM t"}, [
        "INSERT INTO t VALUES (1, 'b', 3, 1.50, DATE '2026-01-02', 0.5), (1, NULL, NULL, NULL, NULL, NULL)",
        "INSERT INTO t VALUES (1, 'c', -3, -0.25, DATE '2025-01-02', 0.5), (2, 'a', 7, 0.00, NULL, NULL)",
        "INSERT INTO t VALUES (NULL, 'z', 0, 9.99, DATE '2030-01-01', 1.0)",
    ], executor)
