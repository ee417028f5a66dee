"""PostgreSQL's values of the types beyond numbers, text, dates and timestamps, in and out.

**In.**  wal2json (CDC) and Spark's JDBC reader give a value in PostgreSQL's text form: an array as its literal
(``{1,NULL,3}``, ``{"a,b",NULL}``, ``{{1,2},{3,4}}``), ``jsonb`` / ``json`` as JSON text, ``bytea`` as hex, ``uuid``
and ``time`` as text.  psycopg (the driver's snapshot and poll mode) gives Python values.  :func:`decoder` makes
both into the Python values :func:`sqlengine.ingest.inputs.convert_values` takes for the SQL column:

- an array (of any element type PostgreSQL prints, at any depth) into an ARRAY column, its NULL elements kept;
- ``jsonb`` / ``json`` into a VARIANT (JSON) column as its JSON value, or into an ARRAY, MAP or ROW column
  (a JSON object for a MAP or ROW); a key given twice in ``json`` keeps its last value, as ``jsonb`` does;
- ``uuid`` as its lower-case text, ``bytea`` as bytes, ``time`` as a time of day, ``timestamptz`` converted to UTC,
  ``interval`` as its text (months, days and microseconds kept apart, as an INTERVAL column keeps them).

**Out.**  :func:`pg_type` names the PostgreSQL type of a column of the view: an ARRAY of a scalar type is that
type's array (``INT[]`` -> ``integer[]``), a deeper ARRAY, an ARRAY of ROWs or MAPs, a MAP, a ROW and a VARIANT are
``jsonb``, UUID ``uuid``, BLOB ``bytea``, TIME ``time``, INTERVAL ``interval`` (written as DuckDB's text of it, which
PostgreSQL reads).  :func:`as_text` writes a column of such values as the text
PostgreSQL's COPY reads.
"""
from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any, Callable, List, Optional

import pyarrow as pa

from planner.types import SqlType, element_type, is_nested
from sqlengine import nested
from sqlengine.types import arrow_type

# ------------------------------------------------------------------ PostgreSQL's array literals


def parse_array(text: str) -> list:
    """A PostgreSQL array literal -> nested lists of element texts (None for NULL).

    >>> parse_array('{1,NULL,3}'), parse_array('{"a,b",NULL,"NULL","q\\\\"x",""}'), parse_array('{{1,2},{3,4}}')
    (['1', None, '3'], ['a,b', None, 'NULL', 'q"x', ''], [['1', '2'], ['3', '4']])
    >>> parse_array('[0:1]={7,8}'), parse_array('{}')
    (['7', '8'], [])
    """
    s = text.strip()
    if s.startswith("["):   # explicit bounds: [lo:hi]={...}
        s = s[s.index("=") + 1:].strip()
    out, pos = _parse(s, 0)
    if s[pos:].strip():
        raise ValueError(f"not an array literal: {text[:80]!r}")
    return out


def _parse(s: str, i: int):
    if i >= len(s) or s[i] != "{":
        raise ValueError(f"not an array literal: {s[:80]!r}")
    i += 1
    items: list = []
    if i < len(s) and s[i] == "}":
        return items, i + 1
    while True:
        while i < len(s) and s[i].isspace():
            i += 1
        if i >= len(s):
            raise ValueError(f"unterminated array literal: {s[:80]!r}")
        if s[i] == "{":
            item, i = _parse(s, i)
            items.append(item)
        elif s[i] == '"':
            buf, i = [], i + 1
            while i < len(s) and s[i] != '"':
                if s[i] == "\\":
                    i += 1
                buf.append(s[i])
                i += 1
            items.append("".join(buf))
            i += 1
        else:
            j = i
            while j < len(s) and s[j] not in ",}":
                j += 1
            word = s[i:j].strip()
            items.append(None if word.upper() == "NULL" else word)
            i = j
        while i < len(s) and s[i].isspace():
            i += 1
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        if i < len(s) and s[i] == "}":
            return items, i + 1
        raise ValueError(f"bad array literal: {s[:80]!r}")


# ------------------------------------------------------------------ one value from its text or psycopg's object
_INTS = ("smallint", "integer", "bigint")
_FLOATS = ("real", "double precision")


