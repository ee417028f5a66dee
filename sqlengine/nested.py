"""Nested values on the data plane: ARRAY, MAP and STRUCT (ROW) columns as Arrow's nested types, JSON
(VARIANT) columns as text; their one canonical form, and the keys that both executors hash them by.

**Canonical form.** Every nested value the engine stores is canonical, so that equal values are equal in
Arrow, DuckDB and Spark alike, position by position:

* a MAP's entries are sorted by key (its keys are unique and not NULL): ``MAP {'b': 2, 'a': 1}`` is stored as
  ``MAP {'a': 1, 'b': 2}``, so map equality does not depend on the order the keys came in;
* a JSON value is its compact text with every object's keys sorted (``{"a":1,"b":2}``), so ``{"b":2,"a":1}``
  equals ``{"a":1,"b":2}``; numbers keep their text (``1`` and ``1.0`` are different values).

Input values are made canonical as they come in (:func:`from_python`, :func:`canonical`); values a view
computes are made canonical by the planner's rewrite (``planner.semantics``).

**Keys.** Arrow cannot hash a list, a struct or a map.  Where the executor groups or joins rows in Arrow
(consolidation, aggregate groups, keyed reads), a nested column is replaced by :func:`hash_key`: its canonical
JSON text (floats as SQL compares them: ``-0.0`` as ``0.0``, every NaN one).

>>> import pyarrow as pa
>>> from planner.types import SqlType
>>> m = from_python([{"b": 2, "a": 1}, None, []], SqlType("MAP(VARCHAR, INT)"))
>>> m.to_pylist()
[[('a', 1), ('b', 2)], None, []]
>>> from_python([{"b": [1, 2.5], "a": None}, "x", 3], SqlType("JSON")).to_pylist()
['{"a":null,"b":[1,2.5]}', '"x"', '3']
>>> hash_key(pa.array([[1.5, -0.0], None, [float("nan")]])).to_pylist()
['[1.5,0.0]', None, '[NaN]']
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence

import pyarrow as pa

from planner.nested_types import DUCKDB_BASES
from planner.types import SqlType, contains, element_type, map_types, struct_fields

from sqlengine import intervals
from sqlengine.types import arrow_type, to_decimal

__all__ = ["from_python", "canonical", "canonical_json", "hash_key", "hashable", "holds", "is_nested_arrow",
           "needs_canonical"]


CONVERTED = DUCKDB_BASES   # the column types whose input values this module converts and makes canonical


class Pairs(dict):
    """A JSON object whose text gives a key more than once (:func:`loads`): a dict of the last values, which
    remembers its pairs, so that a MAP column rejects it."""

    def __init__(self, pairs):
        super().__init__(pairs)
        self.pairs = pairs


def _object(pairs):
    d = dict(pairs)
    return d if len(d) == len(pairs) else Pairs(pairs)


_DECODER = json.JSONDecoder(object_pairs_hook=_object)   # (one decoder: json.loads(..., hook) makes one a call)


def loads(text):
    """``json.loads`` that keeps track of objects with a key given twice (:class:`Pairs`)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    return _DECODER.decode(text)


def is_nested_arrow(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t) or pa.types.is_map(t) \
        or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t)


