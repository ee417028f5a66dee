"""User-defined functions: Python functions (vectorised over Arrow, or a row at a time) and SQL functions and
macros, under random inserts and deletes on both executors, each view compared with DuckDB after every step.

The oracle's DuckDB runs the same Python functions as its own UDFs (Arrow ones for the vectorised functions,
native ones for the others) and the SQL functions as macros.  A function that raises on a row sends that row
to the error relation; a program that calls a function wrongly is rejected at compile time with a position.
"""
from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from duckdb.func import ARROW, NATIVE, SPECIAL
from hypothesis import given
from hypothesis import strategies as st

import sqlengine
from sqlengine import udf

from ..support.differential import maybe, run_program, runs_on, steps_strategy


@udf("DOUBLE", ["DOUBLE"])
def half(x: pa.Array) -> pa.Array:
    return pc.divide(x, 2.0)


@udf("DATE", ["TIMESTAMP"])
def day_of(ts: pa.Array) -> pa.Array:
    return pc.cast(ts, pa.date32())


@udf("DECIMAL(12, 2)", ["DECIMAL(6, 2)"])
def tripled(d: pa.Array) -> pa.Array:
    return pc.multiply(d, pa.scalar(Decimal("3"), pa.decimal128(1, 0)))


@udf("BIGINT")   # no parameter types: the argument comes as it is (an INT here)
def bump(x: pa.Array) -> pa.Array:
    return pc.add_checked(pc.cast(x, pa.int64()), 1)


@udf("VARCHAR", ["VARCHAR", "INT"], vectorized=False)
def label(s, n):
    return None if s is None or n is None else f"{s}:{n}"


UDFS = [half, day_of, tripled, bump, label]
PRELUDE = ("CREATE FUNCTION scaled(x INT, y INT) RETURNS BIGINT AS x * y + 1;"
           "CREATE MACRO clamp(x, lo, hi) AS LEAST(GREATEST(x, lo), hi);"
           "CREATE FUNCTION sign_of(x DOUBLE) RETURNS INT LANGUAGE PYTHON AS $$\n"
           "def sign_of(x):\n"
           "    return None if x is None else (x > 0) - (x < 0)\n"
           "$$;")


def sign_of(x):
    return None if x is None else (x > 0) - (x < 0)


def oracle(con: duckdb.DuckDBPyConnection) -> None:
    for u in UDFS:
        params = [t.sql for t in u.params] if u.params is not None else None
        con.create_function(u.name, u.fn, params, u.returns.sql, type=ARROW if u.vectorized else NATIVE,
                            null_handling=SPECIAL)
    con.create_function("sign_of", sign_of, ["DOUBLE"], "INT", null_handling=SPECIAL)
    con.execute("CREATE MACRO scaled(x, y) AS CAST(CAST(x AS INT) * CAST(y AS INT) + 1 AS BIGINT)")
    con.execute("CREATE MACRO clamp(x, lo, hi) AS LEAST(GREATEST(x, lo), hi)")


SCHEMA = ("CREATE TABLE t (id INT, g INT, x DOUBLE, d DECIMAL(6,2), s VARCHAR, ts TIMESTAMP);"
          "CREATE TABLE u (k BIGINT, y VARCHAR);")
COLUMNS = {"t": ["id", "g", "x", "d", "s", "ts"], "u": ["k", "y"]}
import datetime as _dt   # noqa: E402
ROW_T = st.tuples(maybe(range(-2, 6)), maybe(range(3)), maybe([0.5, -1.25, 3.0, 0.0, 7.5]),
                  maybe([Decimal("1.50"), Decimal("-2.25"), Decimal("0.00"), Decimal("9999.99")]),
                  maybe(["a", "b", ""]),
                  maybe([_dt.datetime(2024, 2, 29, 23, 59, 59), _dt.datetime(2024, 3, 1, 0, 0, 1)]))
ROW_U = st.tuples(maybe(range(-1, 7)), maybe(["p", "q"]))

VIEWS = [
    ("v_map", "SELECT id, half(x) AS h, day_of(ts) AS dd, tripled(d) AS td, bump(id) AS b, label(s, g) AS l, "
              "sign_of(x) AS sg FROM t", True),
    ("v_group", "SELECT label(s, 0) AS k, SUM(half(x)) AS hs, MAX(tripled(d)) AS mt, COUNT(*) AS n FROM t "
                "WHERE bump(g) > 1 GROUP BY label(s, 0)", True),
    ("v_join", "SELECT t.id, u.y, half(t.x) AS h FROM t JOIN u ON bump(t.id) = u.k", True),
    ("v_sql", "SELECT id, scaled(id, g) AS sc, clamp(x, -1.0, 1.0) AS cl, scaled(CAST(bump(g) AS INT), 2) AS nested FROM t",
     True),
    ("v_on_top", "SELECT sg, COUNT(*) AS n FROM v_map GROUP BY sg", False),
]


