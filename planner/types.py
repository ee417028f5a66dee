"""SQL column types as the planner sees them.

Types are kept as canonical SQL text (``BIGINT``, ``DECIMAL(10, 2)``) plus a
nullability flag.  Only the types below may appear in ``CREATE TABLE``.

>>> from_sql_type("decimal(12,2)").sql
'DECIMAL(12, 2)'
>>> from_sql_type("string").sql
'VARCHAR'
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

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
}

SUPPORTED_COLUMN_TYPES = ("BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL(p, s)",
                          "REAL", "DOUBLE", "VARCHAR", "DATE", "TIMESTAMP")


@dataclass(frozen=True)
class SqlType:
    """A column type: canonical SQL text and nullability."""

    sql: str
    nullable: bool = True

    @property
    def base(self) -> str:
        """The type name without parameters, e.g. ``DECIMAL``."""
        return self.sql.split("(")[0]

    def with_nullable(self, nullable: bool) -> "SqlType":
        return SqlType(self.sql, nullable)

    def __str__(self) -> str:
        return self.sql + ("" if self.nullable else " NOT NULL")


UNKNOWN = SqlType("UNKNOWN")
BIGINT = SqlType("BIGINT")
BOOLEAN = SqlType("BOOLEAN")


def from_datatype(dt: exp.DataType) -> SqlType | None:
    """Canonical type for a parsed sqlglot DataType, or None if not a column type we support."""
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
    t = from_datatype(exp.DataType.build(text))
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