def holds(t: pa.DataType, leaf: Callable[[pa.DataType], bool]) -> bool:
    """Whether the Arrow type ``t`` is, or holds at any depth (an element, a field, a map's key or value), a type
    that ``leaf`` accepts.

    >>> holds(pa.list_(pa.struct([("d", pa.date32())])), pa.types.is_date), holds(pa.int64(), pa.types.is_date)
    (True, False)
    """
    if leaf(t):
        return True
    if pa.types.is_struct(t):
        return any(holds(t.field(i).type, leaf) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return holds(t.key_type, leaf) or holds(t.item_type, leaf)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return holds(t.value_type, leaf)
    return False


def needs_canonical(t: SqlType) -> bool:
    """Whether values of ``t`` have a canonical form other than Arrow's own (a MAP, a JSON or a UUID inside)."""
    return contains(t, "MAP") or contains(t, "JSON") or contains(t, "UUID") or contains(t, "INTERVAL")


# ------------------------------------------------------------------ JSON
def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


class JsonText(str):
    """JSON text given for a JSON column, which takes it as the value it spells (``JsonText('null')`` is JSON's
    null, not SQL's NULL; ``'{"a": 1}'`` an object), where a plain ``str`` is a JSON string value."""


def canonical_json(text: Optional[str]) -> Optional[str]:
    """JSON text in its canonical form (compact, every object's keys sorted); raises ValueError if it is not
    JSON.

    >>> canonical_json('{ "b" : [1, {"d": 1, "c": 2}], "a": "x" }')
    '{"a":"x","b":[1,{"c":2,"d":1}]}'
    """
    if text is None:
        return None
    return _dump(json.loads(text, parse_constant=_no_constant))


def _dump(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                      default=_json_default)


def _json_default(v: Any):
    if isinstance(v, decimal.Decimal):
        return float(v) if v != v.to_integral_value() else int(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat()
    if isinstance(v, tuple):
        return list(v)
    if hasattr(v, "tolist"):        # numpy arrays and scalars
        return v.tolist()
    raise TypeError(f"{type(v).__name__} is not a JSON value")


def canonical_json_array(a: pa.Array) -> pa.Array:
    """A text array of JSON values in canonical form (NULL stays NULL); raises ValueError on text that is not
    JSON."""
    return pa.array([canonical_json(v) for v in a.to_pylist()], pa.string())


# ------------------------------------------------------------------ Python values -> canonical Python values
def _leaf(t: SqlType) -> Callable[[Any], Any]:
    """The converter of a scalar inside a nested value: text to a DATE or a TIMESTAMP read as the columns
    read it, decimals rounded as DuckDB's cast rounds, the rest as Arrow converts it."""
    b = t.base
    if b == "TIME":
        def time(v):
            if isinstance(v, str):
                return dt.time.fromisoformat(v.strip())
            if not isinstance(v, dt.time):
                raise TypeError(f"{v!r} is not a TIME (write 'HH:MM:SS[.ffffff]')")
            return v.replace(tzinfo=None)
        return time
    if b == "BLOB":
        def blob(v):
            if isinstance(v, str):   # text: base64, as Flink's and Kafka Connect's JSON write bytes
                return base64.b64decode(v, validate=True)
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(f"{v!r} is not a BINARY value (bytes, or base64 text)")
            return bytes(v)
        return blob
    if b == "INTERVAL":
        return intervals.interval_text
    if b == "UUID":
        def uuid_text(v):
            return str(v if isinstance(v, uuid.UUID) else uuid.UUID(str(v).strip()))
        return uuid_text
    if b == "DATE":
        def date(v):
            if isinstance(v, str):
                return dt.date.fromisoformat(v.strip())
            if isinstance(v, dt.datetime):
                raise TypeError("a timestamp is not a DATE")
            return v
        return date
    if b == "TIMESTAMP":
        def stamp(v):
            if isinstance(v, str):
                v = dt.datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
            if isinstance(v, dt.datetime) and v.tzinfo is not None:
                v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
            return v
        return stamp
    if b == "DECIMAL":
        target = arrow_type(t)
        return lambda v: to_decimal(v, target)
    if b == "VARCHAR":
        def text(v):
            if not isinstance(v, str):
                raise TypeError(f"{v!r} is not a string")
            return v
        return text
    if b == "BOOLEAN":
        def boolean(v):
            if not isinstance(v, bool):
                raise TypeError(f"{v!r} is not a boolean")
            return v
        return boolean
    if b in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        def integer(v):
            if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()) or isinstance(v, str):
                raise TypeError(f"{v!r} is not an integer")
            return int(v)
        return integer
    if b in ("REAL", "DOUBLE"):
        def number(v):
            if isinstance(v, (bool, str)):
                raise TypeError(f"{v!r} is not a number")
            return float(v)
        return number
    return lambda v: v


def _key_text(t: SqlType) -> Callable[[str], Any]:
    """A map key of type ``t`` from a JSON object's key (text): a number or a boolean from its JSON spelling."""
    if t.base in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        def integer(k: str):
            if not re.fullmatch(r"\s*-?\d+\s*", k):
                raise TypeError(f"{k!r} is not an integer")
            return int(k)
        return integer
    if t.base in ("REAL", "DOUBLE"):
        return float
    if t.base == "DECIMAL":
        return decimal.Decimal
    if t.base == "BOOLEAN":
        return lambda k: {"true": True, "false": False}[k]
    return lambda k: k


def converter(t: SqlType) -> Callable[[Any], Any]:
    """A function from a Python value to the canonical Python value of type ``t`` (NULL -> None) that Arrow
    builds the column from; it raises ValueError / TypeError on a value that does not fit."""
    b = t.base
    if b == "JSON":
        return lambda v: None if v is None else canonical_json(v) if isinstance(v, JsonText) else _dump(v)
    if b == "ARRAY":
        inner = converter(element_type(t))

        def array(v):
            if v is None:
                return None
            if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__"):
                raise TypeError(f"{_short(v)} is not an array")
            return [inner(x) for x in v]
        return array
    if b == "MAP":
        kt, vt = map_types(t)
        key, value = converter(kt), converter(vt)
        named = _key_text(kt)   # a JSON object's keys are text: {"7": ...} for a MAP(INT, ...), as egress writes it

        def mapping(v):
            if v is None:
                return None
            is_object = isinstance(v, (dict, Pairs))
            items = v.pairs if isinstance(v, Pairs) else list(v.items()) if isinstance(v, dict) else list(v)
            out: Dict[Any, Any] = {}
            for item in items:
                if not isinstance(item, (tuple, list)) or len(item) != 2:
                    raise TypeError(f"{_short(v)} is not a map (a dict, or a list of (key, value) pairs)")
                k = key(named(item[0]) if is_object and isinstance(item[0], str) else item[0])
                if k is None:
                    raise ValueError("a map key is NULL")
                if k in out:
                    raise ValueError(f"map key {k!r} is given twice")
                out[k] = value(item[1])
            return sorted(out.items(), key=lambda kv: _order(kv[0]))
        return mapping
    if b == "STRUCT":
        fields = struct_fields(t)
        convs = [(name, converter(ft)) for name, ft in fields]
        lower = {name.lower(): name for name, _ in fields}

        def struct(v):
            if v is None:
                return None
            if isinstance(v, dict):
                unknown = [k for k in v if str(k).lower() not in lower]
                if unknown:
                    raise ValueError(f"field {unknown[0]!r} is not a field of {t.sql}")
                given = {lower[str(k).lower()]: x for k, x in v.items()}
                return {name: conv(given.get(name)) for name, conv in convs}
            if isinstance(v, (tuple, list)) and len(v) == len(convs):
                return {name: conv(x) for (name, conv), x in zip(convs, v)}
            raise TypeError(f"{_short(v)} is not a row of {t.sql} (a dict of its fields)")
        return struct
    leaf = _leaf(t)
    return lambda v: None if v is None else leaf(v)


def _order(k: Any):
    """A map key's sort key: NaN after every number, as SQL orders it."""
    if isinstance(k, float) and math.isnan(k):
        return (1, 0.0)
    return (0, k)


def _short(v: Any) -> str:
    text = repr(v)
    return text[:40] + "..." if len(text) > 40 else text


def from_python(values: Sequence[Any], t: SqlType) -> pa.Array:
    """Python values (lists, dicts, tuples; JSON values for a JSON column) -> a canonical Arrow array of the
    nested type ``t``; raises ValueError or TypeError on a value that does not fit (all or nothing: the caller
    names the bad ones by converting them one by one).  Column by column first (:func:`_columnar`); where that
    refuses a value, value by value (:func:`converter`), which says why."""
    target = arrow_type(t)
    try:
        out = _columnar(list(values), t)
        return out if out.type == target else out.cast(target)
    except (pa.ArrowException, TypeError, ValueError, KeyError, AttributeError, OverflowError):
        pass
    conv = converter(t)
    return pa.array([conv(v) for v in values], target)


_NUMBERS = {"TINYINT", "SMALLINT", "INT", "BIGINT", "REAL", "DOUBLE"}


def _columnar(values: list, t: SqlType) -> pa.Array:
    """``values`` as an Arrow array of ``t``, built column by column: an ARRAY's elements, a MAP's keys and
    values, a ROW's fields each converted as one list (Arrow's own conversion for numbers, text and booleans),
    then assembled with their offsets and validity.  Raises on anything the value-by-value converter would have
    to judge (it then does)."""
    b = t.base
    if b == "ARRAY":
        offsets, flat, mask = [0], [], []
        for v in values:
            if v is not None and (isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__")):
                raise TypeError("not an array")
            if v is not None:
                flat.extend(v)
            mask.append(v is None)
            offsets.append(len(flat))
        inner = _columnar(flat, element_type(t))
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), inner, mask=pa.array(mask, pa.bool_()))
    if b == "MAP":
        kt, vt = map_types(t)
        offsets, keys, items, mask = [0], [], [], []
        for v in values:
            mask.append(v is None)
            if v is None:
                offsets.append(len(keys))
                continue
            if type(v) is not dict:   # (pairs, and a Pairs with a key twice: value by value)
                raise TypeError("not a dict")
            entries = sorted(v.items(), key=lambda kv: _order(kv[0])) if len(v) > 1 else v.items()
            for k, x in entries:
                if k is None:
                    raise ValueError("a map key is NULL")
                keys.append(k)
                items.append(x)
            offsets.append(len(keys))
        return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), _columnar(keys, kt), _columnar(items, vt),
                                       mask=pa.array(mask, pa.bool_()))
    if b == "STRUCT":
        fields = struct_fields(t)
        names = [n for n, _ in fields]
        known = set(names)
        columns: List[list] = [[] for _ in fields]
        mask = []
        for v in values:
            if v is None:
                mask.append(True)
                for c in columns:
                    c.append(None)
                continue
            if type(v) is not dict or not known.issuperset(v):   # (other spellings of the names: value by value)
                raise TypeError("not a dict of the fields")
            mask.append(False)
            for c, n in zip(columns, names):
                c.append(v.get(n))
        children = [_columnar(c, ft) for c, (_, ft) in zip(columns, fields)]
        return pa.StructArray.from_arrays(children, fields=[pa.field(n, c.type) for n, c in zip(names, children)],
                                          mask=pa.array(mask, pa.bool_()))
    target = arrow_type(t)
    if b in _NUMBERS:
        integral = b not in ("REAL", "DOUBLE")
        for v in values:
            if v is not None and (isinstance(v, (bool, str)) or (integral and isinstance(v, float)
                                                                  and not v.is_integer())):
                raise TypeError("not a number of this type")
        return pa.array(values, target)
    if b in ("VARCHAR", "BOOLEAN"):
        return pa.array(values, target)
    if b == "INTERVAL" and all(v is None or isinstance(v, str) for v in values):
        return intervals.interval_texts(pa.array(values, pa.string()))
    conv = converter(t)
    return pa.array([conv(v) for v in values], target)