def _scalar(pg: str) -> Callable[[Any], Any]:
    """A function of one element (PostgreSQL's text, or psycopg's object) of PostgreSQL type ``pg``."""
    if pg in _INTS:
        return lambda v: int(v) if isinstance(v, str) else v
    if pg.startswith("numeric"):
        return lambda v: Decimal(v) if isinstance(v, str) else v
    if pg in _FLOATS:
        return lambda v: float(v) if isinstance(v, str) else v
    if pg == "boolean":
        return lambda v: {"t": True, "f": False, "true": True, "false": False}[v.lower()] if isinstance(v, str) else v
    if pg == "date":
        return lambda v: dt.date.fromisoformat(v) if isinstance(v, str) else v
    if pg.startswith("timestamp"):
        return lambda v: _timestamp(v) if isinstance(v, str) else v
    if pg.startswith("time"):
        return lambda v: dt.time.fromisoformat(v) if isinstance(v, str) else v
    if pg == "bytea":
        return lambda v: _bytes(v) if isinstance(v, str) else bytes(v)
    if pg == "uuid":
        return lambda v: str(v).lower()
    if pg in ("json", "jsonb"):
        return lambda v: nested.loads(v) if isinstance(v, str) else v
    if pg == "interval":
        return lambda v: pg_interval(v) if isinstance(v, str) else v
    return lambda v: v


def pg_interval(text: str) -> str:
    """PostgreSQL's text of an interval (its default ``IntervalStyle``) as DuckDB reads one: a time part after a
    negative day is signed (``-1 days +02:00:00``), which DuckDB does not read with the ``+``.

    >>> pg_interval("-1 days +02:00:00"), pg_interval("1 year 2 mons -00:00:01")
    ('-1 days 02:00:00', '1 year 2 mons -00:00:01')
    """
    return text.replace(" +", " ")


def _timestamp(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text)
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None) if t.tzinfo is not None else t


def _bytes(text: str) -> bytes:
    """bytea's hex text (``\\x6869``; wal2json gives it without the ``\\x``)."""
    return bytes.fromhex(text[2:] if text.startswith("\\x") else text)


def _is_time(pg: str) -> bool:
    """``time`` or ``time with time zone`` (a time of day), not a ``timestamp``."""
    return pg.startswith("time") and not pg.startswith("timestamp")


