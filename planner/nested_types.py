"""Nested and JSON values in bound expressions: their types, as DuckDB gives them, and the rewrites that keep
the data plane's values canonical (``sqlengine.nested``).

* :func:`duckdb_type`: the type of an expression over columns of known types, asked of DuckDB itself
  (``DESCRIBE SELECT``): sqlglot types few functions of nested values, DuckDB types all of them.
* :func:`read_json_columns`: a JSON column is text on the data plane; inside an expression it is read as
  DuckDB's JSON (``CAST(c0 AS JSON)``), so that ``j['a']``, ``j.a`` and ``j->'a'`` mean what they mean in DuckDB.
* :func:`canonical_value`: a computed value whose type holds a MAP or a JSON value, made canonical (MAP entries
  sorted by key, JSON text with its object keys sorted by :data:`CANONICAL_JSON`), at every depth.

>>> from sqlglot import parse_one
>>> from .types import SqlType
>>> duckdb_type(parse_one("list_transform(c0, x -> x * 2)", read="duckdb"), [SqlType("INT[]")]).sql
'INT[]'
>>> duckdb_type(parse_one("c0.b[1]", read="duckdb"), [SqlType("STRUCT(a INT, b MAP(VARCHAR, DATE)[])")]).sql
'MAP(VARCHAR, DATE)'
>>> canonical_value(parse_one("m", read="duckdb"), SqlType("MAP(VARCHAR, JSON)")).sql("duckdb")
'MAP_FROM_ENTRIES(LIST_SORT(LIST_TRANSFORM(MAP_ENTRIES(m), LAMBDA __e1 : STRUCT_PACK(key := __e1.key, value := __CANONICAL_JSON(__e1.value)))))'
"""
from __future__ import annotations

import atexit
import threading
from functools import lru_cache
from typing import Optional, Sequence, Tuple

from sqlglot import exp, parse_one

from .types import NESTED, SqlType, contains, element_type, from_datatype, map_types, plane_sql, struct_fields

CANONICAL_JSON = "__canonical_json"   # JSON -> its canonical text (registered by the executors and here)
DUCKDB_MARK = "__duckdb"               # mark_duckdb's macro: its argument
MARK_MACRO = f"CREATE MACRO {DUCKDB_MARK}(x) AS x"
_LOCK = threading.Lock()
_CON = None


def _connection():
    global _CON
    if _CON is None:
        import duckdb
        _CON = duckdb.connect(":memory:")
        _CON.create_function(CANONICAL_JSON, lambda x: x, ["JSON"], "JSON", side_effects=False)
        _CON.execute(MARK_MACRO)
        atexit.register(_CON.close)
    return _CON


def named_tuples(text: str) -> str:
    """DuckDB's name of a type with each unnamed ROW in it (``TUPLE(INTEGER, VARCHAR)``, the type of
    ``ROW(1, 'a')`` and of ``list_zip``'s elements) as a ROW whose fields are named as DuckDB names them in Arrow
    (``element1``, ``element2``, ...), which a CAST gives the value.

    >>> named_tuples("TUPLE(INTEGER, TUPLE(VARCHAR, DATE)[])[]")
    'STRUCT(element1 INTEGER, element2 STRUCT(element1 VARCHAR, element2 DATE)[])[]'
    """
    at = text.upper().find("TUPLE(")
    if at < 0:
        return text
    depth, parts, start = 0, [], at + len("TUPLE(")
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif ch == ")" or (ch == "," and depth == 0):
            parts.append(text[start:i].strip())
            start = i + 1
            if ch == ")":
                fields = ", ".join(f"element{k} {named_tuples(p)}" for k, p in enumerate(parts, 1))
                return text[:at] + f"STRUCT({fields})" + named_tuples(text[i + 1:])
    return text


def from_duckdb_name(text: str) -> SqlType:
    """A DuckDB type name (``INTEGER[]``, ``STRUCT(a VARCHAR)``) as the engine's type, or as DuckDB's name if it
    is none of the engine's (``INTERVAL``, ``UNION(...)``), for planner.column_check's message.  An unnamed ROW
    is a ROW with fields ``element1``, ... (:func:`named_tuples`)."""
    text = named_tuples(text)
    if text.upper() == "HUGEINT":   # (a DECIMAL(38, 0) on Arrow, as the engine's SUMs of integers)
        return SqlType("DECIMAL(38, 0)")
    try:
        t = from_datatype(exp.DataType.build(text, dialect="duckdb"))
    except Exception:
        t = None
    return t if t is not None else SqlType(text)   # (DuckDB writes type names upper case; field names as given)


