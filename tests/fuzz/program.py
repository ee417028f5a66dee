"""A fuzz program: typed tables, views, and steps of changes, as plain data (saved as ``.sql`` + ``.json``).

Row values are stored in a JSON-safe form per column type (:func:`encode`): floats as their ``repr``
(``'nan'``, ``'-inf'``, ``'-0.0'``), decimals, dates and timestamps as text; :func:`decode` gives the
Python value back.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

INT_TYPES = ("BIGINT", "INT")
FLOAT_TYPES = ("DOUBLE", "REAL")


# the nested column types of tables, and their categories (a view's column of exactly one of these types too)
NESTED_TYPES = {"INT[]": "list_int", "VARCHAR[]": "list_varchar", "MAP(VARCHAR, INT)": "map",
                "STRUCT(a INT, b VARCHAR)": "struct", "JSON": "json"}
NESTED_CATEGORIES = tuple(NESTED_TYPES.values())


def category(sql_type: str) -> str:
    """The generator's type of a column: int, decimal, double, real, varchar, boolean, date, timestamp, interval
    (a value only: never a key), one of :data:`NESTED_CATEGORIES`, or other."""
    t = sql_type.upper()
    flat = t.replace("INTEGER", "INT").replace('"', "")
    if flat in ("INT[]", "BIGINT[]"):
        return "list_int"
    if flat == "VARCHAR[]":
        return "list_varchar"
    if flat == "MAP(VARCHAR, INT)":
        return "map"
    if flat == "STRUCT(A INT, B VARCHAR)":
        return "struct"
    if flat == "JSON":
        return "json"
    if flat == "INTERVAL":
        return "interval"
    if t in ("BIGINT", "INT", "INTEGER", "HUGEINT", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "INT64", "INT32"):
        return "int"
    if t.startswith("DECIMAL") or t.startswith("NUMERIC"):
        return "decimal"
    if t in ("DOUBLE", "FLOAT8"):
        return "double"
    if t in ("REAL", "FLOAT", "FLOAT4"):
        return "real"
    if t in ("VARCHAR", "TEXT", "STRING"):
        return "varchar"
    if t in ("BOOLEAN", "BOOL"):
        return "boolean"
    if t == "DATE":
        return "date"
    if t.startswith("TIMESTAMP"):
        return "timestamp"
    return "other"


def encode(v, sql_type: str):
    """The JSON-safe form of a Python value of a column of ``sql_type``."""
    if v is None:
        return None
    c = category(sql_type)
    if c in ("double", "real"):
        return repr(float(v))
    if c == "decimal":
        return str(v)
    if c in ("date", "timestamp"):
        return v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat()
    return v


def decode(v, sql_type: str):
    """The Python value of a stored value (see :func:`encode`)."""
    if v is None:
        return None
    c = category(sql_type)
    if c in ("double", "real"):
        return float(v)
    if c == "decimal":
        return decimal.Decimal(v)
    if c == "date":
        return dt.date.fromisoformat(v)
    if c == "timestamp":
        return dt.datetime.fromisoformat(v)
    if c == "int":
        return int(v)
    return v


def literal(v, sql_type: str) -> str:
    """``v`` (a decoded value) as a SQL literal of ``sql_type``."""
    if v is None:
        return f"CAST(NULL AS {sql_type})"
    c = category(sql_type)
    if c == "int":
        return str(v) if -2 ** 62 < v < 2 ** 62 else f"CAST('{v}' AS {sql_type})"
    if c in ("double", "real", "decimal"):
        return f"CAST('{v}' AS {sql_type})"
    if c == "varchar":
        return "'" + v.replace("'", "''") + "'"
    if c == "boolean":
        return "TRUE" if v else "FALSE"
    if c == "date":
        return f"DATE '{v.isoformat()}'"
    if c == "timestamp":
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if c in NESTED_CATEGORIES:
        return f"CAST({nested_literal(v, c)} AS {sql_type})"
    if c == "interval":   # (DuckDB's text of it, which DuckDB reads back)
        return f"CAST('{v}' AS INTERVAL)"
    raise ValueError(sql_type)


def nested_literal(v, c: str) -> str:
    """A nested value (a list, a dict; JSON text for a JSON column) as DuckDB's literal."""
    def scalar(x):
        if x is None:
            return "NULL"
        return "'" + x.replace("'", "''") + "'" if isinstance(x, str) else str(x)
    if c == "json":
        return "'" + v.replace("'", "''") + "'"
    if c in ("list_int", "list_varchar"):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    if c == "map":
        return "MAP {" + ", ".join(f"{scalar(k)}: {scalar(x)}" for k, x in v.items()) + "}"
    return "{" + ", ".join(f"'{k}': {scalar(x)}" for k, x in v.items()) + "}"


@dataclass
class Table:
    name: str
    columns: List[Tuple[str, str]]   # (name, SQL type)
    append_only: bool = False        # WITH ('append_only' = 'true'): the steps only insert into it

    def ddl(self, engine: bool = True) -> str:
        """The CREATE TABLE statement; ``engine``: with the engine's WITH options (DuckDB takes none)."""
        options = " WITH ('append_only' = 'true')" if engine and self.append_only else ""
        return f"CREATE TABLE {self.name} ({', '.join(f'{n} {t}' for n, t in self.columns)}){options};"


@dataclass
class View:
    name: str
    sql: str
    materialized: bool = True


@dataclass
class Op:
    """One change of a step: ``kind`` insert | delete (one copy of each row) | update (``rows`` become
    ``new_rows``) | delete_where (``where``, through ``execute``); ``via`` execute | pandas | pandas_nullable |
    json | csv.  Rows are encoded (:func:`encode`)."""
    table: str
    kind: str
    via: str
    rows: List[list] = field(default_factory=list)
    new_rows: List[list] = field(default_factory=list)
    where: Optional[str] = None


@dataclass
class Program:
    tables: List[Table]
    views: List[View]
    steps: List[List[Op]]
    seed: Optional[int] = None
    functions: List[str] = field(default_factory=list)   # CREATE MACRO statements, one a line
    transactions: bool = False   # the runner puts every third step of several input calls in a transaction


    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)

    def sql(self, views: Optional[List[View]] = None) -> str:
        vs = self.views if views is None else views
        return "\n".join(list(self.functions) + [t.ddl() for t in self.tables] +
                         [f"CREATE {'MATERIALIZED ' if v.materialized else ''}VIEW {v.name} AS {v.sql};" for v in vs])

    def to_json(self) -> str:
        return json.dumps({
            "seed": self.seed,
            "transactions": self.transactions,
            "functions": self.functions,
            "tables": [{"name": t.name, "columns": t.columns, "append_only": t.append_only} for t in self.tables],
            "views": [vars(v) for v in self.views],
            "steps": [[vars(o) for o in s] for s in self.steps],
        }, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Program":
        d = json.loads(text)
        return cls([Table(t["name"], [tuple(c) for c in t["columns"]], t.get("append_only", False)) for t in d["tables"]],
                   [View(**v) for v in d["views"]], [[Op(**o) for o in s] for s in d["steps"]], d.get("seed"),
                   d.get("functions", []), d.get("transactions", False))
