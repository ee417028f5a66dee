"""Query forms rewritten before binding (``planner.query_forms``), under random inserts and deletes, each view
compared with DuckDB after every step: named WINDOW clauses, VALUES in FROM, SEMI and ANTI JOIN, NATURAL JOIN, ANY / SOME / ALL, QUALIFY, window functions in grouped queries, LATERAL."""
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
    ("v_any", "SELECT k, x FROM t WHERE x > ANY (SELECT z FROM u)", True),
    ("v_all_correlated", "SELECT k, x FROM t WHERE x >= ALL (SELECT z FROM u WHERE u.k = t.k)", True),
    ("v_some_or_all", "SELECT k, x FROM t WHERE x = SOME (SELECT z FROM u) OR k < ALL (SELECT k FROM u)", True),
    ("v_all_grouped", "SELECT k, y FROM t WHERE x <> ALL (SELECT MAX(z) FROM u GROUP BY k) AND y IS NOT NULL", True),
    ("v_any_self", "SELECT k FROM t WHERE x < ANY (SELECT x FROM t AS t2 WHERE t2.k = t.k)", True),
    # where NULL and FALSE differ: under NOT, in the SELECT list, in a CASE (three-valued, as SQL says)
    ("v_not_any", "SELECT k, x FROM t WHERE NOT (x > ANY (SELECT z FROM u))", True),
    ("v_select_all", "SELECT k, x > ALL (SELECT z FROM u) AS a, x = ANY (SELECT z FROM u WHERE u.k = t.k) AS b "
                     "FROM t", True),
    ("v_case_some", "SELECT k, CASE WHEN x <= SOME (SELECT MAX(z) FROM u GROUP BY k) THEN 'le' ELSE 'other' END AS c "
                    "FROM t", False),
    ("v_not_all_corr", "SELECT k FROM t WHERE NOT (x <> ALL (SELECT z FROM u WHERE u.k = t.k)) OR k IS NULL", False),
    ("q_top", "SELECT k, x, y FROM t QUALIFY RANK() OVER (PARTITION BY k ORDER BY x DESC) = 1", True),
    ("q_alias", "SELECT k, x, DENSE_RANK() OVER (PARTITION BY k ORDER BY x) AS dr FROM t QUALIFY dr <= 2", True),
    ("q_grouped", "SELECT k, SUM(x) AS s FROM t GROUP BY k QUALIFY RANK() OVER (ORDER BY SUM(x) DESC) <= 2", True),
    ("q_distinct", "SELECT DISTINCT k FROM t QUALIFY COUNT(*) OVER (PARTITION BY k) > 1", True),
    ("g_rank", "SELECT k, SUM(x) AS s, RANK() OVER (ORDER BY SUM(x) DESC) AS r, SUM(COUNT(*)) OVER () AS total "
               "FROM t GROUP BY k", True),
    ("g_lag", "SELECT t.k, MAX(z) AS m, LAG(MAX(z)) OVER (ORDER BY t.k) AS prev FROM t JOIN u ON t.k = u.k "
              "GROUP BY 1", True),
    ("g_global", "SELECT SUM(x) AS s, COUNT(*) OVER () AS n FROM t", True),
    ("g_expr_key", "SELECT k % 2 AS g, COUNT(*) AS n, AVG(COUNT(*)) OVER () AS mean FROM t GROUP BY k % 2 "
                   "HAVING COUNT(*) > 0", True),
    ("l_top", "SELECT t.k, t.x, s.z FROM t, LATERAL (SELECT z FROM u WHERE u.k = t.k ORDER BY z DESC LIMIT 2) s",
     True),
    ("l_left", "SELECT * FROM t LEFT JOIN LATERAL (SELECT z, z + 1 AS z1 FROM u WHERE u.k = t.k AND u.z > 0) s "
               "ON TRUE", True),
    ("l_offset", "SELECT t.k, s.z FROM t JOIN LATERAL (SELECT z FROM u WHERE t.k = u.k ORDER BY z LIMIT 1 OFFSET 1) s "
                 "ON t.x < s.z", True),
    ("l_computed", "SELECT t.k, s.d FROM t CROSS JOIN LATERAL (SELECT t.x * 2 AS d, t.y AS e) s WHERE s.e > 0", True),
    ("l_agg", "SELECT t.k, s.n, s.m FROM t, LATERAL (SELECT COUNT(*) AS n, MAX(z) AS m FROM u WHERE u.k = t.k) s",
     True),
    ("l_agg_star", "SELECT * FROM t LEFT JOIN LATERAL (SELECT COUNT(*) AS n FROM u WHERE u.k = t.k AND u.z > 0) s "
                   "ON TRUE", True),
    # grouped or DISTINCT per outer row (grouped by the correlation keys too)
    ("l_group", "SELECT t.k, t.x, s.z, s.n FROM t, LATERAL (SELECT z, COUNT(*) AS n FROM u WHERE u.k = t.k GROUP BY z "
                "HAVING COUNT(*) > 0) s", True),
    ("l_group_left", "SELECT t.x, s.* FROM t LEFT JOIN LATERAL (SELECT z % 2 AS parity, SUM(z) AS total FROM u "
                     "WHERE u.k = t.k GROUP BY z % 2) s ON s.total > t.x", True),
    ("l_group_top", "SELECT t.k, s.z, s.n FROM t, LATERAL (SELECT z, COUNT(*) AS n FROM u WHERE u.k = t.k GROUP BY z "
                    "ORDER BY COUNT(*) DESC, z LIMIT 1) s", True),
    ("l_top_position", "SELECT t.k, s.zz FROM t, LATERAL (SELECT z + 1 AS zz FROM u WHERE u.k = t.k ORDER BY 1 DESC "
                       "LIMIT 1) s", True),
    ("l_top_alias", "SELECT t.k, s.zz FROM t, LATERAL (SELECT z * 2 AS zz FROM u WHERE u.k = t.k ORDER BY zz LIMIT 2) s",
     True),
    ("l_distinct", "SELECT t.k, t.y, s.z FROM t JOIN LATERAL (SELECT DISTINCT z FROM u WHERE t.k = u.k) s ON TRUE",
     True),
    ("v_natural", "SELECT * FROM t NATURAL JOIN u", True),
    ("v_natural_two", "SELECT * FROM t NATURAL JOIN (SELECT k, x, z FROM u JOIN t USING (k)) s", True),
    ("v_natural_left", "SELECT k, x, z FROM t NATURAL LEFT JOIN u", True),
    ("v_natural_full", "SELECT COALESCE(t.k, u.k) AS k, x, y, z FROM t NATURAL FULL JOIN u", True),
]