@lru_cache(maxsize=4096)
def _describe(sql: str, types: Tuple[str, ...]) -> Tuple[Optional[str], Optional[str]]:
    """(the type DuckDB gives ``sql`` over columns ``c<i>`` of ``types``, or None; DuckDB's error, or None)."""
    import duckdb
    cols = ", ".join(f"CAST(NULL AS {t}) AS c{i}" for i, t in enumerate(types)) or "1 AS __none"
    with _LOCK:
        try:
            rows = _connection().execute(f"DESCRIBE SELECT {sql} AS r FROM (SELECT {cols}) AS t").fetchall()
        except duckdb.Error as e:
            return None, str(e).splitlines()[0]
    return (rows[0][1] if rows else None), None


def _described(e: exp.Expression, types: Sequence[SqlType]) -> Tuple[Optional[str], Optional[str]]:
    return _describe(e.sql(dialect="duckdb"), tuple("VARCHAR" if t.sql == "UNKNOWN" else t.sql for t in types))


def duckdb_bind_error(e: exp.Expression, types: Sequence[SqlType]) -> Optional[str]:
    """DuckDB's error binding ``e`` over columns of ``types`` when it is a type error (no function or operator
    takes these arguments), else None (it binds, or it calls a Python function DuckDB does not know)."""
    found = _described(e, types)[1]
    return found[len("Binder Error: "):] if found and found.startswith("Binder Error") else None


def duckdb_type(e: exp.Expression, types: Sequence[SqlType]) -> Optional[SqlType]:
    """The type DuckDB gives ``e`` over columns ``c<i>`` of ``types``, or None if DuckDB cannot bind it (a
    Python function, which the planner types by its declaration)."""
    found = _described(e, types)[0]
    return None if found is None else from_duckdb_name(found)


DUCKDB_BASES = ("ARRAY", "MAP", "STRUCT", "JSON", "UUID", "TIME", "BLOB", "INTERVAL")   # evaluated by DuckDB on
# Spark too
READ_AS = {"JSON": "JSON", "UUID": "UUID", "INTERVAL": "INTERVAL"}   # text on the data plane, read as this DuckDB
# type in expressions


def involves_nested(e: exp.Expression, types: Sequence[SqlType]) -> bool:
    """Whether ``e`` reads a column of a type that only DuckDB evaluates faithfully (nested, JSON, UUID, TIME,
    BLOB)."""
    for c in e.find_all(exp.Column):
        i = _position(c)
        if i is not None and i < len(types) and (types[i].base in DUCKDB_BASES):
            return True
    return False


def _position(c: exp.Column) -> Optional[int]:
    name = c.name
    return int(name[1:]) if not c.table and name.startswith("c") and name[1:].isdigit() else None


def read_json_columns(e: exp.Expression, types: Sequence[SqlType]) -> exp.Expression:
    """``e`` with each JSON (UUID) column inside it read as DuckDB's JSON (UUID), not ``e`` itself if it is that
    column: both are text on the data plane."""
    if isinstance(e, exp.Column):
        return e

    def fix(n):
        if isinstance(n, exp.Column):
            i = _position(n)
            read = _read_as(types[i]) if i is not None and i < len(types) else None
            if read is not None:
                want = exp.DataType.build(read, dialect="duckdb")
                if not (isinstance(n.parent, exp.Cast) and n.parent.to == want):
                    return exp.Cast(this=n.copy(), to=want)
        return n
    return e.transform(fix)


def _read_as(t: SqlType) -> Optional[str]:
    """The DuckDB type an expression reads a column of type ``t`` as, where its data plane holds text: JSON,
    UUID and INTERVAL as themselves, a nested type holding an INTERVAL as its own type (DuckDB casts the text
    at every depth); None for the others."""
    if t.base in READ_AS:
        return READ_AS[t.base]
    return t.sql if t.base in NESTED and contains(t, "INTERVAL") else None