@given(steps_strategy({"t": ROW_T, "u": ROW_U}, max_steps=4))
def test_user_functions_against_duckdb(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps, prelude=PRELUDE, oracle_setup=oracle, udfs=UDFS)


@udf("INT", ["INT"], vectorized=False)
def picky(n):
    if n == 13:
        raise ValueError("13 is unlucky")
    return n * 2


@udf("INT", ["INT"])
def wrong_type(n):
    return pc.cast(n, pa.string())


def test_a_function_that_raises_fails_the_row_not_the_pipeline(make_pipeline, executor):
    p = make_pipeline("CREATE TABLE t (k INT);"
                      "CREATE MATERIALIZED VIEW v AS SELECT k, picky(k) AS p FROM t;"
                      "CREATE MATERIALIZED VIEW w AS SELECT k, wrong_type(k) AS p FROM t;", udfs=[picky, wrong_type])
    p.execute("INSERT INTO t VALUES (1), (13), (2)")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == [(1, 2), (2, 4)]
    assert list(p.query("SELECT * FROM w")) == []
    errors = p.query_pandas("SELECT view, error FROM sqlengine_errors")
    assert p.status()["errors"] == {"v": 1, "w": 3}
    assert errors[errors.view == "v"].error.str.contains("13 is unlucky").all()
    assert errors[errors.view == "w"].error.str.contains("returned string where it is declared INT").all()
    p.execute("DELETE FROM t WHERE k = 1")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == [(2, 4)]


@pytest.mark.parametrize("sql, message", [
    ("CREATE VIEW v AS SELECT half(x, x) FROM t", "function half takes 1 argument, not 2"),
    ("CREATE FUNCTION f(a INT) RETURNS INT AS a + 1; CREATE VIEW v AS SELECT f() FROM t",
     "function f takes 1 argument, not 0"),
    ("CREATE FUNCTION upper(a VARCHAR) RETURNS VARCHAR AS a", "function upper is a built-in function"),
    ("CREATE FUNCTION f(a INT) RETURNS INT AS a + b", "unknown column 'b' in function f"),
    ("CREATE FUNCTION f(a INT) AS a + 1", "function f needs RETURNS"),
    ("CREATE FUNCTION f(a UBIGINT) RETURNS INT AS 1", "type UBIGINT of parameter a is not supported"),
    ("CREATE FUNCTION f(a INTERVAL) RETURNS INT LANGUAGE PYTHON AS 'm:f'", "cannot take or return an INTERVAL"),
    ("CREATE FUNCTION f(a INT) RETURNS INT LANGUAGE JAVASCRIPT AS 'x'", "LANGUAGE JAVASCRIPT is not supported"),
    ("CREATE FUNCTION f(a INT) RETURNS INT LANGUAGE PYTHON AS 'no_such_module_here:f'",
     "cannot import module no_such_module_here"),
    ("CREATE FUNCTION f(a INT) RETURNS INT LANGUAGE PYTHON AS $$\nx = 1\n$$", "must define one function"),
    ("CREATE MACRO m(a) AS a; CREATE MACRO m(b) AS b", "function m is defined twice"),
    ("CREATE FUNCTION f(a INT) RETURNS INT AS (SELECT 1)", "must be an expression"),
    ("CREATE VIEW v AS SELECT roll(x) FROM t", "declared non-deterministic"),
    # arguments convert to the parameters' types only where DuckDB converts implicitly
    ("CREATE VIEW v AS SELECT half(CAST(x AS DATE)) FROM t", "cannot pass DATE as DOUBLE"),
    ("CREATE VIEW v AS SELECT half('one') FROM t", "cannot pass 'one' as DOUBLE"),
    ("CREATE FUNCTION f(a INT) RETURNS INT AS a + 1; CREATE VIEW v AS SELECT f(x) FROM t",
     "cannot pass DOUBLE as INTEGER"),
    ("CREATE FUNCTION f(a INT) RETURNS INT AS a + 1; CREATE VIEW v AS SELECT f(CAST(x AS BIGINT)) FROM t",
     "cannot pass BIGINT as INTEGER"),
    ("CREATE FUNCTION f(a VARCHAR) RETURNS INT AS LENGTH(a); CREATE VIEW v AS SELECT f(x) FROM t",
     "cannot pass DOUBLE as VARCHAR"),
])
def test_rejected_at_compile_time_with_a_position(sql, message):
    @udf("DOUBLE", ["DOUBLE"], deterministic=False)
    def roll(x):
        return x
    with pytest.raises(sqlengine.EngineError) as e:
        sqlengine.Pipeline.from_sql("CREATE TABLE t (x DOUBLE);" + sql, udfs=[half, roll])
    assert message in str(e.value)
    assert "line 1, column" in str(e.value) or "line 2, column" in str(e.value)


