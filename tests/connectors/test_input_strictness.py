"""Every input path is strict and exact, as DuckDB's casts are (issue 28).

``execute()`` (INSERT ... VALUES, INSERT ... SELECT, DELETE), ``input_json`` (list, text, insert_delete),
``input_pandas`` (object and nullable columns) and ``input_csv`` each take the same cases: invalid dates
and timestamps are rejected naming the table, column and row (never moved to another day), integers stay
integral (no float64 on the way, with a NULL in the same column), out-of-range integers and decimals are
rejected, decimals are rounded as DuckDB rounds, and NaN, infinities and -0.0 are kept as values, never
NULL.  The expected outcome of every case is DuckDB's: the same statements run in DuckDB, and each table's
contents must equal DuckDB's exactly (NaN compared as NaN, -0.0 equal to 0.0 as in SQL).
"""
import io
import json
import math

import duckdb
import numpy as np
import pandas as pd
import pytest

from sqlengine import InputError

COLUMNS = "id INT, ti TINYINT, b BIGINT, m DECIMAL(5,2), d DOUBLE, dt DATE, ts TIMESTAMP"
PATHS = ("execute", "json", "json_text", "json_insert_delete", "pandas_object", "pandas_nullable", "csv")
NAN, INF = float("nan"), float("inf")

# (column, Python value for JSON/pandas, DuckDB literal of the same value).  CSV takes the value's text.
CASES = [
    ("dt", "2024-02-29", "'2024-02-29'"),
    ("dt", "2023-02-29", "'2023-02-29'"),
    ("dt", "2023-04-31", "'2023-04-31'"),
    ("dt", "2023-13-01", "'2023-13-01'"),
    ("ts", "2024-02-29 23:59:59", "'2024-02-29 23:59:59'"),
    ("ts", "2023-02-29 10:00:00", "'2023-02-29 10:00:00'"),
    ("ts", "2023-04-31 00:00:00", "'2023-04-31 00:00:00'"),
    ("ts", "2024-01-02 25:00:00", "'2024-01-02 25:00:00'"),
    ("b", 9007199254740993, "9007199254740993"),
    ("b", 9223372036854775807, "9223372036854775807"),
    ("b", -9223372036854775807, "-9223372036854775807"),
    ("b", 2 ** 63, "9223372036854775808"),
    ("ti", -128, "-128"),
    ("ti", 128, "128"),
    ("m", "1.005", "'1.005'"),
    ("m", "-1.005", "'-1.005'"),
    ("m", 1.005, "1.005"),
    ("m", "1234.5", "'1234.5'"),
    ("m", "999.995", "'999.995'"),
    ("d", NAN, "CAST('nan' AS DOUBLE)"),
    ("d", INF, "CAST('inf' AS DOUBLE)"),
    ("d", -INF, "CAST('-inf' AS DOUBLE)"),
    ("d", -0.0, "CAST('-0.0' AS DOUBLE)"),
    ("d", 1.5, "1.5"),
]


def exact(v):
    """A value made comparable exactly: NaN equals NaN, and -0.0 is not 0.0 (a stored -0.0 reads back as -0.0,
    as in DuckDB)."""
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else (v, math.copysign(1.0, v), type(v).__name__)
    return v


def contents(rows):
    return sorted((tuple(exact(x) for x in r) for r in rows), key=repr)


def engine_rows(p, table):
    return contents(tuple(r.values()) for r in p.query(f"SELECT * FROM {table}"))


def duck_rows(con, table):
    return contents(con.execute(f"SELECT * FROM {table}").fetchall())


def duckdb_error(con, sql):
    """DuckDB's error for ``sql`` (its first line), or None; nothing of ``sql`` is kept."""
    con.execute("BEGIN")
    try:
        con.execute(sql)
        return None
    except duckdb.Error as e:
        return str(e).splitlines()[0]
    finally:
        con.execute("ROLLBACK")


def csv_text(v):
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return str(v)


def nullable_dtype(values):
    """The pandas nullable dtype for the values, or None where there is none that keeps them (pandas turns a
    NaN into NA in a Float64 array, so float cases are only checked through object columns)."""
    given = [v for v in values if v is not None]
    if all(isinstance(v, int) for v in given) and all(-2 ** 63 <= v < 2 ** 63 for v in given):
        return "Int64"
    if all(isinstance(v, str) for v in given):
        return "string"
    return None


