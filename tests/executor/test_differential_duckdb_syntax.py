"""Differential tests of DuckDB's own syntax, expanded by the binder (planner/bind_star.py, bind.py,
bind_window.py): the views run the same SQL in DuckDB as the oracle, under random inserts and deletes.

``* EXCLUDE / REPLACE / RENAME``, ``UNION [ALL] BY NAME``, ``COLUMNS('regex')`` / ``COLUMNS(*)`` (alone and
inside expressions and aggregates), ``GROUP BY ALL`` and ``ORDER BY ALL ... LIMIT``.
"""
from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, steps_strategy

SCHEMA = """CREATE TABLE t (id INT NOT NULL, g INT, x_a INT, x_b DOUBLE, v VARCHAR);
CREATE TABLE u (id BIGINT NOT NULL, v VARCHAR, z INT, x_a INT);"""
COLUMNS = {"t": ["id", "g", "x_a", "x_b", "v"], "u": ["id", "v", "z", "x_a"]}

T_ROW = st.tuples(st.integers(0, 5), maybe(range(0, 3)), maybe(range(-2, 4)), maybe([-1.5, 0.0, 2.25]),
                  maybe(["", "a", "Ab", "b"]))
U_ROW = st.tuples(st.integers(0, 5), maybe(["a", "b", "zz"]), maybe(range(0, 3)), maybe(range(-1, 2)))
TABLES = {"t": T_ROW, "u": U_ROW}

STAR = [
    ("v_exclude", "SELECT * EXCLUDE (g, v) FROM t", True),
    ("v_exclude_join", "SELECT t.* EXCLUDE (x_b), u.* EXCLUDE (id, x_a) FROM t JOIN u ON t.id = u.id", False),
    ("v_exclude_qualified", "SELECT * EXCLUDE (u.id, v) FROM t JOIN u ON t.g = u.z", False),
    ("v_replace", "SELECT * REPLACE (x_a * 2 AS x_a, UPPER(v) AS v) FROM t", True),
    ("v_rename", "SELECT * EXCLUDE (x_b) RENAME (x_a AS a) FROM t", False),
    ("v_replace_grouped", "SELECT * REPLACE (COUNT(*) AS n) FROM (SELECT g, 0 AS n FROM t) GROUP BY g", False),
]
UNION = [
    ("v_union_by_name", "SELECT id, g, v FROM t UNION ALL BY NAME SELECT v, z, id FROM u", True),
    ("v_union_by_name_distinct", "SELECT v, x_a FROM t UNION BY NAME SELECT x_a, v FROM u", False),
    ("v_union_by_name_chain", "SELECT g FROM t UNION ALL BY NAME SELECT z FROM u UNION ALL BY NAME "
                              "SELECT x_a, g FROM t", False),
    ("v_union_by_name_case", "SELECT x_a AS A, v FROM t UNION ALL BY NAME SELECT v, x_a AS a FROM u", False),
]
COLUMNS_EXPR = [
    ("v_columns", "SELECT id, COLUMNS('^x_') FROM t", True),
    ("v_columns_star", "SELECT COLUMNS(*) FROM u", False),
    ("v_columns_expr", "SELECT id, COLUMNS('x_') + 1 FROM t WHERE g > 0", False),
    ("v_columns_agg", "SELECT g, MAX(COLUMNS('^x_')), SUM(COLUMNS('x_a')) FROM t GROUP BY g", True),
    ("v_columns_global", "SELECT MIN(COLUMNS(* EXCLUDE (id))) FROM u", False),
]
ALL = [
    ("v_group_all", "SELECT g, v, COUNT(*) AS n, SUM(x_a) AS s FROM t GROUP BY ALL", True),
    ("v_group_all_expr", "SELECT g + 1 AS g1, 7 AS seven, COUNT(*) AS n FROM t GROUP BY ALL", False),
    ("v_group_all_global", "SELECT COUNT(*) AS n, SUM(x_a) AS s, 1 AS one FROM t GROUP BY ALL", True),
    ("v_group_all_columns", "SELECT g, MAX(COLUMNS('^x_')) FROM t GROUP BY ALL", False),
    ("v_order_all", "SELECT g, x_a, id FROM t ORDER BY ALL LIMIT 3", True),
    ("v_order_all_desc", "SELECT g, v FROM t ORDER BY ALL DESC NULLS FIRST LIMIT 2 OFFSET 1", False),
    ("v_group_order_all", "SELECT g, COUNT(*) AS n FROM t GROUP BY ALL ORDER BY ALL LIMIT 2", True),
]


@given(steps_strategy(TABLES))
def test_star_exclude_replace_rename(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, STAR, steps)


@given(steps_strategy(TABLES))
def test_union_by_name(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, UNION, steps)


@given(steps_strategy(TABLES))
def test_columns_expressions(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, COLUMNS_EXPR, steps)


@given(steps_strategy(TABLES))
def test_group_by_all_and_order_by_all(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, ALL, steps)
