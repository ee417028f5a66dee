"""Validating and converting user input (pandas, JSON, CSV) into positional Arrow rows.

Every error names the table, the column and the row (0-based position in the
batch: the DataFrame row, the JSON record, the CSV data row after the header).
What happens to a bad row depends on the batch's error policy, an
:class:`Errors` collector: ``reject`` raises ``InputError`` at the first bad
row (the caller then applies nothing of the batch); ``dead_letter`` records
every bad row (table, row, column, message, raw row) and the converters drop
those rows, so the good ones can be applied.

Huge inputs are converted in chunks (``*_chunks`` generators): each chunk is a
``Chunk`` of at most ``chunk_rows`` rows, so memory stays bounded by the chunk.
"""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from planner.bind import TableDef
from planner.errors import InputError
from planner.logical import col

from sqlengine import nested
from sqlengine.types import arrow_type, to_decimal

NESTED_BASES = nested.CONVERTED   # the column types whose values sqlengine.nested converts
TEXT_VALUES = ("UUID", "TIME", "BLOB", "INTERVAL")   # of these, the ones whose text is the value itself (not JSON)
POLICIES = ("reject", "dead_letter")
_CONVERT_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                   decimal.InvalidOperation, OverflowError)


def _describe(v: Any) -> str:
    text = repr(v)
    return (text[:40] + "...") if len(text) > 40 else text


def jsonable(v: Any) -> Any:
    """A JSON-serializable form of a raw input value (for dead-letter records)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if _isnull(v):
        return None
    v = _unbox(v)
    if isinstance(v, (str, int, bool)) or (isinstance(v, float)):
        return v
    return str(v)


class Errors:
    """The error policy of one input batch, and the bad rows it collected.

    ``row_ids``/``offset`` map a row's position in the chunk being converted to its row number in the batch;
    ``raw(i)`` gives the raw form of chunk row ``i`` for the dead-letter record.
    """

    def __init__(self, table: str, policy: str = "reject"):
        if policy not in POLICIES:
            raise InputError(f"unknown on_error policy {policy!r}; use 'reject' or 'dead_letter'")
        self.table = table
        self.reject = policy == "reject"
        self.offset = 0
        self.row_ids: Optional[Sequence[int]] = None
        self.raw: Optional[Callable[[int], Any]] = None
        self.bad: Dict[int, dict] = {}       # batch row number -> dead-letter record
        self._chunk_bad: set = set()          # chunk positions of bad rows in the current chunk

    def start_chunk(self, offset: int = 0, row_ids=None, raw=None) -> None:
        self.offset, self.row_ids, self.raw = offset, row_ids, raw
        self._chunk_bad = set()

    def row(self, i: int) -> int:
        return int(self.row_ids[i]) if self.row_ids is not None else self.offset + i

    def add(self, i: int, column: Optional[str], message: str, raw: Any = None, batch_level: bool = False) -> None:
        """Row ``i`` (chunk position) is bad: record it (``check`` then raises under ``reject``)."""
        row = self.row(i)
        where = f", column {column}" if column else ""
        text = f"table {self.table}{where}, row {row}: {message}"
        if batch_level:
            raise InputError(text)
        self._chunk_bad.add(i)
        if row not in self.bad:
            if raw is None and self.raw is not None and not self.reject:
                raw = self.raw(i)
            self.bad[row] = {"table": self.table, "row": row, "column": column, "error": text,
                             "raw": jsonable(raw)}

    def check(self) -> None:
        """Under ``reject``, raise the error of the first bad row found so far."""
        if self.reject and self.bad:
            raise InputError(self.bad[min(self.bad)]["error"])

    def is_bad(self, i: int) -> bool:
        return i in self._chunk_bad

    def keep(self, table: pa.Table, *others):
        """Drop the current chunk's bad rows from ``table`` (and from the lists in ``others``)."""
        if not self._chunk_bad:
            return (table, *others) if others else table
        mask = [i not in self._chunk_bad for i in range(table.num_rows)]
        kept = table.filter(pa.array(mask, pa.bool_()))
        rest = tuple([x for x, k in zip(o, mask) if k] for o in others)
        return (kept, *rest) if others else kept


