"""Validating and converting user input (pandas, JSON) into positional Arrow rows.

Every error names the table, the column and the row (0-based position in the
batch) and nothing of the batch is applied: a batch is accepted whole or not
at all.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any, Dict, List, Sequence, Tuple

import pyarrow as pa

from planner.bind import TableDef
from planner.errors import InputError
from planner.logical import col

from .schema import arrow_type


def _describe(v: Any) -> str:
    text = repr(v)
    return (text[:40] + "...") if len(text) > 40 else text


def _locate_bad(values: Sequence[Any], target: pa.DataType, table: str, column: str, sqltype: str):
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            _convert_list([v], target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                decimal.InvalidOperation, OverflowError):
            raise InputError(f"table {table}, column {column}, row {i}: cannot convert {_describe(v)} "
                             f"({type(v).__name__}) to {sqltype}") from None
    raise InputError(f"table {table}, column {column}: values cannot be converted to {sqltype}")


def _convert_list(values: Sequence[Any], target: pa.DataType) -> pa.Array:
    if pa.types.is_boolean(target) and any(not isinstance(v, (bool, type(None))) and not
                                           (hasattr(v, "dtype") and str(v.dtype) == "bool") for v in values):
        raise TypeError("not a boolean")
    if pa.types.is_decimal(target):
        conv = [None if v is None else decimal.Decimal(str(v)) for v in values]
        for d in conv:
            if d is not None and (not d.is_finite() or -d.as_tuple().exponent > target.scale
                                  or len(d.as_tuple().digits) - max(0, -d.as_tuple().exponent) > target.precision - target.scale):
                raise ValueError("decimal out of range")
        return pa.array(conv, type=target)
    if pa.types.is_integer(target) and any(isinstance(v, float) and not float(v).is_integer() for v in values if v is not None):
        raise ValueError("not an integer")
    if pa.types.is_timestamp(target) or pa.types.is_date(target):
        if any(isinstance(v, str) for v in values):
            arr = pa.array([None if v is None else str(v).replace("T", " ") for v in values], pa.string())
            if pa.types.is_date(target):
                return pa.compute.cast(pa.compute.strptime(arr, "%Y-%m-%d", "s"), pa.date32())
            return pa.compute.cast(arr, target)
    if pa.types.is_string(target) and any(not isinstance(v, str) for v in values if v is not None):
        raise TypeError("not a string")
    return pa.array(list(values), type=target)


def convert_values(values: Sequence[Any], ftype, table: str, column: str) -> pa.Array:
    target = arrow_type(ftype)
    try:
        return _convert_list(values, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
            decimal.InvalidOperation, OverflowError):
        _locate_bad(values, target, table, column, ftype.sql)
        raise  # pragma: no cover - _locate_bad always raises


def _check_not_null(arr: pa.Array, table: str, f, only=None) -> None:
    """NOT NULL check; ``only``: a boolean mask of the rows it applies to (None: all)."""
    if not f.type.nullable and arr.null_count:
        bad = pa.compute.is_null(arr)
        if only is not None:
            bad = pa.compute.and_(bad, only)
        if pa.compute.any(bad).as_py():
            i = pa.compute.index(bad, True).as_py()
            raise InputError(f"table {table}, column {f.name}, row {i}: NULL in a NOT NULL column")


def _key_only(t: TableDef, f) -> bool:
    """Deletes from a table with a PRIMARY KEY need only the key columns."""
    return bool(t.primary_key) and f.name not in t.primary_key


def check_unique_keys(t: TableDef, rows: pa.Table, weights) -> None:
    """Within one batch a primary key may be inserted at most once and deleted at most once."""
    if not t.primary_key:
        return
    idx = [i for i, f in enumerate(t.fields) if f.name in t.primary_key]
    seen = {}
    cols = [rows.column(i).to_pylist() for i in idx]
    ws = [weights] * rows.num_rows if isinstance(weights, int) else list(weights)
    for r, key in enumerate(zip(*cols)):
        kind = "inserted" if ws[r] > 0 else "deleted"
        if (key, kind) in seen:
            shown = ", ".join(f"{t.fields[i].name}={v!r}" for i, v in zip(idx, key))
            raise InputError(f"table {t.name}: duplicate primary key ({shown}) {kind} twice in one batch, "
                             f"rows {seen[(key, kind)]} and {r}")
        seen[(key, kind)] = r


def _match_columns(t: TableDef, given: Sequence[str], delete: bool = False) -> Dict[str, str]:
    """Map table field name -> given column name; error on unknown or missing NOT NULL columns."""
    by_lower = {f.name.lower(): f for f in t.fields}
    mapping: Dict[str, str] = {}
    for g in given:
        f = by_lower.get(str(g).lower())
        if f is None:
            raise InputError(f"table {t.name}: unknown column '{g}'. Columns: "
                             f"{', '.join(f.name for f in t.fields)}")
        if f.name in mapping:
            raise InputError(f"table {t.name}: column '{f.name}' given twice")
        mapping[f.name] = g
    for f in t.fields:
        if f.name not in mapping and not f.type.nullable and not (delete and _key_only(t, f)):
            raise InputError(f"table {t.name}: missing value for NOT NULL column '{f.name}'")
    return mapping


def from_pandas(t: TableDef, df, delete: bool = False) -> pa.Table:
    """Positional Arrow rows (``c0..``) from a pandas DataFrame with the table's column names.

    ``delete``: rows to delete; for a table with a PRIMARY KEY only the key columns are needed.
    """
    import pandas as pd
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"table {t.name}: expected a pandas DataFrame, got {type(df).__name__}")
    mapping = _match_columns(t, list(df.columns), delete)
    arrays = []
    n = len(df)
    for i, f in enumerate(t.fields):
        if f.name not in mapping:
            arrays.append(pa.nulls(n, arrow_type(f.type)))
            continue
        s = df[mapping[f.name]]
        target = arrow_type(f.type)
        try:
            if pa.types.is_timestamp(target) and isinstance(s.dtype, pd.DatetimeTZDtype):
                s = s.dt.tz_convert("UTC").dt.tz_localize(None)
            if pa.types.is_timestamp(target) and str(s.dtype).startswith("datetime64"):
                arr = pa.compute.cast(pa.Array.from_pandas(s), target, safe=False)
            elif pa.types.is_decimal(target) or pa.types.is_date(target) or s.dtype == object:
                raise pa.ArrowInvalid("slow path")
            else:
                arr = pa.Array.from_pandas(s, type=target, safe=True)
                if pa.types.is_integer(target) and s.dtype.kind == "f":
                    raise pa.ArrowInvalid("float to int")
                if pa.types.is_boolean(target) and s.dtype.kind != "b":
                    raise pa.ArrowInvalid("not bool")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
            values = [None if _isnull(v) else _unbox(v) for v in s.tolist()]
            arr = convert_values(values, f.type, t.name, f.name)
        if not (delete and _key_only(t, f)):
            _check_not_null(arr, t.name, f)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=[col(i) for i in range(len(t.fields))])


def _isnull(v) -> bool:
    try:
        import pandas as pd
        return v is None or (not isinstance(v, (list, dict)) and bool(pd.isna(v)))
    except (TypeError, ValueError):
        return False


def _unbox(v):
    import numpy as np
    import pandas as pd
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    return v


def parse_json(data) -> List[Any]:
    """A list of records from a list, a dict, a JSON array text or newline-delimited JSON text."""
    if isinstance(data, (bytes, bytearray)):
        data = data.decode()
    if isinstance(data, str):
        text = data.strip()
        try:
            parsed = json.loads(text) if text else []
        except json.JSONDecodeError:
            parsed = []
            for lineno, line in enumerate(text.splitlines()):
                if not line.strip():
                    continue
                try:
                    parsed.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(f"malformed JSON on line {lineno + 1}: {e.msg} (column {e.colno})") from None
        data = parsed
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise InputError(f"expected JSON records (a list of objects), got {type(data).__name__}")
    return data


def from_json(t: TableDef, data, update_format: str) -> Tuple[pa.Table, List[int]]:
    """Positional rows and their weights (+1 insert / -1 delete) from JSON records."""
    if update_format not in ("raw", "insert_delete"):
        raise InputError(f"unknown update_format {update_format!r}; use 'raw' or 'insert_delete'")
    records = parse_json(data)
    rows, weights = [], []
    for i, rec in enumerate(records):
        if update_format == "insert_delete":
            if not isinstance(rec, dict) or len(rec) != 1 or next(iter(rec)) not in ("insert", "delete"):
                raise InputError(f"table {t.name}, row {i}: expected {{\"insert\": {{...}}}} or "
                                 f"{{\"delete\": {{...}}}}, got {_describe(rec)}")
            kind, rec = next(iter(rec.items()))
            weights.append(1 if kind == "insert" else -1)
        else:
            weights.append(1)
        if not isinstance(rec, dict):
            raise InputError(f"table {t.name}, row {i}: expected a JSON object, got {_describe(rec)}")
        rows.append(rec)
    by_lower = {f.name.lower(): f for f in t.fields}
    for i, rec in enumerate(rows):
        for k in rec:
            if str(k).lower() not in by_lower:
                raise InputError(f"table {t.name}, row {i}: unknown column '{k}'. Columns: "
                                 f"{', '.join(f.name for f in t.fields)}")
    arrays = []
    for f in t.fields:
        values = []
        for rec in rows:
            v = None
            for k, x in rec.items():
                if str(k).lower() == f.name.lower():
                    v = x
            values.append(v)
        arr = convert_values(values, f.type, t.name, f.name)
        inserts = pa.array([w > 0 for w in weights], pa.bool_())
        _check_not_null(arr, t.name, f, only=inserts if _key_only(t, f) else None)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=[col(i) for i in range(len(t.fields))]), weights
