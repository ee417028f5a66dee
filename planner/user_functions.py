"""User-defined functions: SQL functions and macros inlined before binding, and Python functions called by name.

A program declares them with

* ``CREATE FUNCTION f(x INT, y INT) RETURNS INT AS x * y + 1`` (Feldera's form): a SQL body, inlined at each
  call with its arguments cast to the parameters' types and its result cast to the declared type;
* ``CREATE MACRO f(x, y) AS x * y + 1`` (DuckDB's): the same without types (the arguments are substituted as
  they are);
* ``CREATE FUNCTION f(x DOUBLE) RETURNS DOUBLE LANGUAGE PYTHON AS 'module:function'`` (or an inline body in
  ``$$ ... $$``): a Python function, whose implementation the engine finds (:mod:`sqlengine.udf`); Python
  functions declared in Python (``sqlengine.udf``) come to :func:`planner.compile_program` as
  :class:`UserFunction` values too.

A call of a Python function is written ``CAST(f(CAST(a AS T1), ...) AS R)``: the binder reads its type from the
outer CAST, and both executors give the function its declared argument types.  The planner never calls a
function; ``impl`` is what the executors register under the name (opaque here).

>>> import sqlglot
>>> fs = {"f": UserFunction("f", ("x", "y"), (SqlType("INT"), SqlType("INT")), SqlType("INT"),
...                          body=sqlglot.parse_one("x * y + 1"))}
>>> inline(sqlglot.parse_one("SELECT f(a, 2) FROM t", read="duckdb"), fs, "").sql(dialect="duckdb")
'SELECT CAST((CAST(a AS INT) * CAST(2 AS INT) + 1) AS INT) FROM t'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import sqlglot
from sqlglot import exp
from sqlglot.tokens import Token

from .errors import BindError, UnsupportedError
from .scope import name_of, position_of
from .typecheck import keep_position
from .types import SUPPORTED_COLUMN_TYPES, SqlType, contains, from_datatype

DIALECT = "duckdb"
LANGUAGES = ("SQL", "PYTHON")


class UserAggregate(exp.Expression, exp.AggFunc):
    """A call of a user's Python aggregate function: ``this`` its name, ``expressions`` its arguments (cast to
    the parameters' types), ``returns`` its declared type (a string).  The binder makes it an ``UDAF`` call
    (:func:`planner.aggregate_functions.call_sql`)."""
    arg_types = {"this": True, "expressions": False, "returns": True, "retracts": False}


@dataclass(frozen=True, eq=False)
class UserFunction:
    """A user's function.  ``types`` is None for a macro (untyped parameters) and for a Python function that
    takes its arguments as they come; ``returns`` is None only for a macro.  ``body``: a SQL function's
    expression; ``source``: where a Python function declared in SQL is (``'module:function'``, or its code);
    ``impl``: a Python function's implementation, for the executors (``sqlengine.udf.Udf``)."""

    name: str
    params: Tuple[str, ...]
    types: Optional[Tuple[SqlType, ...]]
    returns: Optional[SqlType]
    body: Optional[exp.Expression] = None
    language: str = "SQL"
    source: str = ""
    deterministic: bool = True
    aggregate: bool = False          # a Python aggregate function (``sqlengine.udaf``)
    retracts: bool = False           # an aggregate with ``retract(acc, *args)``: kept per group, not recomputed
    offset: Optional[int] = None
    impl: Optional[Callable] = field(default=None, compare=False, repr=False)

    @property
    def python(self) -> bool:
        return self.language == "PYTHON"


def is_builtin(name: str) -> bool:
    """Is ``name`` a function of the SQL dialect (sqlglot knows it, or DuckDB's catalogue has it)?"""
    try:
        call = sqlglot.parse_one(f"{name}(1)", read=DIALECT)
    except sqlglot.errors.ParseError:
        return True
    if not isinstance(call, exp.Anonymous):
        return True
    import duckdb
    con = duckdb.connect(":memory:")
    try:
        return bool(con.execute("SELECT 1 FROM duckdb_functions() WHERE lower(function_name) = ? LIMIT 1",
                                [name.lower()]).fetchall())
    finally:
        con.close()


def _type(dt: exp.Expression, what: str, sql: str, at: Optional[int]) -> SqlType:
    t = from_datatype(dt) if isinstance(dt, exp.DataType) else None
    if t is None:
        raise UnsupportedError(f"type {dt.sql(dialect=DIALECT)} of {what} is not supported (supported: "
                               f"{', '.join(SUPPORTED_COLUMN_TYPES)})", sql=sql, offset=position_of(dt) or at)
    return t


