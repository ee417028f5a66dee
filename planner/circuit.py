"""The incremental circuit: Z-set operators over change streams.

Each :class:`Op` computes, once per step, the change (a Z-set delta) of one
logical node, from the changes of its inputs and from state.  ``integrate``
ops hold state: the running sum of a node's changes, i.e. the node's current
contents.  Joins read the integrals of both inputs, aggregates either keep
their own accumulators or read the integral of their input, and DISTINCT reads
the integral of its input.  Every op reads state *as of the previous step*;
all state updates of a step commit together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .logical import (Aggregate, Distinct, Filter, Join, Node, OneRow, Project, Scan, UnionAll, Unnest, Window,
                      tables_under)
from .aggregate_functions import retracts

# aggregate functions that can be maintained by adding and subtracting sums
INVERTIBLE = {"COUNT_STAR", "COUNT", "SUM", "AVG"}
# and those kept as a running MIN / MAX where the input only ever gains rows (insert_only)
MONOTONE = {"MIN", "MAX"}
FLOATS = ("REAL", "DOUBLE")
UNORDERED = FLOATS + ("ARRAY", "MAP", "STRUCT", "JSON", "UNKNOWN")   # no running MIN / MAX over these


@dataclass(frozen=True)
class Op:
    """One circuit operator.

    kind:      input | constant | map | union | join | aggregate | distinct | setop | window | integrate
    node:      the logical node whose change this op computes (for integrate: the node it sums)
    inputs:    ids of the ops whose changes it consumes
    reads:     ids of integrate ops whose state (as of the previous step) it reads
    mode:      aggregates: ``accumulate`` (own additive state), ``retract`` (Python accumulators kept in the
               integral of its own change) or ``recompute`` (touched groups); DISTINCT: ``grow`` (over rows
               only inserted: reads the integral of its own change, see :func:`grows`);
               integrals: ``derived`` (no state of its own: read through the integrals in ``reads``, a
               table's or a join's inputs', see :mod:`planner.rules.share_table_state`), ``stream`` (an
               append-only table's that nothing reads: no state at all, see :func:`stream_tables`), else ``""``
    """

    id: int
    kind: str
    node: Node
    inputs: Tuple[int, ...] = ()
    reads: Tuple[int, ...] = ()
    mode: str = ""

    @property
    def algebra(self) -> str:
        if self.kind == "integrate":
            return "state"
        return self.node.algebra

    @property
    def owns_state(self) -> bool:
        return (self.kind == "integrate" and self.mode not in ("derived", "stream")) or \
            (self.kind == "aggregate" and self.mode == "accumulate")

    def describe(self) -> str:
        extra = []
        if self.inputs:
            extra.append("in=" + ",".join(f"#{i}" for i in self.inputs))
        if self.reads:
            extra.append("reads=" + ",".join(f"#{i}" for i in self.reads))
        if self.mode:
            extra.append(f"mode={self.mode}")
        what = "integral of #" + str(self.inputs[0]) if self.kind == "integrate" else self.node.describe()
        return f"#{self.id} {self.kind:<9} [{self.algebra}] {what}  ({'; '.join(extra)})"


@dataclass(frozen=True)
class Output:
    """A view's change stream and, if materialized or emit-final, the integrate op that holds its contents."""

    name: str
    delta: int
    integral: Optional[int]
    names: Tuple[str, ...]


@dataclass
class Circuit:
    ops: List[Op] = field(default_factory=list)
    tables: Dict[str, Tuple[int, int]] = field(default_factory=dict)   # name -> (input op, integrate op)
    outputs: Dict[str, Output] = field(default_factory=dict)

    def upstream(self, op_id: int) -> List[Op]:
        """The ops ``op_id`` depends on (itself included), in id order."""
        seen = set()
        stack = [op_id]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            stack.extend(self.ops[i].inputs)
            stack.extend(self.ops[i].reads)
        return [self.ops[i] for i in sorted(seen)]

    def stream(self, table: str) -> bool:
        """Is ``table`` a stream that keeps no rows (an append-only table nothing reads, see :func:`stream_tables`)?"""
        return self.ops[self.tables[table][1]].mode == "stream"


def aggregate_mode(node: Aggregate, tables=None) -> str:
    """``accumulate`` when every aggregate is invertible (or, over an input that only gains rows, a MIN or MAX:
    :func:`insert_only` over ``tables``), ``retract`` when each is a Python aggregate with ``retract`` or a COUNT
    (each group's accumulators are kept beside its output, see ``planner.incrementalize``), else ``recompute``.
    A SUM or AVG over floats is not invertible: a running float sum depends on the order of the steps'
    additions (1e20 + 1 - 1e20 is 0), so the group's value would be a function of its history, not of its rows.
    A running MIN / MAX is not kept over floats either (NaN, and ``-0.0`` beside ``0.0``), nor over nested
    values."""
    if any(retracts(a) for a in node.aggs) and \
            all(retracts(a) or (a.func in ("COUNT", "COUNT_STAR") and not a.distinct) for a in node.aggs):
        return "retract"
    if all(_summed(a) for a in node.aggs):
        return "accumulate"
    if all(_summed(a) or running_extreme(a) for a in node.aggs) and tables is not None \
            and insert_only(node.input, tables):
        return "accumulate"
    return "recompute"


def _summed(a) -> bool:
    """Is call ``a`` kept as a running sum (COUNT, SUM, AVG of exact types)?"""
    return a.func in INVERTIBLE and not a.distinct and not _float_argument(a)


def running_extreme(a) -> bool:
    """Can call ``a`` be kept as a running least or greatest value, where its input only gains rows (a MIN or
    MAX, not over floats or nested values)?"""
    return a.func in MONOTONE and not a.distinct and a.args[0].type.base not in UNORDERED


def event_time_under(node: Node, tables) -> bool:
    """Does ``node`` read a table with event time (LATENESS), whose closed rows the watermark trims?"""
    return any(getattr(tables.get(t), "lateness", None) is not None for t in tables_under(node))


def grows(node: Distinct, tables) -> bool:
    """Does DISTINCT ``node`` keep only the rows it emitted (``mode="grow"``), not its input's rows with their
    multiplicities?  Where its input is :func:`insert_only`, a row is new when it was never emitted and nothing
    is ever retracted, so its state is its distinct rows however often they repeat (Nexmark q15's bidders of a
    day).  Not over float or MAP columns (``-0.0`` and ``0.0``; a MAP compared by its entries), nor under event
    time (the state the watermark trims is the input's).

    >>> from planner import compile_program
    >>> p = compile_program("CREATE TABLE t (k INT, s VARCHAR) WITH ('append_only' = 'true'); CREATE TABLE u (k INT);"
    ...     "CREATE VIEW a AS SELECT DISTINCT k, s FROM t; CREATE VIEW b AS SELECT DISTINCT k FROM u;")
    >>> [(op.mode, op.reads == (op.id + 1,)) for op in p.circuit.ops if op.kind == "distinct"]
    [('grow', True), ('', False)]
    """
    if any(f.type.base in FLOATS + ("MAP",) for f in node.fields) or not insert_only(node.input, tables):
        return False
    return not event_time_under(node, tables)


def insert_only(node: Node, tables) -> bool:
    """Does ``node``'s change never hold a deleted row?  The rows of append-only tables (``'append_only' =
    'true'``: deletes are rejected at the input), through filters, projections, UNNEST, UNION ALL, inner joins
    and DISTINCT (a row enters once and never leaves when nothing leaves its input).

    >>> from planner import compile_program
    >>> p = compile_program("CREATE TABLE t (k INT, x INT) WITH ('append_only' = 'true'); CREATE TABLE u (k INT);"
    ...     "CREATE VIEW a AS SELECT k, MAX(x) AS m FROM t GROUP BY k;"
    ...     "CREATE VIEW b AS SELECT t.k, MAX(x) AS m FROM t JOIN u ON t.k = u.k GROUP BY t.k;")
    >>> [op.mode for op in p.circuit.ops if op.kind == "aggregate"]
    ['accumulate', 'recompute']
    """
    if isinstance(node, Scan):
        return bool(getattr(tables.get(node.table), "append_only", False))
    if isinstance(node, OneRow):
        return True
    if isinstance(node, (Filter, Project, Unnest, UnionAll, Distinct)):
        return all(insert_only(c, tables) for c in node.inputs)
    if isinstance(node, Join) and node.kind == "inner":
        return insert_only(node.left, tables) and insert_only(node.right, tables)
    return False


def _float_argument(a) -> bool:
    return a.func in ("SUM", "AVG") and bool(a.args) and a.args[0].type.base in FLOATS


def keeps_output(node: Node) -> bool:
    """Does the op of ``node`` (a recomputing aggregate, or a window) keep what it emitted, and retract that?

    Its change for a touched group is new rows minus old rows.  Where an output is a float computed by
    arithmetic (STDDEV, AVG, a SUM of floats, a window AVG), recomputing the old rows may give other bits than
    the ones emitted (another order of additions, or the other executor), and a retraction that differs in the
    last bit never cancels: the view keeps a stale row.  A float that is picked (MIN/MAX, LAG/LEAD, ARG_MIN)
    or a row of float values that a window orders may be -0.0 in one computation and 0.0 in the next (the two
    are equal in SQL, so which comes first depends on the order of the rows, and a Z-set keeps the sign of a
    zero).  Such an op reads the integral of its own output and retracts exactly the rows stored there.  Other
    outputs (counts, exact sums, MIN/MAX of exact types, ranks over exact types) recompute to the same value
    from the same rows, and need no such state.  A Python aggregate that raises for a group leaves the group
    out (a row error): its old rows are then retracted as stored, since recomputing them may raise too."""
    if isinstance(node, Aggregate):   # (and a Python aggregate: its value for a group may fail to compute)
        return any(a.type.base in FLOATS or a.func == "UDAF" for a in node.aggs)
    if isinstance(node, Window):
        return any(f.type.base in FLOATS for f in node.fields)
    return False


def streamable(table) -> bool:
    """Is ``table`` (a ``TableDef``) one that keeps no rows unless an op reads its own integral: append-only,
    not ``'materialized' = 'true'``, no event time (see :func:`stream_tables`)?  The rules do not make a copy
    of such a table's rows state that other ops read (``planner.rules.prune_columns`` narrows it below a join,
    ``share_table_state`` does not read the narrowed state through it)."""
    return bool(getattr(table, "append_only", False)) and not getattr(table, "materialized", False) and \
        getattr(table, "lateness", None) is None


def stream_tables(circuit: Circuit, tables) -> Circuit:
    """``circuit`` with the integral of every append-only table (``'append_only' = 'true'``, not
    ``'materialized' = 'true'``, no event time) that no op reads marked ``mode="stream"``: such a table is a stream,
    as in Flink or Feldera, and keeps no state (it takes no deletes to clamp, and its views compute from its
    changes alone).  A table an ad-hoc query or a later view reads must be declared ``'materialized' = 'true'``.

    >>> from planner import compile_program
    >>> sql = "CREATE TABLE t (k INT) WITH ('append_only' = 'true'); CREATE VIEW v AS SELECT k + 1 AS j FROM t;"
    >>> c = compile_program(sql).circuit
    >>> c.ops[c.tables["t"][1]].mode, c.ops[c.tables["t"][1]].owns_state
    ('stream', False)
    >>> c = compile_program(sql + "CREATE VIEW n AS SELECT a.k FROM t a JOIN t b ON a.k = b.k;").circuit
    >>> c.ops[c.tables["t"][1]].mode   # read (by the join, whole rows)
    ''
    """
    import dataclasses
    read = {r for op in circuit.ops for r in op.reads}
    ops = list(circuit.ops)
    for name, (_, integral) in circuit.tables.items():
        if streamable(tables[name]) and integral not in read:
            ops[integral] = dataclasses.replace(ops[integral], mode="stream")
    return dataclasses.replace(circuit, ops=ops)
