"""Values as JSON: rows of queries and of egress chunks, and the columns of tables and views."""
from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any, List

INT_KINDS = {"TINYINT", "SMALLINT", "INT", "BIGINT"}


def json_value(v: Any, kind: str = "") -> Any:
    """One value as JSON: timestamps and dates as ISO 8601 text, decimals as strings (exact) except those of
    scale 0 (e.g. a HUGEINT ``SUM``), which are integers; NULL as null."""
    if v is None:
        return None
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
    if hasattr(v, "item"):
        return json_value(v.item(), kind)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    return str(v)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)


def sql_type(t) -> str:
    return getattr(t, "sql", None) or str(t)


def columns_of(p, relation: str) -> List[dict]:
    if relation in p.program.tables:
        return [{"name": f.name, "type": sql_type(f.type)} for f in p.program.tables[relation].fields]
    names = list(p.program.circuit.outputs[relation].names)
    fields = list(p.program.views[relation].plan.fields)
    return [{"name": n, "type": sql_type(f.type)} for n, f in zip(names, fields)]