def canonical(a: pa.Array, t: SqlType) -> pa.Array:
    """An Arrow array of nested type ``t`` (from DuckDB, a file, Spark) in canonical form: cast to the engine's
    Arrow type, maps sorted, JSON text canonical.  Raises ValueError on JSON text that is not JSON and on a map
    with a key twice."""
    target = arrow_type(t)
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if t.base == "JSON":
        return canonical_json_array(a.cast(pa.string()))
    if t.base == "INTERVAL":
        return intervals.interval_texts(a)
    if not needs_canonical(t):
        return a if a.type == target else a.cast(target)
    return pa.array([_recanonical(v, t) for v in a.to_pylist()], target)


def _recanonical(v: Any, t: SqlType) -> Any:
    """A value as Arrow's ``to_pylist`` gives it (maps as lists of pairs, JSON as text) made canonical."""
    if v is None:
        return None
    b = t.base
    if b == "JSON":
        return canonical_json(v)
    if b == "UUID":
        return str(uuid.UUID(str(v)))
    if b == "INTERVAL":
        return intervals.interval_text(v)
    if b == "ARRAY":
        return [_recanonical(x, element_type(t)) for x in v]
    if b == "MAP":
        kt, vt = map_types(t)
        keys = [k for k, _ in v]
        if len(set(keys)) != len(keys):
            raise ValueError("a map key is given twice")
        return sorted(((k, _recanonical(x, vt)) for k, x in v), key=lambda kv: _order(kv[0]))
    if b == "STRUCT":
        return {name: _recanonical(v.get(name), ft) for name, ft in struct_fields(t)}
    return v


