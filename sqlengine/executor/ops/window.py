"""Window functions (``OVER``; ranking, LAG and top-N filters over them): the calls recomputed
over the partitions a change touches, calls(old + d) - calls(old) (``delta_rules.window_sql``).  It reads its
input's integral (``S``) by the partition keys; with ``planner.circuit.keeps_output`` it retracts what it
emitted before, read from its own output (``O``) by the same keys."""
from __future__ import annotations

from typing import List

import pyarrow as pa

from planner.logical import col

from sqlengine.executor import delta_rules as rules
from sqlengine.executor.backends.duckdb import duck
from sqlengine.executor.op_schemas import data_types, normalize, with_weight
from sqlengine.executor.ops import ProbeSpec

SKIPS_UNCHANGED = False


def probes(op) -> List[ProbeSpec]:
    """Its input's integral; its own output's (keeps_output): the input's columns first in both."""
    keys = tuple(duck(p.sql) for p in op.node.partition)
    return [ProbeSpec(keys, [(0, keys)] if keys else []) for _ in op.reads or (0,)]


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    node = op.node
    got = typer.select_types(ins[0], [f"{duck(c.sql)} AS {col(i)}" for i, c in enumerate(node.calls)])
    return with_weight(data_types(ins[0]) + [normalize(t, c.type) for t, c in zip(got, node.calls)])


def local(lw, op, ins, reads, initial: bool = False) -> pa.Table:
    if len(reads) > 1:   # it retracts what it emitted (planner.circuit.keeps_output)
        return lw.rule(rules.window_sql(op.node, emitted=True), S=reads[0], D=ins[0], O=reads[1])
    return lw.rule(rules.window_sql(op.node), S=reads[0], D=ins[0])


def spark(lw, op, ins, reads, initial: bool = False):
    if len(reads) > 1:
        return lw.rule(rules.window_sql(op.node, emitted=True, spark=True), D=ins[0], S=reads[0], O=reads[1])
    return lw.rule(rules.window_sql(op.node, spark=True), D=ins[0], S=reads[0])