@given(steps_strategy(ROWS, max_steps=4))
def test_query_forms(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)


def test_star_over_a_coalesced_using_column_is_rejected():
    """DuckDB's ``*`` over ``a FULL JOIN b USING (k)`` has one ``k``, the two coalesced: rejected with its
    position rather than given as two columns."""
    import pytest
    from planner import compile_program
    from planner.errors import BindError, UnsupportedError
    for q in ("SELECT * FROM t FULL JOIN u USING (k)", "SELECT * FROM t NATURAL RIGHT JOIN u"):
        with pytest.raises(UnsupportedError, match=r"\* over a RIGHT or FULL JOIN ... USING \(k\)") as e:
            compile_program(SCHEMA + f"CREATE VIEW v AS {q};")
        assert e.value.column == len(SCHEMA) + len("CREATE VIEW v AS SELECT ") + 1
    with pytest.raises(BindError, match="no column in common"):
        compile_program(SCHEMA + "CREATE VIEW v AS SELECT * FROM t NATURAL JOIN (SELECT COUNT(*) AS n FROM u) s;")


def test_any_and_all_over_lists_or_several_columns_are_rejected():
    import pytest
    from planner import compile_program
    from planner.errors import UnsupportedError
    for q, message in [("SELECT k FROM t WHERE x = ANY ([1, 2])", "ANY over a list or an array"),
                       ("SELECT k FROM t WHERE x > ALL (SELECT z, k FROM u)", "must return one column")]:
        with pytest.raises(UnsupportedError, match=message) as e:
            compile_program(SCHEMA + f"CREATE VIEW v AS {q};")
        assert e.value.column is not None


