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
    from sqlengine.executor.backends.spark import union_all
    return union_all([d for d in ins if d is not None])
