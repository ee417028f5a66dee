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
    types first."""
    from pyspark.sql import functions as F

    from sqlengine.executor.backends.spark import union_all
    from sqlengine.executor.schema import spark_type
    frames = [d for d in ins if d is not None]
    if len({tuple(f.dataType for f in d.schema.fields) for d in frames}) > 1:
        want = [spark_type(f.type) for f in op.node.fields]
        frames = [d.select(*[F.col(c).cast(t).alias(c) if d.schema[c].dataType != t else F.col(c)
                             for c, t in zip(d.columns, want)], *d.columns[len(want):]) for d in frames]
    return union_all(frames)
