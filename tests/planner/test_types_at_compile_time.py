"""A program that compiles never fails a step because of its types (planner/column_check.py).

* Views whose columns, keys or aggregate arguments are of a type the executors do not store (unsigned
  integers, nested values holding INTERVALs, ...) or that the planner cannot tell are rejected at compile time, naming the view, the
  column and its type, at the expression.  Nested values of the other types compile, with DuckDB's types.
* Every function of DuckDB's catalogue, called with typical arguments: if the binder accepts it, DuckDB's result
  type is one the executors store.
* Every function of README.md's SQL reference: it compiles and a one-step run agrees with DuckDB, or it is
  rejected at compile time; never a failed step.
"""
import datetime

import duckdb
import pytest

from planner import compile_program
from planner.column_check import storable
from planner.errors import EngineError, UnsupportedError
from planner.nested_types import from_duckdb_name

SCHEMA = ("CREATE TABLE t (k INT, b BIGINT, x DOUBLE, n DECIMAL(10, 2), v VARCHAR, d DATE, ts TIMESTAMP, "
          "bo BOOLEAN)")


def rejected(view: str) -> UnsupportedError:
    sql = SCHEMA + ";\nCREATE VIEW w AS " + view
    with pytest.raises(UnsupportedError) as info:
        compile_program(sql)
    return info.value


@pytest.mark.parametrize("view, what, type_, at", [
    ("SELECT k, CAST(k AS UBIGINT) AS u FROM t", "column u", "UBIGINT", "k AS"),
    ("SELECT MAP {ts - TIMESTAMP '2024-01-01': 1} AS m FROM t", "column m", "(a MAP)", "ts -"),
])
def test_a_column_of_a_type_views_cannot_hold_is_rejected_at_its_expression(view, what, type_, at):
    err = rejected(view)
    assert f"view w: {what} has type" in err.message and type_ in err.message, err.message
    assert "which a view cannot hold" in err.message
    line = (SCHEMA + ";\nCREATE VIEW w AS " + view).split("\n")[1]
    assert (err.line, err.column) == (2, line.index(at) + 1), str(err)


@pytest.mark.parametrize("view, types", [
    ("SELECT k, string_split(v, ',') AS s FROM t", ["INT", "VARCHAR[]"]),
    ("SELECT [k, 2] AS l, struct_pack(a := k) AS s, MAP([k], [v]) AS m FROM t",
     ["INT[]", "STRUCT(a INT)", "MAP(INT, VARCHAR)"]),
    ("SELECT json_keys(v) AS j, range(b) AS r, list_value(k) AS l FROM t", ["VARCHAR[]", "BIGINT[]", "INT[]"]),
    ("SELECT DISTINCT [k] AS l FROM t", ["INT[]"]),
    ("SELECT CAST(MAP {} AS MAP(VARCHAR, INT)) AS m FROM t", ["MAP(VARCHAR, INT)"]),   # (sqlglot wrote MAP MAP())
    ("SELECT string_split(v, ',') AS s, COUNT(*) AS c FROM t GROUP BY 1", ["VARCHAR[]", "BIGINT"]),
    ("SELECT CAST(v AS JSON) AS j, json_extract(v, '$.a') AS e, v::JSON->>'a' AS s FROM t",
     ["JSON", "JSON", "VARCHAR"]),
])
def test_nested_and_json_columns_compile_with_duckdbs_types(view, types):
    p = compile_program(SCHEMA + ";\nCREATE VIEW w AS " + view)
    assert [f.type.sql for f in p.views["w"].plan.fields] == types


@pytest.mark.parametrize("view, message, at", [
    ("SELECT (SELECT 'x' FROM t AS b WHERE a.l = b.n) AS s FROM u AS a", "cannot compare DECIMAL(10, 2)[] with "
     "DECIMAL(10, 2)", "a.l ="),
    ("SELECT a.k FROM u AS a WHERE EXISTS (SELECT 1 FROM t AS b WHERE a.l = b.n)", "cannot compare", "a.l ="),
    ("SELECT k FROM t WHERE n IN (SELECT l FROM u)", "cannot compare DECIMAL(10, 2) with DECIMAL(10, 2)[]",
     "n IN"),
    ("SELECT k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.ts)", "cannot compare INTEGER with TIMESTAMP",
     "u.k ="),
    ("SELECT k FROM u JOIN t USING (k) WHERE u.l = t.n", "cannot compare", "u.l ="),
    ("SELECT n FROM t UNION SELECT l FROM u", "UNION column 1: cannot combine DECIMAL(10, 2) with "
     "DECIMAL(10, 2)[]", "l FROM u"),
    ("SELECT l FROM u EXCEPT SELECT n FROM t", "EXCEPT column 1: cannot combine", "n FROM t"),
    ("SELECT l + 1 AS p FROM u", "cannot apply + to DECIMAL(10, 2)[] and INTEGER", "l +"),
    ("SELECT CAST(ABS(l) AS INT) AS p FROM u", "No function matches the given name and argument types "
     "'abs(DECIMAL(10,2)[])'", "ABS(l)"),   # (fuzz seed 92: DuckDB types it; the CAST around it hid it)
    ("SELECT k FROM u WHERE l IN (1.5, 2)", "cannot compare DECIMAL(10, 2)[] with DECIMAL", "1.5"),
])
def test_a_nested_value_beside_a_scalar_is_an_error_at_compile_time(view, message, at):
    """DuckDB binds these and then fails on every row ("Unimplemented type for cast"), or rejects them; the
    correlated and IN forms are join keys bound one side at a time (fuzz seed 70181)."""
    sql = SCHEMA + ";\nCREATE TABLE u (k INT, l DECIMAL(10, 2)[]);\nCREATE VIEW w AS " + view
    with pytest.raises(EngineError) as info:
        compile_program(sql)
    assert message in info.value.message, info.value.message
    assert (info.value.line, info.value.column) == (3, sql.split("\n")[2].index(at) + 1), str(info.value)


