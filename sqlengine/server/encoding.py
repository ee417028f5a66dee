"""Values as JSON: rows of queries and of egress chunks, and the columns of tables and views."""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
from typing import Any, List

import pyarrow as pa

from planner.types import SqlType, element_type, map_types, struct_fields

INT_KINDS = {"TINYINT", "SMALLINT", "INT", "BIGINT"}   # (a column's SQL type, or its base name)


def json_value(v: Any, kind: str = "") -> Any:
    """One value as JSON: timestamps and dates as ISO 8601 text, decimals as strings (exact) except those of
    scale 0 (e.g. a HUGEINT ``SUM``), which are integers; NULL as null.  ``kind``: the column's SQL type, by
    which a MAP (a list of pairs in Arrow) is an object, a VARIANT (its JSON text) is the JSON value itself, and
    the parts of an ARRAY, a MAP and a ROW are written by their own types."""
    if v is None:
        return None
    if kind and (kind.endswith("]") or kind.startswith(("MAP(", "STRUCT(", "JSON"))):
        return _nested_value(v, SqlType(kind))
    if isinstance(v, float):
        return None if math.isnan(v) else (int(v) if kind in INT_KINDS else v)
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return v
    if isinstance(v, decimal.Decimal):   # exact: as text; a scale-0 decimal (HUGEINT sums) as an integer
        return int(v) if v.is_finite() and v.as_tuple().exponent == 0 else str(v)
    try:
        import pandas as pd
        if v is pd.NaT:
            return None
        if isinstance(v, pd.Timestamp):
            return v.isoformat()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if hasattr(v, "tolist") and not hasattr(v, "item") or getattr(v, "ndim", 0):
        return json_value(v.tolist(), kind)
    if hasattr(v, "item"):
        return json_value(v.item(), kind)
    if isinstance(v, (bytes, bytearray)):   # BINARY: base64, as input takes it
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    return str(v)


def _nested_value(v: Any, t: SqlType) -> Any:
    if v is None:
        return None
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):   # a NumPy array of a pandas frame
        v = v.tolist()
    if t.base == "JSON":
        return json.loads(v) if isinstance(v, str) else v
    if t.base == "ARRAY":
        inner = element_type(t)
        return [json_value(x, inner.sql) for x in v]
    if t.base == "MAP":
        k, inner = map_types(t)
        pairs = v.items() if isinstance(v, dict) else v
        return {str(json_value(a, k.sql)): json_value(b, inner.sql) for a, b in pairs}
    if t.base == "STRUCT":
        return {name: json_value(v.get(name), ft.sql) for name, ft in struct_fields(t)}
    return json_value(v, t.sql)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)


def sql_type(t) -> str:
    return getattr(t, "sql", None) or str(t)


_ARROW_SCALARS = {pa.bool_(): "BOOLEAN", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
                  pa.int64(): "BIGINT", pa.uint8(): "UTINYINT", pa.uint16(): "USMALLINT", pa.uint32(): "UINTEGER",
                  pa.uint64(): "UBIGINT", pa.float16(): "REAL", pa.float32(): "REAL", pa.float64(): "DOUBLE",
                  pa.string(): "VARCHAR", pa.large_string(): "VARCHAR", pa.binary(): "BLOB",
                  pa.large_binary(): "BLOB", pa.date32(): "DATE", pa.date64(): "DATE", pa.null(): "NULL"}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def arrow_sql_type(t: pa.DataType) -> str:
    """The SQL type (as the engine spells it: ``INT[]``, ``MAP(VARCHAR, INT)``, ``STRUCT(a INT, "b c" DATE)``)
    of an Arrow type: the types of an ad-hoc query's columns (DuckDB's, in which a VARIANT is VARCHAR).

    >>> arrow_sql_type(pa.map_(pa.string(), pa.list_(pa.int32())))
    'MAP(VARCHAR, INT[])'
    >>> arrow_sql_type(pa.struct([("a", pa.decimal128(10, 2)), ("b c", pa.timestamp("us", tz="UTC"))]))
    'STRUCT(a DECIMAL(10, 2), "b c" TIMESTAMP WITH TIME ZONE)'
    """
    if t in _ARROW_SCALARS:
        return _ARROW_SCALARS[t]
    if pa.types.is_map(t):
        return f"MAP({arrow_sql_type(t.key_type)}, {arrow_sql_type(t.item_type)})"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return arrow_sql_type(t.value_type) + "[]"
    if pa.types.is_struct(t):
        fields = (t.field(i) for i in range(t.num_fields))
        return "STRUCT(" + ", ".join(
            (f.name if _PLAIN_NAME.fullmatch(f.name) else '"' + f.name.replace('"', '""') + '"')
            + " " + arrow_sql_type(f.type) for f in fields) + ")"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz else "TIMESTAMP"
    if pa.types.is_time(t):
        return "TIME"
    if pa.types.is_interval(t) or pa.types.is_duration(t):
        return "INTERVAL"
    if pa.types.is_dictionary(t):
        return arrow_sql_type(t.value_type)
    return str(t).upper()


def columns_header(schema: pa.Schema) -> str:
    """The ``x-columns`` header of a JSON query answer: its columns, in order, as ASCII JSON
    ``[{"name": ..., "type": ...}, ...]`` (a row object cannot tell a MAP from a ROW, nor give the columns of an
    empty result)."""
    return json.dumps([{"name": f.name, "type": arrow_sql_type(f.type)} for f in schema], separators=(",", ":"))


def columns_of(p, relation: str) -> List[dict]:
    if relation in p.program.tables:
        return [{"name": f.name, "type": sql_type(f.type)} for f in p.program.tables[relation].fields]
    names = list(p.program.circuit.outputs[relation].names)
    fields = list(p.program.views[relation].plan.fields)
    return [{"name": n, "type": sql_type(f.type)} for n, f in zip(names, fields)]
