"""The Arrow schema of every operator's change and state, derived on the driver without Spark.

Structural operators (filter, join, union of equal inputs, distinct, set
operations, integrals) take their inputs' columns; aggregates follow fixed
rules; projections, window calls and unions of differing inputs are typed by
DuckDB's binder over empty Arrow tables (about 1 ms a query, no rows).  The
result is what the driver executor produces, so both executors cast their
changes to it, and Spark analyzes a plan only when a step runs there.

Conventions (the README's "Semantics" section):

* every TIMESTAMP is naive and holds UTC wall time: a time-zone-aware result (``AT TIME ZONE``, Spark's
  ``date_trunc``) is converted to UTC and stored naive;
* an integer SUM (also as a window call) is a BIGINT computed exactly: a total outside BIGINT's range is a
  row error (see :mod:`sqlengine.executor.row_errors`), never a wrapped value;
* accumulators of integer SUM/AVG are DECIMAL(38, 0), so partial sums never wrap.

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE t (k INT, x DECIMAL(10,2)); CREATE VIEW v AS SELECT k, SUM(x * 2) AS s FROM t GROUP BY k")
>>> s, st = derive(p.circuit)
>>> s[p.circuit.outputs['v'].delta].field('c1').type
Decimal128Type(decimal128(38, 2))
"""
from __future__ import annotations

from typing import Dict, Tuple

import pyarrow as pa

from planner.circuit import Circuit, Op
from planner.logical import Aggregate, Project, Window, col
from planner.types import SqlType

from sqlengine import private_duckdb
from sqlengine.executor.local_lower import duck
from sqlengine.executor.schema import arrow_type
from sqlengine.zset import W

INTEGER_BASES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
HUGE = pa.decimal128(38, 0)


def _nullable(fields) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, True) for f in fields])


def with_weight(types) -> pa.Schema:
    return _nullable([pa.field(col(i), t) for i, t in enumerate(types)] + [pa.field(W, pa.int64())])


def data_types(s: pa.Schema):
    return [f.type for f in s if f.name != W]


def normalize(t: pa.DataType, planned: SqlType = None) -> pa.DataType:
    """One type per SQL type on the data plane: naive microsecond timestamps, 32-bit offsets, and BIGINT
    where the planner says an integer but DuckDB widened it (HUGEINT sums)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us")
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_null(t):
        return arrow_type(planned) if planned is not None and planned.sql != "UNKNOWN" else pa.int32()
    if planned is not None and planned.base in INTEGER_BASES and pa.types.is_decimal(t) and t.scale == 0:
        return arrow_type(planned)
    if pa.types.is_decimal256(t):
        return pa.decimal128(38, min(t.scale, 38))
    return t


class _Typer:
    def __init__(self):
        self.con = private_duckdb.connect()

    def select_types(self, schema: pa.Schema, items) -> list:
        """DuckDB's result types of ``SELECT items FROM d`` over an empty table of ``schema``."""
        self.con.register("d", schema.empty_table())
        try:
            return [f.type for f in self.con.sql(f"SELECT {', '.join(items)} FROM d LIMIT 0").to_arrow_table().schema]
        finally:
            self.con.unregister("d")

    def union_types(self, schemas) -> list:
        for i, s in enumerate(schemas):
            self.con.register(f"u{i}", s.empty_table())
        try:
            q = " UNION ALL ".join(f"SELECT * FROM u{i}" for i in range(len(schemas)))
            return [f.type for f in self.con.sql(q + " LIMIT 0").to_arrow_table().schema]
        finally:
            for i in range(len(schemas)):
                self.con.unregister(f"u{i}")


def acc_type(arg: pa.DataType) -> pa.DataType:
    """The accumulator type of SUM/AVG over ``arg``: exact DECIMAL(38, s) for integers and decimals."""
    if pa.types.is_integer(arg):
        return HUGE
    if pa.types.is_decimal(arg):
        return pa.decimal128(38, arg.scale)
    return pa.float64()