def test_unsigned_values_inside_a_nested_value_become_signed():
    """``[cardinality(...), 3]`` is a UBIGINT[] in DuckDB: a BIGINT[] here, UNNESTed too (fuzz seed 70143)."""
    p = compile_program(SCHEMA + ";\nCREATE VIEW w AS SELECT u.x, [len(v)] AS l, {'a': len(v)} AS s FROM t "
                        "JOIN UNNEST([cardinality([k, b]), 3]) AS u(x) ON TRUE")
    assert [f.type.sql for f in p.views["w"].plan.fields] == ["BIGINT", "BIGINT[]", "STRUCT(a BIGINT)"]
    # BIGINT beside UBIGINT is a HUGEINT in DuckDB: DECIMAL(38, 0), as a SUM of integers (fuzz seed 70449)
    p = compile_program(SCHEMA + ";\nCREATE VIEW w AS SELECT [b, cardinality([b])] AS l FROM t")
    assert [f.type.sql for f in p.views["w"].plan.fields] == ["DECIMAL(38, 0)[]"]
    # a ROW's field names keep their case (fuzz seed 70782: the type's text was made upper case, 'b' became 'B')
    p = compile_program(SCHEMA + ";\nCREATE VIEW w AS SELECT {'_0': cardinality([k]), 'b': k} AS s FROM t")
    assert [f.type.sql for f in p.views["w"].plan.fields] == ['STRUCT(_0 BIGINT, b INT)']


def test_nested_values_inside_an_expression_are_fine():
    p = compile_program(SCHEMA + ";\nCREATE VIEW w AS SELECT len(string_split(v, ',')) AS n, "
                        "string_split(v, ',')[1] IS NULL AS e, list_contains([k, 2], 2) AS c, NULL AS z FROM t")
    assert [str(f.type) for f in p.views["w"].plan.fields][:3] == ["BIGINT", "BOOLEAN", "BOOLEAN"]


# ------------------------------------------------------------------ DuckDB's catalogue
STORABLE = {"BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "VARCHAR", "DATE",
            "TIMESTAMP", "JSON", "TIMESTAMP WITH TIME ZONE", "HUGEINT", "\"NULL\""}
ARGS = {"BIGINT": "b", "INTEGER": "k", "SMALLINT": "k", "TINYINT": "k", "DOUBLE": "x", "FLOAT": "x",
        "DECIMAL": "n", "VARCHAR": "v", "DATE": "d", "TIMESTAMP": "ts", "BOOLEAN": "bo", "ANY": "k", "T": "k",
        "ANY[]": "[k]", "T[]": "[k]", "VARCHAR[]": "[v]", "BIGINT[]": "[b]", "DOUBLE[]": "[x]",
        "INTERVAL": "INTERVAL 1 DAY", "TIME": "CAST(ts AS TIME)", "STRUCT": "{'a': k}", "MAP(K, V)": "MAP([k], [v])",
        "JSON": "CAST(v AS JSON)"}


def catalogue_calls():
    con = duckdb.connect()
    rows = con.sql("SELECT DISTINCT function_name, parameter_types FROM duckdb_functions() "
                   "WHERE function_type = 'scalar' AND regexp_matches(function_name, '^[a-z][a-z_0-9]*$') "
                   "ORDER BY ALL").fetchall()
    return sorted({f"{name}({', '.join(ARGS[p] for p in params)})" for name, params in rows
                   if all(p in ARGS for p in params)})


def test_every_function_the_binder_accepts_has_a_result_type_the_executors_store():
    con = duckdb.connect()
    con.execute(SCHEMA)
    accepted, bad = 0, []
    for call in catalogue_calls():
        view = f"SELECT {call} AS r FROM t"
        try:
            duck_type = con.sql(f"DESCRIBE {view}").fetchall()[0][1]
        except duckdb.Error:
            continue   # not a valid call with these arguments
        try:
            planned = compile_program(SCHEMA + ";\nCREATE VIEW w AS " + view).views["w"].plan.fields[0].type
        except EngineError:
            continue
        accepted += 1
        if not (duck_type in STORABLE or duck_type.startswith("DECIMAL") or storable(from_duckdb_name(duck_type))
                or (duck_type.startswith("U") and storable(planned))):   # unsigned: cast to a signed type
            bad.append((call, duck_type))
    assert accepted > 150
    assert not bad, bad


