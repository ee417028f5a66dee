"""Division and remainder as DuckDB computes them, on both executors.

``/`` divides in DOUBLE: by a zero it is +-inf (the zero's sign counts: ``1 / -0.0`` is -inf) or NaN (0/0, NaN/0),
where Spark's ``/`` raises (ANSI) or gives NULL.  A DECIMAL operand is divided in DOUBLE at any depth of nesting
(Spark keeps 6 digits after the point of a DECIMAL quotient).  ``%`` with a DOUBLE or REAL operand is NaN by a
zero; an integer ``%`` or ``//`` by zero is an error in DuckDB, so a row error here.  With every step on Spark
no step may fail and be re-run on the driver.
"""
import duckdb

from ..support.differential import statements_against_duckdb
from ..support.oracle import bag

SCHEMA = "CREATE TABLE t (k INT, x DOUBLE, y DOUBLE, r REAL, m DECIMAL(10,2), i INT);"
VIEWS = {
    "v_div": "SELECT k, x / y AS q, 1 / y AS inv, r / y AS rq, i / y AS iq, (x / y) / (y / x) AS nested, "
             "x / NULLIF(i, 1) AS ni FROM t",
    "v_mod": "SELECT k, x % y AS fm, r % 0 AS rz, i % 2 AS im, (x % y) % 2.5e0 AS nm FROM t",
    "v_dec": "SELECT k, (m / 2.25) / 1.5 AS dd, CAST(m / 3 AS INT) AS di, m / y AS dy FROM t",
    "v_agg": "SELECT k % 2 AS g, SUM(x / y) AS s, MAX(1 / y) AS mx, COUNT(*) AS n FROM t GROUP BY k % 2",
}
NZ = "CAST('-0.0' AS DOUBLE)"
STEPS = [
    f"INSERT INTO t VALUES (1, 1.0, 0.0, 2.5, 1.00, 0), (2, -1.0, {NZ}, 1.5, 2.50, 1), (3, 0.0, 0.0, 0.0, 3.33, 2)",
    f"INSERT INTO t VALUES (4, CAST('nan' AS DOUBLE), 0.0, -2.5, -7.77, 3), (5, 5.5, 2.0, NULL, NULL, NULL), "
    f"(6, CAST('inf' AS DOUBLE), {NZ}, 1.0, 0.01, -4), (7, NULL, 0.0, 3.0, 9.99, 5)",
    "DELETE FROM t WHERE k IN (1, 5)",
]



def test_division_and_remainder_by_zero_as_duckdb(make_pipeline, executor):
    statements_against_duckdb(make_pipeline, SCHEMA, VIEWS, STEPS, executor)


def test_integer_remainder_by_zero_is_a_row_error(make_pipeline, executor):
    p = make_pipeline("CREATE TABLE t (k INT, i INT);"
                      "CREATE MATERIALIZED VIEW v AS SELECT k, 7 % i AS m, 7 // i AS d FROM t;")
    p.execute("INSERT INTO t VALUES (1, 2), (2, 0), (3, -3)")
    p.wait_for_idle()
    want = duckdb.sql("SELECT k, 7 % i, 7 // i FROM (VALUES (1, 2), (2, 0), (3, -3)) t(k, i) WHERE i <> 0")
    assert bag([tuple(r.values()) for r in p.query("SELECT * FROM v")]) == bag(want.fetchall())
    assert p.status()["errors"] == {"v": 1}
