"""DISTINCT: +1 for rows whose integrated weight turns positive, -1 for rows whose weight stops being positive
(``delta_rules.distinct_sql``).  It reads its input's integral (``S``) by every column, probed with the
change's rows; over rows only inserted (``mode="grow"``), the integral of its own change: the rows it emitted
(``delta_rules.distinct_grow_sql``)."""
from __future__ import annotations

from typing import List

import pyarrow as pa

from sqlengine.executor import delta_rules as rules
from sqlengine.executor.delta_rules import cols
from sqlengine.executor.ops import ProbeSpec

SKIPS_UNCHANGED = False


def probes(op) -> List[ProbeSpec]:
    keys = tuple(cols(len(op.node.fields)))
    return [ProbeSpec(keys, [(0, keys)])]


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    return ins[0]


def _rule(op) -> str:
    return rules.distinct_grow_sql(op.node) if op.mode == "grow" else rules.distinct_sql(op.node)


def local(lw, op, ins, reads, initial: bool = False) -> pa.Table:
    return lw.rule(_rule(op), S=reads[0], D=ins[0])


def spark(lw, op, ins, reads, initial: bool = False):
    from sqlengine.executor.backends.spark import entries_as_maps, maps_as_entries
    out = lw.rule(_rule(op), **maps_as_entries({"D": ins[0], "S": reads[0]}))
    return entries_as_maps(out, reads[0])
