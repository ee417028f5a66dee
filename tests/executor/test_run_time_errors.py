"""Run-time failures the differential fuzzer found: each fails a row, never the pipeline.

Where DuckDB fails the whole query, the engine records the failing row in ``sqlengine_errors`` and keeps it out
of the view (a join key that fails matches nothing), and the views equal DuckDB's over the rows that do not
fail.  Where DuckDB does not fail (a BIGINT = DOUBLE key beyond 2^53 compares in DOUBLE), neither does the
engine.  Each runs with steps on the driver and with every step on Spark.
"""
import json

import duckdb
import pytest

from ..support.oracle import bag, diff



def run(make_pipeline, schema, views, inserts):
    p = make_pipeline(schema + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in views.items()))
    for stmt in inserts:
        p.execute(stmt)
    p.wait_for_idle()
    return p


def expected(schema, inserts, query):
    con = duckdb.connect()
    con.execute(schema)
    for stmt in inserts:
        con.execute(stmt)
    return bag(con.execute(query).fetchall())


def got(p, view):
    return bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {view}")])


def test_a_failing_cast_under_not_in_is_a_row_error(make_pipeline, executor):
    schema = "CREATE TABLE t (a INT, s VARCHAR);"
    rows = ["INSERT INTO t VALUES (1, 'abc'), (2, '3'), (3, '1'), (4, NULL)"]
    p = run(make_pipeline, schema, {"v": "SELECT a FROM t WHERE CAST(s AS BIGINT) NOT IN (1, 2)"}, rows)
    # DuckDB fails the query; over the rows that do not fail it gives:
    want = expected(schema, rows, "SELECT a FROM t WHERE s IS DISTINCT FROM 'abc' AND CAST(s AS BIGINT) NOT IN (1, 2)")
    assert not diff(got(p, "v"), want)
    assert p.status()["errors"] == {"v": 1}
    (err,) = p.query("SELECT * FROM sqlengine_errors")
    assert json.loads(err["row"])["s"] == "abc" and "Could not convert" in err["error"]


def test_a_failing_operand_beside_a_null_is_a_row_error(make_pipeline, executor):
    """DuckDB evaluates the right operand of ``<`` (and of NULLIF's comparison) where the left one is NULL, so a
    cast that fails there fails the row; Spark's generated code skips it (fuzz seed 69195): it must be a row
    error on both executors, not a silent NULL."""
    schema = "CREATE TABLE t (a INT, x INT, s VARCHAR);"
    rows = ["INSERT INTO t VALUES (1, NULL, 'abc'), (2, 3, '4'), (3, NULL, '7')"]
    p = run(make_pipeline, schema, {"v": "SELECT a, x < CAST(s AS INT) AS lt, NULLIF(x, CAST(s AS INT)) AS n FROM t"},
            rows)
    assert got(p, "v") == bag([(2, True, 3), (3, None, None)])
    assert p.status()["errors"] == {"v": 1}
    (err,) = p.query("SELECT * FROM sqlengine_errors")
    assert json.loads(err["row"])["s"] == "abc" and "Could not convert" in err["error"]


def test_a_failing_argument_after_a_null_one_is_a_row_error(make_pipeline, executor):
    """DuckDB evaluates every argument of ``POWER``, ``LOG(b, x)`` and ``STRPOS`` where an earlier one is NULL, so
    a cast that fails in a later one fails the row; Spark's generated code skips the later arguments then: a row
    error on both executors, not a silent NULL."""
    schema = "CREATE TABLE t (a INT, x INT, s VARCHAR);"
    rows = ["INSERT INTO t VALUES (1, NULL, 'abc'), (2, 3, '2'), (3, NULL, '7')"]
    views = {"p": "SELECT a, POWER(x, CAST(s AS INT)) AS y FROM t",
             "l": "SELECT a, LOG(x, CAST(s AS INT)) AS y FROM t",
             "i": "SELECT a, STRPOS(CAST(x AS VARCHAR), CAST(CAST(s AS INT) AS VARCHAR)) AS y FROM t"}
    p = run(make_pipeline, schema, views, rows)
    for v in views:
        want = expected(schema, ["INSERT INTO t VALUES (2, 3, '2'), (3, NULL, '7')"], views[v])
        assert not diff(got(p, v), want), v
    assert p.status()["errors"] == {v: 1 for v in views}


def test_an_overflow_in_an_outer_join_key_fails_the_row_not_the_pipeline(make_pipeline, executor):
    schema = "CREATE TABLE t (a INT); CREATE TABLE u (k INT);"
    rows = ["INSERT INTO t VALUES (2147483647), (1), (5)", "INSERT INTO u VALUES (2), (6)"]
    views = {"l": "SELECT t.a, u.k FROM t LEFT JOIN u ON t.a + 1 = u.k",
             "i": "SELECT t.a, u.k FROM t JOIN u ON t.a + 1 = u.k"}
    p = run(make_pipeline, schema, views, rows)
    # the failing key matches nothing: the LEFT JOIN pads its row
    want = expected(schema, rows, "SELECT t.a, u.k FROM t LEFT JOIN u ON (CASE WHEN t.a < 2147483647 THEN t.a + 1 END) = u.k")
    assert not diff(got(p, "l"), want)
    want = expected(schema, rows, "SELECT t.a, u.k FROM t JOIN u ON (CASE WHEN t.a < 2147483647 THEN t.a + 1 END) = u.k")
    assert not diff(got(p, "i"), want)
    assert set(p.status()["errors"]) == {"l", "i"}
    p.execute("INSERT INTO u VALUES (-2147483648)")   # a later step reads the failing row from state
    p.execute("DELETE FROM t WHERE a = 1")
    p.wait_for_idle()
    rows += ["INSERT INTO u VALUES (-2147483648)", "DELETE FROM t WHERE a = 1"]
    want = expected(schema, rows, "SELECT t.a, u.k FROM t LEFT JOIN u ON (CASE WHEN t.a < 2147483647 THEN t.a + 1 END) = u.k")
    assert not diff(got(p, "l"), want)