def test_the_flink_spelling_of_window_table_functions_is_the_engines():
    """``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), ...))`` (also HOP, and SESSION with PARTITION BY) compiles to the
    same plan as the engine's ``TUMBLE(t, ts, ...)`` (whose results are differential-tested); other forms are
    rejected with their position."""
    import pytest
    from planner import compile_program
    from planner.errors import UnsupportedError
    schema = "CREATE TABLE bid (auction INT, bidder INT, price INT, ts TIMESTAMP);"
    pairs = [("TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND))", "TUMBLE(bid, ts, INTERVAL '10' SECOND)"),
             ("TABLE(HOP(TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '6' SECOND))",
              "HOP(bid, ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND)"),
             ("TABLE(SESSION(TABLE bid PARTITION BY auction, bidder, DESCRIPTOR(ts), INTERVAL '5' SECOND))",
              "SESSION(bid, ts, INTERVAL '5' SECOND, auction, bidder)"),
             ("TABLE(HOP(DATA => TABLE bid, SLIDE => INTERVAL '2' SECOND, TIMECOL => DESCRIPTOR(ts), "
              "SIZE => INTERVAL '6' SECOND))", "HOP(bid, ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND)"),
             ("TABLE(SESSION(DATA => TABLE bid PARTITION BY auction, TIMECOL => DESCRIPTOR(ts), "
              "GAP => INTERVAL '5' SECOND))", "SESSION(bid, ts, INTERVAL '5' SECOND, auction)")]
    for flink, ours in pairs:
        q = "CREATE VIEW v AS SELECT window_start, window_end, COUNT(*) AS n FROM {} GROUP BY window_start, window_end;"
        a, b = compile_program(schema + q.format(flink)), compile_program(schema + q.format(ours))
        assert a.explain("v") == b.explain("v")
    with pytest.raises(UnsupportedError, match=r"write TABLE\(TUMBLE\(TABLE t, DESCRIPTOR\(ts\)") as e:
        compile_program(schema + "CREATE VIEW v AS SELECT window_start FROM TABLE(TUMBLE(TABLE bid, ts, "
                                 "INTERVAL '1' SECOND));")
    assert e.value.column is not None
    with pytest.raises(UnsupportedError, match="argument WHEN of TUMBLE is not one of DATA, TIMECOL, SIZE, OFFSET"):
        compile_program(schema + "CREATE VIEW v AS SELECT window_start FROM TABLE(TUMBLE(DATA => TABLE bid, "
                                 "WHEN => DESCRIPTOR(ts), SIZE => INTERVAL '1' SECOND));")


def test_lateral_forms_it_cannot_maintain_are_rejected():
    import pytest
    from planner import compile_program
    from planner.errors import UnsupportedError
    for q, message in [("SELECT * FROM t, LATERAL (SELECT z, ROW_NUMBER() OVER (ORDER BY z) AS r FROM u "
                        "WHERE u.k = t.k) s", "with window functions"),
                       ("SELECT * FROM t, LATERAL (SELECT z, COUNT(*) AS n FROM u WHERE u.k = t.k GROUP BY z "
                        "HAVING MAX(t.x) > 0) s", "correlated other than"),
                       ("SELECT * FROM t, LATERAL (SELECT z FROM u WHERE u.k < t.k) s", "correlated other than"),
                       ("SELECT k, y2 FROM t, LATERAL (SELECT t.x * 2 AS y2) s", "without its relation's name"),
                       ("SELECT * FROM t, LATERAL (SELECT z FROM u WHERE u.k = t.k LIMIT 1) s", "LIMIT and no ORDER BY"),
                       ("SELECT * FROM t FULL JOIN LATERAL (SELECT z FROM u WHERE u.k = t.k) s ON TRUE", "FULL JOIN")]:
        with pytest.raises(UnsupportedError, match=message) as e:
            compile_program(SCHEMA + f"CREATE VIEW v AS {q};")
        assert e.value.column is not None
