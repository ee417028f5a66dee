"""Differential tests for CTEs, subqueries in FROM, DISTINCT and FILTER aggregates, STDDEV/VARIANCE,
GROUP BY positions and aliases, UNION, and JOIN ... USING."""
from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, steps_strategy

SCHEMA = """CREATE TABLE a (k INT, x INT, v VARCHAR);
CREATE TABLE c (k INT, z DOUBLE);"""
COLUMNS = {"a": ["k", "x", "v"], "c": ["k", "z"]}


TABLES = {
    "a": st.tuples(maybe(range(3)), maybe(range(-2, 3)), maybe(["p", "q", "r"])),
    "c": st.tuples(maybe(range(-1, 3)), maybe([-1.5, 0.0, 2.0, 4.25])),
}

VIEWS = [
    ("m_cte", "WITH g AS (SELECT k, COUNT(*) AS n FROM a GROUP BY k) SELECT k, n FROM g WHERE n > 1", True),
    ("m_from_sub", "SELECT s.k, s.t FROM (SELECT k, SUM(x) AS t FROM a WHERE x IS NOT NULL GROUP BY k) AS s "
                   "WHERE s.t <> 0", False),
    ("m_distinct_aggs", "SELECT k, COUNT(DISTINCT v) AS dv, SUM(DISTINCT x) AS sx, AVG(DISTINCT x) AS ax, "
                        "COUNT(*) FILTER (WHERE x > 0) AS pos, SUM(x) FILTER (WHERE v = 'p') AS sp "
                        "FROM a GROUP BY k", True),
    ("m_stats", "SELECT k, STDDEV_SAMP(z) AS sd, VAR_POP(z) AS vp, STDDEV_POP(z) AS sdp, VARIANCE(z) AS var "
                "FROM c GROUP BY k", False),
    ("m_group_pos", "SELECT v, x % 2 AS parity, COUNT(*) AS n FROM a GROUP BY 1, parity", False),
    ("m_union", "SELECT k FROM a UNION SELECT k FROM c", True),
    ("m_using", "SELECT k, a.x, c.z FROM a JOIN c USING (k)", False),
    ("m_using_star", "SELECT * FROM a JOIN c USING (k) WHERE z > 0", False),
]


@given(steps_strategy(TABLES))
def test_more_sql(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)


SET_OPS = [
    ("x_intersect", "SELECT k FROM a INTERSECT SELECT k FROM c", True),
    ("x_intersect_all", "SELECT k FROM a INTERSECT ALL SELECT k FROM c", False),
    ("x_except", "SELECT k FROM a EXCEPT SELECT k FROM c", True),
    ("x_except_all", "SELECT k FROM a EXCEPT ALL SELECT k FROM c", False),
    ("x_except_rows", "SELECT k, x FROM a EXCEPT SELECT k, k - 1 FROM c", False),
]


@given(steps_strategy(TABLES))
def test_intersect_and_except(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, SET_OPS, steps)


GROUPING = [
    ("g_rollup", "SELECT k, v, SUM(x) AS s, COUNT(*) AS n, GROUPING(k, v) AS gid FROM a GROUP BY ROLLUP (k, v)", True),
    ("g_cube", "SELECT k, v, MAX(x) AS m FROM a GROUP BY CUBE (k, v)", False),
    ("g_sets", "SELECT k, v, COUNT(x) AS n FROM a GROUP BY GROUPING SETS ((k), (v), ())", False),
    ("g_mixed", "SELECT k, v, SUM(x) AS s FROM a GROUP BY k, ROLLUP (v) HAVING COUNT(*) > 1", False),
]


@given(steps_strategy(TABLES))
def test_grouping_sets(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, GROUPING, steps)
