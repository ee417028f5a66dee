"""Rule ``share_table_state``: an integral of a filter or projection of a table is read through the table's
own state instead of being stored as a copy.

An incremental join keeps the integral of each input, and an input is often ``Project(Filter(Scan t))``:
pushdown and pruning put the filters and narrowing projections right above the table.  Stored, that integral
repeats rows the table's integral already holds (TPC-H at SF 0.1: 1.8M of 5.5M state rows).  Since the map
is linear, its integral equals the map applied to the table's integral, so the readers can look the table's
state up by the same key and apply the map to the rows found.  Such an integral is marked ``mode="derived"``:
it owns no state, reads the table's integral, and both executors read it through that
(``sqlengine.executor``).

It applies to an integral when:

* its node is a chain of ``Filter``/``Project`` down to a ``Scan`` (whose integral every table has);
* no expression of the chain can fail on a row (a failing row is recorded once, when its change passes; a
  read must not fail or record it again);
* every reader looks it up by plain columns that the chain passes through unchanged (then the table's key
  index answers the lookup), or reads all of it;
* it is not a view's contents (ad-hoc queries read those) and the table has no event time (closed rows may
  be dropped from the table's state and not from the copy's, or the other way round).

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE t (a INT, b INT, c INT); CREATE TABLE u (a INT, d INT);"
...     "CREATE VIEW v AS SELECT t.b, u.d FROM t JOIN u ON t.a = u.a WHERE t.c > 0")
>>> [op.describe().split("]")[1].strip() for op in p.circuit.ops if op.mode == "derived"]
['integral of #5  (in=#5; reads=#1; mode=derived)']
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional

from ..circuit import Circuit, Op
from ..logical import Filter, Node, Project, Scan, Window
from .exprs import cannot_fail, column_index, shift


def chain_of(node: Node) -> Optional[List[Node]]:
    """The ``Filter``/``Project`` nodes from ``node`` down to the ``Scan`` below them (top first), or None."""
    out = []
    while isinstance(node, (Filter, Project)):
        out.append(node)
        node = node.input
    return out if out and isinstance(node, Scan) else None


def passes_through(chain: List[Node]) -> Dict[int, int]:
    """Column i of the chain's output -> the table column it is, for the columns the chain only picks."""
    mapping = {i: i for i in range(len(chain[0].fields))}
    for n in chain:   # top down: a Project maps its output columns to its input's
        if isinstance(n, Project):
            mapping = {i: j for i, j in ((i, column_index(n.exprs[src].sql)) for i, src in mapping.items())
                       if j is not None}
    return mapping


def _safe(chain: List[Node]) -> bool:
    for n in chain:
        exprs = [n.predicate] if isinstance(n, Filter) else list(n.exprs)
        if not all(cannot_fail(e.sql) for e in exprs):
            return False
    return True


def _read_columns(reader: Op, integral: int, circuit: Circuit) -> Optional[List[Optional[int]]]:
    """The columns of ``integral`` that ``reader`` looks its rows up by (``[]``: it reads all rows), or None
    when a key is not a plain column."""
    node = reader.node
    if reader.kind == "join":
        side = [k for k, r in enumerate(reader.reads) if r == integral]
        nl = len(node.left.fields)
        out: List[Optional[int]] = []
        for s in side:
            keys = node.left_keys if s == 0 else node.right_keys
            for k in keys:
                i = column_index(k.sql if s == 0 else shift(k, -nl).sql)
                if i is None:
                    return None
                out.append(i)
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


def share_table_state(circuit: Circuit, tables: Mapping[str, object], event_tables=frozenset()) -> Circuit:
    """The circuit with every eligible integral marked ``mode="derived"`` (see the module docstring)."""
    contents = {o.integral for o in circuit.outputs.values() if o.integral is not None}
    table_integrals = {i for _, i in circuit.tables.values()}
    readers: Dict[int, List[Op]] = {}
    for op in circuit.ops:
        for r in dict.fromkeys(op.reads):
            readers.setdefault(r, []).append(op)
    ops = list(circuit.ops)
    for op in circuit.ops:
        if op.kind != "integrate" or op.id in contents or op.id in table_integrals or op.id not in readers:
            continue
        chain = chain_of(op.node)
        if chain is None or not _safe(chain):
            continue
        scan = chain[-1].input
        if scan.table in event_tables or scan.table not in tables:
            continue
        through = passes_through(chain)
        ok = True
        for reader in readers[op.id]:
            cols = _read_columns(reader, op.id, circuit)
            if cols is None or any(c not in through for c in cols):
                ok = False
                break
        if ok:
            ops[op.id] = dataclasses.replace(op, mode="derived", reads=(circuit.tables[scan.table][1],))
    return Circuit(ops=ops, tables=dict(circuit.tables), outputs=dict(circuit.outputs))
