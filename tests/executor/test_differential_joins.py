"""Differential tests for inner joins: equi-joins, residual non-equi conditions, joins on expressions,
three-way and comma joins, cross joins, joins feeding aggregates and DISTINCT, and views over joins."""
from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, runs_on, steps_strategy

SCHEMA = """CREATE TABLE a (k INT, x INT, v VARCHAR);
CREATE TABLE b (k INT, y INT, w VARCHAR);
CREATE TABLE c (k INT, z INT);"""
COLUMNS = {"a": ["k", "x", "v"], "b": ["k", "y", "w"], "c": ["k", "z"]}


TABLES = {
    "a": st.tuples(maybe(range(3)), maybe(range(-2, 3)), maybe(["p", "q", "r"])),
    "b": st.tuples(maybe(range(4)), maybe(range(-2, 3)), maybe(["p", "s"])),
    "c": st.tuples(maybe(range(-1, 3)), maybe(range(-1, 2))),
}

JOINS = [
    ("j_eq", "SELECT a.k, a.x, b.y FROM a JOIN b ON a.k = b.k", True),
    ("j_res", "SELECT a.x, b.y, a.v FROM a JOIN b ON a.k = b.k AND a.x < b.y", False),
    ("j_two_keys", "SELECT a.v, b.w FROM a INNER JOIN b ON a.k = b.k AND a.v = b.w", False),
    ("j_expr", "SELECT a.v, b.w, b.k FROM a JOIN b ON a.k + 1 = b.k", False),
    ("j_comma3", "SELECT a.x, b.y, c.z FROM a, b, c WHERE a.k = b.k AND b.y = c.k AND c.z >= 0", True),
    ("j_cross", "SELECT a.x, c.z FROM a CROSS JOIN c WHERE a.x > c.z", False),
]

JOIN_AGGS = [
    ("j_agg", "SELECT a.k, COUNT(*) AS n, SUM(b.y) AS s, MAX(b.w) AS mw FROM a JOIN b ON a.k = b.k GROUP BY a.k", True),
    ("j_acc", "SELECT b.w, COUNT(a.x) AS n, AVG(a.x) AS av FROM a JOIN b ON a.k = b.k GROUP BY b.w", False),
    ("j_dist", "SELECT DISTINCT a.k, b.w FROM a JOIN b ON a.k = b.k", True),
    ("j_view_join", "SELECT ja.k, ja.n, c.z FROM j_agg ja JOIN c ON ja.k = c.k", True),
    ("j_having", "SELECT c.k, SUM(c.z) AS sz FROM c JOIN a ON c.k = a.k GROUP BY c.k HAVING SUM(c.z) > 0", False),
]


@given(steps_strategy(TABLES))
def test_joins(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, JOINS, steps)


@given(steps_strategy(TABLES))
def test_joins_with_aggregates(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, JOIN_AGGS, steps)


OUTER = [
    ("o_left", "SELECT a.k, a.x, b.y FROM a LEFT JOIN b ON a.k = b.k", True),
    ("o_left_res", "SELECT a.x, b.y, b.w FROM a LEFT OUTER JOIN b ON a.k = b.k AND b.y > a.x", False),
    ("o_right", "SELECT a.v, b.k, b.w FROM a RIGHT JOIN b ON a.k = b.k", False),
    ("o_full", "SELECT a.k AS ak, b.k AS bk, a.x, b.y FROM a FULL OUTER JOIN b ON a.k = b.k AND a.v = b.w", True),
    ("o_anti", "SELECT a.k, a.v FROM a LEFT JOIN c ON a.k = c.k WHERE c.k IS NULL", False),
    ("o_agg", "SELECT a.k, COUNT(b.y) AS n, SUM(b.y) AS s FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.k", True),
    ("o_chain", "SELECT a.x, b.y, c.z FROM a LEFT JOIN b ON a.k = b.k JOIN c ON c.k = a.k", False),
    ("o_using", "SELECT k, a.x, c.z FROM a LEFT JOIN c USING (k)", False),
]


@given(steps_strategy(TABLES))
def test_outer_joins(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, OUTER, steps)


SUBQUERIES = [
    ("s_in", "SELECT a.x, a.v FROM a WHERE a.k IN (SELECT k FROM b WHERE y > 0)", True),
    ("s_in_agg", "SELECT k, x FROM a WHERE k IN (SELECT k FROM b GROUP BY k HAVING COUNT(*) > 1)", False),
    ("s_exists", "SELECT x FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.y > a.x)", True),
    ("s_not_exists", "SELECT k, x FROM a WHERE NOT EXISTS (SELECT * FROM b WHERE k = a.k) AND x > -2", False),
    ("s_in_corr", "SELECT v FROM a WHERE x IN (SELECT y FROM b WHERE b.w = a.v)", False),
    ("s_exists_join", "SELECT a.k, c.z FROM a JOIN c ON a.k = c.k WHERE EXISTS (SELECT 1 FROM b WHERE b.y = c.z)", False),
    ("s_uncorr_exists", "SELECT k FROM c WHERE EXISTS (SELECT 1 FROM b WHERE y > 1)", False),
]


@given(steps_strategy(TABLES))
def test_subqueries(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, SUBQUERIES, steps)


# A comma binds more loosely than JOIN: ``a, b RIGHT JOIN c ON ...`` pads the rows of c unmatched in b, each then
# paired with every row of a (once joined left to right, as (a, b) RIGHT JOIN c).
COMMA_OUTER = [
    ("j_comma_right", "SELECT a.x, b.y, c.z FROM a, b RIGHT JOIN c ON b.k = c.k", True),
    ("j_comma_full", "SELECT a.v, b.w, c.k FROM c, a FULL JOIN b ON a.k = b.k AND a.v = b.w WHERE c.z >= 0", False),
    ("j_comma_groups", "SELECT a.x, b.y, c.z, c2.z AS z2 FROM a LEFT JOIN c ON a.k = c.k, b RIGHT JOIN c AS c2 "
                       "ON b.k = c2.k",
     False),
    ("j_comma_left", "SELECT a.x, b.y, c.z FROM a, b LEFT JOIN c ON a.k = c.k", False),
]


@given(steps_strategy(TABLES))
def test_a_comma_before_an_outer_join(make_pipeline, executor, steps):
    if runs_on(executor, "comma_outer"):
        run_program(make_pipeline, SCHEMA, COLUMNS, COMMA_OUTER, steps)