def feed(p, path, table, column, rows, literals, delete=False):
    """Insert (or delete) ``rows`` [(id, value)] through ``path``; False if the path cannot carry these values.
    ``literals``: the values as DuckDB literals, for ``execute``; a delete there is by the column's value."""
    ids = [i for i, _ in rows]
    values = [v for _, v in rows]
    records = [{"id": i, column: v} for i, v in rows]
    kind = "delete" if delete else "insert"
    if path == "execute" and delete:
        p.execute(f"DELETE FROM {table} WHERE {column} IN ({', '.join(literals)})")
    elif path == "execute":
        tuples = ", ".join(f"({i}, {lit})" for i, lit in zip(ids, literals))
        p.execute(f"INSERT INTO {table} (id, {column}) VALUES {tuples}")
    elif path == "json" and not delete:
        p.input_json(table, records)
    elif path == "json_text" and not delete:
        p.input_json(table, "\n".join(json.dumps(r) for r in records))
    elif path.startswith("json"):
        p.input_json(table, "\n".join(json.dumps({kind: r}) for r in records) if path == "json_text" else
                     [{kind: r} for r in records], update_format="insert_delete")
    elif path == "pandas_object":
        p.input_pandas(table, pd.DataFrame({"id": ids, column: pd.Series(values, dtype=object)}), delete=delete)
    elif path == "pandas_nullable":
        dtype = nullable_dtype(values)
        if dtype is None:
            return False
        p.input_pandas(table, pd.DataFrame({"id": pd.array(ids, dtype="Int32"), column: pd.array(values, dtype=dtype)}),
                       delete=delete)
    elif path == "csv":
        text = f"id,{column}\n" + "".join(f"{i},{'' if v is None else csv_text(v)}\n" for i, v in rows)
        p.input_csv(table, text, delete=delete)
    return True


def test_every_path_rejects_and_keeps_values_as_duckdb_does(make_pipeline):
    """Each case is a batch of a NULL row then the value's row, through every input path; DuckDB runs the same
    INSERT.  Where DuckDB rejects it, the path raises InputError naming the table, the column and row 1, and
    applies nothing; otherwise the table holds exactly what DuckDB holds."""
    p = make_pipeline("".join(f"CREATE TABLE t_{path} ({COLUMNS});\n" for path in PATHS))
    con = duckdb.connect()
    for path in PATHS:
        con.execute(f"CREATE TABLE t_{path} ({COLUMNS})")
    for k, (column, value, literal) in enumerate(CASES):
        rows, literals = [(10 * k, None), (10 * k + 1, value)], ["NULL", literal]
        insert = f"INSERT INTO {{}} (id, {column}) VALUES ({10 * k}, NULL), ({10 * k + 1}, {literal})"
        duck_error = duckdb_error(con, insert.format("t_execute"))
        for path in PATHS:
            table = f"t_{path}"
            if duck_error is None:
                if feed(p, path, table, column, rows, literals):
                    con.execute(insert.format(table))
                continue
            seq = p.log.next_seq
            try:
                applicable = feed(p, path, table, column, rows, literals)
            except InputError as e:
                assert f"table {table}, column {column}, row 1:" in str(e), (path, column, value, str(e))
                assert p.log.next_seq == seq
                continue
            assert not applicable, f"{path} accepted {column}={value!r}; DuckDB: {duck_error}"
    p.wait_for_idle()
    for path in PATHS:
        assert engine_rows(p, f"t_{path}") == duck_rows(con, f"t_{path}"), path
        q = f"SELECT count(*) AS n, count(*) FILTER (WHERE isnan(d)) AS nans FROM t_{path} WHERE d IS NULL OR isnan(d)"
        assert [tuple(r.values()) for r in p.query(q)] == con.execute(q).fetchall(), path
    # a big integer is found again by its exact value: each path deletes the row it inserted
    k = CASES.index(("b", 9007199254740993, "9007199254740993"))
    for path in PATHS:
        assert feed(p, path, f"t_{path}", "b", [(10 * k + 1, 9007199254740993)], ["9007199254740993"], delete=True)
        con.execute(f"DELETE FROM t_{path} WHERE b = 9007199254740993")
    p.wait_for_idle()
    for path in PATHS:
        assert engine_rows(p, f"t_{path}") == duck_rows(con, f"t_{path}"), path