def test_python_functions_given_twice_or_named_as_builtins_are_rejected():
    with pytest.raises(sqlengine.EngineError, match="given twice"):
        sqlengine.Pipeline.from_sql("CREATE TABLE t (x DOUBLE);", udfs=[half, half])
    with pytest.raises(sqlengine.EngineError, match="built-in"):
        sqlengine.Pipeline.from_sql("CREATE TABLE t (x DOUBLE);", udfs=[udf("DOUBLE", name="abs")(lambda x: x)])


@sqlengine.udaf("DOUBLE", ["DOUBLE", "DOUBLE"])
class WeightedMean:
    """SUM(x * w) / SUM(w) over the rows where neither is NULL; NULL without weight."""

    def create(self):
        return [0.0, 0.0]

    def accumulate(self, acc, x, w):
        if x is not None and w is not None:
            acc[0] += x * w
            acc[1] += w

    def finish(self, acc):
        return acc[0] / acc[1] if acc[1] else None


@sqlengine.udaf("VARCHAR", ["VARCHAR"])
class Joined:
    """The distinct non-NULL texts, sorted, joined by '+' (an immutable accumulator)."""

    def create(self):
        return frozenset()

    def accumulate(self, acc, s):
        return acc if s is None else acc | {s}

    def finish(self, acc):
        return "+".join(sorted(acc)) if acc else None


@sqlengine.udaf("BIGINT", ["VARCHAR"])
class Tally:
    """COUNT(s): 0 over no rows, where most aggregates are NULL."""

    def create(self):
        return 0

    def accumulate(self, acc, s):
        return acc + (s is not None)

    def finish(self, acc):
        return acc


AGG_SCHEMA = "CREATE TABLE t (g INT, x DOUBLE, w DOUBLE, s VARCHAR, k BIGINT);"
AGG_COLUMNS = {"t": ["g", "x", "w", "s", "k"]}
AGG_ROW = st.tuples(maybe(range(3)), maybe([0.5, -1.25, 3.0, 0.0, 8.0]), maybe([1.0, 2.0, 0.5, 0.0]),
                    maybe(["a", "b", "ab", ""]), maybe(range(-3, 4)))
AGG_VIEWS = [
    ("a_group", "SELECT g, weightedmean(x, w) AS wm, joined(s) AS j, COUNT(*) AS n FROM t GROUP BY g", True,
     "SELECT g, SUM(x * w) FILTER (WHERE x IS NOT NULL AND w IS NOT NULL) / "
     "NULLIF(SUM(w) FILTER (WHERE x IS NOT NULL AND w IS NOT NULL), 0) AS wm, "
     "STRING_AGG(DISTINCT s, '+' ORDER BY s) AS j, COUNT(*) AS n FROM t GROUP BY g"),
    ("a_filter", "SELECT g, joined(s) FILTER (WHERE k > 0) AS j, joined(CAST(k AS VARCHAR)) AS ks FROM t GROUP BY g",
     True,
     "SELECT g, STRING_AGG(DISTINCT s, '+' ORDER BY s) FILTER (WHERE k > 0) AS j, "
     "STRING_AGG(DISTINCT CAST(k AS VARCHAR), '+' ORDER BY CAST(k AS VARCHAR)) AS ks FROM t GROUP BY g"),
    ("a_global", "SELECT weightedmean(x, 1.0) AS m, joined(s) AS j FROM t", True,
     "SELECT AVG(x) AS m, STRING_AGG(DISTINCT s, '+' ORDER BY s) AS j FROM t"),
    # in correlated subqueries, where a row without inner rows takes the aggregate's value over no rows
    ("a_correlated_eq", "SELECT g, (SELECT tally(i.s) FROM t AS i WHERE i.g = o.g + 1) AS n, "
     "(SELECT tally('x') FROM t AS i WHERE i.g = o.g + 1) AS m FROM t AS o", True,
     "SELECT g, (SELECT COUNT(i.s) FROM t AS i WHERE i.g = o.g + 1) AS n, "
     "(SELECT COUNT(*) FROM t AS i WHERE i.g = o.g + 1) AS m FROM t AS o"),
    ("a_correlated_lt", "SELECT k, (SELECT tally(i.s) FROM t AS i WHERE i.k > o.k) AS n, "
     "(SELECT tally('x') FROM t AS i WHERE i.k > o.k) AS m, (SELECT joined('x') FROM t AS i WHERE i.k > o.k) AS j "
     "FROM t AS o", True,
     "SELECT k, (SELECT COUNT(i.s) FROM t AS i WHERE i.k > o.k) AS n, "
     "(SELECT COUNT(*) FROM t AS i WHERE i.k > o.k) AS m, (SELECT MAX('x') FROM t AS i WHERE i.k > o.k) AS j "
     "FROM t AS o"),
]


