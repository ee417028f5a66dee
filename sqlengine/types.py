"""SQL column types and their Arrow types: the one map between the two, shared by the engine and connectors.

The data plane holds every SQL column type as one Arrow type (``arrow_type``); connectors and the input
converters build their Arrow columns with it, and the executor types its changes with it.  It needs only
pyarrow; the Spark types are the executor's (``sqlengine.executor.schema``).

>>> from planner.types import SqlType, element_type, map_types, struct_fields
>>> arrow_type(SqlType("DECIMAL(10, 2)")), arrow_type(SqlType("TIMESTAMP"))
(Decimal128Type(decimal128(10, 2)), TimestampType(timestamp[us]))
"""
from __future__ import annotations

import decimal
from functools import lru_cache
from typing import Any

import pyarrow as pa

from planner.types import SqlType, element_type, map_types, struct_fields

__all__ = ["arrow_type", "to_decimal"]


@lru_cache(maxsize=4096)
def arrow_type(t: SqlType) -> pa.DataType:
    """The Arrow type of the data plane's column of SQL type ``t`` (TIMESTAMP: microseconds, no zone; JSON:
    its canonical text, see :mod:`sqlengine.nested`; UUID: its lower-case text; INTERVAL: DuckDB's text of it,
    see :mod:`sqlengine.intervals`).

    >>> arrow_type(SqlType("STRUCT(a INT, b MAP(VARCHAR, DOUBLE[]))"))
    StructType(struct<a: int32, b: map<string, list<item: double>>>)
    """
    b = t.base
    if b == "ARRAY":
        return pa.list_(arrow_type(element_type(t)))
    if b == "MAP":
        k, v = map_types(t)
        return pa.map_(arrow_type(k), arrow_type(v))
    if b == "STRUCT":
        return pa.struct([pa.field(name, arrow_type(ft)) for name, ft in struct_fields(t)])
    if b == "DECIMAL":
        p, s = (int(x) for x in t.sql[len("DECIMAL("):-1].split(","))
        return pa.decimal128(p, s)
    return {"BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(),
            "BIGINT": pa.int64(), "REAL": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
            "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us"), "JSON": pa.string(), "TIME": pa.time64("us"),
            "BLOB": pa.binary(), "UUID": pa.string(), "INTERVAL": pa.string()}[b]


_DECIMAL_CONTEXT = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)


def to_decimal(v: Any, target: pa.DataType) -> decimal.Decimal:
    """A number or numeric text -> a Decimal of ``target``'s scale, rounded half away from zero as DuckDB's
    cast rounds (``'1.005'`` -> 1.01 in DECIMAL(5,2)); a value beyond the precision raises ``ValueError``.

    >>> to_decimal("1.005", pa.decimal128(5, 2)), to_decimal(-2.5, pa.decimal128(3, 0))
    (Decimal('1.01'), Decimal('-3'))
    """
    if isinstance(v, bool) or (isinstance(v, str) and "_" in v):
        raise ValueError("not a decimal")
    d = v if isinstance(v, decimal.Decimal) else decimal.Decimal(str(v).strip())
    if not d.is_finite():
        raise ValueError("not a finite decimal")
    q = d.quantize(decimal.Decimal(1).scaleb(-target.scale), context=_DECIMAL_CONTEXT)
    if abs(q) >= decimal.Decimal(10) ** (target.precision - target.scale):
        raise ValueError("decimal out of range")
    return q