LITERAL_TYPES = {"ti": "TINYINT", "si": "SMALLINT", "i": "INT", "b": "BIGINT", "m": "DECIMAL(5,2)",
                 "r": "REAL", "d": "DOUBLE", "v": "VARCHAR", "dt": "DATE", "ts": "TIMESTAMP", "ok": "BOOLEAN"}
LITERALS = {
    "ti": ["127", "128", "-129", "1.5", "2.5", "'7'", "'x'"],
    "si": ["32767", "32768", "-2.5"],
    "i": ["2147483647", "2147483648", "1.5", "'1.5'", "1e2"],
    "b": ["9223372036854775807", "9223372036854775808", "9007199254740993", "1e19", "'42'", "4.5e0"],
    "m": ["1.005", "-1.005", "1.004999", "1.5", "1", "'1.005'", "999.995", "1234.5", "2.675e0", "1.125e0",
          "CAST('nan' AS DOUBLE)"],
    "r": ["1.5", "3.5e38", "'nan'::REAL", "1", "0.1"],
    "d": ["1.5", "1", "9007199254740993", "'1.5'", "1e308", "CAST('nan' AS DOUBLE)", "'nan'::DOUBLE",
          "CAST('inf' AS DOUBLE)", "CAST('-inf' AS DOUBLE)", "-0.0", "CAST('-0.0' AS DOUBLE)", "-0.0e0", "1.005",
          "'abc'"],
    "v": ["'abc'", "1", "1.5", "''", "DATE '2024-01-02'"],
    "dt": ["'2024-02-29'", "'2023-02-29'", "'2023-04-31'", "'2023-13-01'", "DATE '2024-01-02'",
           "'2024-01-02 10:00:00'", "'2024-1-2'", "TIMESTAMP '2024-01-02 10:00:00'"],
    "ts": ["'2024-01-02 10:00:00'", "'2023-02-29 10:00:00'", "'2024-01-02 25:00:00'", "'2024-01-02 10:61:00'",
           "'2024-01-02'", "TIMESTAMP '2024-01-02 10:00:00.123456'", "DATE '2024-02-29'"],
    "ok": ["true", "'true'", "'t'", "1", "0", "'maybe'"],
}


def test_literals_are_cast_as_duckdb_casts_them(make_pipeline):
    """``INSERT INTO t (id, c) VALUES (k, <literal>)`` stores what ``SELECT CAST(<literal> AS <type>)`` gives in
    DuckDB, with a NULL row in the same column, and is rejected (naming column and row) where DuckDB fails."""
    columns = ", ".join(f"{c} {ty}" for c, ty in LITERAL_TYPES.items())
    p = make_pipeline(f"CREATE TABLE lit (id INT, {columns});")
    expected, k = [], 0
    for column, literals in LITERALS.items():
        ty = LITERAL_TYPES[column]
        for literal in literals:
            k += 2
            try:
                want = duckdb.sql(f"SELECT CAST({literal} AS {ty})").fetchall()[0][0]
            except duckdb.Error:
                with pytest.raises(InputError, match=f"table lit, column {column}, row 1: cannot convert"):
                    p.execute(f"INSERT INTO lit (id, {column}) VALUES ({k}, NULL), ({k + 1}, {literal})")
                continue
            p.execute(f"INSERT INTO lit (id, {column}) VALUES ({k}, NULL), ({k + 1}, {literal})")
            expected.append((k + 1, column, literal, exact(want)))
    p.wait_for_idle()
    stored = {r["id"]: r for r in p.query("SELECT * FROM lit")}
    assert len(stored) == 2 * len(expected)
    for row, column, literal, want in expected:
        assert exact(stored[row][column]) == want, (column, literal)
        assert stored[row - 1][column] is None


