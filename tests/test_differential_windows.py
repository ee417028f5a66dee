"""Differential tests for window functions (ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD, running SUM/COUNT/AVG
with ROWS and RANGE frames, one and several PARTITION BYs, no PARTITION BY), top-k per group via
ROW_NUMBER() <= k, and ORDER BY ... LIMIT/OFFSET views.  Orders are total over the output columns, so
results do not depend on how ties are broken."""
from hypothesis import given
from hypothesis import strategies as st

from .differential import maybe, run_program, steps_strategy

SCHEMA = "CREATE TABLE a (k INT, x INT, v VARCHAR);"
COLUMNS = {"a": ["k", "x", "v"]}
TABLES = {"a": st.tuples(maybe(range(3)), maybe(range(-2, 4)), maybe(["p", "q", "r"]))}

WINDOWS = [
    ("w_rownum", "SELECT k, x, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x DESC, v) AS rn FROM a", True),
    ("w_topk", "SELECT k, x, v FROM (SELECT k, x, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x, v) AS rn "
               "FROM a) t WHERE rn <= 2", True),
    ("w_rank", "SELECT k, x, RANK() OVER (PARTITION BY k ORDER BY x) AS r, "
               "DENSE_RANK() OVER (PARTITION BY k ORDER BY x DESC) AS dr FROM a", False),
    ("w_lag", "SELECT k, x, v, LAG(x) OVER (PARTITION BY k ORDER BY x, v) AS px, "
              "LEAD(v, 1) OVER (PARTITION BY k ORDER BY x, v) AS nv FROM a", False),
    ("w_running", "SELECT k, x, SUM(x) OVER (PARTITION BY k ORDER BY x) AS rs, "
                  "COUNT(*) OVER (PARTITION BY k ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS c2, "
                  "AVG(x) OVER (PARTITION BY k) AS ax FROM a", True),
    ("w_two_partitions", "SELECT k, v, x, ROW_NUMBER() OVER (ORDER BY k, v, x) AS g, "
                         "COUNT(x) OVER (PARTITION BY v) AS nv FROM a WHERE x IS NOT NULL", False),
]


@given(steps_strategy(TABLES))
def test_window_functions(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, WINDOWS, steps)


LIMITS = [
    ("l_topk", "SELECT k, x FROM a ORDER BY x DESC, k LIMIT 3", True),
    ("l_offset", "SELECT v, x FROM a ORDER BY x NULLS FIRST, v LIMIT 2 OFFSET 1", True),
    ("l_grouped", "SELECT k, COUNT(*) AS n FROM a GROUP BY k ORDER BY n DESC, k LIMIT 2", False),
    ("l_hidden", "SELECT v FROM a ORDER BY k + x, v LIMIT 2", False),
    ("l_distinct", "SELECT DISTINCT v FROM a ORDER BY v DESC LIMIT 2", False),
]


@given(steps_strategy(TABLES))
def test_order_by_limit_views(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, LIMITS, steps)
