"""The planner: pure, positions in errors, plan and circuit shapes."""
import subprocess
import sys

import pytest

from planner import BindError, ParseError, UnsupportedError, compile_program

T = "CREATE TABLE t (a INT, b VARCHAR, c DOUBLE);\nCREATE TABLE u (a INT, d INT);\n"


def test_planner_imports_neither_spark_nor_pandas():
    code = ("import sys, planner; planner.compile_program('CREATE TABLE t (a INT); CREATE VIEW v AS SELECT a FROM t');"
            "bad = [m for m in ('pyspark', 'pandas', 'pyarrow', 'duckdb') if m in sys.modules];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("view, error, message, at", [
    ("SELECT a, RANK() OVER (ORDER BY COUNT(*)) FROM t GROUP BY CUBE (a)", UnsupportedError,
     "window function with ROLLUP, CUBE or GROUPING SETS", "RANK"),
    ("SELECT a FROM t QUALIFY a > 1", BindError, "QUALIFY needs a window function", "a > 1"),
    ("SELECT a FROM t LIMIT 3", UnsupportedError, "LIMIT or OFFSET without ORDER BY", "3"),
    ("SELECT b, COUNT(*) FROM t GROUP BY b HAVING COUNT(*) > (SELECT COUNT(*) FROM u WHERE u.b = t.b)",
     UnsupportedError, "correlated scalar subquery in the SELECT list or HAVING of a grouped query", "COUNT(*) FROM u"),
    ("SELECT a FROM t WHERE a NOT IN (SELECT a FROM u WHERE u.b = t.b)", UnsupportedError,
     "correlated NOT IN subquery", "a NOT"),
    ("SELECT a, (SELECT DISTINCT b FROM u) AS x FROM t", UnsupportedError, "scalar subquery that is not an aggregate",
     "b FROM"),
    ("SELECT a, (SELECT MAX(u.a) + t.b FROM u WHERE u.b < t.b) AS x FROM t", UnsupportedError,
     "outer column in a scalar subquery's SELECT list", "t.b FROM"),
    ("SELECT t.a FROM t SEMI JOIN u USING (a)", UnsupportedError, "SEMI JOIN without ON", "u USING"),
    ("SELECT a FROM t ORDER BY a LIMIT 1 + 1", UnsupportedError, "LIMIT that is not a non-negative integer", "1 + 1"),
    ("SELECT zz FROM t", BindError, "unknown column 'zz'. Valid columns: t.a, t.b, t.c", "zz"),
    ("SELECT a FROM nope", BindError, "unknown table or view 'nope'", "nope"),
    ("SELECT a FROM t, u", BindError, "ambiguous", "a FROM"),
    ("SELECT a, COUNT(*) FROM t", BindError, "must appear in GROUP BY", "a,"),
    ("SELECT a FROM t WHERE SUM(a) > 1", BindError, "aggregate functions are not allowed in WHERE", "SUM"),
    ("SELECT approx_count_distinct(a) FROM t", UnsupportedError, "aggregate function", "approx_count_distinct"),
])
def test_errors_point_into_the_sql(view, error, message, at):
    with pytest.raises(error) as e:
        compile_program(T + "CREATE VIEW v AS " + view)
    assert message in str(e.value)
    expected_column = len("CREATE VIEW v AS ") + view.index(at) + 1
    assert (e.value.line, e.value.column) == (3, expected_column), str(e.value)
    assert "^" in str(e.value)


def test_parse_error_has_position():
    with pytest.raises(ParseError) as e:
        compile_program(T + "CREATE VIEW v AS SELECT (a FROM t")
    assert e.value.line == 3


def test_unsupported_type_and_statement():
    with pytest.raises(UnsupportedError, match="column type"):
        compile_program("CREATE TABLE t (a MAP(INTERVAL, INT))")
    with pytest.raises(UnsupportedError, match="INSERT"):
        compile_program("CREATE TABLE t (a INT); INSERT INTO t VALUES (1)")


def test_views_share_subplans_and_state():
    p = compile_program(T + "CREATE VIEW v1 AS SELECT a, COUNT(*) AS n FROM t GROUP BY a;"
                            "CREATE VIEW v2 AS SELECT a, COUNT(*) AS n FROM t GROUP BY a;")
    assert p.circuit.outputs["v1"].delta == p.circuit.outputs["v2"].delta


def test_circuit_declares_algebra():
    p = compile_program(T + "CREATE MATERIALIZED VIEW j AS SELECT t.b, SUM(u.d) AS s, MAX(u.d) AS m "
                            "FROM t JOIN u ON t.a = u.a WHERE t.c > 0 GROUP BY t.b")
    kinds = {op.kind: op for op in p.circuit.ops}
    join = kinds["join"]
    assert join.algebra == "bilinear"
    assert all(p.circuit.ops[r].kind == "integrate" for r in join.reads)
    agg = kinds["aggregate"]
    assert agg.mode == "recompute" and agg.algebra == "stateful"   # MAX needs the group's values
    text = p.explain("j")
    assert "logical plan:" in text and "incremental circuit:" in text and "Join ON c0 = c2" in text   # t.c pruned
    p2 = compile_program(T + "CREATE VIEW g AS SELECT b, SUM(a) AS s, COUNT(*) AS n FROM t GROUP BY b")
    assert [op.mode for op in p2.circuit.ops if op.kind == "aggregate"] == ["accumulate"]
    # a running sum of floats would depend on the order of the steps: SUM(DOUBLE) recomputes its groups, and
    # retracts what it emitted, read from the integral of its own output
    p3 = compile_program(T + "CREATE VIEW g AS SELECT a, SUM(c) AS s, COUNT(*) AS n FROM t GROUP BY a")
    (agg,) = [op for op in p3.circuit.ops if op.kind == "aggregate"]
    own = p3.circuit.ops[agg.reads[1]]
    assert agg.mode == "recompute" and own.kind == "integrate" and own.inputs == (agg.id,)


def test_filters_are_pushed_below_joins():
    p = compile_program(T + "CREATE VIEW j AS SELECT t.b FROM t, u WHERE t.a = u.a AND t.c > 1 AND u.d < 3")
    plan = p.views["j"].plan
    text = p.explain("j")
    assert text.index("Join") < text.index("Filter c2 > 1") and "Filter c1 < 3" in text


def test_scalar_subqueries_over_the_same_outer_columns_share_their_domain():
    """The second subquery's domain is DISTINCT a.x of ``a`` (not of ``a`` joined with the first's groups), so
    both subqueries read one domain and one domain-side join."""
    schema = "CREATE TABLE a (k INT, x INT); CREATE TABLE b (k INT, y INT);"
    one = compile_program(schema + "CREATE VIEW v AS SELECT a.k, "
                          "(SELECT COUNT(*) FROM b WHERE b.y < a.x) AS n FROM a")
    two = compile_program(schema + "CREATE VIEW v AS SELECT a.k, (SELECT COUNT(*) FROM b WHERE b.y < a.x) AS n, "
                          "(SELECT MAX(b.k) FROM b WHERE b.y < a.x) AS m FROM a")
    assert sum(op.kind == "distinct" for op in two.circuit.ops) == 1
    assert sum(op.kind == "join" for op in two.circuit.ops) == sum(op.kind == "join" for op in one.circuit.ops) + 1
