"""``casts.cast_to``: a change cast to its operator's schema keeps DuckDB's values, and never changes one
silently."""
import math

import duckdb
import pyarrow as pa
import pytest

from sqlengine.executor.casts import cast_to

FLOATS = [3.0, -0.0, 1e20, 1.5e-7, 0.1, 1 / 3, 1e16, 1e15, 123456789012345678.0, math.inf, -math.inf, math.nan,
          5e-324, 1.7976931348623157e308, 100.0, 1e-5, 1e7, None]


def duckdb_text(values, sql_type):
    con = duckdb.connect()
    t = pa.table({"v": pa.array(values, {"DOUBLE": pa.float64(), "REAL": pa.float32()}[sql_type])})
    con.register("t", t)
    return [r[0] for r in con.execute("SELECT CAST(v AS VARCHAR) FROM t").fetchall()]


@pytest.mark.parametrize("sql_type", ["DOUBLE", "REAL"])
def test_floats_are_written_as_duckdb_writes_them(sql_type):
    arrow = {"DOUBLE": pa.float64(), "REAL": pa.float32()}[sql_type]
    got = cast_to(pa.table({"a": pa.array(FLOATS, arrow)}), pa.schema([("a", pa.string())]))
    assert got.column(0).to_pylist() == duckdb_text(FLOATS, sql_type)


def test_other_scalars_are_written_as_duckdb_writes_them():
    import datetime as dt
    import decimal
    cols = {"b": pa.array([True, False, None]), "d": pa.array([decimal.Decimal("1.50"), decimal.Decimal("-0.05"), None],
                                                                  pa.decimal128(10, 2)),
            "ts": pa.array([dt.datetime(2024, 2, 29, 1, 2, 3, 500000), dt.datetime(2023, 1, 1), None]),
            "day": pa.array([dt.date(2024, 2, 29), None, dt.date(1, 1, 1)])}
    t = pa.table(cols)
    got = cast_to(t, pa.schema([(n, pa.string()) for n in cols]))
    con = duckdb.connect()
    con.register("t", t)
    want = con.execute("SELECT " + ", ".join(f"CAST({n} AS VARCHAR)" for n in cols) + " FROM t").fetchall()
    assert [tuple(r.values()) for r in got.to_pylist()] == want


def test_a_value_that_would_change_raises():
    t = pa.table({"a": pa.array([9.223372036854776e18], pa.float64())})
    with pytest.raises(pa.ArrowInvalid):
        cast_to(t, pa.schema([("a", pa.int64())]))
    with pytest.raises(pa.ArrowInvalid):
        cast_to(pa.table({"a": pa.array([2.5])}), pa.schema([("a", pa.int64())]))
    with pytest.raises(pa.ArrowInvalid):
        cast_to(pa.table({"a": pa.array([300], pa.int64())}), pa.schema([("a", pa.int8())]))


def test_what_duckdb_rounds_is_rounded():
    got = cast_to(pa.table({"i": pa.array([2147483647], pa.int32()), "x": pa.array([9007199254740993], pa.int64()),
                            "m": pa.array([1.005], pa.float64())}),
                  pa.schema([("i", pa.float32()), ("x", pa.float64()), ("m", pa.decimal128(5, 2))]))
    con = duckdb.connect()
    want = con.execute("SELECT CAST(2147483647 AS REAL), CAST(9007199254740993 AS DOUBLE), "
                       "CAST(CAST(1.005 AS DOUBLE) AS DECIMAL(5, 2))").fetchone()
    assert tuple(got.to_pylist()[0].values()) == want


def test_spark_text_is_duckdb_text(spark):
    from pyspark.sql import functions as F

    from sqlengine.executor.casts import spark_text
    df = spark.createDataFrame([(v,) for v in FLOATS], "x DOUBLE")
    got = [r[0] for r in df.select(spark_text(F.col("x"), pa.float64())).collect()]
    assert got == duckdb_text(FLOATS, "DOUBLE")
