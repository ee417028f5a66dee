"""What ``postgres_input`` and ``postgres_output`` share: connecting, naming tables, and mapping types.

A table is named ``"schema.table"`` or ``"table"`` (schema ``public``), each part as PostgreSQL stores it
(unquoted names are lower case there).  Columns of the SQL program are matched to the PostgreSQL
table's columns by name, ignoring case.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlparse, urlunparse


from planner.errors import ConnectorError, PermanentConnectorError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def redact(uri: str) -> str:
    """The URI without its password, for messages."""
    u = urlparse(uri)
    if u.password is None:
        return uri
    netloc = f"{u.username}:***@{u.hostname}" + (f":{u.port}" if u.port else "")
    return urlunparse(u._replace(netloc=netloc))


def split_table(name: str, strict: bool = True) -> Tuple[str, str]:
    """``"schema.table"`` -> (schema, table); ``"table"`` -> ("public", table).  A name with more parts is a
    ``ValueError`` (``strict``) or kept whole (for ``validate()`` to report)."""
    parts = name.split(".")
    if len(parts) == 1:
        return "public", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    if not strict:
        return "public", name
    raise ValueError(f"table name {name!r} has more than two parts; use \"schema.table\"")


def check_table_name(name: str, where, what: str) -> None:
    try:
        parts = split_table(name)
    except ValueError as e:
        raise where.error(f"{what}: {e}", "table") from None
    for p in parts:
        if not _IDENT.match(p):
            raise where.error(f"{what}: {p!r} in table {name!r} is not a plain identifier (letters, digits, _)",
                              "table")


def quote(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def qualified(schema: str, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}"


# SQLSTATE classes that retrying cannot fix: 22 data exception (a value that does not fit the column),
# 23 integrity constraint violation, 28 invalid authorization, 3D invalid database, 3F invalid schema,
# 42 syntax error or access rule violation (undefined table or column, datatype mismatch, insufficient
# privilege), 0A feature not supported.  Others (08 connection, 53 insufficient resources such as a full
# disk, 57 operator intervention such as a shutdown, 40 serialization failure or deadlock, 55 an object
# in use, XX internal) are transient.
PERMANENT_SQLSTATE_CLASSES = ("22", "23", "28", "3D", "3F", "42", "0A")
# libpq reports failures while connecting without a SQLSTATE: these texts are the permanent ones
PERMANENT_CONNECT_TEXTS = ("password authentication failed", "authentication failed", "does not exist",
                           "no pg_hba.conf entry", "permission denied", "no password supplied",
                           "invalid connection option", "invalid uri", "invalid integer value")


def is_permanent(e: BaseException) -> bool:
    """Whether a psycopg error is one that retrying cannot fix (see ``PERMANENT_SQLSTATE_CLASSES``)."""
    import psycopg
    state = getattr(e, "sqlstate", None)
    if state:
        return state[:2] in PERMANENT_SQLSTATE_CLASSES
    if isinstance(e, (psycopg.ProgrammingError, psycopg.NotSupportedError)):
        return True
    text = str(e).lower()
    return isinstance(e, psycopg.OperationalError) and any(t in text for t in PERMANENT_CONNECT_TEXTS)


def pg_error(message: str, e: BaseException) -> ConnectorError:
    """``message`` as a ``PermanentConnectorError`` if ``e`` is a permanent psycopg error, else a ``ConnectorError``."""
    return (PermanentConnectorError if is_permanent(e) else ConnectorError)(message)


def connect(uri: str, what: str, **kw):
    """A psycopg connection (autocommit, UTC); a failure is a ``ConnectorError`` naming the server (a
    ``PermanentConnectorError`` for bad credentials, a missing role or database)."""
    import psycopg
    try:
        conn = psycopg.connect(uri, autocommit=True, connect_timeout=5, **kw)
    except psycopg.Error as e:
        raise pg_error(f"{what}: cannot connect to {redact(uri)}: {str(e).strip()}", e) from None
    try:
        conn.execute("SET TimeZone = 'UTC'")
    except psycopg.Error:
        pass
    return conn


def table_columns(conn, schema: str, table: str) -> Optional[List[Tuple[str, str, str]]]:
    """[(column, type as PostgreSQL prints it, type category)] of a table, or None if it does not exist."""
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory::text "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (schema, table)).fetchall()
    if not rows:
        exists = conn.execute("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                              "WHERE n.nspname = %s AND c.relname = %s", (schema, table)).fetchone()
        return [] if exists else None
    return [(r[0], r[1], r[2]) for r in rows]


def _pg_kind(pg_type: str, category: str) -> str:
    """The kind of a PostgreSQL type, in the terms of ``connectors.formats._kind``."""
    t = pg_type.lower()
    if t in ("smallint", "integer", "bigint"):
        return "int"
    if t.startswith("numeric"):
        return "decimal"
    if t in ("real", "double precision"):
        return "float"
    if t == "boolean":
        return "bool"
    if t == "date":
        return "date"
    if t.startswith("timestamp"):
        return "timestamp"
    if category == "S" or t in ("uuid", "json", "jsonb") or t.startswith(("character", "text")):
        return "string"
    return t


def check_columns(what: str, relation: str, fields: List[Tuple[str, Any]], pg_columns, pg_name: str,
                  reading: bool) -> Dict[str, str]:
    """SQL column name -> PostgreSQL column name; a missing column or one whose type does not fit is a
    ``PermanentConnectorError`` naming it.  ``reading``: PostgreSQL values go into the SQL columns (else the
    reverse)."""
    from sqlengine.types import arrow_type

    from .formats import _COMPATIBLE, _kind
    from .postgres_values import fits
    by_lower = {c[0].lower(): c for c in pg_columns}
    out: Dict[str, str] = {}
    for name, ftype in fields:
        c = by_lower.get(name.lower())
        if c is None:
            raise PermanentConnectorError(f"{what}: PostgreSQL table {pg_name} has no column {name!r} (of {relation}); "
                                          f"its columns: {', '.join(x[0] for x in pg_columns)}")
        ok = fits(c[1], ftype, reading)
        if ok is None:
            sql_kind, pg_kind = _kind(arrow_type(ftype)), _pg_kind(c[1], c[2])
            ok = pg_kind in _COMPATIBLE.get(sql_kind, ()) if reading else sql_kind in _COMPATIBLE.get(pg_kind, ())
            ok = ok or (not reading and pg_kind == "string")
        if not ok:
            raise PermanentConnectorError(f"{what}: column {name} is {c[1]} in PostgreSQL table {pg_name} but "
                                          f"{ftype.sql} in {relation}")
        out[name] = c[0]
    return out


def pg_type(ftype) -> Optional[str]:
    """The PostgreSQL column type for a SQL column type (None: no mapping; see ``connectors.postgres_values``)."""
    from .postgres_values import pg_type as mapped
    return mapped(ftype)