def _deep(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def each(v):
        if v is None:
            return None
        if isinstance(v, list):
            return [each(x) for x in v]
        return f(v)
    return each


SPECIAL = ("ARRAY", "MAP", "STRUCT", "JSON", "UUID", "BLOB", "TIME", "INTERVAL")   # the SQL column types this
# module reads


def fits(pg: str, ftype: SqlType, reading: bool) -> Optional[bool]:
    """Whether a PostgreSQL column of type ``pg`` fits a SQL column of type ``ftype`` (``reading``: PostgreSQL's
    values go into the SQL column, else the reverse); None for the types ``connectors.postgres_common`` decides."""
    pg = pg.lower()
    if ftype.base not in SPECIAL:
        return None
    if pg in ("json", "jsonb"):
        return ftype.base in ("ARRAY", "MAP", "STRUCT", "JSON")
    if ftype.base == "ARRAY":
        if not pg.endswith("[]"):
            return False
        e = element_type(ftype)
        while e.base == "ARRAY" and reading:   # (PostgreSQL's arrays of any depth are one type)
            e = element_type(e)
        inner = fits(pg[:-2], e, reading)
        if inner is not None:
            return inner
        want = pg_type(e)
        return want is not None and (want == pg[:-2] or (want.split("(")[0] == pg[:-2].split("(")[0]) or
                                     (reading and _widens(pg[:-2], want)))
    if not reading and (pg == "text" or pg.startswith("character")):
        return True   # (any value into a text column: its text)
    if ftype.base == "UUID":
        return pg in ("uuid", "text") or pg.startswith("character")
    if ftype.base == "BLOB":
        return pg == "bytea"
    if ftype.base == "TIME":
        return _is_time(pg) and "with time zone" not in pg
    if ftype.base == "INTERVAL":
        return pg.startswith("interval")
    return False


def _widens(source: str, target: str) -> bool:
    """A PostgreSQL element type read into a wider one (integer into bigint, real into double precision)."""
    order = ["smallint", "integer", "bigint"]
    if source in order and target in order:
        return order.index(source) <= order.index(target)
    return source in ("real", "double precision") and target == "double precision"


def decoder(pg: str, ftype: SqlType) -> Optional[Callable[[Any], Any]]:
    """The function that makes a value of PostgreSQL type ``pg`` (as ``format_type`` prints it) into the Python
    value the SQL column of type ``ftype`` takes; None where the value needs nothing (numbers, text, dates,
    timestamps: the converters read them)."""
    pg = pg.lower()
    if ftype.base not in SPECIAL:   # (a uuid or JSON text read into a VARCHAR column: its text)
        return (lambda v: v if isinstance(v, str) else str(v)) if pg == "uuid" else None
    if pg.endswith("[]"):
        element = _deep(_scalar(pg[:-2]))

        def array(v):
            return element(parse_array(v) if isinstance(v, str) else v)
        return array
    if pg in ("json", "jsonb"):   # a VARIANT takes the JSON text (its null is not NULL); an ARRAY, MAP or ROW the
        if ftype.base == "JSON":  # list or object it spells
            return lambda v: nested.JsonText(v) if isinstance(v, str) else v
        return _scalar(pg)
    if pg in ("bytea", "uuid") or _is_time(pg):
        return _scalar(pg)
    if pg.startswith("interval"):
        return _scalar("interval")
    return None


def snapshot_column(pg: str, quoted_name: str) -> str:
    """The select-list item that reads a column for the driver's snapshot: ``json`` as its text (psycopg would
    parse it, keeping one value of a key given twice before we can see it)."""
    return f"{quoted_name}::text" if pg.lower() in ("json", "jsonb", "json[]", "jsonb[]") or \
        pg.lower().startswith("interval") else quoted_name   # (psycopg's timedelta has no months)


def text_column(pg: str, quoted_name: str) -> str:
    """The select-list item that reads a column in PostgreSQL's text form (for Spark's JDBC reader, whose own
    mapping of arrays, JSON, UUID and TIME loses what :func:`decoder` keeps)."""
    return f"{quoted_name}::text" if needs_text(pg) else quoted_name


def needs_text(pg: str) -> bool:
    pg = pg.lower()
    return pg.endswith("[]") or pg in ("json", "jsonb", "uuid") or _is_time(pg) or pg.startswith("interval")


# ------------------------------------------------------------------ out
_SPECIAL_PG = {"UUID": "uuid", "BLOB": "bytea", "TIME": "time", "JSON": "jsonb", "INTERVAL": "interval"}


def pg_type(t: SqlType) -> Optional[str]:
    """The PostgreSQL column type for a SQL column type (None: no mapping)."""
    if t.base == "ARRAY":
        e = element_type(t)
        if is_nested(e) or e.base == "JSON":
            return "jsonb"
        inner = pg_type(e)
        return None if inner is None else inner + "[]"
    if t.base in ("MAP", "STRUCT"):
        return "jsonb"
    if t.base in _SPECIAL_PG:
        return _SPECIAL_PG[t.base]
    return _scalar_pg(arrow_type(t))


def _scalar_pg(t: pa.DataType) -> Optional[str]:
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return "smallint"
    if pa.types.is_int32(t):
        return "integer"
    if pa.types.is_integer(t):
        return "bigint"
    if pa.types.is_float32(t):
        return "real"
    if pa.types.is_floating(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    return None


def _literal(v: Any) -> str:
    """One element of a PostgreSQL array literal."""
    if v is None:
        return "NULL"
    if isinstance(v, list):
        return "{" + ",".join(_literal(x) for x in v) + "}"
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, float):
        return "NaN" if v != v else "Infinity" if v == float("inf") else "-Infinity" if v == float("-inf") else repr(v)
    if isinstance(v, (int, Decimal)):
        return str(v)
    if isinstance(v, bytes):
        text = "\\x" + v.hex()
    elif isinstance(v, (dt.datetime, dt.date, dt.time)):
        text = v.isoformat()
    else:
        text = str(v)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def as_text(column: pa.Array, t: SqlType) -> pa.Array:
    """A column of the view as the text PostgreSQL's COPY reads for a column of type :func:`pg_type` (NULL kept)."""
    kind = pg_type(t)
    if kind == "jsonb":
        if t.base == "JSON":
            return column.cast(pa.string())   # (the canonical JSON text already)
        return pa.array([None if v is None else json.dumps(v, default=_json_default, separators=(",", ":"))
                         for v in nested.python_values(column)], pa.string())
    if kind is not None and kind.endswith("[]"):
        return pa.array([None if v is None else _literal(v) for v in column.to_pylist()], pa.string())
    if kind == "bytea":
        return pa.array([None if v is None else "\\x" + v.hex() for v in column.to_pylist()], pa.string())
    return column


def _json_default(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v) if v != v.to_integral_value() or abs(v) >= 2 ** 53 else int(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, uuid.UUID):
        return str(v)
    raise TypeError(f"{type(v).__name__} is not JSON")


def needs_text_out(t: SqlType) -> bool:
    """Whether :func:`as_text` rewrites a column of type ``t``."""
    kind = pg_type(t) or ""
    return kind == "jsonb" or kind.endswith("[]") or kind == "bytea"


__all__: List[str] = ["parse_array", "fits", "decoder", "snapshot_column", "text_column", "needs_text", "pg_type",
                      "as_text", "needs_text_out"]
