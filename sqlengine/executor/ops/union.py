"""UNION ALL: linear, no state.  Delta rule: d(A + B) = dA + dB; an input that did not change adds nothing."""
from __future__ import annotations

from typing import List

import pyarrow as pa

from sqlengine.executor.op_schemas import data_types, normalize, with_weight
from sqlengine.zset import W

SKIPS_UNCHANGED = True


def probes(op) -> list:
    return []


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    if all(data_types(s) == data_types(ins[0]) for s in ins):
        return ins[0]
    planned = [f.type for f in op.node.fields]
    got = typer.union_types([s.remove(s.get_field_index(W)) for s in ins])
    return with_weight([normalize(t, p) for t, p in zip(got, planned)])


def local(lw, op, ins, reads=(), initial: bool = False) -> List[pa.Table]:
    return [d for d in ins if d is not None]


def spark(lw, op, ins, reads=(), initial: bool = False):
    """Spark's union is by position and widens types its own way (a branch whose column is an untyped NULL,
    typed INT, beside a VARCHAR made 'a' a BIGINT): branches of other types are cast to the union's column
    types first, also when only one branch changed (the ops after it compute in the union's types: a BIGINT
    beside a DOUBLE is a DOUBLE); a float cast to VARCHAR is written as DuckDB writes it (``casts.spark_text``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, DoubleType, FloatType, StringType

    from sqlengine.executor.backends.spark import union_all
    from sqlengine.executor.casts import spark_text
    from sqlengine.executor.schema import spark_type
    frames = [d for d in ins if d is not None]
    want = [spark_type(f.type) for f in op.node.fields]

    def cast(d, c, t):
        have = d.schema[c].dataType
        if have == t or isinstance(t, DecimalType):   # Spark widens DECIMALs as DuckDB does; the planner may not
            return F.col(c)
        if isinstance(t, StringType) and isinstance(have, (DoubleType, FloatType)):
            return spark_text(F.col(c), pa.float64() if isinstance(have, DoubleType) else pa.float32()).alias(c)
        return F.col(c).cast(t).alias(c)

    def differs(d):
        return any(d.schema[c].dataType != t and not isinstance(t, DecimalType) for c, t in zip(d.columns, want))
    frames = [d.select(*[cast(d, c, t) for c, t in zip(d.columns, want)], *d.columns[len(want):])
              if differs(d) else d for d in frames]
    return union_all(frames)