# ------------------------------------------------------------------ README's SQL reference, run for one step
README_CALLS = [
    "UPPER(v)", "LOWER(v)", "LENGTH(v)", "SUBSTRING(v, 1, 2)", "TRIM(v)", "REPLACE(v, 'a', 'z')", "v || '!'",
    "CONCAT(v, 'x')", "EXTRACT(YEAR FROM d)", "EXTRACT(DOW FROM d)", "EXTRACT(ISODOW FROM ts)",
    "EXTRACT(EPOCH FROM ts)", "EXTRACT(WEEK FROM d)", "CAST(ts AS DATE)", "CAST(k AS VARCHAR)", "CAST(x AS INT)",
    "CAST(n AS BIGINT)", "COALESCE(b, k, -1)", "CASE WHEN b > 1 THEN 'big' ELSE 'small' END",
    "date_trunc('hour', ts)", "d - DATE '2024-01-01'", "d + 1", "ts + INTERVAL 1 DAY", "d + INTERVAL 1 HOUR",
    "(k + b) % 3", "x / 4", "k <> b AND NOT bo", "k IN (1, 3)", "v LIKE 'a%'", "n BETWEEN -2 AND 2",
    "md5(v)", "round_even(x, 1)", "repeat(v, 2)", "reverse(v)", "strpos(v, 'b')", "instr(v, 'b')",
    "lpad(v, 5, '*')", "rpad(v, 5, '*')", "ltrim(v)", "rtrim(v)", "ascii(v)", "chr(65)", "sign(x)", "ln(x)",
    "log10(x)", "pi()", "least(k, b)", "greatest(x, 2)", "nullif(v, 'ab')", "char_length(v)",
    "character_length(v)", "last_day(d)", "dayofweek(d)", "dayofmonth(d)", "dayofyear(d)", "week(d)", "hour(ts)",
    "minute(ts)", "second(ts)", "year(d)", "month(d)", "day(d)", "quarter(d)", "abs(n)", "round(n, 1)",
    "floor(x)", "ceil(n)", "trunc(x)", "sqrt(x)", "power(x, 2)", "date_diff('day', d, ts)", "split_part(v, ',', 1)",
    "regexp_extract(v, '[a-z]+')", "regexp_replace(v, 'a', 'b')", "left(v, 1)", "right(v, 1)",
    "string_split(v, ',')", "[k, 2]", "ts - TIMESTAMP '2024-01-01'", "json_extract(v, '$.a')",
    "ts AT TIME ZONE 'UTC'", "string_split(v, ',')[2]", "len(string_split(v, ','))",
]
ROW = "(2, 7, 2.5e0, 1.25, 'ab,c', DATE '2024-02-29', TIMESTAMP '2024-03-01 10:20:30', true)"


def test_each_reference_function_compiles_and_runs_or_is_rejected_at_compile_time(make_pipeline):
    accepted = {}
    for i, call in enumerate(README_CALLS):
        view = f"CREATE MATERIALIZED VIEW f{i} AS SELECT k, {call} AS r FROM t"
        try:
            compile_program(SCHEMA + ";\n" + view)
        except UnsupportedError:
            continue
        accepted[f"f{i}"] = view
    for must in ("UPPER(v)", "lpad(v, 5, '*')", "REPLACE(v, 'a', 'z')", "d - DATE '2024-01-01'",
                 "ts - TIMESTAMP '2024-01-01'"):   # (an INTERVAL column: DuckDB's text of it)
        assert f"f{README_CALLS.index(must)}" in accepted, must
    p = make_pipeline(SCHEMA + ";\n" + ";\n".join(accepted.values()))
    p.execute(f"INSERT INTO t VALUES {ROW}")
    p.wait_for_idle()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(SCHEMA)
    con.execute(f"INSERT INTO t VALUES {ROW}")
    for name, view in accepted.items():
        query = view.split(" AS ", 1)[1]
        got = [tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")]
        try:
            expected = con.sql(query).fetchall()
        except duckdb.Error:   # a run-time error in DuckDB: a row error here (sqlengine_errors), no row
            expected = []
        assert len(got) == len(expected), (view, got, expected)
        if not expected:
            continue
        g, e = got[0][1], expected[0][1]
        if getattr(e, "tzinfo", None) is not None:   # TIMESTAMP WITH TIME ZONE: the engine keeps naive UTC
            e = e.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        if isinstance(e, datetime.timedelta):   # an INTERVAL: DuckDB's text of it here
            e = con.sql(f"SELECT CAST(r AS VARCHAR) FROM ({query})").fetchall()[0][0]
        if isinstance(e, float) or isinstance(g, float):
            assert g == pytest.approx(float(e), rel=1e-9), (view, g, e)
        else:
            assert str(g) == str(e) or g == e, (view, g, e)