def canonical_value(x: exp.Expression, t: SqlType, depth: int = 0) -> exp.Expression:
    """An expression of the canonical form of ``x``'s value, of type ``t`` (``x`` itself where ``t`` holds no
    MAP and no JSON)."""
    if not (contains(t, "MAP") or contains(t, "JSON")):
        return x
    var = f"__e{depth + 1}"
    if t.base == "JSON":
        return exp.Anonymous(this=CANONICAL_JSON, expressions=[x])
    if t.base == "ARRAY":
        body = canonical_value(exp.column(var), element_type(t), depth + 1)
        return exp.Anonymous(this="LIST_TRANSFORM", expressions=[x, exp.Lambda(this=body, expressions=[
            exp.to_identifier(var)])])
    if t.base == "MAP":
        _, vt = map_types(t)
        entries: exp.Expression = exp.Anonymous(this="MAP_ENTRIES", expressions=[x])
        if contains(vt, "MAP") or contains(vt, "JSON"):
            value = canonical_value(parse_one(f"{var}.value", read="duckdb"), vt, depth + 1)
            pack = exp.Anonymous(this="STRUCT_PACK", expressions=[
                exp.PropertyEQ(this=exp.to_identifier("key"), expression=parse_one(f"{var}.key", read="duckdb")),
                exp.PropertyEQ(this=exp.to_identifier("value"), expression=value)])
            entries = exp.Anonymous(this="LIST_TRANSFORM", expressions=[entries, exp.Lambda(
                this=pack, expressions=[exp.to_identifier(var)])])
        return exp.Anonymous(this="MAP_FROM_ENTRIES", expressions=[exp.Anonymous(this="LIST_SORT",
                                                                                 expressions=[entries])])
    if t.base == "STRUCT":
        fields = [exp.PropertyEQ(this=exp.to_identifier(name), expression=canonical_value(
            exp.Anonymous(this="struct_extract", expressions=[x.copy(), exp.Literal.string(name)]), ft, depth + 1))
            for name, ft in struct_fields(t)]
        return exp.Case(ifs=[exp.If(this=exp.Is(this=x.copy(), expression=exp.Null()), true=exp.Null())],
                        default=exp.Anonymous(this="STRUCT_PACK", expressions=fields))
    return x


def mark_duckdb(e: exp.Expression, t: SqlType) -> exp.Expression:
    """``e`` marked as an expression over nested or JSON values, which Spark evaluates as DuckDB does (a UDF
    that runs DuckDB, ``sqlengine.executor.backends.duckdb_eval``): ``__duckdb(CAST(e AS t))``, where
    :data:`DUCKDB_MARK` is a macro of every DuckDB connection of the engine that gives its argument."""
    stored = plane_sql(t)
    return exp.Anonymous(this=DUCKDB_MARK, expressions=[exp.Cast(this=e, to=exp.DataType.build(stored,
                                                                                             dialect="duckdb"))])


ORDERED_OTHERWISE = ("ARRAY", "STRUCT", "MAP")   # types Spark orders otherwise than DuckDB, or not at all


def sort_key(x: str) -> str:
    """DuckDB's sort key of the value of ``x`` (DuckDB SQL): a BLOB whose bytes order as DuckDB orders the values,
    NULL for NULL; marked, so that Spark computes it with DuckDB too.  Spark orders a NULL element of a LIST (or
    field of a ROW) before any value where DuckDB orders it after, and orders no MAP (fuzz seed 68033).

    >>> sort_key("c1")
    "__duckdb(CAST(CASE WHEN c1 IS NULL THEN NULL ELSE create_sort_key(c1, 'ASC NULLS LAST') END AS BLOB))"
    """
    return (f"{DUCKDB_MARK}(CAST(CASE WHEN {x} IS NULL THEN NULL ELSE create_sort_key({x}, 'ASC NULLS LAST') END "
            "AS BLOB))")


def marked(n: exp.Expression) -> bool:
    """Is ``n`` an expression :func:`mark_duckdb` marked?"""
    return isinstance(n, exp.Anonymous) and n.name.lower() == DUCKDB_MARK and len(n.expressions) == 1 and \
        isinstance(n.expressions[0], exp.Cast)


def parenthesized_arrows(e: exp.Expression) -> exp.Expression:
    """``e`` with each ``j -> path`` and ``j ->> path`` in parentheses: DuckDB reads ``f(c1 -> '$.a')`` as a
    lambda (``x -> body``) in a function's arguments; and ``map_contains_key(m, k)`` as DuckDB's
    ``map_contains(m, k)`` (sqlglot writes it with its arguments swapped)."""
    def fix(n):
        if isinstance(n, (exp.JSONExtract, exp.JSONExtractScalar)) and not isinstance(n.parent, exp.Paren):
            return exp.Paren(this=n.copy())
        if isinstance(n, exp.MapContainsKey):
            return exp.Anonymous(this="map_contains", expressions=[n.this.copy(), n.args["key"].copy()])
        return n
    kinds = (exp.JSONExtract, exp.JSONExtractScalar, exp.MapContainsKey)
    return e.transform(fix) if any(isinstance(n, kinds) for n in e.walk()) else e


def comparable_key(e):
    """A join key (a :class:`planner.logical.Expr`) that holds a MAP as its JSON text: Spark cannot compare
    MAPs, and canonical MAPs are equal exactly when their texts are (marked, so both executors write the text as
    DuckDB does)."""
    from .logical import Expr
    if not contains(e.type, "MAP"):
        return e
    inner = parse_one(e.sql, read="duckdb")
    if marked(inner):
        inner = inner.expressions[0].this
    text = exp.Anonymous(this="to_json", expressions=[inner])
    return Expr(mark_duckdb(text, SqlType("JSON")).sql(dialect="duckdb"), SqlType("JSON"))