def function_def(stmt: exp.Create, sql: str, tokens: Sequence[Token] = ()) -> UserFunction:
    """The function a ``CREATE FUNCTION`` / ``CREATE MACRO`` statement declares, checked."""
    udf = stmt.this
    name = name_of(udf.this).lower()
    at = position_of(udf.this)
    if is_builtin(name):
        raise BindError(f"function {name} is a built-in function: give yours another name", sql=sql, offset=at)
    for arg in ("replace", "exists"):
        if stmt.args.get(arg):
            word = "OR REPLACE" if arg == "replace" else "IF NOT EXISTS"
            raise UnsupportedError(f"{word} in CREATE {stmt.kind} is not supported", sql=sql, offset=at)
    props = list(stmt.args["properties"].expressions) if stmt.args.get("properties") else []
    returns, language = None, "SQL"
    for p in props:
        if isinstance(p, exp.ReturnsProperty) and not p.args.get("is_table") and stmt.kind == "FUNCTION":
            returns = _type(p.this, f"function {name}'s result", sql, at)
        elif isinstance(p, exp.LanguageProperty) and stmt.kind == "FUNCTION":
            language = p.name.upper()
            if language not in LANGUAGES:
                raise UnsupportedError(f"LANGUAGE {p.name} is not supported (SQL or PYTHON)", sql=sql,
                                       offset=position_of(p.this) or at)
        else:
            raise UnsupportedError(f"{p.sql(dialect=DIALECT)} in CREATE {stmt.kind} is not supported", sql=sql,
                                   offset=position_of(p) or at)
    params, types = [], []
    for p in udf.expressions:
        if isinstance(p, exp.ColumnDef) and stmt.kind == "FUNCTION":
            if p.args.get("kind") is None:
                raise BindError(f"parameter {p.name} of function {name} needs a type (CREATE MACRO takes "
                                "parameters without types)", sql=sql, offset=position_of(p.this))
            types.append(_type(p.args["kind"], f"parameter {p.name}", sql, position_of(p.this)))
            params.append(p.name.lower())
        elif isinstance(p, (exp.Identifier, exp.Column)) and stmt.kind == "MACRO":
            params.append(p.name.lower())
        else:
            raise UnsupportedError(f"parameter {p.sql(dialect=DIALECT)} of {name} is not supported", sql=sql,
                                   offset=position_of(p) or at)
    if len(set(params)) < len(params):
        raise BindError(f"function {name} names a parameter twice", sql=sql, offset=at)
    if stmt.kind == "FUNCTION" and returns is None:
        raise BindError(f"function {name} needs RETURNS and its type (CREATE MACRO declares a function without "
                        "types)", sql=sql, offset=at)
    body = stmt.expression
    if language == "PYTHON":
        if any(t is not None and contains(t, "INTERVAL") for t in (*types, returns)):
            raise UnsupportedError(f"Python function {name} cannot take or return an INTERVAL: pass a number, e.g. "
                                   "EXTRACT(EPOCH FROM i)", sql=sql, offset=at)
        if not isinstance(body, (exp.Literal, exp.Heredoc)) or (isinstance(body, exp.Literal) and
                                                                not body.is_string):
            raise BindError(f"Python function {name} needs AS 'module:function' or AS $$ code $$", sql=sql,
                            offset=position_of(body) if body is not None else at)
        return UserFunction(name, tuple(params), tuple(types), returns, language="PYTHON", source=body.name,
                            offset=at)
    if body is None or isinstance(body, (exp.Select, exp.Union, exp.Heredoc)) or \
            (isinstance(body, exp.Subquery) and isinstance(body.this, (exp.Select, exp.Union))):
        raise UnsupportedError(f"the body of SQL function {name} must be an expression (a table function or a "
                               "query is not supported)", sql=sql, offset=position_of(body) if body is not None else at)
    for c in body.find_all(exp.Column):
        if c.args.get("table") is not None or c.name.lower() not in params:
            raise BindError(f"unknown column '{c.sql()}' in function {name}: a body refers only to its parameters "
                            f"({', '.join(params) or 'none'})", sql=sql, offset=position_of(c))
    return UserFunction(name, tuple(params), tuple(types) if stmt.kind == "FUNCTION" else None, returns,
                        body=body, offset=at)


