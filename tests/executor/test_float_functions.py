"""Float functions where Spark's meaning differs from DuckDB's, checked on both executors against DuckDB.

A DOUBLE or REAL as text (``CAST``, ``||``, CONCAT: DuckDB writes ``1e+20``, ``inf``; Spark ``1.0E20``,
``Infinity``), LN / LOG / LOG10 / LOG2 of 0 and of negatives (-inf and NaN; Spark: NULL; and DuckDB's one-argument
LOG is base 10, Spark's is e), SIGN(NaN) (0; Spark: NaN), FLOOR / CEIL of a float (a float; Spark: a BIGINT,
0 for NaN), SUBSTRING with a start of 0 or a negative length.  With every step on Spark no step may fail and be re-run on the driver.  Values are compared with
DuckDB's recomputation as bags with exact multiplicities, the texts exactly.
"""
import duckdb

from ..support.differential import statements_against_duckdb
from ..support.oracle import bag, diff

SCHEMA = "CREATE TABLE t (k INT, x DOUBLE, r REAL);"
VIEWS = {
    "v_text": "SELECT k, CAST(x AS VARCHAR) AS xs, CAST(r AS VARCHAR) AS rs, x || '|' || r AS cat, "
              "CONCAT('<', x, '>') AS cc FROM t",
    "v_logs": "SELECT k, LN(x) AS ln, LOG(x) AS lg, LOG10(x) AS l10, LOG2(x) AS l2, SIGN(x) AS sg, "
              "FLOOR(x) AS fl, CEIL(x) AS ce, FLOOR(r) AS fr, CEIL(r) AS cr FROM t",
    "v_grouped": "SELECT CAST(x AS VARCHAR) AS xs, COUNT(*) AS n FROM t GROUP BY CAST(x AS VARCHAR)",
    # DuckDB's SUBSTRING: a start of 0, a negative length (Spark: 1, none)
    "v_substring": "SELECT k, SUBSTRING('abcdef' || k, k % 5 - 2, k % 7 - 3) AS s, SUBSTRING('xyz', k % 3 - 1) AS t "
                   "FROM t",
}
VALUES = ["1e20", "CAST('inf' AS DOUBLE)", "CAST('-inf' AS DOUBLE)", "CAST('nan' AS DOUBLE)", "CAST('-0.0' AS DOUBLE)",
          "0.1", "16777216.0", "1e-5", "-2.5", "0.0", "123456789.125", "1e16", "-0.5", "4.5e15", "NULL"]
REALS = ["CAST(0.1 AS REAL)", "CAST(1e20 AS REAL)", "CAST(16777216 AS REAL)", "CAST('nan' AS REAL)", "CAST(-0.5 AS REAL)",
         "CAST(3.4e38 AS REAL)", "CAST(1e-7 AS REAL)", "NULL"]
STEPS = [
    "INSERT INTO t VALUES " + ", ".join(f"({i}, {v}, {REALS[i % len(REALS)]})" for i, v in enumerate(VALUES)),
    "DELETE FROM t WHERE k % 3 = 0",
    "INSERT INTO t VALUES " + ", ".join(f"({100 + i}, {v}, {r})" for i, (v, r) in enumerate(zip(VALUES[::2], REALS))),
]



def test_float_functions_as_duckdb(make_pipeline, executor):
    statements_against_duckdb(make_pipeline, SCHEMA, VIEWS, STEPS, executor)


def test_a_float_cast_to_decimal_fails_its_row_for_nan_and_infinities(make_pipeline, executor):
    """DuckDB fails CAST(NaN AS DECIMAL) (Spark gives NULL): the row is a row error on both executors (on Spark
    the step fails and is re-run on the driver, which records it)."""
    p = make_pipeline("CREATE TABLE t (k INT, x DOUBLE);"
                      "CREATE MATERIALIZED VIEW v AS SELECT k, CAST(x AS DECIMAL(10, 2)) AS d FROM t;")
    p.execute("INSERT INTO t VALUES (1, 1.505), (2, CAST('nan' AS DOUBLE)), (3, CAST('-inf' AS DOUBLE)), (4, -2.5)")
    p.wait_for_idle()
    want = duckdb.sql("SELECT k, CAST(x AS DECIMAL(10, 2)) FROM (VALUES (1, 1.505::DOUBLE), (4, -2.5::DOUBLE)) v(k, x)")
    assert not diff(bag([tuple(r.values()) for r in p.query("SELECT * FROM v")]), bag(want.fetchall()))
    assert p.status()["errors"] == {"v": 2}
