"""Mapping SQL column types to Spark types, and the executor's exact integer accumulator.

The SQL to Arrow map is :func:`sqlengine.types.arrow_type` (connectors use it too); this module holds what
only the executor needs: Spark types and schemas, and converting Spark schemas to Arrow and back.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from planner.logical import col
from planner.types import SqlType, element_type, map_types, struct_fields

from sqlengine.zset import W

INTEGER_BASES = ("TINYINT", "SMALLINT", "INT", "BIGINT")   # the SQL integer types (their ``SqlType.base``)
HUGE_SQL = "DECIMAL(38, 0)"      # the exact accumulator of integer sums: partial sums never wrap
HUGE = pa.decimal128(38, 0)      # the same, in Arrow

def spark_type(t: SqlType):
    b = t.base
    if b == "ARRAY":
        return T.ArrayType(spark_type(element_type(t)), True)
    if b == "MAP":
        k, v = map_types(t)
        return T.MapType(spark_type(k), spark_type(v), True)
    if b == "STRUCT":
        return T.StructType([T.StructField(name, spark_type(ft), True) for name, ft in struct_fields(t)])
    if b == "DECIMAL":
        p, s = (int(x) for x in t.sql[len("DECIMAL("):-1].split(","))
        return T.DecimalType(p, s)
    return {"BOOLEAN": T.BooleanType(), "TINYINT": T.ByteType(), "SMALLINT": T.ShortType(),
            "INT": T.IntegerType(), "BIGINT": T.LongType(), "REAL": T.FloatType(), "DOUBLE": T.DoubleType(),
            "VARCHAR": T.StringType(), "DATE": T.DateType(), "TIMESTAMP": T.TimestampNTZType(),
            "JSON": T.StringType(), "UUID": T.StringType(), "INTERVAL": T.StringType(), "BLOB": T.BinaryType(), "TIME": T.TimeType(6)}[b]


def table_spark_schema(fields) -> T.StructType:
    """Positional data-plane schema of a table: c0.. plus the weight."""
    return T.StructType([T.StructField(col(i), spark_type(f.type), True) for i, f in enumerate(fields)]
                        + [T.StructField(W, T.LongType(), True)])


def arrow_schema_of(spark_schema: T.StructType) -> pa.Schema:
    """Arrow schema for a Spark schema, every field nullable."""
    from pyspark.sql.pandas.types import to_arrow_schema
    s = to_arrow_schema(spark_schema, timezone="UTC")   # TIMESTAMP WITH LOCAL TIME ZONE results, e.g. date_trunc
    return pa.schema([pa.field(f.name, f.type, True) for f in s])


def spark_schema_of(schema: pa.Schema) -> T.StructType:
    """Spark schema for an Arrow schema of the data plane (TIMESTAMP is Spark's TIMESTAMP_NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def chunked(t: pa.Table) -> pa.Table:
    """``t`` with a column of no chunks (an empty result) given one empty chunk: PySpark's conversion of a
    nested column rebuilds it chunk by chunk and cannot build one of no chunks (``ArrowInvalid: cannot
    construct ChunkedArray from empty vector``)."""
    if all(c.num_chunks for c in t.columns):
        return t
    return pa.table([c if c.num_chunks else pa.chunked_array([pa.array([], c.type)], c.type) for c in t.columns],
                    schema=t.schema)
