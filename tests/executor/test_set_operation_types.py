"""UNION / INTERSECT / EXCEPT of branches whose column types differ: the result columns are widened as DuckDB
widens them (``planner.types.set_operation_type``), on both executors.  A BIGINT beyond 2^53 beside a DOUBLE is
computed in DOUBLE, as DuckDB does, and never cast back to BIGINT (9223372036854775807 once came back as
-9223372036854775808: fuzz seed 91356)."""
import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, runs_on, steps_strategy

SCHEMA = """CREATE TABLE t (id INT NOT NULL, b BIGINT, ti TINYINT, d DATE, v VARCHAR);
CREATE TABLE u (id INT NOT NULL, x DOUBLE, i INT, ts TIMESTAMP, r REAL);"""
COLUMNS = {"t": ["id", "b", "ti", "d", "v"], "u": ["id", "x", "i", "ts", "r"]}

BIG = [9223372036854775807, -9223372036854775808, 9007199254740993, 0, 3]
T_ROW = st.tuples(st.integers(0, 4), maybe(BIG), maybe([-128, 127, 1, 3]),
                  maybe([dt.date(2024, 2, 29), dt.date(2023, 12, 31)]), maybe(["a", "2024-02-29", ""]))
U_ROW = st.tuples(st.integers(0, 4), maybe([9.223372036854776e18, 3.0, 1.5, -0.0]), maybe([1, 3, 2147483647]),
                  maybe([dt.datetime(2024, 2, 29), dt.datetime(2023, 12, 31, 12)]), maybe([1.5, 3.0]))
TABLES = {"t": T_ROW, "u": U_ROW}

VIEWS = [
    ("v_except", "SELECT b FROM t EXCEPT SELECT x FROM u", True),
    ("v_except_all", "SELECT b, ti FROM t EXCEPT ALL SELECT x, i FROM u", True),
    ("v_intersect", "SELECT ti, d FROM t INTERSECT SELECT i, ts FROM u", True),
    ("v_union", "SELECT b, d, v FROM t UNION SELECT x, ts, ts FROM u", True),
    ("v_union_all", "SELECT ti, v FROM t UNION ALL SELECT r, ts FROM u UNION ALL SELECT i, x FROM u", True),
    ("v_except_null_extract", "SELECT b FROM t EXCEPT SELECT EXTRACT(DOW FROM CAST(NULL AS TIMESTAMP)) FROM u",
     True),
    ("v_over_union", "SELECT b + 1 AS b1, COUNT(*) AS n FROM (SELECT b FROM t UNION ALL SELECT x FROM u) s "
                     "GROUP BY b + 1", True),
]


@given(steps_strategy(TABLES))
def test_set_operations_widen_types(make_pipeline, executor, steps):
    if runs_on(executor, "set_operation_types"):
        run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)


def test_planned_types_are_widened():
    from planner import compile_program
    p = compile_program(SCHEMA + "CREATE VIEW v AS SELECT b, ti, d, v FROM t UNION ALL SELECT x, i, ts, r FROM u;"
                        "CREATE VIEW w AS SELECT ti FROM t EXCEPT SELECT i FROM u;")
    assert [str(f.type) for f in p.views["v"].plan.fields] == ["DOUBLE", "INT", "TIMESTAMP", "VARCHAR"]
    assert [str(f.type) for f in p.views["w"].plan.fields] == ["INT"]