TIMESTAMP_FORMATS = ("expected a timestamp string 'YYYY-MM-DD[ HH:MM:SS[.ffffff]]' or ISO 8601 with 'T' and an "
                     "optional 'Z' or ±HH:MM offset")
# text ending in a zone: a time (after 'T' or ' '), then 'Z' or an offset (+HH, +HHMM, +HH:MM)
_ZONED = r"[T ]\d\d(:\d\d(:\d\d(\.\d*)?)?)?(Z|[+-]\d\d(:?\d\d)?)$"


def _hint(target: pa.DataType) -> str:
    return f": {TIMESTAMP_FORMATS}" if pa.types.is_timestamp(target) else ""


def parse_timestamps(strings: pa.Array, target: pa.DataType) -> pa.Array:
    """Timestamp text -> ``target`` (a naive timestamp type meaning UTC), vectorized.

    Naive text ('2024-01-02 10:00:00', '2024-01-02T10:00') is taken as it is; text with 'Z' or an offset
    ('2024-01-02T10:00:00+02:00') is converted to UTC.  Raises ``ArrowInvalid`` if any value does not parse.
    """
    try:
        return pc.cast(strings, target)     # the common case, naive text: one cast
    except _CONVERT_ERRORS:
        pass
    zoned = pc.fill_null(pc.match_substring_regex(strings, _ZONED), False)
    if not pc.any(zoned).as_py():
        raise pa.ArrowInvalid("not a timestamp")
    none = pa.scalar(None, pa.string())
    naive = pc.cast(pc.if_else(zoned, none, strings), target)
    utc = pc.cast(pc.cast(pc.if_else(zoned, strings, none), pa.timestamp(target.unit, "UTC")), target)
    return pc.if_else(zoned, utc, naive)


def _timestamps(values: Sequence[Any], target: pa.DataType) -> pa.Array:
    """Strings (see :func:`parse_timestamps`) or datetimes (aware ones converted to UTC) -> naive timestamps.
    Numbers are rejected: an epoch count has no unit we could know."""
    try:
        strings = pa.array(values, pa.string())   # all strings (or None): no per-value Python
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        strings = None
    if strings is not None:
        return parse_timestamps(strings, target)
    if any(not isinstance(v, (str, dt.datetime)) for v in values if v is not None):
        raise TypeError("not a timestamp")
    texts = pa.array([v if isinstance(v, str) else None for v in values], pa.string())
    stamps = pa.array([v if isinstance(v, dt.datetime) else None for v in values], target)  # aware: to UTC
    return pc.if_else(pc.is_valid(texts), parse_timestamps(texts, target), stamps)


_DATE_PARTS = r"^\s*(?P<y>\d+)-(?P<m>\d+)-(?P<d>\d+)"


def parse_dates(strings: pa.Array) -> pa.Array:
    """Date text ``'YYYY-MM-DD'`` -> date32, vectorized.  A day that does not exist in its month
    (``'2023-02-29'``, ``'2023-04-31'``) raises ``ArrowInvalid``, as DuckDB's cast does, never moving to
    another day."""
    parsed = pc.strptime(strings, "%Y-%m-%d", "s")
    parts, back = pc.extract_regex(strings.drop_null(), _DATE_PARTS), parsed.drop_null()
    for part, field in (("y", pc.year), ("m", pc.month), ("d", pc.day)):
        if not pc.all(pc.equal(pc.cast(parts.field(part), pa.int64()), field(back))).as_py():
            raise pa.ArrowInvalid("date field value out of range")
    return pc.cast(parsed, pa.date32())