def test_bigint_equal_to_double_beyond_2_53_compares_in_double(make_pipeline, executor):
    schema = "CREATE TABLE t (a BIGINT); CREATE TABLE u (k DOUBLE);"
    rows = ["INSERT INTO t VALUES (9007199254740993), (1), (-9223372036854775808)",
            "INSERT INTO u VALUES (1.0), (9007199254740992.0), (-9.223372036854775808e18)"]
    q = "SELECT t.a, u.k FROM t JOIN u ON t.a = u.k"
    p = run(make_pipeline, schema, {"v": q}, rows)
    assert not diff(got(p, "v"), expected(schema, rows, q))
    assert not p.status()["errors"]


def test_a_date_after_9999_is_a_row_error(make_pipeline):
    """DuckDB holds 10000-01-01; Spark and Python do not (the fuzzer found a listener failing the pipeline)."""
    p = make_pipeline("CREATE TABLE t (d DATE); CREATE VIEW v AS SELECT d + 1 AS n FROM t;"
                      "CREATE MATERIALIZED VIEW w AS SELECT d + INTERVAL 1 DAY AS n FROM t;", start=False)
    h = p.listen("v")
    p.start()
    p.execute("INSERT INTO t VALUES ('9999-12-31'), ('2024-01-01')")
    p.wait_for_idle()
    assert [str(x) for x in h.to_pandas()["n"]] == ["2024-01-02"]
    assert [str(r["n"]) for r in p.query("SELECT * FROM w")] == ["2024-01-02 00:00:00"]
    assert p.status()["errors"] == {"v": 1, "w": 1}
    errors = list(p.query("SELECT error FROM sqlengine_errors ORDER BY view"))
    assert all("outside the years 1 to 9999" in e["error"] for e in errors)


def test_a_date_after_9999_inside_a_nested_value_is_a_row_error(make_pipeline, executor):
    """The same for a date inside a ROW, an ARRAY or a MAP (fuzz seed 68954: a ROW holding one reached the view's
    listener and failed the pipeline, on both executors)."""
    p = make_pipeline("CREATE TABLE t (k INT, d DATE);"
                      "CREATE VIEW v AS SELECT k, {'n': d + k, 'm': 1} AS r FROM t;"
                      "CREATE MATERIALIZED VIEW w AS SELECT k, [d, d + k] AS l, MAP {'x': d + k} AS m FROM t;",
                      start=False)
    h = p.listen("v")
    p.start()
    p.execute("INSERT INTO t VALUES (2, '9999-12-31'), (1, '2024-01-01'), (0, '9999-12-31')")
    p.wait_for_idle()
    assert sorted(r for r in h.to_pandas()["k"]) == [0, 1]
    assert sorted(r["k"] for r in p.query("SELECT * FROM w")) == [0, 1]
    assert p.status()["errors"] == {"v": 1, "w": 1}
    errors = list(p.query("SELECT error FROM sqlengine_errors ORDER BY view"))
    assert all("outside the years 1 to 9999" in e["error"] for e in errors), errors
    p.execute("DELETE FROM t WHERE k = 2")
    p.wait_for_idle()
    assert p.status()["error"] is None


def test_a_row_that_fails_only_in_a_batch_is_a_row_error(make_pipeline, executor):
    """DuckDB fails ``NULLIF(c, c) / CAST(big AS DECIMAL(10,2))`` over a batch that holds a NULL, not over its one
    row alone (a one-row batch is a constant vector, which it takes shortcuts on), and TRY evaluates rows alone:
    a row is tested beside a row of NULLs, so the row that fails the batch is found and recorded (fuzz)."""
    schema = "CREATE TABLE t (c DECIMAL(18,4), b BIGINT);"
    rows = ["INSERT INTO t VALUES (1.5, 9007199254740993), (NULL, NULL), (2.5, 7)"]
    p = run(make_pipeline, schema, {"v": "SELECT b, NULLIF(c, c) / CAST(b AS DECIMAL(10, 2)) AS o FROM t"}, rows)
    with pytest.raises(duckdb.ConversionException):
        expected(schema, rows, "SELECT NULLIF(c, c) / CAST(b AS DECIMAL(10, 2)) FROM t")
    assert got(p, "v") == bag([(None, None), (7, None)])
    assert p.status()["errors"] == {"v": 1}
    (err,) = p.query("SELECT * FROM sqlengine_errors")
    assert json.loads(err["row"])["b"] == 9007199254740993 and "DECIMAL(10,2)" in err["error"]