def _cast(e: exp.Expression, t: Optional[SqlType], implicit: bool = False) -> exp.Expression:
    """``e`` as type ``t``.  ``implicit``: an argument given to a typed parameter, which converts only where
    DuckDB converts implicitly (``planner.typecheck`` rejects the others, e.g. a DATE to a BIGINT)."""
    if t is None:
        return e if isinstance(e, (exp.Column, exp.Literal, exp.Paren, exp.Null)) else exp.Paren(this=e)
    out = exp.Cast(this=e, to=exp.DataType.build(t.sql, dialect=DIALECT))
    if implicit:
        out.meta["implicit"] = True
    return out


def _expanded(call: exp.Anonymous, args: Sequence[exp.Expression], f: UserFunction, sql: str) -> exp.Expression:
    for a in args:
        if isinstance(a, (exp.Distinct, exp.Order)):
            raise UnsupportedError(f"DISTINCT or ORDER BY in a call of {'aggregate ' * f.aggregate}function {f.name}",
                                   sql=sql, offset=position_of(call))
    if len(args) != len(f.params) and (f.types is not None or not f.python):
        raise BindError(f"function {f.name} takes {len(f.params)} argument{'s' * (len(f.params) != 1)}, "
                        f"not {len(args)}", sql=sql, offset=position_of(call))
    if f.python and not f.deterministic:
        raise UnsupportedError(f"function {f.name} is declared non-deterministic: its value would differ between a "
                               "row's insert and its delete", sql=sql, offset=position_of(call))
    typed = [_cast(a, f.types[i] if f.types is not None else None, implicit=True) for i, a in enumerate(args)]
    for t in typed:
        if position_of(t) is None:
            keep_position(t, call)
    if f.aggregate:
        return keep_position(UserAggregate(this=exp.to_identifier(f.name), expressions=typed,
                                           returns=exp.Literal.string(f.returns.sql),
                                           retracts=exp.true() if f.retracts else None), call)
    if f.python:
        return _cast(keep_position(exp.Anonymous(this=f.name, expressions=typed), call), f.returns)
    by_name = dict(zip(f.params, typed))

    def put(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.name.lower() in by_name:
            return by_name[n.name.lower()].copy()
        return n

    body = f.body.copy().transform(put)
    return _cast(exp.Paren(this=body) if f.returns is not None else body, f.returns)


def inline(q: exp.Expression, functions: Mapping[str, UserFunction], sql: str) -> exp.Expression:
    """``q`` with each call of a SQL function replaced by its body, and each call of a Python function given
    its casts.  A body was inlined itself when its function was declared (it may call the functions declared
    before it), so only the arguments are expanded in turn."""
    if not functions:
        return q

    def expand(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Anonymous) and n.name.lower() in functions:
            args = [inline(a, functions, sql) for a in n.expressions]
            return _expanded(n, args, functions[n.name.lower()], sql)
        return n

    return q.copy().transform(expand)


def ad_hoc_calls(q: exp.Expression, functions: Mapping[str, UserFunction], sql: str) -> exp.Expression:
    """An ad-hoc query (or the query of ``execute()``) with the user's functions as DuckDB runs them: SQL bodies
    inlined, and a Python aggregate as its function over the LIST of its rows
    (:func:`planner.aggregate_functions.call_sql`)."""
    from .aggregate_functions import call_sql
    out = inline(q, functions, sql)

    def lowered(n: exp.Expression) -> exp.Expression:
        cond = "TRUE"
        if isinstance(n, exp.Filter) and isinstance(n.this, UserAggregate):   # f(x) FILTER (WHERE c)
            cond, n = f"({n.expression.this.sql(dialect=DIALECT)})", n.this
        if isinstance(n, UserAggregate):
            text = call_sql("UDAF", [cond] + [a.sql(dialect=DIALECT) for a in n.expressions],
                            [exp.Literal.string(n.this.name).sql(), n.args["returns"].sql()])
            return sqlglot.parse_one(text, read=DIALECT)
        return n
    return out.transform(lowered) if functions else out


def python_names(functions: Mapping[str, UserFunction]) -> frozenset:
    return frozenset(n for n, f in functions.items() if f.python)


def python_functions(functions: Dict[str, UserFunction]) -> Dict[str, UserFunction]:
    return {n: f for n, f in functions.items() if f.python}