@given(steps_strategy({"t": AGG_ROW}, max_steps=4))
def test_python_aggregates_against_duckdb(make_pipeline, steps):
    run_program(make_pipeline, AGG_SCHEMA, AGG_COLUMNS, AGG_VIEWS, steps, udfs=[WeightedMean, Joined, Tally])


@sqlengine.udaf("VARCHAR", ["VARCHAR", "BIGINT"])
class FirstRow:
    """The first row given, as text: a result that depends on the order of the rows."""

    def create(self):
        return None

    def accumulate(self, acc, s, k):
        return acc if acc is not None else f"{s}:{k}"

    def finish(self, acc):
        return acc


ORDER_VIEWS = [
    ("a_first", "SELECT g, firstrow(s, k) AS f, firstrow(s, k) FILTER (WHERE x > 0) AS fx FROM t GROUP BY g", True,
     "SELECT g, FIRST(COALESCE(s, 'None') || ':' || COALESCE(CAST(k AS VARCHAR), 'None') ORDER BY s NULLS LAST, "
     "k NULLS LAST) AS f, FIRST(COALESCE(s, 'None') || ':' || COALESCE(CAST(k AS VARCHAR), 'None') ORDER BY s "
     "NULLS LAST, k NULLS LAST) FILTER (WHERE x > 0) AS fx FROM t GROUP BY g"),
]


@given(steps_strategy({"t": AGG_ROW}, max_steps=4))
def test_python_aggregates_take_the_rows_in_one_order_on_both_executors(make_pipeline, executor, steps):
    """Rows in DuckDB's order of (s, k), NULL fields last, on Spark too (which orders a NULL field first)."""
    if runs_on(executor, "udaf_order"):
        run_program(make_pipeline, AGG_SCHEMA, AGG_COLUMNS, ORDER_VIEWS, steps, udfs=[FirstRow])


def test_an_aggregate_needs_its_methods_and_arguments():
    with pytest.raises(sqlengine.EngineError, match="has no finish"):
        sqlengine.udaf("INT", ["INT"])(type("NoFinish", (), {"create": lambda s: 0, "accumulate": lambda s, a, x: a}))
    with pytest.raises(sqlengine.EngineError) as e:
        sqlengine.Pipeline.from_sql("CREATE TABLE t (x DOUBLE, w DOUBLE);\n"
                                    "CREATE VIEW v AS SELECT weightedmean(DISTINCT x, w) FROM t", udfs=[WeightedMean])
    assert "DISTINCT or ORDER BY in a call of aggregate function weightedmean" in str(e.value)
    assert "line 2" in str(e.value)


def test_ad_hoc_queries_and_execute_call_the_programs_functions(make_pipeline):
    p = make_pipeline("CREATE MACRO big(x) AS x > 10;"
                      "CREATE TABLE t (g INT, x DOUBLE, w DOUBLE);"
                      "CREATE MATERIALIZED VIEW v AS SELECT g, half(x) AS h FROM t;", udfs=[half, WeightedMean])
    p.execute("INSERT INTO t VALUES (1, 20, 1), (1, 4, 3), (2, 30, 1)")
    p.wait_for_idle()
    got = p.query("SELECT g, weightedmean(x, w) AS m, weightedmean(x, w) FILTER (WHERE big(x)) AS mb, "
                  "SUM(half(x)) AS s FROM t GROUP BY g ORDER BY g")
    assert [tuple(r.values()) for r in got] == [(1, 8.0, 20.0, 12.0), (2, 30.0, 30.0, 15.0)]
    assert p.execute("DELETE FROM t WHERE big(x) AND half(x) < 12") == 1
    p.execute("INSERT INTO t SELECT g + 10, half(x), w FROM t WHERE NOT big(x)")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == [(1, 2.0), (2, 15.0), (11, 1.0)]


