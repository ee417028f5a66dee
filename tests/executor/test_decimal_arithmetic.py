"""Arithmetic over DECIMALs of different widths and scales, typed and computed as DuckDB does, on both executors.

``DECIMAL(10, 2) - DECIMAL(18, 4)`` is a ``DECIMAL(19, 4)`` in DuckDB; typed as its first operand it rounded
``-3.0001`` to ``-3.00`` wherever the type was applied (an aggregate's stored value: fuzz seed 99382).  The
views mix DECIMALs with integers, literals, REALs and DOUBLEs in arithmetic, choices (CASE, COALESCE, GREATEST)
and aggregates; after each step each must equal DuckDB's bag, and its stored column types DuckDB's types.
"""
import duckdb

from ..support.differential import statements_against_duckdb

SCHEMA = "CREATE TABLE t (k INT, a DECIMAL(10,2), b DECIMAL(18,4), n BIGINT, r REAL, s DECIMAL(4,1));"
VIEWS = {
    "v_arith": "SELECT k, a - b AS d, b - a AS e, a * b AS m, a + n AS an, a % b AS md, s * s * s AS cube, "
               "a + 1.5 AS al, a * 1.25 AS am, a - 3 AS ai, -b AS nb FROM t",
    "v_float": "SELECT k, a + r AS ar, b * 1e0 AS bd FROM t",
    "v_choice": "SELECT k, COALESCE(a, b) AS c, CASE WHEN k > 2 THEN a ELSE s END AS w, GREATEST(a, b, n) AS g, "
                "LEAST(s, 0.05) AS l FROM t",
    "v_agg": "SELECT k % 2 AS p, ARG_MIN(CAST('-3' AS DECIMAL(10, 2)) - b, b) AS am, MAX(a - b) AS mx, "
             "MIN(a * b) AS mn, SUM(b - a) AS sm, ARG_MAX(COALESCE(a, b), k) AS ax FROM t GROUP BY k % 2",
    "v_key": "SELECT a - b AS d, COUNT(*) AS c FROM t GROUP BY a - b",
}
STEPS = [
    "INSERT INTO t VALUES (1, 1.00, 0.0001, 2, 0.5, 1.5), (2, NULL, -7.1234, 9000000000, 2.25, -99.9), "
    "(3, 123456.78, 999999.9999, NULL, NULL, 0.1), (4, -0.01, 0.0001, -1, -1.5, NULL)",
    "INSERT INTO t VALUES (5, 2.50, 0.0002, 3, 0.0, 2.0), (1, 1.00, 0.0001, 2, 0.5, 1.5)",
    "DELETE FROM t WHERE k IN (1, 4)",
    "INSERT INTO t VALUES (6, -3.00, -0.0001, 0, 1.0, 0.0)",
    "DELETE FROM t WHERE b > 1",
]


def test_decimal_arithmetic_as_duckdb(make_pipeline, executor):
    statements_against_duckdb(make_pipeline, SCHEMA, VIEWS, STEPS, executor)


def test_views_hold_duckdbs_decimal_types(make_pipeline):
    p = make_pipeline(SCHEMA + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in VIEWS.items()))
    p.execute(STEPS[0])
    p.wait_for_idle()
    con = duckdb.connect()
    con.execute(SCHEMA)
    con.execute(STEPS[0])
    for name, q in VIEWS.items():
        want = con.sql(q).to_arrow_table()
        got = p.query_arrow(f"SELECT * FROM {name}")
        assert [f.type for f in got.schema] == [f.type for f in want.schema], name
