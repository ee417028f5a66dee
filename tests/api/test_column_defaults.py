"""DEFAULT values on table columns: an input row that leaves a column out gets its DEFAULT, on every input path
(INSERT with a column list, input_json, input_pandas, input_csv, input_arrow); a NULL given stays NULL.  The
table is compared with DuckDB given the same statements (DuckDB's INSERT applies DEFAULT the same way)."""
import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from planner.errors import BindError, UnsupportedError
from planner.program import compile_program

from ..support.oracle import bag

SCHEMA = ("CREATE TABLE t (k INT NOT NULL, v VARCHAR DEFAULT 'none', n BIGINT NOT NULL DEFAULT 7, "
          "x DOUBLE DEFAULT -1.5, d DATE DEFAULT DATE '2024-02-29', m DECIMAL(6,2) DEFAULT 1 + 0.25);")


def test_every_input_path_fills_a_left_out_column_with_its_default(make_pipeline):
    p = make_pipeline(SCHEMA + "CREATE MATERIALIZED VIEW w AS SELECT * FROM t;")
    con = duckdb.connect()
    con.execute(SCHEMA)
    for stmt in ["INSERT INTO t (k) VALUES (1)", "INSERT INTO t (k, v) VALUES (2, NULL)",
                 "INSERT INTO t (k, n, x) VALUES (3, 9, NULL)"]:
        p.execute(stmt)
        con.execute(stmt)
    p.input_json("t", [{"k": 4}, {"k": 5, "n": 11, "v": None}])
    con.execute("INSERT INTO t (k) VALUES (4)")
    con.execute("INSERT INTO t (k, n, v) VALUES (5, 11, NULL)")
    p.input_pandas("t", pd.DataFrame({"k": [6]}))
    p.input_csv("t", "k,x\n7,2.5\n")
    p.input_arrow("t", pa.table({"k": pa.array([8], pa.int32())}))
    con.execute("INSERT INTO t (k) VALUES (6), (8)")
    con.execute("INSERT INTO t (k, x) VALUES (7, 2.5)")
    p.wait_for_idle()
    assert bag(tuple(r.values()) for r in p.query("SELECT * FROM w")) == bag(con.execute("SELECT * FROM t").fetchall())
    p.input_json("t", [{"delete": {"k": 4}}], update_format="insert_delete")   # the defaults name the row
    p.wait_for_idle()
    assert sorted(r["k"] for r in p.query("SELECT k FROM w")) == [1, 2, 3, 5, 6, 7, 8]


@pytest.mark.parametrize("column, error, fragment", [
    ("c INT DEFAULT now()", UnsupportedError, "DEFAULT of column c: only a constant is supported"),
    ("c INT DEFAULT k", UnsupportedError, "DEFAULT of column c: only a constant is supported"),
    ("c DATE DEFAULT CAST(current_date AS DATE)", UnsupportedError, "only a constant"),
    ("c INT DEFAULT 'abc'", BindError, "DEFAULT of column c: Conversion Error"),
    ("c INT NOT NULL DEFAULT NULL", BindError, "DEFAULT of column c is NULL, and the column is NOT NULL"),
])
def test_a_default_is_a_constant_of_the_column_type(column, error, fragment):
    with pytest.raises(error) as e:
        compile_program(f"CREATE TABLE t (k INT,\n  {column});")
    assert fragment in str(e.value) and "line 2" in str(e.value), str(e.value)