def test_a_restart_with_other_code_for_a_function_recomputes_the_views_that_call_it(tmp_path):
    """The function's code is part of the program: restarting with other code backfills the views that call it
    from their tables (so a later delete retracts what is stored), and keeps the others' state."""
    sql = ("CREATE TABLE t (k INT, x DOUBLE);"
           "CREATE MATERIALIZED VIEW v AS SELECT k, scaled(x) AS y FROM t;"
           "CREATE MATERIALIZED VIEW w AS SELECT k, SUM(x) AS s FROM t GROUP BY k;")

    def version(factor):
        @udf("DOUBLE", ["DOUBLE"], name="scaled")
        def scaled(x):
            return pc.multiply(x, factor)
        return scaled
    store = str(tmp_path / "s")
    p = sqlengine.Pipeline.from_sql(sql, storage_dir=store, udfs=[version(2.0)],
                                    spark_conf={"sqlengine.spark.start": "lazy"})
    p.start()
    p.execute("INSERT INTO t VALUES (1, 1.0), (2, 2.0)")
    p.wait_for_idle()
    p.stop()
    q = sqlengine.Pipeline.from_sql(sql, storage_dir=store, udfs=[version(10.0)],
                                    spark_conf={"sqlengine.spark.start": "lazy"})
    q.start()
    assert sorted(tuple(r.values()) for r in q.query("SELECT * FROM v")) == [(1, 10.0), (2, 20.0)]
    q.execute("DELETE FROM t WHERE k = 1")
    q.wait_for_idle()
    assert sorted(tuple(r.values()) for r in q.query("SELECT * FROM v")) == [(2, 20.0)]
    assert sorted(tuple(r.values()) for r in q.query("SELECT * FROM w")) == [(2, 2.0)]
    q.stop()


def test_a_python_aggregate_takes_null_fields_last_on_both_executors(make_pipeline, executor):
    p = make_pipeline(AGG_SCHEMA + "CREATE MATERIALIZED VIEW f AS SELECT g, firstrow(s, k) AS f FROM t GROUP BY g;",
                      udfs=[FirstRow])
    p.execute("INSERT INTO t (g, s, k) VALUES (1, NULL, 1), (1, 'a', NULL), (1, 'a', 1), (2, NULL, 1), (2, NULL, NULL)")
    p.wait_for_idle()
    p.execute("INSERT INTO t (g, s, k) VALUES (1, 'a', 0)")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM f")) == [(1, "a:0"), (2, "None:1")]
    assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error


@sqlengine.udaf("BIGINT", ["BIGINT"], name="picky_sum")
class PickySum:
    """A sum that cannot take 13: a group holding a 13 has no value."""

    def create(self):
        return 0

    def accumulate(self, acc, x):
        if x == 13:
            raise ValueError("13 is unlucky")
        return acc + (x or 0)

    def finish(self, acc):
        return acc


def test_a_python_aggregate_that_raises_fails_the_group_not_the_pipeline(make_pipeline, executor):
    """The group whose value raises is a row error (its key, the function's message) and has no row in the
    view; the row it had is retracted as it was emitted; once the failing row is deleted, the group comes back.
    The other groups, and the other aggregates of the same groups, go on."""
    p = make_pipeline("CREATE TABLE t (g INT, x BIGINT);"
                      "CREATE MATERIALIZED VIEW v AS SELECT g, picky_sum(x) AS s, COUNT(*) AS n FROM t GROUP BY g;"
                      "CREATE MATERIALIZED VIEW w AS SELECT picky_sum(x) AS s FROM t;", udfs=[PickySum])
    p.execute("INSERT INTO t VALUES (1, 1), (1, 2), (2, 5)")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == [(1, 3, 2), (2, 5, 1)]
    p.execute("INSERT INTO t VALUES (1, 13), (2, 6)")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == [(2, 11, 2)]
    assert list(p.query("SELECT * FROM w")) == []
    errors = p.query_pandas("SELECT view, operator, error, row FROM sqlengine_errors")
    assert p.status()["errors"] == {"v": 1, "w": 1}, errors
    assert errors.error.str.contains("13 is unlucky").all()
    assert errors[errors.view == "v"].row.str.contains('"g": 1').all()
    p.execute("DELETE FROM t WHERE x = 13")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == [(1, 3, 2), (2, 11, 2)]
    assert [tuple(r.values()) for r in p.query("SELECT * FROM w")] == [(14,)]
    assert p.status()["error"] is None
