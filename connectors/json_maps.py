"""MAP columns on the vectorised JSON reader (``connectors.messages.JsonDecoder``).

pyarrow's JSON reader has no map type: a MAP column is read as a struct whose fields it infers (every key any
message of the batch has), and made a map here, entries sorted by key as the engine stores a map
(``sqlengine.nested``).  A key given twice fails the read (pyarrow refuses it), and so does a value whose JSON
type changes between messages; the batch then takes the exact path, which names the bad messages.

Two things a struct cannot tell, which send the batch to the exact path too: a key whose value is JSON ``null``
(present with a NULL value, where a struct holds NULL for an absent field as well: the messages that spell
``null`` are parsed to look), and a value whose JSON type the exact path would refuse or convert otherwise
(only MAPs of VARCHAR keys to BOOLEAN, integer, REAL / DOUBLE or VARCHAR values take this path, each value
of its own JSON kind: a string for VARCHAR, an integer for an integer, a number for a float).

>>> import pyarrow as pa
>>> from planner.types import SqlType
>>> t = SqlType("MAP(VARCHAR, INT)")
>>> arr = pa.array([{"b": 2, "a": 1}, None, {}], pa.struct([("b", pa.int64()), ("a", pa.int64())]))
>>> as_map(arr, t).to_pylist()
[[('a', 1), ('b', 2)], None, []]
"""
from __future__ import annotations

import json
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from planner.types import map_types
from sqlengine.types import arrow_type

READ_TYPE = pa.struct([])   # what the reader is told: a struct whose fields it infers
_KINDS = {"BOOLEAN": (pa.types.is_boolean,), "TINYINT": (pa.types.is_integer,), "SMALLINT": (pa.types.is_integer,),
          "INT": (pa.types.is_integer,), "BIGINT": (pa.types.is_integer,), "VARCHAR": (pa.types.is_string,),
          "REAL": (pa.types.is_integer, pa.types.is_floating), "DOUBLE": (pa.types.is_integer, pa.types.is_floating)}


class NotVectorised(Exception):
    """The batch's MAP values need the exact path."""


def vectorised(t) -> bool:
    """Does a MAP column of type ``t`` take the vectorised reader (VARCHAR keys, scalar values)?"""
    if t.base != "MAP":
        return False
    kt, vt = map_types(t)
    return kt.base == "VARCHAR" and vt.base in _KINDS


def as_map(arr: pa.Array, t) -> pa.Array:
    """The struct the reader inferred for a MAP column of type ``t`` as the canonical map (raises
    :class:`NotVectorised` where a value's JSON type is not the map's)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    target = arrow_type(t)
    if not pa.types.is_struct(arr.type):
        raise NotVectorised("not an object")
    _, vt = map_types(t)
    value_type = target.item_type
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    order = sorted(range(len(names)), key=lambda i: names[i])
    children = []
    for i in order:
        child = arr.field(i)
        if not (pa.types.is_null(child.type) or any(test(child.type) for test in _KINDS[vt.base])):
            raise NotVectorised(f"a {child.type} value in a MAP of {vt.sql}")
        children.append(child.cast(value_type))
    n = len(arr)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if not children:
        offsets = np.zeros(n + 1, np.int32)
        keys, values = pa.array([], pa.string()), pa.array([], value_type)
    else:
        present = np.stack([c.is_valid().to_numpy(zero_copy_only=False) for c in children], axis=1) & valid[:, None]
        rows, which = np.nonzero(present)   # row-major: each row's keys in sorted order
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(present.sum(axis=1), out=offsets[1:])
        keys = pa.array([names[order[j]] for j in range(len(order))], pa.string()).take(pa.array(which))
        values = pa.concat_arrays(children).take(pa.array(which * n + rows))
    mask = pa.array(~valid)
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), keys, values, mask=mask).cast(target)


def null_values(messages: Sequence[bytes], columns: Sequence[str]) -> bool:
    """Does a message give one of the MAP ``columns`` (top-level fields, named as the table names them) a key
    whose value is JSON null?  Only the messages that spell ``null`` are parsed."""
    lower = {c.lower() for c in columns}
    for m in messages:
        if b"null" not in m:
            continue
        try:
            obj = json.loads(m)
        except ValueError:
            return True   # (the reader failed it already; the exact path says why)
        if not isinstance(obj, dict):
            continue
        for k, v in obj.items():
            if str(k).lower() in lower and isinstance(v, dict) and any(x is None for x in v.values()):
                return True
    return False


def read_schema(fields, read_type) -> pa.struct:
    """The row the reader is given: MAP columns as :data:`READ_TYPE`, the others as ``read_type(f)``."""
    return pa.struct([pa.field(f.name, READ_TYPE if f.type.base == "MAP" else read_type(f)) for f in fields])


def same_shape(read: pa.Schema, expected: pa.Schema, maps: Sequence[str]) -> Optional[str]:
    """Why a table read with inferred fields is not what the explicit schema gives (a field no column has, a
    ROW with a field more): None when it is, the MAP columns aside."""
    if read.names != expected.names:
        return "a field that is no column"
    for f, e in zip(read, expected):
        if f.name not in maps and f.type != e.type:
            return f"column {f.name} read as {f.type}"
    return None


__all__ = ["READ_TYPE", "NotVectorised", "vectorised", "as_map", "null_values", "read_schema", "same_shape"]