def _convert_list(values: Sequence[Any], target: pa.DataType) -> pa.Array:
    if pa.types.is_boolean(target) and any(not isinstance(v, (bool, type(None))) and not
                                           (hasattr(v, "dtype") and str(v.dtype) == "bool") for v in values):
        raise TypeError("not a boolean")
    if pa.types.is_decimal(target):
        return pa.array([None if v is None else to_decimal(v, target) for v in values], type=target)
    if pa.types.is_integer(target) and any(isinstance(v, float) and not float(v).is_integer() for v in values if v is not None):
        raise ValueError("not an integer")
    if pa.types.is_timestamp(target):
        return _timestamps(values, target)
    if pa.types.is_date(target):
        if any(isinstance(v, str) for v in values):
            return parse_dates(pa.array([None if v is None else str(v) for v in values], pa.string()))
    if pa.types.is_string(target) and any(not isinstance(v, str) for v in values if v is not None):
        raise TypeError("not a string")
    return pa.array(list(values), type=target)


def convert_values(values: Sequence[Any], ftype, column: str, errs: Errors) -> pa.Array:
    """Python values -> an Arrow array of the column's type; bad values go to ``errs`` (and become NULL).
    A nested column takes lists, dicts and tuples, a JSON column any JSON value (:mod:`sqlengine.nested`)."""
    target = arrow_type(ftype)
    if ftype.base in NESTED_BASES:
        def convert(vs):
            return nested.from_python(vs, ftype)
    else:
        def convert(vs):
            return _convert_list(vs, target)
    try:
        return convert(values)
    except _CONVERT_ERRORS:
        pass
    cleaned = list(values)
    found = False
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            convert([v])
        except _CONVERT_ERRORS as e:
            why = f": {e}" if ftype.base in NESTED_BASES else _hint(target)
            errs.add(i, column, f"cannot convert {_describe(v)} ({type(v).__name__}) to {ftype.sql}{why}")
            cleaned[i] = None
            found = True
    if not found:
        errs.add(0, column, f"values cannot be converted to {ftype.sql}", batch_level=True)
    return convert(cleaned)


