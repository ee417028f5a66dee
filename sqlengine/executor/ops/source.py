"""Inputs, constants and integrals: the ops the step loop itself feeds and stores (see ``Engine.run_step``).

* input: a table's change this step (Z-set rows of its columns);
* constant: ``SELECT`` without ``FROM``: its one row, with weight 1, in the pipeline's first step;
* integrate: I(d) = the sum of its input's changes so far; it writes its input's change as a run of its state
  (a *derived* integral stores nothing: see :mod:`sqlengine.executor.derived`).

They run no delta rule of their own.
"""
from __future__ import annotations

from typing import Dict, List

import pyarrow as pa

from planner.errors import InternalError

from sqlengine.executor.op_schemas import with_weight
from sqlengine.types import arrow_type
from sqlengine.zset import W

FED = ("input", "constant", "integrate")

SKIPS_UNCHANGED = False


def fed(op) -> bool:
    """Is ``op`` one of the ops the step loop feeds or stores itself (no rule of its own)?"""
    return op.kind in FED


def integrates(op) -> bool:
    return op.kind == "integrate"


def reads_table(op) -> bool:
    """Is ``op`` a table's input (its change is the table's change)?"""
    return op.kind == "input"


def change(op, table_deltas: Dict[str, object], initial: bool):
    """The change of an input (its table's change, None if empty) or a constant (its row in the first step)."""
    if op.kind == "constant":   # SELECT without FROM: its one row, once
        return pa.table({W: pa.array([1], pa.int64())}) if initial else None
    d = table_deltas.get(op.node.table)
    return d if d is not None and (not isinstance(d, pa.Table) or d.num_rows) else None


def probes(op) -> list:
    return []


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    if op.kind == "integrate":
        return ins[0]
    return with_weight([arrow_type(f.type) for f in op.node.fields])


def state_schema(op, change: pa.Schema, ins: List[pa.Schema]):
    """An integral's runs hold its input's rows."""
    return change if op.kind == "integrate" else None


def merge_rule(op):
    return None   # runs of an integral merge by consolidation


def local(lw, op, ins, reads, initial: bool = False):   # pragma: no cover - the step loop feeds them
    raise InternalError(f"op #{op.id} ({op.kind}) has no rule: the step loop feeds it")


spark = local
