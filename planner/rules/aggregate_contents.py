"""Rule ``aggregate_contents``: a materialized aggregate view's contents are read from the aggregate's own
state instead of being stored as a copy.

An accumulating aggregate (COUNT, SUM, AVG over a GROUP BY) keeps per group the sums of its change, one row
per group and step, added up when read.  A materialized view over it also kept its contents: per step, the
old and the new row of every touched group, merged over time.  Both hold the same information: a view's
contents are the aggregate's final rows of its summed state (the rule of its first step, over all of its
state), through the maps above it.  So such an integral is marked ``mode="derived"`` with ``reads`` naming
the aggregate op; it owns no state, and the executors compute it when it is read
(:mod:`sqlengine.executor.derived`).  A step then writes the view nothing, and when no one listens to the
view's changes, does not compute them either: it only adds the change's sums to the aggregate's state.

Reading the contents (ad-hoc queries, sinks that mirror the view) costs a group-by over the aggregate's
runs, where reading the stored copy cost consolidating its runs: about the same.

It applies to the integral of a view's contents when:

* the op below its chain of ``Filter``/``Project`` maps is an accumulating aggregate;
* no expression of the chain can fail on a row (a read must not fail, or record a row again);
* no operator reads the integral (only the view's readers do), and no table under it has event time
  (closed rows are dropped from the contents, and emit-final views read them per step).

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE t (k INT, v INT);"
...     "CREATE MATERIALIZED VIEW v AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k")
>>> [op.describe().split("]")[1].strip() for op in p.circuit.ops if op.mode == "derived"]
['integral of #3  (in=#3; reads=#2; mode=derived)']
"""
from __future__ import annotations

import dataclasses

from ..circuit import Circuit
from .share_table_state import maps_below, safe_maps, tables_under


def aggregate_contents(circuit: Circuit, event_tables=frozenset()) -> Circuit:
    """The circuit with every eligible view-contents integral marked ``mode="derived"`` (module docstring)."""
    contents = {o.integral for o in circuit.outputs.values() if o.integral is not None}
    read = {r for op in circuit.ops for r in op.reads}
    ops = list(circuit.ops)
    for op in circuit.ops:
        if op.kind != "integrate" or op.id not in contents or op.id in read or op.mode == "derived":
            continue
        chain, bottom = maps_below(circuit, op)
        if bottom.kind != "aggregate" or bottom.mode != "accumulate" or not safe_maps([m.node for m in chain]) \
                or tables_under(bottom.node) & set(event_tables):
            continue
        ops[op.id] = dataclasses.replace(op, mode="derived", reads=(bottom.id,))
    return Circuit(ops=ops, tables=dict(circuit.tables), outputs=dict(circuit.outputs))
