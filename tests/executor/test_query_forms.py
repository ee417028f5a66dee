"""Query forms rewritten before binding (``planner.query_forms``), under random inserts and deletes, each view
compared with DuckDB after every step: named WINDOW clauses, VALUES in FROM, SEMI and ANTI JOIN."""
from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, steps_strategy

SCHEMA = "CREATE TABLE t (k INT, x INT, y DOUBLE); CREATE TABLE u (k INT, z INT);"
COLUMNS = {"t": ["k", "x", "y"], "u": ["k", "z"]}
ROWS = {"t": st.tuples(maybe(range(4)), maybe(range(-2, 3)), maybe([0.5, 1.5, -2.0])),
        "u": st.tuples(maybe(range(4)), maybe(range(3)))}

VIEWS = [
    ("v_named", "SELECT k, x, SUM(x) OVER w AS s, COUNT(*) OVER w AS n, ROW_NUMBER() OVER (w2 ORDER BY x, y) AS r "
                "FROM t WINDOW w AS (PARTITION BY k), w2 AS (PARTITION BY k)", True),
    ("v_values", "SELECT v.name, t.x FROM t JOIN (VALUES (0, 'zero'), (1, 'one'), (2, 'two')) v(num, name) "
                 "ON t.k = v.num", True),
    ("v_values_alone", "SELECT col0 + 1 AS a, col1 FROM (VALUES (1, 'a'), (2, NULL))", False),
    ("v_semi", "SELECT t.k, t.x FROM t SEMI JOIN u ON t.k = u.k", True),
    ("v_anti", "SELECT t.k, t.y FROM t ANTI JOIN u ON t.k = u.k AND u.z > 0 WHERE t.x IS NOT NULL", True),
    ("v_semi_left", "SELECT t.k, u2.z FROM t SEMI JOIN u ON t.k = u.k LEFT JOIN u AS u2 ON u2.z = t.x", True),
]


@given(steps_strategy(ROWS, max_steps=4))
def test_query_forms(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)
