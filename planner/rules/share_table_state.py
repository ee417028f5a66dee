"""Rule ``share_table_state``: an integral of a filter or projection of a table, or of an inner join, is read
through the states it is made of instead of being stored as a copy.

An incremental join keeps the integral of each input.  An input is often ``Project(Filter(Scan t))``
(pushdown and pruning put filters and narrowing projections right above the table), and in a tree of joins
the output of one join is an input of the next.  Stored, those integrals repeat what other state already
holds (TPC-H, 22 views at SF 0.1: 3.6M of 5.5M state rows).  Maps and joins are linear in each input, so:

* the integral of a map over a table is the map applied to the table's integral: read the table's rows of
  the key and apply the map;
* the integral of an inner join is the join of its inputs' integrals (the ones the join op reads anyway):
  read the rows of the key from the input that holds the key, look the other input up by the join key
  with the rows found, join them, and apply the maps above.

Such an integral is marked ``mode="derived"``: it owns no state, ``reads`` names the integrals it is read
from, and both executors read it through those (:mod:`sqlengine.executor.derived`).  A lookup stays
proportional to the rows of the key (times the rows they join), not to the state.

It applies to an integral when:

* its node is a chain of ``Filter``/``Project`` down to a ``Scan`` (whose integral every table has), or a
  (possibly empty) chain down to an inner equi-join;
* no expression of the chain, and no key or condition of the join, can fail on a row (a failing row is
  recorded once, when its change passes; a read must not fail or record it again);
* every reader looks it up by plain columns that the chain passes through unchanged (over a join: all from
  the same input, and each input can in turn be looked up as needed), or reads all of it;
* it is not a view's contents (ad-hoc queries read those) and no table under it has event time (closed
  rows may be dropped from one state and not from another).

Integrals are decided in circuit order, so the inputs of a join are decided before the join's own integral.

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE t (a INT, b INT, c INT); CREATE TABLE u (a INT, d INT);"
...     "CREATE VIEW v AS SELECT t.b, u.d FROM t JOIN u ON t.a = u.a WHERE t.c > 0")
>>> [op.describe().split("]")[1].strip() for op in p.circuit.ops if op.mode == "derived"]
['integral of #5  (in=#5; reads=#1; mode=derived)']
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from ..circuit import Circuit, Op
from ..logical import Filter, Join, Node, Project, Unnest, Window, tables_under
from .exprs import cannot_fail, column_index, shift


def maps_below(circuit: Circuit, integral: Op) -> Tuple[List[Op], Op]:
    """The map ops from the integral's input down (top first), and the op below them (an UNNEST ends the chain:
    it is no filter or projection of the rows below)."""
    chain = []
    i = integral.inputs[0]
    while circuit.ops[i].kind == "map" and not isinstance(circuit.ops[i].node, Unnest):
        chain.append(circuit.ops[i])
        i = circuit.ops[i].inputs[0]
    return chain, circuit.ops[i]


def passes_through(chain: Sequence[Node], width: Optional[int] = None) -> Dict[int, int]:
    """Column i of the chain's output -> the column of the node below the chain it is, for the columns the
    chain only picks (``width``: the output's width when the chain is empty)."""
    mapping = {i: i for i in range(len(chain[0].fields) if chain else width)}
    for n in chain:   # top down: a Project maps its output columns to its input's
        if isinstance(n, Project):
            mapping = {i: j for i, j in ((i, column_index(n.exprs[src].sql)) for i, src in mapping.items())
                       if j is not None}
    return mapping


def safe_maps(chain: Sequence[Node]) -> bool:
    for n in chain:
        exprs = [n.predicate] if isinstance(n, Filter) else list(n.exprs)
        if not all(cannot_fail(e.sql) for e in exprs):
            return False
    return True


def _read_columns(reader: Op, integral: int, circuit: Circuit) -> Optional[List[int]]:
    """The columns of ``integral`` that ``reader`` looks its rows up by (``[]``: it reads all rows), or None
    when a key is not a plain column."""
    node = reader.node
    if reader.kind == "join":
        side = [k for k, r in enumerate(reader.reads) if r == integral]
        out: List[int] = []
        for s in side:
            keys = join_keys(node, s)
            if keys is None:
                return None
            out += keys
        return out
    if reader.kind in ("distinct", "setop"):
        return list(range(len(circuit.ops[integral].node.fields)))
    if reader.kind == "aggregate":
        return list(range(len(node.keys)))
    if reader.kind == "window":
        assert isinstance(node, Window)
        idx = [column_index(p.sql) for p in node.partition]
        return None if any(i is None for i in idx) else idx
    return None


def join_keys(node: Join, side: int) -> Optional[List[int]]:
    """The columns of one side's rows (0: left, 1: right) that a join's keys on that side are, or None when
    a key is an expression."""
    nl = len(node.left.fields)
    keys = node.left_keys if side == 0 else [shift(k, -nl) for k in node.right_keys]
    idx = [column_index(k.sql) for k in keys]
    return None if any(i is None for i in idx) else idx


class _Sharing:
    """The decisions so far: derived integral id -> (chain, the op below it: an input or an inner join)."""

    def __init__(self, circuit: Circuit):
        self.circuit = circuit
        self.derived: Dict[int, Tuple[List[Node], Op]] = {}

    def accepts(self, integral: int, cols: Sequence[int]) -> bool:
        """Can integral ``integral`` (as decided so far) be looked up by its columns ``cols`` ([]: read whole)?"""
        if integral not in self.derived:
            return True
        chain, bottom = self.derived[integral]
        through = passes_through(chain, len(self.circuit.ops[integral].node.fields))
        if any(c not in through for c in cols):
            return False
        if bottom.kind == "input" or not cols:
            return True
        # a join: the lookup columns must all be on one side; that side is looked up by them, and the other
        # side by its join keys, with the rows found
        node: Join = bottom.node
        nl = len(node.left.fields)
        mapped = [through[c] for c in cols]
        sides = {0 if j < nl else 1 for j in mapped}
        if len(sides) != 1:
            return False
        side = sides.pop()
        other = join_keys(node, 1 - side)
        return other is not None and \
            self.accepts(bottom.reads[side], [j - nl * side for j in mapped]) and \
            self.accepts(bottom.reads[1 - side], other)


def share_table_state(circuit: Circuit, event_tables=frozenset(), streams=frozenset()) -> Circuit:
    """The circuit with every eligible integral marked ``mode="derived"`` (see the module docstring);
    ``streams``: tables that keep no rows unless an op reads them whole (``planner.circuit.streamable``), whose
    narrowed copies are stored instead of read through them."""
    contents = {o.integral for o in circuit.outputs.values() if o.integral is not None}
    table_integrals = {i for _, i in circuit.tables.values()}
    readers: Dict[int, List[Op]] = {}
    for op in circuit.ops:
        for r in dict.fromkeys(op.reads):
            readers.setdefault(r, []).append(op)
    sharing = _Sharing(circuit)
    ops = list(circuit.ops)
    for op in circuit.ops:   # in id order: the integrals a join reads come before the integral of the join
        if op.kind != "integrate" or op.id in contents or op.id in table_integrals or op.id not in readers:
            continue
        chain_ops, bottom = maps_below(circuit, op)
        chain, below = [m.node for m in chain_ops], bottom.node
        if not safe_maps(chain) or tables_under(below) & set(event_tables):
            continue
        if bottom.kind == "input" and chain and below.table in streams:
            continue
        if bottom.kind == "input" and chain:
            reads = (circuit.tables[below.table][1],)
        elif isinstance(below, Join) and bottom.kind == "join" and below.kind == "inner" and below.left_keys \
                and all(cannot_fail(k.sql) for k in below.left_keys + below.right_keys) \
                and (below.residual is None or cannot_fail(below.residual.sql)):
            reads = bottom.reads
        else:
            continue
        sharing.derived[op.id] = (chain, bottom)
        lookups = [_read_columns(r, op.id, circuit) for r in readers[op.id]]
        if all(cols is not None and sharing.accepts(op.id, cols) for cols in lookups):
            ops[op.id] = dataclasses.replace(op, mode="derived", reads=reads)
        else:
            del sharing.derived[op.id]
    return Circuit(ops=ops, tables=dict(circuit.tables), outputs=dict(circuit.outputs))