def variant_casts(e: exp.Expression, types) -> exp.Expression:
    """``e`` with each CAST of a JSON (VARIANT) value to another type a TRY_CAST: a value of another JSON type
    casts to NULL, as in Feldera (DuckDB's CAST raises)."""
    def fix(n):
        if isinstance(n, exp.Cast) and not isinstance(n, exp.TryCast) and \
                n.to.this not in (exp.DataType.Type.JSON, exp.DataType.Type.VARIANT) and not marked(n):
            inner = duckdb_type(n.this, types)
            if inner is not None and inner.base == "JSON":
                return exp.TryCast(this=n.this, to=n.to)
        return n
    if not any(isinstance(n, exp.Cast) for n in e.walk()) or not any(t.base == "JSON" for t in types) and \
            not any(isinstance(n, (exp.JSONExtract, exp.ParseJSON)) for n in e.walk()):
        return e
    return e.transform(fix)


def json_brackets(e: exp.Expression, types) -> exp.Expression:
    """``e`` with each ``j[i]`` and ``j['k']`` of a JSON value ``j`` as ``json_extract(j, i)``: DuckDB indexes a
    JSON array from 0 (and a LIST from 1); sqlglot reads every bracket as a LIST's and would shift the index."""
    def fix(n):
        if not isinstance(n, exp.Bracket) or len(n.expressions) != 1 or isinstance(n.expressions[0], exp.Slice):
            return n
        inner = duckdb_type(read_json_columns(n.this, types), types)
        if inner is None or inner.base != "JSON":
            return n
        key = n.expressions[0]
        if n.args.get("offset") == 1 or isinstance(key, exp.Literal) and key.is_string:
            written: exp.Expression = key.copy()   # (as written: planner.interval_literals.list_indexes_as_written)
        elif isinstance(key, exp.Literal):
            written = exp.Literal.number(int(key.this) + 1)
        elif isinstance(key, exp.Neg) and isinstance(key.this, exp.Literal) and not key.this.is_string:
            written = exp.Literal.number(-int(key.this.this) + 1)
        else:
            written = exp.Add(this=exp.Paren(this=key.copy()), expression=exp.Literal.number(1))
        return exp.Anonymous(this="json_extract", expressions=[n.this, written])
    while any(isinstance(n, exp.Bracket) for n in e.walk()):   # (transform does not visit what it replaced)
        new = e.transform(fix)
        if new.sql(dialect="duckdb") == e.sql(dialect="duckdb"):
            break
        e = new
    return e


_NESTED_CLASSES = (exp.Array, exp.Struct, exp.Map, exp.VarMap, exp.Lambda, exp.Bracket, exp.Slice)
_NESTED_PREFIXES = ("Array", "List", "JSON", "Map", "Struct", "Transform", "Flatten", "Split", "GenerateSeries",
                    "ParseJSON", "ToMap", "Cardinality")


def nested_syntax(e: exp.Expression) -> bool:
    """Whether ``e`` builds, reads or transforms a nested or JSON value somewhere inside (a list literal, a
    lambda, ``list_filter``, ``json_extract``, ...) or casts to an INTERVAL, even between scalar inputs and a scalar result
    (``len(list_filter([a, b], lambda x: x > 0))``): Spark has no faithful translation of these."""
    for n in e.walk():
        if isinstance(n, _NESTED_CLASSES) or type(n).__name__.startswith(_NESTED_PREFIXES):
            return True
        if isinstance(n, exp.Anonymous) and n.name.lower() in _NESTED_NAMES:
            return True
        if isinstance(n, exp.Cast) and n.to.this == exp.DataType.Type.INTERVAL:   # (text read as DuckDB reads
            return True                                                         # it: Spark's CAST gives NULL)
    return False


_NESTED_NAMES = {"struct_extract", "struct_pack", "row", "list_value", "list_extract", "list_element", "len",
                 "cardinality", "element_at", "map_entries", "map_values", "map_extract", "map_contains",
                 "map_concat", "to_json", "json", "json_valid", "json_value", "json_contains", "json_exists",
                 "json_merge_patch", "json_serialize", "json_structure", "json_array_length", "array_transform",
                 "list_reduce", "list_aggregate", "list_sum", "list_count", "list_avg", "list_unique",
                 "list_has_all", "list_zip", "list_position", "list_indexof", "list_slice", "list_cat",
                 "list_reverse", "list_apply", CANONICAL_JSON}


def empty_map_literals(tree: exp.Expression) -> exp.Expression:
    """``tree`` with DuckDB's empty map literal ``MAP {}`` as ``MAP()`` (sqlglot writes ``MAP {}`` under a CAST as
    ``MAP MAP()``, which DuckDB cannot parse)."""
    for m in list(tree.find_all(exp.ToMap)):
        if isinstance(m.this, exp.Struct) and not m.this.expressions:
            m.replace(exp.Map())
    return tree
