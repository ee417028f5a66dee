"""COUNT, SUM and AVG over DISTINCT values, counted through a DISTINCT (``planner.rules.distinct_aggregates``): each
view against DuckDB after every step of random inserts and deletes (NULLs and duplicate rows included), on both
executors; the aggregate accumulates and nothing reads a group's rows; a restart keeps the sets.
"""
from decimal import Decimal

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

import sqlengine

from ..support.differential import maybe, run_program, runs_on, statements_against_duckdb, steps_strategy

SCHEMA = ("CREATE TABLE t (g INT, s VARCHAR, x BIGINT, d DECIMAL(6, 2), y DOUBLE);"
          "CREATE TABLE u (s VARCHAR, w INT);")
COLUMNS = {"t": ["g", "s", "x", "d", "y"], "u": ["s", "w"]}
TABLES = {
    "t": st.tuples(maybe(range(3)), maybe(["a", "b", ""]), maybe(range(-2, 3)), maybe([Decimal("1.50"), Decimal("-0.25"), Decimal("0.00")]),
                   maybe([0.5, -1.0, 2.25])),
    "u": st.tuples(maybe(["a", "b"]), maybe(range(3))),
}
VIEWS = [
    # Nexmark q15's shape: COUNT(*) and COUNT(DISTINCT) with and without FILTER, two columns
    ("d_q15", "SELECT g, COUNT(*) AS n, COUNT(*) FILTER (WHERE x > 0) AS pos, COUNT(DISTINCT s) AS ds, "
              "COUNT(DISTINCT s) FILTER (WHERE x > 0) AS dsp, COUNT(DISTINCT x) AS dx, "
              "COUNT(DISTINCT x) FILTER (WHERE s <> 'a') AS dxa FROM t GROUP BY g", True),
    # SUM and AVG over DISTINCT values (sharing a set), beside a SUM and an AVG of the rows
    ("d_sums", "SELECT s, SUM(DISTINCT x) AS sx, AVG(DISTINCT x) AS ax, SUM(DISTINCT d) AS sd, SUM(x) AS tx, "
               "AVG(d) AS ad, COUNT(d) AS nd FROM t GROUP BY s", False),
    # global: one row over no rows (0 and NULL), HAVING over a distinct count
    ("d_global", "SELECT COUNT(DISTINCT g) AS dg, SUM(DISTINCT g) AS sg, COUNT(*) AS n FROM t", True),
    ("d_having", "SELECT g FROM t GROUP BY g HAVING COUNT(DISTINCT s) > 1", False),
    # over a join, two keys, an expression as the value
    ("d_join", "SELECT t.g, u.w, COUNT(DISTINCT t.x + u.w) AS dv, COUNT(*) AS n FROM t JOIN u ON t.s = u.s "
               "GROUP BY t.g, u.w", True),
]


def test_the_aggregates_accumulate(make_pipeline):
    """Each view's aggregate accumulates (its distinct values come through a DISTINCT op) and no op reads the
    rows of a group: the only integral read is the DISTINCT's, by the change's (group, value) rows."""
    p = make_pipeline(SCHEMA + "".join(f"CREATE VIEW {n} AS {q};" for n, q, *_ in VIEWS))
    ops = p.program.circuit.ops
    aggregates = [o for o in ops if o.kind == "aggregate"]
    assert len(aggregates) == len(VIEWS) and all(o.mode == "accumulate" for o in aggregates)
    readers = {o.kind for o in ops if o.reads and o.kind != "integrate"}   # (derived integrals read through)
    assert readers == {"distinct", "join"}, readers


@given(steps_strategy(TABLES, max_steps=4))
def test_distinct_aggregates_against_duckdb(make_pipeline, executor, steps):
    if runs_on(executor, "distinct_aggregates", examples=1):   # (one example on Spark: CI time)
        run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)


def test_a_value_leaves_the_set_with_its_last_row(make_pipeline, executor):
    """Duplicates of a value: the count drops only when the last row holding it goes; a NULL never counts."""
    statements_against_duckdb(make_pipeline, "CREATE TABLE t (g INT, x INT);", {
        "v": "SELECT g, COUNT(DISTINCT x) AS d, SUM(DISTINCT x) AS s, COUNT(*) AS n FROM t GROUP BY g"}, [
        "INSERT INTO t VALUES (1, 5), (1, 5), (1, 7), (1, NULL), (2, NULL)",
        "DELETE FROM t WHERE x = 5 AND g = 1",       # both rows of 5 go
        "INSERT INTO t VALUES (1, 7), (2, 3)",
        "DELETE FROM t WHERE x = 7",
        "DELETE FROM t WHERE x IS NULL",
    ], executor)


def test_the_sets_survive_a_restart(tmp_path):
    sql = "CREATE TABLE t (g INT, x INT); CREATE MATERIALIZED VIEW v AS SELECT g, COUNT(DISTINCT x) AS d FROM t GROUP BY g;"
    store = str(tmp_path / "s")
    conf = {"sqlengine.spark.start": "lazy"}
    p = sqlengine.Pipeline.from_sql(sql, storage_dir=store, spark_conf=conf)
    p.start()
    p.input_pandas("t", pd.DataFrame({"g": [1, 1, 1, 2], "x": [1, 1, 2, 9]}))
    p.wait_for_idle()
    p.stop()
    q = sqlengine.Pipeline.from_sql(sql, storage_dir=store, spark_conf=conf)
    q.start()
    q.execute("DELETE FROM t WHERE x = 2")
    q.execute("INSERT INTO t VALUES (2, 9), (2, 8)")
    q.wait_for_idle()
    assert sorted(tuple(r.values()) for r in q.query("SELECT * FROM v")) == [(1, 1), (2, 2)]
    q.input_pandas("t", pd.DataFrame({"g": [1], "x": [1]}), delete=True)   # one of the two rows of 1: still in the set
    q.wait_for_idle()
    assert sorted(tuple(r.values()) for r in q.query("SELECT * FROM v")) == [(1, 1), (2, 2)]
    q.stop()
