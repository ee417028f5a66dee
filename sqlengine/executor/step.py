"""The step loop, written once for both executors.

A step visits the circuit's ops in order (inputs before the ops that read them) and computes each needed op's
change from its inputs' changes: an input takes its table's change, a constant its one row in the first step,
an integral writes its input's change as a run of its state; an op none of whose inputs changed has no change
(unless it seeds: :func:`sqlengine.executor.ops.aggregate.seeds`); every other op's change is the
executor's: on the driver (``LocalExecutor``: DuckDB and Arrow, every op there) or in a Spark step
(``Engine``: each op placed on the driver where its changes are and its state can be read by key, else on
Spark; see :mod:`sqlengine.executor.placement`).  A change is ``None`` (:data:`EMPTY`: nothing changed), an
Arrow table, a lazy DataFrame, or the ``Future`` of a Spark job that collects one; the loop waits for a
``Future`` only where an op reads it.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Callable, Dict, Iterable, Set

from planner.circuit import Op

from sqlengine.executor.ops import aggregate as agg_op, source

EMPTY = None   # an op whose change is empty in this step


def run_ops(circuit_ops: Iterable[Op], need: Set[int], deltas: Dict[int, object], table_deltas: Dict[str, object],
            initial: bool, write_integral: Callable[[Op, object], None],
            change: Callable[[Op, list], object]) -> Dict[int, object]:
    """Fill ``deltas`` (op id -> change) with the changes of the ops in ``need``, from the tables' changes
    ``table_deltas``.  ``write_integral(op, d)``: store change ``d`` of an integral's input (the executor
    decides whether it writes it); ``change(op, ins)``: the change of an op with a rule, given its inputs'
    changes ``ins`` (some changed, or it seeds).  ``initial``: the pipeline's first step."""
    def got(op_id: int):
        x = deltas[op_id]
        if isinstance(x, Future):
            x = deltas[op_id] = x.result()
        return x

    for op in circuit_ops:
        if op.id not in need:
            continue
        if source.fed(op):
            if source.integrates(op):
                d = got(op.inputs[0])
                if d is not EMPTY:
                    write_integral(op, d)
            else:
                deltas[op.id] = source.change(op, table_deltas, initial)
            continue
        ins = [got(i) for i in op.inputs]
        if all(x is EMPTY for x in ins) and not agg_op.seeds(op, initial):
            deltas[op.id] = EMPTY
            continue
        deltas[op.id] = change(op, ins)
    return deltas