def _from_text(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Text -> ``target`` (not a string type); raises one of ``_CONVERT_ERRORS`` if a value does not convert.
    Decimal text with more digits after the point than the scale is rounded by :func:`to_decimal`."""
    if pa.types.is_timestamp(target):
        return parse_timestamps(arr, target)
    try:
        return pc.cast(arr, target)
    except _CONVERT_ERRORS:
        if not pa.types.is_decimal(target):
            raise
    return pa.array([None if v is None else to_decimal(v, target) for v in arr.to_pylist()], type=target)


def convert_strings(arr: pa.Array, ftype, column: str, errs: Errors) -> pa.Array:
    """Text values (CSV fields; NULL for an empty field) -> the column's type; bad ones go to ``errs``.  The
    text of a nested or JSON value is its JSON."""
    target = arrow_type(ftype)
    if ftype.base in TEXT_VALUES:
        return convert_values(arr.to_pylist(), ftype, column, errs)
    if ftype.base in NESTED_BASES:
        values = []
        for i, v in enumerate(arr.to_pylist()):
            try:
                values.append(None if v is None else nested.loads(v))
            except ValueError as e:
                errs.add(i, column, f"cannot convert {_describe(v)} to {ftype.sql}: not JSON ({e})")
                values.append(None)
        return convert_values(values, ftype, column, errs)
    if pa.types.is_string(target):
        return arr
    try:
        return _from_text(arr, target)
    except _CONVERT_ERRORS:
        pass
    bad = []
    for i, v in enumerate(arr.to_pylist()):
        if v is None:
            continue
        try:
            _from_text(pa.array([v], pa.string()), target)
        except _CONVERT_ERRORS:
            errs.add(i, column, f"cannot convert {_describe(v)} to {ftype.sql}{_hint(target)}")
            bad.append(i)
    if not bad:
        errs.add(0, column, f"values cannot be converted to {ftype.sql}", batch_level=True)
    mask = pa.array([False] * len(arr), pa.bool_()).to_numpy(zero_copy_only=False).copy()
    mask[bad] = True
    return _from_text(pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), arr), target)


def _check_not_null(arr: pa.Array, f, errs: Errors, only=None) -> None:
    """NOT NULL check; ``only``: a boolean mask of the rows it applies to (None: all)."""
    if not f.type.nullable and arr.null_count:
        bad = pc.is_null(arr)
        if only is not None:
            bad = pc.and_(bad, only)
        for i in pc.indices_nonzero(bad).to_pylist():
            if not errs.is_bad(i):
                errs.add(i, f.name, "NULL in a NOT NULL column")


def _key_only(t: TableDef, f) -> bool:
    """Deletes from a table with a PRIMARY KEY need only the key columns."""
    return bool(t.primary_key) and f.name not in t.primary_key


def check_unique_keys(t: TableDef, rows: pa.Table, weights, errs: Errors, seen: Optional[dict] = None) -> None:
    """Within one batch a primary key may be inserted at most once and deleted at most once.

    ``seen`` carries the keys of earlier chunks of the same batch.
    """
    if not t.primary_key:
        return
    seen = {} if seen is None else seen
    idx = [i for i, f in enumerate(t.fields) if f.name in t.primary_key]
    cols = [rows.column(i).to_pylist() for i in idx]
    ws = [weights] * rows.num_rows if isinstance(weights, int) else list(weights)
    for r, key in enumerate(zip(*cols)):
        if errs.is_bad(r):
            continue
        kind = "inserted" if ws[r] > 0 else "deleted"
        if (key, kind) in seen:
            shown = ", ".join(f"{t.fields[i].name}={v!r}" for i, v in zip(idx, key))
            errs.add(r, None, f"duplicate primary key ({shown}) {kind} twice in one batch, rows "
                              f"{seen[(key, kind)]} and {errs.row(r)}")
            continue
        seen[(key, kind)] = errs.row(r)


UNKNOWN_FIELDS = ("ignore", "reject")


def match_columns(t: TableDef, given: Sequence[str], delete: bool = False,
                   unknown_fields: str = "reject") -> Dict[str, str]:
    """Map table field name -> given column name; error on missing NOT NULL columns, and on unknown columns
    unless ``unknown_fields`` is ``"ignore"`` (then they are skipped)."""
    by_lower = {f.name.lower(): f for f in t.fields}
    mapping: Dict[str, str] = {}
    for g in given:
        f = by_lower.get(str(g).lower())
        if f is None:
            if unknown_fields == "ignore":
                continue
            raise InputError(f"table {t.name}: unknown column '{g}'. Columns: "
                             f"{', '.join(f.name for f in t.fields)}")
        if f.name in mapping:
            raise InputError(f"table {t.name}: column '{f.name}' given twice")
        mapping[f.name] = g
    for f in t.fields:
        if f.name not in mapping and not f.type.nullable and not (delete and _key_only(t, f)) and \
                not t.has_default(f.name):
            raise InputError(f"table {t.name}: missing value for NOT NULL column '{f.name}'")
    return mapping


def left_out(t: TableDef, f, n: int) -> pa.Array:
    """The values of column ``f`` for ``n`` input rows that leave it out: its DEFAULT, else NULL."""
    target = arrow_type(f.type)
    if not t.has_default(f.name):
        return pa.nulls(n, target)
    return pa.array([t.default(f.name)] * n, target)


def finish(t: TableDef, arrays: List[pa.Array], weights, errs: Errors, seen: dict):
    """NOT NULL and primary-key checks over a converted chunk, then its good rows and their weights."""
    wlist = None if isinstance(weights, int) else list(weights)
    inserts = None
    for f, arr in zip(t.fields, arrays):
        if _key_only(t, f):
            if weights == -1:
                continue
            if wlist is not None:
                inserts = inserts if inserts is not None else pa.array([w > 0 for w in wlist], pa.bool_())
                _check_not_null(arr, f, errs, only=inserts)
                continue
        _check_not_null(arr, f, errs)
    rows = pa.Table.from_arrays(arrays, names=[col(i) for i in range(len(t.fields))]) if arrays else None
    check_unique_keys(t, rows, weights, errs, seen)
    errs.check()
    if wlist is None:
        return errs.keep(rows), weights
    rows, wlist = errs.keep(rows, wlist)
    return rows, wlist


Chunk = Tuple[pa.Table, Any]    # (positional rows c0.., weights: an int for all rows or a list)


def pandas_chunks(t: TableDef, df, delete: bool, errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
    """Chunks of positional rows from a pandas DataFrame with the table's column names.

    ``delete``: rows to delete; for a table with a PRIMARY KEY only the key columns are needed.
    """
    import pandas as pd
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"table {t.name}: expected a pandas DataFrame, got {type(df).__name__}")
    mapping = match_columns(t, list(df.columns), delete)
    seen: dict = {}
    weight = -1 if delete else 1
    for start in range(0, len(df), chunk_rows):
        part = df.iloc[start:start + chunk_rows]
        errs.start_chunk(start, raw=lambda i, part=part: part.iloc[i].to_dict())
        arrays = [_pandas_column(t, f, part, mapping, errs) for f in t.fields]
        yield finish(t, arrays, weight, errs, seen)


def arrow_chunks(t: TableDef, table: pa.Table, delete: bool, errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
    """Chunks of positional rows from an Arrow table whose columns are named after the table's columns and
    already hold its values (``execute()``'s rows, cast by DuckDB): no value goes through pandas or float64,
    so big integers stay exact and NaN stays NaN.  ``delete`` as for :func:`pandas_chunks`."""
    mapping = match_columns(t, table.column_names, delete)
    seen: dict = {}
    weight = -1 if delete else 1
    for start in range(0, table.num_rows, chunk_rows):
        part = table.slice(start, chunk_rows)
        errs.start_chunk(start, raw=lambda i, part=part: part.slice(i, 1).to_pylist()[0])
        arrays = []
        for f in t.fields:
            target = arrow_type(f.type)
            if f.name not in mapping:
                arrays.append(left_out(t, f, part.num_rows))
                continue
            arr = part.column(mapping[f.name]).combine_chunks()
            try:
                arrays.append(arr if arr.type == target and f.type.base not in NESTED_BASES
                              else _arrow_cast(arr, target, f.type))
            except _CONVERT_ERRORS:   # value by value, by the same cast: the bad ones are named
                arrays.append(_cast_each(arr, f.type, f.name, errs))
        yield finish(t, arrays, weight, errs, seen)


def _arrow_cast(arr: pa.Array, target: pa.DataType, ftype=None) -> pa.Array:
    """An Arrow column cast to a table column's type: text as CSV fields are read (strict timestamps, decimals
    rounded), nested values made canonical (``ftype``: the column's SQL type), other types by Arrow's safe
    cast."""
    if ftype is not None and ftype.base in NESTED_BASES:
        text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
        if ftype.base in TEXT_VALUES and (text or not nested.needs_canonical(ftype)):
            return nested.from_python(arr.to_pylist(), ftype) if text else arr.cast(target)
        if ftype.base != "JSON" and text:
            return nested.from_python([None if v is None else nested.loads(v) for v in arr.to_pylist()], ftype)
        return nested.canonical(arr, ftype)
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return _from_text(arr.cast(pa.string()), target) if not pa.types.is_string(target) else arr.cast(target)
    return pc.cast(arr, target)


def _cast_each(arr: pa.Array, ftype, column: str, errs: Errors) -> pa.Array:
    """``arr`` cast value by value (:func:`_arrow_cast`); the values that do not cast go to ``errs`` as NULL."""
    target = arrow_type(ftype)
    out = []
    for i in range(len(arr)):
        one = arr.slice(i, 1)
        try:
            out.append(_arrow_cast(one, target, ftype))
        except _CONVERT_ERRORS:
            v = one[0].as_py()
            errs.add(i, column, f"cannot convert {_describe(v)} ({arr.type}) to {ftype.sql}{_hint(target)}")
            out.append(pa.nulls(1, target))
    return pa.concat_arrays(out) if out else pa.array([], target)


def _pandas_column(t: TableDef, f, df, mapping, errs: Errors) -> pa.Array:
    import pandas as pd
    target = arrow_type(f.type)
    if f.name not in mapping:
        return left_out(t, f, len(df))
    s = df[mapping[f.name]]
    try:
        if f.type.base in NESTED_BASES:   # (sqlengine.nested: canonical values, checked)
            raise pa.ArrowInvalid("nested")
        if pa.types.is_timestamp(target) and isinstance(s.dtype, pd.DatetimeTZDtype):
            s = s.dt.tz_convert("UTC").dt.tz_localize(None)
        if pa.types.is_timestamp(target) and str(s.dtype).startswith("datetime64"):
            return pc.cast(pa.Array.from_pandas(s), target, safe=False)
        if pa.types.is_timestamp(target):
            if s.dtype.kind in "biufc":
                raise pa.ArrowInvalid("numbers are not timestamps")   # the slow path names the bad values
            if (s.dtype == object or isinstance(s.dtype, pd.StringDtype)) and \
                    pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
                return parse_timestamps(pa.Array.from_pandas(s, type=pa.string()), target)
        if pa.types.is_string(target) and (s.dtype == object or isinstance(s.dtype, pd.StringDtype)):
            if pd.api.types.infer_dtype(s, skipna=True) not in ("string", "empty"):
                raise pa.ArrowInvalid("not all strings")   # the slow path names the bad values
            return pa.Array.from_pandas(s, type=target)
        if pa.types.is_decimal(target) or pa.types.is_date(target) or s.dtype == object:
            raise pa.ArrowInvalid("slow path")
        arr = pa.Array.from_pandas(s, type=target, safe=True)
        if pa.types.is_integer(target) and s.dtype.kind == "f":
            raise pa.ArrowInvalid("float to int")
        if pa.types.is_boolean(target) and s.dtype.kind != "b":
            raise pa.ArrowInvalid("not bool")
        return arr
    except _CONVERT_ERRORS:
        missing = _missing_object if s.dtype == object else _isnull
        values = [None if missing(v) else _unbox(v) for v in s.tolist()]
        return convert_values(values, f.type, f.name, errs)


def _isnull(v) -> bool:
    try:
        import pandas as pd
        return v is None or (not isinstance(v, (list, dict)) and bool(pd.isna(v)))
    except (TypeError, ValueError):
        return False


def _missing_object(v) -> bool:
    """NULL in an object column: None, ``pd.NA`` or ``NaT``.  A float NaN there is a value (NaN), unlike in a
    float column, where pandas uses NaN for missing."""
    import numpy as np
    return _isnull(v) and not isinstance(v, (float, np.floating))


def _unbox(v):
    import numpy as np
    import pandas as pd
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    return v


_MALFORMED = object()


def parse_json(data, errs: Errors) -> Tuple[List[Any], Dict[int, str]]:
    """Records from a list, a dict, a JSON array text or newline-delimited JSON text.

    Returns the records and, for NDJSON lines that are not valid JSON, their raw text by record number
    (their record is a placeholder; under ``reject`` the first one raises).
    """
    malformed: Dict[int, str] = {}
    if isinstance(data, (bytes, bytearray)):
        data = data.decode()
    if isinstance(data, str):
        text = data.strip()
        try:
            parsed = nested.loads(text) if text else []
        except json.JSONDecodeError:
            parsed = []
            for lineno, line in enumerate(text.splitlines()):
                if not line.strip():
                    continue
                try:
                    parsed.append(nested.loads(line))
                except json.JSONDecodeError as e:
                    errs.start_chunk(0)
                    errs.add(len(parsed), None, f"malformed JSON on line {lineno + 1}: {e.msg} (column {e.colno})",
                             raw=line)
                    malformed[len(parsed)] = line
                    parsed.append(_MALFORMED)
        data = parsed
    errs.check()
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise InputError(f"table {errs.table}: expected JSON records (a list of objects), got {type(data).__name__}")
    return data, malformed


def json_chunks(t: TableDef, data, update_format: str, errs: Errors, chunk_rows: int,
                unknown_fields: str = "reject") -> Iterator[Chunk]:
    """Chunks of positional rows and their weights (+1 insert / -1 delete) from JSON records.

    A field that is not a column of the table (names match ignoring case) makes its record bad, naming the
    field (``unknown_fields="reject"``, the default of ``Pipeline.input_json``), or is skipped (``"ignore"``,
    the default of the connectors' formats: a producer that adds a field does not break the pipeline).  A
    missing field is its column's DEFAULT, else NULL (a row error if its column is NOT NULL)."""
    if update_format not in ("raw", "insert_delete"):
        raise InputError(f"unknown update_format {update_format!r}; use 'raw' or 'insert_delete'")
    if unknown_fields not in UNKNOWN_FIELDS:
        raise InputError(f"unknown unknown_fields {unknown_fields!r}; use 'ignore' or 'reject'")
    ignore = unknown_fields == "ignore"
    records, malformed = parse_json(data, errs)
    by_lower = {f.name.lower(): f.name for f in t.fields}
    seen: dict = {}
    for start in range(0, len(records), chunk_rows):
        part = records[start:start + chunk_rows]
        errs.start_chunk(start, raw=lambda i, part=part: part[i])
        rows, weights = [], []
        for i, rec in enumerate(part):
            if rec is _MALFORMED:
                errs.add(i, None, "malformed JSON", raw=malformed[start + i])
                rows.append({})
                weights.append(1)
                continue
            weight = 1
            if update_format == "insert_delete":
                if not isinstance(rec, dict) or len(rec) != 1 or next(iter(rec)) not in ("insert", "delete"):
                    errs.add(i, None, f"expected {{\"insert\": {{...}}}} or {{\"delete\": {{...}}}}, got {_describe(rec)}")
                    rec = {"insert": {}}
                kind, rec = next(iter(rec.items()))
                weight = 1 if kind == "insert" else -1
            weights.append(weight)
            if not isinstance(rec, dict):
                errs.add(i, None, f"expected a JSON object, got {_describe(rec)}")
                rec = {}
            row = {}
            for k, v in rec.items():
                name = by_lower.get(str(k).lower())
                if name is None:
                    if not ignore:
                        errs.add(i, None, f"unknown column '{k}'. Columns: {', '.join(f.name for f in t.fields)}")
                    continue
                row[name] = v
            rows.append(row)
        arrays = [convert_values([r[f.name] if f.name in r else t.default(f.name) for r in rows], f.type, f.name,
                                 errs) for f in t.fields]
        yield finish(t, arrays, weights, errs, seen)


def _csv_source(data):
    if isinstance(data, (bytes, bytearray)):
        return io.BytesIO(bytes(data))
    if isinstance(data, os.PathLike) or (isinstance(data, str) and "\n" not in data and os.path.exists(data)):
        return str(data)
    if isinstance(data, str) and ("\n" in data or "," in data):
        return io.BytesIO(data.encode())
    raise InputError(f"CSV input must be CSV text or the path of an existing file, got {_describe(data)}")


def csv_header(source, delimiter: str = ",") -> List[str]:
    """The column names in the first line of CSV ``source`` (a path or a bytes buffer)."""
    import csv
    if isinstance(source, str):
        with open(source, newline="") as f:
            line = f.readline()
    else:
        line = source.getvalue().split(b"\n", 1)[0].decode()
    return next(csv.reader([line.rstrip("\r\n")], delimiter=delimiter), [])


def csv_tables(t: TableDef, source, names: List[str], errs: Errors, chunk_rows: int, first_line: int = 2,
               delimiter: str = ",", header: bool = True) -> Iterator[Tuple[List[pa.Array], int]]:
    """The fields of CSV ``source`` as text columns (``names``, in file order), ``chunk_rows`` rows at a
    time, each with the error context started (``errs.start_chunk``: row numbers around malformed rows).

    A row with the wrong number of fields is bad: it is reported to ``errs`` (its raw line goes to the
    dead letter) and skipped.  ``first_line`` is the line number of data row 0.
    """
    import pyarrow.csv as pcsv
    invalid: List[Tuple[int, int, str]] = []   # (data row number, field count, raw line) of malformed rows

    def on_invalid(row):
        invalid.append(((row.number or 0) - first_line, row.actual_columns, row.text))
        return "skip"

    read_opts = pcsv.ReadOptions(use_threads=False, block_size=1 << 22, column_names=None if header else names)
    try:
        reader = pcsv.open_csv(source, read_options=read_opts,
                               parse_options=pcsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_invalid),
                               convert_options=pcsv.ConvertOptions(
                                   strings_can_be_null=True, null_values=[""], quoted_strings_can_be_null=False,
                                   column_types={h: pa.string() for h in names}))
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"table {t.name}: cannot read CSV: {e}") from None
    state = {"next": 0, "inv": 0}   # next data row number; malformed rows already reported
    skipped: set = set()

    def flush(batches):
        table = pa.Table.from_batches(batches, schema=reader.schema) if batches else None
        n = table.num_rows if table is not None else 0
        for number, fields, text in sorted(invalid[state["inv"]:]):
            skipped.add(number)
            errs.start_chunk(number)
            errs.add(0, None, f"malformed CSV row: expected {len(names)} fields, got {fields}: {_describe(text)}",
                     raw=text)
        state["inv"] = len(invalid)
        base, ids = state["next"], None
        if any(x >= base for x in skipped):   # rows numbered around the skipped malformed ones
            ids, r = [], base
            while len(ids) < n:
                if r not in skipped:
                    ids.append(r)
                r += 1
            state["next"] = r
        else:
            state["next"] = base + n
        if not n:
            errs.check()
            return None
        columns = [table.column(i).combine_chunks() for i in range(len(names))]
        errs.start_chunk(base, row_ids=ids, raw=lambda i: {str(c): a[i].as_py() for c, a in zip(names, columns)})
        return columns, n

    pending, rows = [], 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as e:
            raise InputError(f"table {t.name}: malformed CSV near data row {state['next'] + rows}: {e}") from None
        while batch.num_rows:
            take = min(batch.num_rows, chunk_rows - rows)
            pending.append(batch.slice(0, take))
            rows += take
            batch = batch.slice(take)
            if rows >= chunk_rows:
                out = flush(pending)
                pending, rows = [], 0
                if out is not None:
                    yield out
    out = flush(pending)
    if out is not None:
        yield out


def csv_chunks(t: TableDef, data, delete: bool, errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
    """Chunks of positional rows from CSV (a path or CSV text) with a header row of column names.

    Every field is read as text, then converted to its column's type; an empty field is NULL.
    A row with the wrong number of fields is bad (its raw line goes to the dead letter).
    """
    source = _csv_source(data)
    names = csv_header(source)
    mapping = match_columns(t, names, delete)
    weight = -1 if delete else 1
    seen: dict = {}
    for columns, n in csv_tables(t, source, names, errs, chunk_rows):
        cols = dict(zip(names, columns))
        arrays = []
        for f in t.fields:
            if f.name not in mapping:
                arrays.append(left_out(t, f, n))
                continue
            arrays.append(convert_strings(cols[mapping[f.name]], f.type, f.name, errs))
        yield finish(t, arrays, weight, errs, seen)