def test_a_bad_value_in_a_later_row_names_it_and_nothing_is_inserted(make_pipeline):
    p = make_pipeline("CREATE TABLE t (id INT NOT NULL, dt DATE, b BIGINT);\n"
             "CREATE TABLE src (id INT, s VARCHAR);")
    seq = p.log.next_seq
    with pytest.raises(InputError, match="table t, column dt, row 2: cannot convert '2023-02-29' to DATE"):
        p.execute("INSERT INTO t VALUES (1, '2024-01-01', 1), (2, NULL, NULL), (3, '2023-02-29', 3), "
                  "(4, '2023-04-31', 4)")
    with pytest.raises(InputError, match="table t, column b, row 1: cannot convert 9223372036854775808"):
        p.execute("INSERT INTO t (b, id) VALUES (1, 1), (9223372036854775808, 2)")
    assert p.log.next_seq == seq
    # INSERT ... SELECT: the selected rows are cast as DuckDB casts them into the table's columns
    p.input_json("src", [{"id": 1, "s": "2024-02-29"}, {"id": 2, "s": None}, {"id": 3, "s": "2023-02-29"}])
    with pytest.raises(InputError, match="table t, column dt, row 2: cannot convert '2023-02-29' to DATE"):
        p.execute("INSERT INTO t (id, dt) SELECT id, s FROM src ORDER BY id")
    p.execute("INSERT INTO t (id, dt, b) SELECT id, s, 9007199254740993 FROM src WHERE id < 3")
    p.wait_for_idle()
    con = duckdb.connect()
    con.execute("CREATE TABLE t (id INT NOT NULL, dt DATE, b BIGINT)")
    con.execute("INSERT INTO t VALUES (1, '2024-02-29', 9007199254740993), (2, NULL, 9007199254740993)")
    assert engine_rows(p, "t") == duck_rows(con, "t")


def test_pandas_nan_is_missing_in_float_columns_and_a_value_in_object_columns(make_pipeline):
    """pandas' convention: NaN in a float64 column is a missing value (NULL); in an object column only None,
    pd.NA and NaT are NULL, and a float NaN is the value NaN (as JSON ``NaN`` and execute() keep it)."""
    p = make_pipeline("CREATE TABLE t (id INT, d DOUBLE, v BIGINT);")
    p.input_pandas("t", pd.DataFrame({"id": [1, 2], "d": [1.5, np.nan]}))
    p.input_pandas("t", pd.DataFrame({"id": [3, 4, 5], "d": pd.Series([NAN, None, pd.NA], dtype=object)}))
    p.input_json("t", '[{"id": 6, "d": NaN}, {"id": 7, "d": -Infinity}]')
    p.input_pandas("t", pd.DataFrame({"id": [8, 9], "v": pd.array([9007199254740993, pd.NA], dtype="Int64")}))
    p.wait_for_idle()
    con = duckdb.connect()
    con.execute("CREATE TABLE t (id INT, d DOUBLE, v BIGINT)")
    con.execute("INSERT INTO t VALUES (1, 1.5, NULL), (2, NULL, NULL), (3, 'nan', NULL), (4, NULL, NULL), "
                "(5, NULL, NULL), (6, 'nan', NULL), (7, '-inf', NULL), (8, NULL, 9007199254740993), (9, NULL, NULL)")
    assert engine_rows(p, "t") == duck_rows(con, "t")
    with pytest.raises(InputError, match="table t, column v, row 1"):
        p.input_pandas("t", pd.DataFrame({"id": [10, 11], "v": pd.Series([1, NAN], dtype=object)}))


def test_dead_letter_takes_invalid_dates_and_applies_the_rest(make_pipeline, tmp_path):
    p = make_pipeline("CREATE TABLE t (id INT, dt DATE, ts TIMESTAMP);")
    dead = tmp_path / "dead.jsonl"
    p.input_json("t", [{"id": 1, "dt": "2024-02-29"}, {"id": 2, "dt": "2023-02-29"},
                       {"id": 3, "ts": "2023-04-31 10:00:00"}], on_error="dead_letter", dead_letter=str(dead))
    p.input_csv("t", "id,dt\n4,2023-04-31\n5,2023-04-30\n", on_error="dead_letter", dead_letter=str(dead))
    p.wait_for_idle()
    records = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(r["row"], r["column"]) for r in records] == [(1, "dt"), (2, "ts"), (0, "dt")]
    assert sorted(r["id"] for r in p.query("SELECT id FROM t")) == [1, 5]
