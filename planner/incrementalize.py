"""Incrementalization: logical plans of all views to one shared circuit.

Reads each node's declared ``algebra``:

* source   -> an ``input`` op (the table's change);
* constant -> a ``constant`` op (its rows in the first step, nothing after);
* linear   -> the same node applied to its inputs' changes (``map`` / ``union``);
* bilinear -> a ``join`` op reading the integrals of both inputs;
* stateful -> ``aggregate`` (own accumulators; the integral of its input; or, for Python aggregates with
  ``retract``, the integral of its own change, which keeps each group's accumulators beside its output and
  which a projection drops: :func:`kept_per_group`),
  ``distinct``, ``setop`` or ``window`` (the integrals of their inputs; a DISTINCT over rows that are only
  inserted reads the integral of its own change instead, ``mode="grow"``: :func:`planner.circuit.grows`); a
  recomputing aggregate or a
  window with float outputs also reads the integral of its own change (``circuit.keeps_output``).

Equal subplans are equal values, so they map to the same op: two views that
share a subquery share its work and its state.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict

from .circuit import Circuit, Op, Output, aggregate_mode, grows, keeps_output
from .errors import InternalError
from .logical import (AggCall, Aggregate, Distinct, Expr, Join, Node, OneRow, Project, Recursive, Scan, SetOp,
                      UnionAll, Window, col)
from .types import SqlType

COUNT_NAME = "__count"    # a retracting aggregate's hidden count of its group's rows (the group exists while > 0)
STATE_PREFIX = "__acc"    # and its Python aggregates' accumulators (pickled), after the visible columns


def kept_per_group(node: Aggregate) -> Aggregate:
    """``node`` with hidden calls after its own: COUNT(*) (which says whether the group exists) and the
    accumulator of each Python aggregate (a BLOB), so that its output's integral holds each group's state."""
    hidden = [AggCall("COUNT_STAR", (), False, None, SqlType("BIGINT").with_nullable(False))]
    hidden += [AggCall("UDAF_STATE", a.args, False, None, SqlType("BLOB"), a.params) for a in node.aggs
               if a.func == "UDAF"]
    names = [COUNT_NAME] + [f"{STATE_PREFIX}{i}" for i in range(len(hidden) - 1)]
    return Aggregate(node.input, node.keys, node.aggs + tuple(hidden), node.names + tuple(names))


class _Builder:
    def __init__(self, tables=None):
        self.tables = tables if tables is not None else {}
        self.circuit = Circuit()
        self.delta_ids: Dict[Node, int] = {}
        self.integral_ids: Dict[Node, int] = {}

    def add(self, **kw) -> int:
        op = Op(id=len(self.circuit.ops), **kw)
        self.circuit.ops.append(op)
        return op.id

    def delta(self, node: Node) -> int:
        if node in self.delta_ids:
            return self.delta_ids[node]
        if isinstance(node, OneRow):
            op = self.add(kind="constant", node=node)
        elif node.algebra == "source":
            assert isinstance(node, Scan)
            op = self.add(kind="input", node=node)
        elif node.algebra == "linear":
            ins = tuple(self.delta(c) for c in node.inputs)
            op = self.add(kind="union" if isinstance(node, UnionAll) else "map", node=node, inputs=ins)
        elif node.algebra == "bilinear":
            assert isinstance(node, Join)
            ins = (self.delta(node.left), self.delta(node.right))
            reads = (self.integral(node.left), self.integral(node.right))
            op = self.add(kind="join", node=node, inputs=ins, reads=reads)
        elif isinstance(node, Aggregate):
            ins = (self.delta(node.input),)
            mode = aggregate_mode(node, self.tables)
            if mode == "retract":
                return self.retracting(node, ins)
            reads = () if mode == "accumulate" else (self.integral(node.input),)
            op = self.add(kind="aggregate", node=node, inputs=ins, reads=reads, mode=mode)
        elif isinstance(node, SetOp):
            ins = (self.delta(node.left), self.delta(node.right))
            reads = (self.integral(node.left), self.integral(node.right))
            op = self.add(kind="setop", node=node, inputs=ins, reads=reads)
        elif isinstance(node, Window):
            ins = (self.delta(node.input),)
            op = self.add(kind="window", node=node, inputs=ins, reads=(self.integral(node.input),))
        elif isinstance(node, Distinct):
            ins = (self.delta(node.input),)
            if grows(node, self.tables):   # its own rows: a new row is one it has not emitted
                op = self.add(kind="distinct", node=node, inputs=ins, mode="grow")
                self.delta_ids[node] = op
                self.circuit.ops[op] = replace(self.circuit.ops[op], reads=(self.integral(node),))
                return op
            op = self.add(kind="distinct", node=node, inputs=ins, reads=(self.integral(node.input),))
        elif isinstance(node, Recursive):
            # its relations' changes and contents, then (below) the contents it emitted: the old fixed point
            ins = tuple(self.delta(r) for r in node.relations)
            op = self.add(kind="recursive", node=node, inputs=ins,
                          reads=tuple(self.integral(r) for r in node.relations))
            self.delta_ids[node] = op
            own = self.integral(node)
            self.circuit.ops[op] = replace(self.circuit.ops[op], reads=self.circuit.ops[op].reads + (own,))
            return op
        else:
            raise InternalError(f"no incremental rule for {type(node).__name__}")
        self.delta_ids[node] = op
        if self.circuit.ops[op].mode != "accumulate" and keeps_output(node):
            # it reads what it emitted (the integral of its own change, as of the previous step)
            own = self.integral(node)
            self.circuit.ops[op] = replace(self.circuit.ops[op], reads=self.circuit.ops[op].reads + (own,))
        return op

    def retracting(self, node: Aggregate, ins) -> int:
        """A retracting aggregate's op over :func:`kept_per_group`, reading its own change's integral, and the
        projection of its visible columns."""
        kept = kept_per_group(node)
        op = self.add(kind="aggregate", node=kept, inputs=ins, mode="retract")
        self.delta_ids[kept] = op
        self.circuit.ops[op] = replace(self.circuit.ops[op], reads=(self.integral(kept),))
        visible = Project(kept, tuple(Expr(col(i), f.type) for i, f in enumerate(node.fields)), node.names)
        self.delta_ids[node] = self.delta(visible)
        return self.delta_ids[node]

    def integral(self, node: Node) -> int:
        if node not in self.integral_ids:
            d = self.delta(node)
            self.integral_ids[node] = self.add(kind="integrate", node=node, inputs=(d,))
        return self.integral_ids[node]


def incrementalize(tables, views) -> Circuit:
    """Build the circuit for ``tables`` (all integrated) and ``views`` (name -> ViewDef): a view's contents are
    integrated when it is materialized or emits final rows (``WITH ('emit_final' = ...)``)."""
    b = _Builder(tables)
    for name, t in tables.items():
        scan = Scan(t.name, t.fields)
        b.circuit.tables[name] = (b.delta(scan), b.integral(scan))
    for name, v in views.items():
        d = b.delta(v.plan)
        # an emit-final view keeps its rows until the watermark closes them (planner.watermarks)
        integral = b.integral(v.plan) if v.materialized or getattr(v, "emit_final", None) else None
        b.circuit.outputs[name] = Output(name, d, integral, tuple(f.name for f in v.plan.fields))
    return b.circuit
