"""The Arrow schema of every operator's change and state, derived on the driver without Spark.

Each operator kind's module (:mod:`sqlengine.executor.ops`) types its change and state with the helpers
here: structural operators (filter, join, union of equal inputs, distinct, set operations, integrals) take
their inputs' columns; aggregates follow fixed rules; projections, window calls and unions of differing
inputs are typed by DuckDB's binder over empty Arrow tables (no rows, so a query is cheap).  The
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

from planner.circuit import Circuit
from planner.logical import col
from planner.types import SqlType

from sqlengine import private_duckdb
from sqlengine.executor import ops
from sqlengine.executor.backends.python_calls import register_duckdb
from sqlengine.executor.schema import INTEGER_BASES
from sqlengine.types import arrow_type
from sqlengine.zset import W



def _nullable(fields) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, True) for f in fields])


def with_weight(types) -> pa.Schema:
    return _nullable([pa.field(col(i), t) for i, t in enumerate(types)] + [pa.field(W, pa.int64())])


def data_types(s: pa.Schema):
    return [f.type for f in s if f.name != W]


def normalize(t: pa.DataType, planned: SqlType = None) -> pa.DataType:
    """One type per SQL type on the data plane: naive microsecond timestamps, 32-bit offsets, and BIGINT
    where the planner says an integer but DuckDB widened it (HUGEINT sums)."""
    if planned is not None and planned.base in ("ARRAY", "MAP", "STRUCT", "JSON"):
        return arrow_type(planned)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or \
            pa.types.is_fixed_size_list(t):
        return pa.list_(normalize(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(normalize(t.key_type), normalize(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, normalize(t.field(i).type)) for i in range(t.num_fields)])
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
    def __init__(self, functions=None):
        self.con = private_duckdb.connect()
        register_duckdb(self.con, functions or {})

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


def derive(circuit: Circuit, functions=None) -> Tuple[Dict[int, pa.Schema], Dict[int, pa.Schema]]:
    """(op id -> schema of its change, state-owning op id -> schema of its runs): each op kind's
    ``change_schema`` and ``state_schema`` (:mod:`sqlengine.executor.ops`).  ``functions``: the program's Python
    functions (their calls are typed by their declared result, but DuckDB binds them)."""
    typer = _Typer(functions)
    schemas: Dict[int, pa.Schema] = {}
    states: Dict[int, pa.Schema] = {}
    for op in circuit.ops:
        kind = ops.of(op.kind)
        ins = [schemas[i] for i in op.inputs]
        schemas[op.id] = kind.change_schema(op, ins, typer)
        state = kind.state_schema(op, schemas[op.id], ins)
        if state is not None:
            states[op.id] = state
    return schemas, states