def aggregate_types(node: Aggregate, ins: pa.Schema) -> list:
    types = data_types(ins)
    out = [types[i] for i in range(len(node.keys))]
    for a in node.aggs:
        arg = types[int(a.args[0].sql[1:])] if a.args and a.args[0].sql[1:].isdigit() else None
        if a.func in ("COUNT", "COUNT_STAR"):
            out.append(pa.int64())
        elif a.func in ("MIN", "MAX"):
            out.append(arg if arg is not None else arrow_type(a.type))
        elif a.func == "SUM":
            if arg is not None and pa.types.is_integer(arg):
                out.append(pa.int64())
            elif arg is not None and pa.types.is_decimal(arg):
                out.append(pa.decimal128(38, arg.scale))
            else:
                out.append(pa.float64())
        else:   # AVG, STDDEV_*, VAR_*: DOUBLE, as in DuckDB
            out.append(pa.float64())
    return out


def accumulator_schema(node: Aggregate, ins: pa.Schema) -> pa.Schema:
    """State of an accumulating aggregate: keys, ``__cnt``, and per call ``__s<i>`` (sum of x*w) and
    ``__n<i>`` (sum of w where x is not NULL), as in ``delta_rules.acc_columns``."""
    types = data_types(ins)
    fields = [pa.field(col(i), types[i]) for i in range(len(node.keys))] + [pa.field("__cnt", pa.int64())]
    for i, a in enumerate(node.aggs):
        if a.func == "COUNT":
            fields.append(pa.field(f"__n{i}", pa.int64()))
        elif a.func in ("SUM", "AVG"):
            arg = types[int(a.args[0].sql[1:])]
            fields += [pa.field(f"__s{i}", acc_type(arg)), pa.field(f"__n{i}", pa.int64())]
    return _nullable(fields)


def derive(circuit: Circuit) -> Tuple[Dict[int, pa.Schema], Dict[int, pa.Schema]]:
    """(op id -> schema of its change, state-owning op id -> schema of its runs)."""
    typer = _Typer()
    schemas: Dict[int, pa.Schema] = {}
    states: Dict[int, pa.Schema] = {}
    for op in circuit.ops:
        schemas[op.id] = _change_schema(op, schemas, typer)
        if op.kind == "integrate":
            states[op.id] = schemas[op.id]
        elif op.kind == "aggregate" and op.mode == "accumulate":
            states[op.id] = accumulator_schema(op.node, schemas[op.inputs[0]])
    return schemas, states


def _change_schema(op: Op, schemas: Dict[int, pa.Schema], typer: _Typer) -> pa.Schema:
    node = op.node
    if op.kind in ("input", "constant"):
        return with_weight([arrow_type(f.type) for f in node.fields])
    ins = [schemas[i] for i in op.inputs]
    if op.kind in ("integrate", "distinct", "setop"):
        return ins[0]
    if op.kind == "union":
        if all(data_types(s) == data_types(ins[0]) for s in ins):
            return ins[0]
        planned = [f.type for f in node.fields]
        return with_weight([normalize(t, p) for t, p in zip(typer.union_types([s.remove(s.get_field_index(W))
                                                                                 for s in ins]), planned)])
    if op.kind == "join":
        if node.kind in ("semi", "anti"):
            return ins[0]
        return with_weight(data_types(ins[0]) + data_types(ins[1]))
    if op.kind == "aggregate":
        return with_weight(aggregate_types(node, ins[0]))
    if op.kind == "map" and isinstance(node, Project):
        types = data_types(ins[0])
        if all(e.sql[1:].isdigit() and e.sql.startswith("c") for e in node.exprs):
            return with_weight([types[int(e.sql[1:])] for e in node.exprs])
        got = typer.select_types(ins[0], [f"({duck(e.sql)}) AS {col(i)}" for i, e in enumerate(node.exprs)])
        return with_weight([normalize(t, e.type) for t, e in zip(got, node.exprs)])
    if op.kind == "map":   # Filter
        return ins[0]
    if op.kind == "window":
        node: Window
        got = typer.select_types(ins[0], [f"{duck(c.sql)} AS {col(i)}" for i, c in enumerate(node.calls)])
        return with_weight(data_types(ins[0]) + [normalize(t, c.type) for t, c in zip(got, node.calls)])
    raise AssertionError(f"no schema rule for operator kind {op.kind}")
