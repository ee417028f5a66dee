"""Compiling a SQL program (CREATE TABLE / CREATE [MATERIALIZED] VIEW statements)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError as SqlglotParseError, TokenError

from .bind import DIALECT, Binder, TableDef, ViewDef, name_of, position_of
from .circuit import Circuit
from .errors import BindError, ParseError, UnsupportedError
from .incrementalize import incrementalize
from .logical import Field, format_plan
from .passes import optimize
from .types import SUPPORTED_COLUMN_TYPES, from_datatype


@dataclass
class Program:
    """A compiled program: tables, views (with plans) and the shared circuit."""

    sql: str
    tables: Dict[str, TableDef] = field(default_factory=dict)
    views: Dict[str, ViewDef] = field(default_factory=dict)
    circuit: Circuit = field(default_factory=Circuit)

    def explain(self, view: str) -> str:
        """The view's logical plan and the part of the circuit that maintains it."""
        v = self.views.get(view.lower())
        if v is None:
            raise BindError(f"unknown view '{view}'. Views: {', '.join(self.views) or '(none)'}")
        out = self.circuit.outputs[v.name]
        lines = [f"view {v.name}{' (materialized)' if v.materialized else ''}",
                 "logical plan:", format_plan(v.plan), "incremental circuit:"]
        ids = {out.delta} | ({out.integral} if out.integral is not None else set())
        ops = {op.id: op for i in ids for op in self.circuit.upstream(i)}
        lines += ["  " + ops[i].describe() for i in sorted(ops)]
        lines.append(f"  output: changes of #{out.delta}" +
                     (f", contents in #{out.integral}" if out.integral is not None else ""))
        return "\n".join(lines)


def parse_statements(sql: str) -> List[exp.Expression]:
    try:
        logging.getLogger("sqlglot").setLevel(logging.ERROR)
        stmts = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except SqlglotParseError as e:
        info = e.errors[0] if e.errors else {}
        line, col = info.get("line"), info.get("col")
        offset = None
        if line:
            lines = sql.split("\n")
            offset = sum(len(l) + 1 for l in lines[: line - 1]) + max(0, (col or 1) - 1)
        raise ParseError(f"syntax error: {info.get('description', str(e)).splitlines()[0]}",
                         sql=sql, offset=offset) from None
    except TokenError as e:
        raise ParseError(f"syntax error: {e}") from None
    return stmts


def compile_program(sql: str) -> Program:
    """Parse, bind and incrementalize a program.

    >>> p = compile_program("CREATE TABLE t (a INT); CREATE VIEW v AS SELECT a + 1 AS b FROM t WHERE a > 0")
    >>> [f.name for f in p.views['v'].plan.fields]
    ['b']
    """
    prog = Program(sql)
    for stmt in parse_statements(sql):
        if isinstance(stmt, exp.Command):
            raise ParseError(f"syntax error in statement starting '{stmt.sql()[:40]}'", sql=sql,
                             offset=position_of(stmt) or sql.find(str(stmt.this)))
        if isinstance(stmt, exp.Create) and stmt.kind == "TABLE":
            t = table_def(stmt, sql)
            if t.name in prog.tables or t.name in prog.views:
                raise BindError(f"'{t.name}' is defined twice", sql=sql, offset=position_of(stmt.this))
            prog.tables[t.name] = t
        elif isinstance(stmt, exp.Create) and stmt.kind == "VIEW":
            v = view_def(stmt, sql, prog)
            if v.name in prog.tables or v.name in prog.views:
                raise BindError(f"'{v.name}' is defined twice", sql=sql, offset=position_of(stmt.this))
            prog.views[v.name] = v
        else:
            what = stmt.key.upper() if not isinstance(stmt, exp.Create) else f"CREATE {stmt.kind}"
            raise UnsupportedError(f"statement {what} in a program is not supported "
                                   "(only CREATE TABLE and CREATE [MATERIALIZED] VIEW)",
                                   sql=sql, offset=position_of(stmt))
    prog.circuit = incrementalize(prog.tables, prog.views)
    return prog


def table_def(stmt: exp.Create, sql: str) -> TableDef:
    schema = stmt.this
    if not isinstance(schema, exp.Schema):
        raise UnsupportedError("CREATE TABLE without a column list is not supported", sql=sql,
                               offset=position_of(stmt))
    name = name_of(schema.this)
    fields, pk = [], []
    for c in schema.expressions:
        if isinstance(c, exp.PrimaryKey):
            pk += [name_of(i) if isinstance(i, exp.Identifier) else name_of(i.this) for i in c.expressions]
            continue
        if not isinstance(c, exp.ColumnDef):
            raise UnsupportedError(f"table element {c.key.upper()}", sql=sql, offset=position_of(c))
        t = from_datatype(c.args["kind"]) if c.args.get("kind") else None
        if t is None:
            raise UnsupportedError(f"column type {c.args['kind'].sql() if c.args.get('kind') else '(missing)'} "
                                   f"is not supported; use one of {', '.join(SUPPORTED_COLUMN_TYPES)}",
                                   sql=sql, offset=position_of(c.args.get("kind") or c))
        for cons in c.args.get("constraints") or []:
            kind = cons.args.get("kind")
            if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
                t = t.with_nullable(False)
            elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
                pk.append(name_of(c.this))
            elif isinstance(kind, exp.NotNullColumnConstraint):
                pass
            else:
                raise UnsupportedError(f"column constraint {cons.sql()}", sql=sql, offset=position_of(cons))
        fname = c.this.this if c.this.quoted else c.this.this
        if any(f.name.lower() == fname.lower() for f in fields):
            raise BindError(f"column '{fname}' is defined twice in table {name}", sql=sql, offset=position_of(c))
        fields.append(Field(fname, t))
    names = [f.name.lower() for f in fields]
    for k in pk:
        if k.lower() not in names:
            raise BindError(f"PRIMARY KEY column '{k}' is not a column of {name}. Columns: "
                            f"{', '.join(f.name for f in fields)}", sql=sql, offset=position_of(schema))
    if len(set(k.lower() for k in pk)) != len(pk):
        raise BindError(f"table {name} declares its PRIMARY KEY twice", sql=sql, offset=position_of(schema))
    # key columns are NOT NULL
    fields = [Field(f.name, f.type.with_nullable(False)) if f.name.lower() in {k.lower() for k in pk} else f
              for f in fields]
    pk_names = tuple(next(f.name for f in fields if f.name.lower() == k.lower()) for k in pk)
    return TableDef(name, tuple(fields), pk_names)


def view_def(stmt: exp.Create, sql: str, prog: Program) -> ViewDef:
    name = name_of(stmt.this)
    if isinstance(stmt.this, exp.Schema):
        raise UnsupportedError("column lists in CREATE VIEW", sql=sql, offset=position_of(stmt.this))
    props = stmt.args.get("properties")
    materialized = bool(props and any(isinstance(p, exp.MaterializedProperty) for p in props.expressions))
    if props and any(not isinstance(p, exp.MaterializedProperty) for p in props.expressions):
        raise UnsupportedError("view properties", sql=sql, offset=position_of(props))
    q = stmt.expression
    # ORDER BY without LIMIT does not change a view's contents (a bag); drop it.
    if isinstance(q, (exp.Select, exp.Union)) and q.args.get("order") is not None and q.args.get("limit") is None:
        q = q.copy()
        q.set("order", None)
    binder = Binder(sql, prog.tables, prog.views)
    plan, names = binder.bind_query(q, {})
    plan = optimize(plan)
    return ViewDef(name, plan, materialized, q.sql(dialect=DIALECT))
