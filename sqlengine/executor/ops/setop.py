"""INTERSECT and EXCEPT (with or without ALL): the multiplicities of the touched rows before and after, from
both inputs' integrals (``LOLD``, ``ROLD``, each read by every column, probed with both changes' rows), and
the difference emitted (``delta_rules.setop_sql``).  An input that did not change has no change relation."""
from __future__ import annotations

from typing import List

import pyarrow as pa

from sqlengine.executor import delta_rules as rules
from sqlengine.executor.delta_rules import cols
from sqlengine.executor.ops import ProbeSpec, union

SKIPS_UNCHANGED = True


def probes(op) -> List[ProbeSpec]:
    keys = tuple(cols(len(op.node.fields)))
    return [ProbeSpec(keys, [(0, keys), (1, keys)]), ProbeSpec(keys, [(0, keys), (1, keys)])]


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    """The left input's columns, or, where the inputs' types differ, both widened as a UNION widens them:
    DuckDB computes the rule over both integrals in the wider type (a BIGINT beside a DOUBLE is a DOUBLE),
    and casting that back to the left's type would change values."""
    return union.change_schema(op, ins, typer)


def local(lw, op, ins, reads, initial: bool = False) -> pa.Table:
    tables = {"LOLD": reads[0], "ROLD": reads[1], "D0": ins[0], "D1": ins[1]}
    return lw.rule(rules.setop_sql(op.node, ins[0] is not None, ins[1] is not None),
                   **{n: t for n, t in tables.items() if t is not None})


def spark(lw, op, ins, reads, initial: bool = False):
    from sqlengine.executor.backends.spark import entries_as_maps, maps_as_entries
    frames = maps_as_entries({"D0": ins[0], "D1": ins[1], "LOLD": reads[0], "ROLD": reads[1]})
    out = lw.rule(rules.setop_sql(op.node, ins[0] is not None, ins[1] is not None), **frames)
    return entries_as_maps(out, reads[0])
