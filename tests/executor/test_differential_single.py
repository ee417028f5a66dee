"""Differential tests: expressions, filters, aggregates, DISTINCT, UNION ALL and views on views
over one table with every supported column type, under random inserts and deletes."""
import datetime as dt
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, steps_strategy

SCHEMA = """CREATE TABLE t (id INT NOT NULL, g TINYINT, s SMALLINT, b BIGINT, d DECIMAL(8,2), r REAL,
  x DOUBLE, v VARCHAR, dt DATE, ts TIMESTAMP, flag BOOLEAN);"""
COLUMNS = {"t": ["id", "g", "s", "b", "d", "r", "x", "v", "dt", "ts", "flag"]}


ROW = st.tuples(
    st.integers(0, 5), maybe(range(0, 4)), maybe(range(-2, 3)), maybe(range(-5, 6)),
    maybe([Decimal("-1.50"), Decimal("0.00"), Decimal("2.25"), Decimal("10.10")]),
    maybe([-1.5, 0.0, 2.5]), maybe([-2.25, 0.5, 3.0, 100.125]),
    maybe(["", "a", "ab", "Abc", "b_c", "xyz "]),
    maybe([dt.date(2024, 1, 1), dt.date(2024, 2, 29), dt.date(2023, 12, 31)]),
    maybe([dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 13, 45), dt.datetime(2024, 3, 10, 23, 59, 59)]),
    maybe([True, False]),
)

EXPRESSIONS = [
    ("v_arith", """SELECT id, g + s AS a1, b * 2 - s AS a2, x / 2 AS a3, -b AS a4, b % 3 AS a5, d * 2 AS d2,
        d + 1 AS d3, r * 2 AS r2, ABS(b) AS ab, ROUND(x, 1) AS rx, x / 4 + b AS mix FROM t""", False),
    ("v_logic", """SELECT id, CASE WHEN g IS NULL THEN 'none' WHEN g > 1 THEN 'big' ELSE 'small' END AS c1,
        CASE g WHEN 1 THEN 'one' WHEN 2 THEN 'two' END AS c1b,
        COALESCE(b, s, -1) AS c3, v IS NULL AS c4, v IS NOT NULL AS c4b, g IN (1, 3) AS c5, b BETWEEN -2 AND 2 AS c6,
        v LIKE 'a%' AS c7, v NOT LIKE '%c' AS c7b, NOT flag AS nf, flag AND g > 1 AS fa, flag OR g > 1 AS fo,
        b = s AS eq, b <> s AS ne, b < s AS lt, x >= 0.5 AS ge FROM t""", True),
    ("v_string", """SELECT id, UPPER(v) AS u, LOWER(v) AS l, LENGTH(v) AS len, SUBSTRING(v, 1, 2) AS sub,
        TRIM(v) AS tr, v || '!' AS cat, CAST(g AS VARCHAR) AS gs, CONCAT(v, 'x') AS cc, REPLACE(v, 'a', 'z') AS rp
        FROM t""", False),
    ("v_dates", """SELECT id, EXTRACT(YEAR FROM dt) AS y, EXTRACT(MONTH FROM ts) AS m, EXTRACT(DAY FROM dt) AS dd,
        CAST(ts AS DATE) AS tsd, EXTRACT(HOUR FROM ts) AS h, dt < DATE '2024-01-15' AS early,
        ts > TIMESTAMP '2024-01-01 12:00:00' AS late, CAST(CAST(b AS DOUBLE) AS BIGINT) AS cb FROM t""", False),
    ("v_filter", "SELECT id, v, b FROM t WHERE (g > 1 OR v LIKE '%b%') AND NOT (b IS NULL) AND s <> 0", True),
]

AGGREGATES = [
    ("v_agg", """SELECT g, COUNT(*) AS n, COUNT(b) AS nb, SUM(b) AS sb, AVG(x) AS ax, MIN(v) AS mv, MAX(ts) AS mts,
        MIN(d) AS md, SUM(d) AS sd, MAX(r) AS mr, MIN(dt) AS mdt FROM t GROUP BY g""", True),
    ("v_acc", "SELECT g, s, COUNT(*) AS n, SUM(b) AS sb, AVG(d) AS ad, COUNT(v) AS cv FROM t GROUP BY g, s "
              "HAVING COUNT(*) > 1", False),
    ("v_global", "SELECT COUNT(*) AS n, SUM(b) AS sb, AVG(x) AS ax, COUNT(v) AS cv FROM t", True),
    ("v_global_mm", "SELECT MIN(b) AS mn, MAX(v) AS mx, COUNT(*) AS n FROM t", False),
    ("v_expr_group", "SELECT g + 1 AS g1, SUM(b * 2) AS s2, MAX(b) - MIN(b) AS spread FROM t GROUP BY g + 1", False),
    ("v_on_view", "SELECT g, n * 2 AS n2 FROM v_agg WHERE n > 1", False),
    ("v_agg_of_agg", "SELECT n, COUNT(*) AS groups FROM v_acc GROUP BY n", True),
]

SETS = [
    ("v_distinct", "SELECT DISTINCT g, flag FROM t", True),
    ("v_union", "SELECT id, g FROM t WHERE g > 1 UNION ALL SELECT id, s FROM t WHERE s < 0", False),
    ("v_union_distinct_view", "SELECT DISTINCT id FROM v_filter", False),
]


@given(steps_strategy({"t": ROW}))
def test_expressions(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, EXPRESSIONS, steps)


@given(steps_strategy({"t": ROW}))
def test_aggregates(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, AGGREGATES, steps)


@given(steps_strategy({"t": ROW}))
def test_distinct_and_union(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, EXPRESSIONS[-1:] + SETS, steps)
