"""SQL column types as the planner sees them.

Types are kept as canonical SQL text (``BIGINT``, ``DECIMAL(10, 2)``) plus a
nullability flag.  Only the types below may appear in ``CREATE TABLE``.  Nested types are spelled as DuckDB
spells them, with the engine's names inside: ``INT[]`` (an ARRAY), ``MAP(VARCHAR, INT)``, ``STRUCT(a INT, b
VARCHAR)`` (a ROW); ``VARIANT`` and ``JSON`` are both ``JSON`` (a JSON value, held as its canonical text).

>>> from_sql_type("decimal(12,2)").sql
'DECIMAL(12, 2)'
>>> from_sql_type("string").sql
'VARCHAR'
>>> [from_sql_type(t).sql for t in ("ARRAY<INT>", "MAP<string, DOUBLE[]>", 'STRUCT(a int, "b c" date)', "variant")]
['INT[]', 'MAP(VARCHAR, DOUBLE[])', 'STRUCT(a INT, "b c" DATE)', 'JSON']
>>> element_type(SqlType("INT[][]")).sql, map_types(SqlType("MAP(VARCHAR, INT[])"))
('INT[]', (SqlType(sql='VARCHAR', nullable=True), SqlType(sql='INT[]', nullable=True)))
>>> struct_fields(SqlType('STRUCT(a INT, "b c" STRUCT(x DATE))'))
(('a', SqlType(sql='INT', nullable=True)), ('b c', SqlType(sql='STRUCT(x DATE)', nullable=True)))
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Tuple

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB as DuckDBDialect

# sqlglot type kind -> canonical name used throughout the engine
_CANONICAL = {
    exp.DataType.Type.BOOLEAN: "BOOLEAN",
    exp.DataType.Type.TINYINT: "TINYINT",
    exp.DataType.Type.SMALLINT: "SMALLINT",
    exp.DataType.Type.INT: "INT",
    exp.DataType.Type.BIGINT: "BIGINT",
    exp.DataType.Type.DECIMAL: "DECIMAL",
    exp.DataType.Type.FLOAT: "REAL",
    exp.DataType.Type.DOUBLE: "DOUBLE",
    exp.DataType.Type.VARCHAR: "VARCHAR",
    exp.DataType.Type.CHAR: "VARCHAR",
    exp.DataType.Type.TEXT: "VARCHAR",
    exp.DataType.Type.DATE: "DATE",
    exp.DataType.Type.TIMESTAMP: "TIMESTAMP",
    exp.DataType.Type.DATETIME: "TIMESTAMP",
    exp.DataType.Type.TIMESTAMPNTZ: "TIMESTAMP",
    exp.DataType.Type.TIMESTAMPTZ: "TIMESTAMP",     # TIMESTAMP WITH TIME ZONE: converted to UTC at the edge
    exp.DataType.Type.TIMESTAMPLTZ: "TIMESTAMP",
    exp.DataType.Type.TIME: "TIME",
    exp.DataType.Type.VARBINARY: "BLOB",
    exp.DataType.Type.BINARY: "BLOB",
    exp.DataType.Type.BLOB: "BLOB",
    exp.DataType.Type.UUID: "UUID",
    exp.DataType.Type.INTERVAL: "INTERVAL",   # (months, days, microseconds), not a MAP's key
}

SUPPORTED_COLUMN_TYPES = ("BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL(p, s)",
                          "REAL", "DOUBLE", "VARCHAR", "DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIME",
                          "BINARY / VARBINARY", "UUID", "INTERVAL", "T ARRAY", "MAP<K, V>", "ROW(name T, ...)", "VARIANT")
NESTED = ("ARRAY", "MAP", "STRUCT")   # the ``base`` of a nested type


@dataclass(frozen=True)
class SqlType:
    """A column type: canonical SQL text and nullability."""

    sql: str
    nullable: bool = True

    @property
    def base(self) -> str:
        """The type name without parameters, e.g. ``DECIMAL``; ``ARRAY`` for ``INT[]``."""
        return "ARRAY" if self.sql.endswith("[]") else self.sql.split("(")[0]

    def with_nullable(self, nullable: bool) -> "SqlType":
        return SqlType(self.sql, nullable)

    def __str__(self) -> str:
        return self.sql + ("" if self.nullable else " NOT NULL")


UNKNOWN = SqlType("UNKNOWN")
BIGINT = SqlType("BIGINT")
BOOLEAN = SqlType("BOOLEAN")


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = frozenset(DuckDBDialect.Tokenizer.KEYWORDS)


def _field_name(name: str) -> str:
    """A ROW field's name in a type's SQL: quoted unless a plain name that is no keyword (``"select"``)."""
    if _PLAIN_NAME.fullmatch(name) and name.upper() not in _KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def _nested(dt: exp.DataType) -> SqlType | None:
    """ARRAY, MAP, STRUCT and JSON / VARIANT types (their parts recursively), else None."""
    if dt.this in (exp.DataType.Type.JSON, exp.DataType.Type.VARIANT, exp.DataType.Type.JSONB):
        return SqlType("JSON")
    parts = [from_datatype(p) if isinstance(p, exp.DataType) else None for p in dt.expressions]
    if dt.this == exp.DataType.Type.ARRAY and len(parts) == 1 and parts[0] is not None and not dt.args.get("values"):
        return SqlType(parts[0].sql + "[]")
    if dt.this == exp.DataType.Type.MAP and len(parts) == 2 and None not in parts and \
            not contains(parts[0], "INTERVAL"):   # (a key compares by value: DuckDB normalizes an interval)
        return SqlType(f"MAP({parts[0].sql}, {parts[1].sql})")
    if dt.this == exp.DataType.Type.STRUCT and dt.expressions:
        fields = []
        for f in dt.expressions:
            kind = f.args.get("kind") if isinstance(f, exp.ColumnDef) else None
            t = from_datatype(kind) if isinstance(kind, exp.DataType) else None
            if t is None or not f.name:
                return None
            fields.append(f"{_field_name(f.name)} {t.sql}")
        names = [f.name.lower() for f in dt.expressions]
        return SqlType(f"STRUCT({', '.join(fields)})") if len(set(names)) == len(names) else None
    return None


def from_datatype(dt: exp.DataType) -> SqlType | None:
    """Canonical type for a parsed sqlglot DataType, or None if not a column type we support."""
    if dt.this in (exp.DataType.Type.ARRAY, exp.DataType.Type.MAP, exp.DataType.Type.STRUCT,
                   exp.DataType.Type.JSON, exp.DataType.Type.VARIANT, exp.DataType.Type.JSONB):
        return _nested(dt)
    name = _CANONICAL.get(dt.this)
    if name is None:
        return None
    if name == "DECIMAL":
        params = [p.this.name if isinstance(p, exp.DataTypeParam) else p.name for p in dt.expressions]
        p = int(params[0]) if params else 38
        s = int(params[1]) if len(params) > 1 else 0
        if not (1 <= p <= 38 and 0 <= s <= p):
            return None
        return SqlType(f"DECIMAL({p}, {s})")
    return SqlType(name)


def from_sql_type(text: str) -> SqlType:
    """Parse a type name such as ``decimal(10,2)``; raises ValueError if unsupported."""
    t = from_datatype(exp.DataType.build(text, dialect="duckdb"))
    if t is None:
        raise ValueError(f"unsupported type {text!r}")
    return t


def from_annotation(dt: exp.DataType | None) -> SqlType:
    """Best-effort canonical type of an annotated expression (UNKNOWN if sqlglot could not tell)."""
    if dt is None:
        return UNKNOWN
    if dt.this in (exp.DataType.Type.INT128, exp.DataType.Type.BIGDECIMAL):
        return SqlType("DECIMAL(38, 0)") if dt.this == exp.DataType.Type.INT128 else SqlType("DECIMAL(38, 9)")
    t = from_datatype(dt)
    return t if t is not None else UNKNOWN


@lru_cache(maxsize=1024)
def _parts(t: SqlType) -> exp.DataType:
    return exp.DataType.build(t.sql, dialect="duckdb")


def element_type(t: SqlType) -> SqlType:
    """The element type of an ARRAY type ``t``."""
    return SqlType(t.sql[:-2])


@lru_cache(maxsize=1024)
def map_types(t: SqlType) -> Tuple[SqlType, SqlType]:
    """The key and value types of a MAP type ``t``."""
    k, v = (from_datatype(p) for p in _parts(t).expressions)
    return k, v


@lru_cache(maxsize=1024)
def struct_fields(t: SqlType) -> Tuple[Tuple[str, SqlType], ...]:
    """The (name, type) fields of a STRUCT type ``t``."""
    return tuple((f.name, from_datatype(f.args["kind"])) for f in _parts(t).expressions)


def plane_sql(t: SqlType) -> str:
    """The SQL type of ``t``'s values on the data plane: an INTERVAL is VARCHAR (DuckDB's text of it, see
    ``sqlengine.intervals``), also inside a nested type; ``t`` itself otherwise.

    >>> plane_sql(SqlType("STRUCT(a INTERVAL, b INT)[]")), plane_sql(SqlType("MAP(VARCHAR, INTERVAL)"))
    ('STRUCT(a VARCHAR, b INT)[]', 'MAP(VARCHAR, VARCHAR)')
    """
    if not contains(t, "INTERVAL"):
        return t.sql
    if t.base == "INTERVAL":
        return "VARCHAR"
    if t.base == "ARRAY":
        return plane_sql(element_type(t)) + "[]"
    if t.base == "MAP":
        k, v = map_types(t)
        return f"MAP({plane_sql(k)}, {plane_sql(v)})"
    return "STRUCT(" + ", ".join(f"{_field_name(n)} {plane_sql(ft)}" for n, ft in struct_fields(t)) + ")"


def typed_null(t: SqlType) -> str:
    """A NULL of type ``t`` as the data plane holds it (an untyped NULL where the type is UNKNOWN).

    >>> typed_null(SqlType("INT")), typed_null(SqlType("INTERVAL"))
    ('CAST(NULL AS INT)', 'CAST(NULL AS VARCHAR)')
    """
    return "NULL" if t.sql == "UNKNOWN" else f"CAST(NULL AS {plane_sql(t)})"


def is_nested(t: SqlType) -> bool:
    """An ARRAY, MAP or STRUCT type (JSON is text on the data plane)."""
    return t.base in NESTED


def contains(t: SqlType, base: str) -> bool:
    """Whether ``t`` is or holds (at any depth) a type whose ``base`` is ``base`` (``MAP``, ``JSON``, ...)."""
    if t.base == base:
        return True
    if t.base == "ARRAY":
        return contains(element_type(t), base)
    if t.base == "MAP":
        return any(contains(p, base) for p in map_types(t))
    if t.base == "STRUCT":
        return any(contains(p, base) for _, p in struct_fields(t))
    return False


INTEGERS = ("TINYINT", "SMALLINT", "INT", "BIGINT")   # the SQL integer types, narrowest first


def set_operation_type(a: SqlType, b: SqlType) -> SqlType:
    """The type of a UNION / INTERSECT / EXCEPT column whose branches have types ``a`` and ``b``, as DuckDB's
    binder widens them: the wider integer, REAL or DOUBLE beside a number, VARCHAR beside any scalar, TIMESTAMP
    beside a DATE, and a DECIMAL beside a number as DuckDB's binder types it.  Other pairs keep ``a``, and the
    executor types them by DuckDB's own binder.

    >>> [set_operation_type(SqlType(x), SqlType(y)).sql for x, y in
    ...  (("INT", "BIGINT"), ("BIGINT", "DOUBLE"), ("INT", "REAL"), ("DATE", "VARCHAR"), ("DATE", "TIMESTAMP"))]
    ['BIGINT', 'DOUBLE', 'REAL', 'VARCHAR', 'TIMESTAMP']
    >>> set_operation_type(SqlType("BIGINT"), SqlType("DECIMAL(18, 4)")).sql
    'DECIMAL(23, 4)'
    """
    nullable = a.nullable or b.nullable
    if a.sql == b.sql or b.sql == "UNKNOWN":
        return a.with_nullable(nullable)
    if a.sql == "UNKNOWN":
        return b.with_nullable(nullable)
    pair = {a.base, b.base}
    numbers = set(INTEGERS) | {"DECIMAL", "REAL", "DOUBLE"}
    if pair <= set(INTEGERS):
        return max(a, b, key=lambda t: INTEGERS.index(t.base)).with_nullable(nullable)
    if pair <= numbers and pair & {"REAL", "DOUBLE"}:
        return SqlType("DOUBLE" if "DOUBLE" in pair else "REAL", nullable)
    if pair <= numbers:   # a DECIMAL beside a DECIMAL or an integer: DuckDB's own rule (widths over 38 included)
        return SqlType(_duckdb_union_type(a.sql, b.sql), nullable)
    if "VARCHAR" in pair and not (pair & set(NESTED) or "JSON" in pair):
        return SqlType("VARCHAR", nullable)
    if pair == {"DATE", "TIMESTAMP"}:
        return SqlType("TIMESTAMP", nullable)
    return a.with_nullable(nullable)


@lru_cache(maxsize=None)
def _duckdb_union_type(a: str, b: str) -> str:
    import duckdb
    con = duckdb.connect()
    try:
        got = con.execute(f"SELECT typeof(x) FROM (SELECT NULL::{a} AS x UNION ALL SELECT NULL::{b})").fetchone()[0]
    finally:
        con.close()
    return from_sql_type(got).sql
