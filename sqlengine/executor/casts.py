"""Casts of a change to its operator's Arrow schema with DuckDB's values, on both executors: what DuckDB rounds
is rounded as DuckDB rounds it, values written as text are written as DuckDB writes them, and no cast changes a
value silently (one that would is an error, never a wrapped or truncated value)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sqlengine import private_duckdb


def cast_to(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` (columns in ``schema``'s order) cast to ``schema`` with DuckDB's values: floats and decimals of a
    larger scale cast to a DECIMAL are rounded to its scale first, half away from zero as DuckDB rounds; numbers,
    booleans and dates cast to VARCHAR are written as DuckDB writes them (``3.0``, where Arrow writes ``3``),
    timestamps likewise.  No cast may change a value silently: one Arrow refuses (a DOUBLE beyond BIGINT's range
    to a BIGINT) raises, except where DuckDB rounds too: a number to a float (a BIGINT to a DOUBLE, a DOUBLE to
    a REAL), and a timestamp to the microseconds the data plane keeps."""
    t = t.rename_columns(schema.names)
    if not any(_needs_care(c.type, f.type) for c, f in zip(t.columns, schema)):
        try:
            return t.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    arrays = []
    for c, f in zip(t.columns, schema):
        if c.type == f.type:
            arrays.append(c)
            continue
        if pa.types.is_string(f.type) and pa.types.is_timestamp(c.type):
            c = timestamp_text(c)
        elif pa.types.is_string(f.type) and duckdb_writes_otherwise(c.type):
            c = text_by_duckdb(c)
        if pa.types.is_decimal(f.type) and (pa.types.is_floating(c.type) or
                                            (pa.types.is_decimal(c.type) and c.type.scale > f.type.scale)):
            # rounded half away from zero, as DuckDB casts (Arrow's cast would truncate the digits it drops)
            c = pc.round(c, ndigits=f.type.scale, round_mode="half_towards_infinity")
        rounds = (pa.types.is_temporal(c.type) and pa.types.is_temporal(f.type)) or \
            (pa.types.is_floating(f.type) and (pa.types.is_integer(c.type) or pa.types.is_floating(c.type)))
        arrays.append(c.cast(f.type, safe=not rounds))
    return pa.Table.from_arrays(arrays, schema=schema)


def duckdb_writes_otherwise(source: pa.DataType) -> bool:
    """Whether Arrow writes values of ``source`` as text otherwise than DuckDB's CAST to VARCHAR does."""
    return pa.types.is_floating(source) or pa.types.is_boolean(source) or pa.types.is_decimal(source) or \
        pa.types.is_binary(source) or pa.types.is_time(source)


def _needs_care(source: pa.DataType, target: pa.DataType) -> bool:
    if pa.types.is_decimal(target) and pa.types.is_decimal(source) and source.scale > target.scale:
        return True
    return pa.types.is_string(target) and (pa.types.is_timestamp(source) or duckdb_writes_otherwise(source))


def text_by_duckdb(c) -> pa.ChunkedArray:
    """``c`` cast to VARCHAR by DuckDB."""
    con = private_duckdb.cursor()
    try:
        con.register("c", pa.table({"v": c}))
        return con.sql("SELECT CAST(v AS VARCHAR) AS v FROM c").to_arrow_table().column(0).cast(pa.string())
    finally:
        con.close()


def timestamp_text(c):
    """TIMESTAMP values as DuckDB casts them to VARCHAR: ``2023-12-31 00:00:00``, with the fraction of a second
    only where there is one, without trailing zeros (``00:00:00.5``); Arrow's cast always writes six digits."""
    c = c.cast(pa.timestamp("us"))
    seconds = pc.floor_temporal(c, unit="second")
    whole = pc.strftime(seconds.cast(pa.timestamp("s")), format="%Y-%m-%d %H:%M:%S")
    micros = pc.subtract(c.cast(pa.int64()), seconds.cast(pa.int64()))
    digits = pc.utf8_rtrim(pc.utf8_lpad(micros.cast(pa.string()), 6, padding="0"), characters="0")
    frac = pc.if_else(pc.greater(micros, 0), pc.binary_join_element_wise(".", digits, ""), "")
    return pc.binary_join_element_wise(whole, frac, "")


def spark_text(column, source: pa.DataType):
    """A Spark column of Arrow type ``source`` (a float) cast to VARCHAR as DuckDB writes it (``1e+20`` and
    ``10000000.0``, where Spark writes ``1.0E20`` and ``1.0E7``): an Arrow UDF over ``text_by_duckdb``."""
    import warnings

    from pyspark.sql.functions import ArrowUDFType, arrow_udf
    from pyspark.sql.types import StringType

    def text(a: pa.Array) -> pa.Array:
        return text_by_duckdb(pa.chunked_array([a.cast(source)])).combine_chunks()
    with warnings.catch_warnings():   # "type hints are preferred"
        warnings.simplefilter("ignore", UserWarning)
        return arrow_udf(text, StringType(), ArrowUDFType.SCALAR)(column)
