"""-0.0 and 0.0: equal in SQL, different values.

They group, join and compare as one (``GROUP BY x`` makes one group of them), but ``1/x`` and ``CAST(x AS
VARCHAR)`` tell them apart, so a table that holds both holds two different rows, as in DuckDB.  Z-set
consolidation keeps a row's sign of zero (``sqlengine.zset.with_zero_signs``) on Arrow, in DuckDB's and in
Spark's GROUP BY (both make -0.0 0.0); before, the two zeros of fuzz seed 4055 were merged into two copies of one.
Each step's statements run on the engine and on DuckDB; every view is compared with DuckDB's recomputation as a
bag with exact multiplicities (the columns ``1/x`` and the text of ``x`` carry the sign).
"""
import duckdb
import pandas as pd

from ..support.oracle import bag, bag_from_changes, diff

SCHEMA = "CREATE TABLE t (k INT, x DOUBLE, y REAL);"
VIEWS = {
    "v_signs": "SELECT k, x, 1 / x AS r, CAST(x AS VARCHAR) AS s, CAST(y AS VARCHAR) AS sy FROM t",
    "v_groups": "SELECT x = 0 AS zero, COUNT(*) AS n, SUM(1 / x) AS inv FROM t GROUP BY x = 0",
    "v_join": "SELECT a.k, b.k AS bk, 1 / b.x AS r FROM t a JOIN t b ON a.x = b.x WHERE a.x = 0",
    "v_distinct": "SELECT DISTINCT CAST(x AS VARCHAR) AS s FROM t",
    # one row per group of equal values, whichever zero came first: what is emitted is later retracted
    "v_by_x": "SELECT x, y, COUNT(*) AS n, SUM(k) AS sk FROM t GROUP BY x, y",
    "v_by_x_float": "SELECT x, STDDEV_POP(k) AS sd, COUNT(DISTINCT k) AS nk FROM t GROUP BY x",
    "v_by_x_distinct": "SELECT x, y, COUNT(DISTINCT k) AS nk, MIN(k) AS mk FROM t GROUP BY x, y",   # (SQL rule)
    "v_distinct_x": "SELECT DISTINCT x, y FROM t",
    "v_except": "SELECT x FROM t EXCEPT SELECT y FROM t WHERE k > 2",
}
NZ = "CAST('-0.0' AS DOUBLE)"
STEPS = [
    [f"INSERT INTO t VALUES (1, {NZ}, CAST('-0.0' AS REAL)), (2, 0.0, 0.0)"],
    [f"INSERT INTO t VALUES (3, {NZ}, 0.0), (4, 0.0, CAST('-0.0' AS REAL)), (5, 1.5, 2.5)"],
    ["DELETE FROM t WHERE k = 2"],
    ["DELETE FROM t WHERE 1 / x < 0 AND k = 1", f"INSERT INTO t VALUES (1, 0.0, 0.0), (6, {NZ}, 0.0)"],
    ["DELETE FROM t WHERE 1 / x > 0"],
]


def test_a_table_keeps_both_zeros(make_pipeline):
    p = make_pipeline(SCHEMA + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in VIEWS.items()),
                      start=False)
    handlers = {n: p.listen(n) for n in VIEWS}
    p.start()
    con = duckdb.connect()
    con.execute(SCHEMA)
    # the same rows through input_pandas: a -0.0 in a pandas frame, and a delete of it by value
    steps = STEPS + [[("pandas", [(7, -0.0, -0.0), (8, 0.0, 0.0)], False)], [("pandas", [(7, -0.0, -0.0)], True)]]
    for si, step in enumerate(steps):
        for s in step:
            if isinstance(s, str):
                p.execute(s)
                con.execute(s)
                continue
            _, rows, delete = s
            p.input_pandas("t", pd.DataFrame(rows, columns=["k", "x", "y"]), delete=delete)
            for k, x, y in rows:
                if delete:
                    con.execute("DELETE FROM t WHERE rowid = (SELECT MIN(rowid) FROM t WHERE k = ? AND "
                                "CAST(x AS VARCHAR) = ? AND CAST(y AS VARCHAR) = ?)", [k, str(x), str(y)])
                else:
                    con.execute("INSERT INTO t VALUES (?, ?, ?)", [k, x, y])
        p.wait_for_idle()
        for name, q in VIEWS.items():
            expected = bag(con.execute(q).fetchall())
            problem = diff(bag_from_changes(handlers[name].to_pandas()), expected)
            assert not problem, f"step {si}: view {name} (change stream) differs from DuckDB: {problem}"
            problem = diff(bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")]), expected)
            assert not problem, f"step {si}: view {name} (query) differs from DuckDB: {problem}"
        got = bag([(r["k"], str(r["x"]), str(r["y"])) for r in p.query("SELECT * FROM t")])
        assert got == bag(con.execute("SELECT k, CAST(x AS VARCHAR), CAST(y AS VARCHAR) FROM t").fetchall())


def test_consolidation_keeps_the_sign_of_zero_on_spark(spark):
    """Spark's GROUP BY makes -0.0 0.0, its keys' values too; ``consolidate_spark`` keeps the two apart and each
    with its own sign, as ``consolidate_arrow`` does (NaN stays one value)."""
    import math

    import pyarrow as pa
    from sqlengine.zset import W, consolidate_arrow, consolidate_spark
    t = pa.table({"c0": [-0.0, 0.0, -0.0, math.nan, 1.0, 0.0], "c1": ["a"] * 6, W: [1, 1, 1, 1, 1, -1]})
    rows = list(zip(*t.to_pydict().values()))
    got = consolidate_spark(spark.createDataFrame(rows, f"c0 double, c1 string, {W} bigint")).collect()
    key = sorted((repr(r["c0"]), r["c1"], r[W]) for r in got)
    assert key == [("-0.0", "a", 2), ("1.0", "a", 1), ("nan", "a", 1)]
    assert key == sorted((repr(r["c0"]), r["c1"], r[W]) for r in consolidate_arrow(t).to_pylist())


def test_a_window_over_both_zeros_emits_each(make_pipeline):
    """A window reads its partitions' rows summed per row: -0.0 and 0.0 stay two rows with their own signs."""
    p = make_pipeline(SCHEMA + "CREATE MATERIALIZED VIEW w AS SELECT k, 1 / x AS r, "
                               "COUNT(*) OVER (PARTITION BY k % 2) AS n FROM t;")
    con = duckdb.connect()
    con.execute(SCHEMA)
    for stmt in [f"INSERT INTO t VALUES (1, {NZ}, 0), (1, 0.0, 0), (3, 0.0, 0), (2, 1.0, 0)", "DELETE FROM t WHERE k = 3",
                 f"INSERT INTO t VALUES (3, {NZ}, 0), (3, 0.0, 0)"]:
        p.execute(stmt)
        con.execute(stmt)
        p.wait_for_idle()
        want = bag(con.execute("SELECT k, 1 / x AS r, COUNT(*) OVER (PARTITION BY k % 2) AS n FROM t").fetchall())
        problem = diff(bag([tuple(r.values()) for r in p.query("SELECT * FROM w")]), want)
        assert not problem, f"{stmt}: {problem}"