# ------------------------------------------------------------------ keys
def _key_value(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return _NAN
        return 0.0 if v == 0 else v
    if isinstance(v, dict):
        return [_key_value(x) for x in v.values()]
    if isinstance(v, (list, tuple)):
        return [_key_value(x) for x in v]
    return v


_NAN = float("nan")   # json.dumps writes it NaN


def hash_key(a) -> pa.Array:
    """A string key per value of a nested Arrow array: equal keys for values equal in SQL (NULL stays NULL)."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return pa.array([None if v is None else json.dumps(_key_value(v), default=_json_default, separators=(",", ":"))
                     for v in a.to_pylist()], pa.string())


def hashable(t: pa.Table, columns: Optional[Sequence[str]] = None) -> pa.Table:
    """``t`` with its nested ``columns`` (default: all) replaced by :func:`hash_key`, to group or join by."""
    for name in (columns if columns is not None else t.column_names):
        i = t.schema.get_field_index(name)
        if i >= 0 and is_nested_arrow(t.schema.field(i).type):
            t = t.set_column(i, name, hash_key(t.column(i)))
    return t


def has_nested(schema: pa.Schema, columns: Optional[Sequence[str]] = None) -> bool:
    names = columns if columns is not None else schema.names
    return any(is_nested_arrow(schema.field(n).type) for n in names if schema.get_field_index(n) >= 0)


def group_by(t: pa.Table, keys: List[str], aggregates) -> pa.Table:
    """``t.group_by(keys).aggregate(aggregates)`` where some ``keys`` may be nested: grouped by their
    :func:`hash_key`, each group's nested values taken from its first row."""
    if not has_nested(t.schema, keys):
        return t.group_by(keys, use_threads=False).aggregate(list(aggregates))
    import numpy as np
    idx = "__first_row"
    keyed = hashable(t, keys).append_column(idx, pa.array(np.arange(t.num_rows, dtype=np.int64)))
    g = keyed.group_by(keys, use_threads=False).aggregate(list(aggregates) + [(idx, "min")])
    rows = g.column(f"{idx}_min")
    for k in keys:
        if is_nested_arrow(t.schema.field(k).type):
            g = g.set_column(g.schema.get_field_index(k), k, t.column(k).take(rows))
    return g.drop_columns([f"{idx}_min"])


def register_duckdb(con) -> None:
    """Register :data:`planner.nested_types.CANONICAL_JSON` on a DuckDB connection where rules run."""
    import duckdb
    from duckdb.func import ARROW

    from planner.nested_types import CANONICAL_JSON

    def call(a):   # (DuckDB's JSON comes and goes as Arrow's JSON extension type)
        a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
        if isinstance(a.type, pa.ExtensionType):
            a = a.storage
        return canonical_json_array(a.cast(pa.string())).cast(pa.json_(pa.string()))
    con.create_function(CANONICAL_JSON, call, ["JSON"], "JSON", type=ARROW, side_effects=False,
                        exception_handling=duckdb.PythonExceptionHandling.DEFAULT)


def python_values(a) -> list:
    """The values of an Arrow array as Python values for JSON: as ``to_pylist``, but a MAP as a dict (Arrow
    gives a list of pairs), at any depth."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return [_as_json_value(v, a.type) for v in a.to_pylist()]


def _as_json_value(v, t: pa.DataType):
    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _as_json_value(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_as_json_value(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        return {t.field(i).name: _as_json_value(v.get(t.field(i).name), t.field(i).type) for i in range(t.num_fields)}
    return v
