"""Event time at compile time: which state is closed relative to the tables' watermarks.

A table with an event-time column (``ts TIMESTAMP LATENESS INTERVAL '4' SECOND`` or ``WATERMARK FOR ts AS
ts - INTERVAL '4' SECOND``, see :mod:`planner.event_time`) has a watermark ``W(table)``: the largest event
time it has received minus the lateness.  It only moves forward, and the runtime drops rows whose event time
is below it (inserts and deletes alike), so every future change of the table has ``ts >= W(table)``.

**Bounds.**  A :class:`Bound` ``(column, terms)`` on an operator says: every change the operator emits in a
future step has ``column >= min(W(table) + offset for (table, offset) in terms)`` (or ``column`` NULL: NULL
is never below a bound, so it is never closed).  A row or group whose column is below the bound can never
change again: it is *closed*.  Bounds flow through the circuit (:func:`node_bounds`):

* a table's event-time column: ``W(table)`` (offset 0);
* projections: a column copied keeps its bound; ``col + INTERVAL c`` / ``col - INTERVAL c`` shift the offset
  (``CAST(col AS TIMESTAMP)`` keeps it, ``date_trunc('hour', col)`` shifts it by -1h, for units up to weeks);
  the window bounds the binder writes for TUMBLE / HOP (``planner.bind_window``) get ``window_end >= ts``
  (offset 0) and ``window_start >= ts - size`` (offset ``-size``), because those expressions are read as
  ``TIMESTAMP_MICROS(UNIX_MICROS(ts) - (x % slide) - k*slide [+ size])`` with ``|x % slide| < slide``;
* filters and DISTINCT keep bounds; a union keeps the columns bounded in every input (terms merged);
* a join: a column whose equi-join equivalence class has a bounded member on each side (terms merged: a
  change of either side carries a key at least that side's bound, and the key is equal on both sides);
  other columns are not bounded (a future row of one side can join an old row of the other);
* GROUP BY key columns keep the bound of their key expression; aggregate results are not bounded;
  window calls keep the bounds of their PARTITION BY columns; INTERSECT / EXCEPT those bounded on both sides.

Terms are kept merged: one term per table (the smallest offset), sorted by table name.

**What may be dropped** (:func:`closing_bounds`, ``Program.gc``): rows of a state op whose column is below a
bound, when no reader will ever read them again:

* an accumulating aggregate's own groups, by a bounded GROUP BY key;
* an integral (the node's rows below its own bound never change), when every op reading it reads only rows
  of keys that a future change touches: a recomputing aggregate grouped by the column, a join equi-joining
  on it with the other side's key bounded too (the bound is then the smaller of the two), DISTINCT, a
  window partitioned by it, an INTERSECT / EXCEPT with the column bounded on both sides;
* an integral read by an inner *interval join*: a conjunct of the join's residual condition that is
  ``x >= y + c`` (or ``>``, ``<=``, ``<`` with the sides swapped, or one half of ``x BETWEEN lo AND hi``)
  with ``x`` a plain column of this side, ``y`` a plain column of the other side, each optionally plus or
  minus a constant INTERVAL of fixed length (``c`` their difference), lets rows with ``x < bound(y) + c``
  go: a future row of the other side has ``y >= bound(y)``, so it can only match rows with
  ``x >= bound(y) + c`` (strict comparisons are read as non-strict: weaker, still true).  With the
  integral's own bound on ``x`` the rows below both can neither change nor match again.  Only inner joins:
  an outer, semi or anti join recomputes whether its kept rows have a match, from both integrals, so a
  row dropped on one side would change that answer for rows still stored on the other.  ``OR``, ``NOT``,
  ``BETWEEN SYMMETRIC``, non-constant offsets and expressions other than a column give nothing;
* never the integral of a materialized view (unless ``WITH ('closed_windows' = 'drop')``), nor a table's
  integral unless the table has an event-time
  column and is not ``WITH ('materialized' = 'true')``;
* the integral of an emit-final view (``WITH ('emit_final' = 'col')``) by that column (``Program.final``),
  unless the view is materialized.

>>> from planner import compile_program
>>> p = compile_program("CREATE TABLE bid (auction BIGINT, date_time TIMESTAMP LATENESS INTERVAL '4' SECOND);"
...     "CREATE VIEW v WITH ('emit_final' = 'window_end') AS SELECT auction, window_start, window_end, COUNT(*) AS n "
...     "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY auction, window_start, window_end")
>>> p.final["v"]
Bound(column=2, terms=(('bid', 0),))
>>> for i, b in sorted(p.gc.items()):
...     print(p.circuit.ops[i].describe().split("  (")[0], "|", b.describe("<"))
#1 integrate [state] integral of #0 | c1 < min(W(bid))
#4 aggregate [stateful] Aggregate keys=[c0, c1, c2] aggs=[COUNT(*)] | c1 < min(W(bid) - 10s)
#6 integrate [state] integral of #5 | c2 < min(W(bid))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from sqlglot import exp

from .circuit import Circuit, Op
from .errors import InternalError
from .event_time import interval_micros, unit_micros
from .logical import Aggregate, Distinct, Filter, Join, Node, Project, Scan, SetOp, UnionAll, Window
from .rules.exprs import column_index, conjuncts, positional, tree

Terms = Tuple[Tuple[str, int], ...]


@dataclass(frozen=True)
class Bound:
    """Every change the op emits in a future step has ``column >= min(W(table) + offset_us)`` over ``terms``
    (``column``: an output column index of the op, ``c<column>`` on the data plane).  For ``Program.gc``:
    the op's state rows whose ``column`` is below it may be deleted."""

    column: int
    terms: Terms   # ((table, offset in microseconds), ...)

    def describe(self, op: str = ">=") -> str:
        return f"c{self.column} {op} {format_terms(self.terms)}"


def format_offset(us: int) -> str:
    """``-10s``, ``+1h``, ``-1500ms`` ('' for 0)."""
    if us == 0:
        return ""
    mag = abs(us)
    for unit, n in (("d", 86400 * 10 ** 6), ("h", 3600 * 10 ** 6), ("min", 60 * 10 ** 6), ("s", 10 ** 6),
                    ("ms", 1000), ("us", 1)):
        if mag % n == 0:
            return f"{'-' if us < 0 else '+'}{mag // n}{unit}"
    raise AssertionError(us)   # pragma: no cover


def format_terms(terms: Terms) -> str:
    """``min(W(bid) - 10s, W(person))``."""
    parts = []
    for table, off in terms:
        o = format_offset(off)
        parts.append(f"W({table})" + (f" {o[0]} {o[1:]}" if o else ""))
    return f"min({', '.join(parts)})"


def merge(*terms: Terms) -> Terms:
    """The terms of the minimum of several bounds: one term per table (its smallest offset), by table name."""
    best: Dict[str, int] = {}
    for ts in terms:
        for table, off in ts:
            best[table] = min(off, best.get(table, off))
    return tuple(sorted(best.items()))


def shift(terms: Terms, by: int) -> Terms:
    return tuple((t, o + by) for t, o in terms)


def event_columns(tables: Mapping) -> Dict[str, int]:
    """table name -> index of its event-time column, for the tables that have one."""
    out = {}
    for name, t in tables.items():
        lat = getattr(t, "lateness", None)
        if lat is not None:
            out[name] = [f.name for f in t.fields].index(lat[0])
    return out


# ------------------------------------------------------------------------------------ scalar expressions
# An expression's lower bound is (domain, terms): "ts" for TIMESTAMP values, "us" for integer microseconds
# (UNIX_MICROS(ts), as the binder writes TUMBLE / HOP); constants shift a bound only within their domain.
_UNIX_MICROS = tuple(c for c in (getattr(exp, "UnixMicros", None),) if c is not None)
_TRUNC = tuple(c for c in (getattr(exp, "TimestampTrunc", None), getattr(exp, "DateTrunc", None)) if c is not None)
_TIMESTAMP_TYPES = tuple(t for t in (getattr(exp.DataType.Type, n, None) for n in ("TIMESTAMP", "TIMESTAMPNTZ"))
                         if t is not None)


def _strip(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _constant(e: exp.Expression, domain: str) -> Optional[int]:
    """The value of a constant in ``domain`` (an INTERVAL of fixed length for ``ts``, an integer for ``us``)."""
    e = _strip(e)
    if domain == "ts":
        return interval_micros(e) if isinstance(e, exp.Interval) else None
    if isinstance(e, exp.Literal) and not e.is_string and e.this.lstrip("-").isdigit():
        return int(e.this)
    if isinstance(e, exp.Neg):
        v = _constant(e.this, domain)
        return None if v is None else -v
    return None


def _upper(e: exp.Expression) -> Optional[int]:
    """An upper bound of an integer expression: a constant, or ``x % s`` (``|x % s| < s``) for a positive
    literal ``s``."""
    e = _strip(e)
    if isinstance(e, exp.Mod):
        s = _constant(e.expression, "us")
        return s if s is not None and s > 0 else None
    return _constant(e, "us")


def _lower(e: exp.Expression, inputs: Mapping[int, Terms]) -> Optional[Tuple[str, Terms]]:
    e = _strip(e)
    i = positional(e)
    if i is not None:
        return ("ts", inputs[i]) if i in inputs else None
    if _UNIX_MICROS and isinstance(e, _UNIX_MICROS):
        inner = _lower(e.this, inputs)
        return ("us", inner[1]) if inner is not None and inner[0] == "ts" else None
    if isinstance(e, exp.Anonymous) and e.name.upper() == "TIMESTAMP_MICROS" and len(e.expressions) == 1:
        inner = _lower(e.expressions[0], inputs)
        return ("ts", inner[1]) if inner is not None and inner[0] == "us" else None
    if isinstance(e, exp.Cast) and e.to.this in _TIMESTAMP_TYPES:
        inner = _lower(e.this, inputs)
        return inner if inner is not None and inner[0] == "ts" else None
    if isinstance(e, _TRUNC) and isinstance(e.args.get("unit"), (exp.Var, exp.Literal)):
        # date_trunc(unit, ts) > ts - unit, for units of fixed length (a week starts within 7 days)
        unit = e.args["unit"].name.lower()
        per = 7 * 86400 * 10 ** 6 if unit.rstrip("s") == "week" else unit_micros(unit)
        inner = _lower(e.this, inputs)
        return ("ts", shift(inner[1], -per)) if per is not None and inner is not None and inner[0] == "ts" else None
    if isinstance(e, exp.Add):
        for a, b in ((e.this, e.expression), (e.expression, e.this)):
            left = _lower(a, inputs)
            if left is not None:
                c = _constant(b, left[0])
                if c is not None:
                    return left[0], shift(left[1], c)
        return None
    if isinstance(e, exp.Sub):
        left = _lower(e.this, inputs)
        if left is None:
            return None
        c = _constant(e.expression, left[0]) if left[0] == "ts" else _upper(e.expression)
        return (left[0], shift(left[1], -c)) if c is not None else None
    return None


def expr_bound(sql: str, inputs: Mapping[int, Terms]) -> Optional[Terms]:
    """The bound of a TIMESTAMP expression over columns bounded by ``inputs`` (None: unbounded).

    >>> expr_bound("c1 - INTERVAL '4' SECOND", {1: (("bid", 0),)})
    (('bid', -4000000),)
    >>> expr_bound("TIMESTAMP_MICROS((UNIX_MICROS(c2) - (((UNIX_MICROS(c2) - 0) % 10) + 10) % 10) - 0 + 10)",
    ...            {2: (("bid", 0),)})
    (('bid', 0),)
    >>> expr_bound("c1 + c2", {1: (("bid", 0),), 2: (("bid", 0),)}) is None
    True
    """
    i = column_index(sql)
    if i is not None:
        return inputs.get(i)
    if not inputs:
        return None
    try:
        out = _lower(tree(sql), inputs)
    except Exception:   # noqa: BLE001 - an expression we cannot read has no bound
        return None
    return out[1] if out is not None and out[0] == "ts" else None


# ------------------------------------------------------------------------------------ plans
def _keys(exprs: Sequence) -> List[Optional[int]]:
    return [column_index(k.sql) for k in exprs]


def _shifted_column(e: exp.Expression) -> Optional[Tuple[int, int]]:
    """(i, c) when ``e`` is ``c<i>``, ``c<i> + INTERVAL``, ``INTERVAL + c<i>`` or ``c<i> - INTERVAL`` with an
    INTERVAL of fixed length (``c`` in microseconds, signed)."""
    e = _strip(e)
    i = positional(e)
    if i is not None:
        return i, 0
    if isinstance(e, exp.Add):
        for a, b in ((e.this, e.expression), (e.expression, e.this)):
            i = positional(_strip(a))
            c = _constant(b, "ts") if i is not None else None
            if c is not None:
                return i, c
        return None
    if isinstance(e, exp.Sub):
        i = positional(_strip(e.this))
        c = _constant(e.expression, "ts") if i is not None else None
        if c is not None:
            return i, -c
    return None


def _at_least(sql: str) -> List[Tuple[int, int, int]]:
    """``(x, y, c)`` for each ``x >= y + c`` (columns ``c<x>``, ``c<y>``, ``c`` microseconds) that the predicate
    ``sql`` implies by one of its forms: ``>=``, ``>``, ``<=``, ``<`` or ``BETWEEN`` (two), each side a column
    optionally plus or minus a constant INTERVAL (strict comparisons read as non-strict)."""
    try:
        t = _strip(tree(sql))
    except Exception:   # noqa: BLE001 - a predicate we cannot read implies nothing
        return []
    pairs: List[Tuple[exp.Expression, exp.Expression]] = []   # (small, big): small <= big when TRUE
    if isinstance(t, exp.Between):
        if not t.args.get("symmetric"):
            pairs = [(t.args["low"], t.this), (t.this, t.args["high"])]
    elif isinstance(t, (exp.GTE, exp.GT)):
        pairs = [(t.expression, t.this)]
    elif isinstance(t, (exp.LTE, exp.LT)):
        pairs = [(t.this, t.expression)]
    out = []
    for small, big in pairs:
        lo, hi = _shifted_column(small), _shifted_column(big)
        if lo is not None and hi is not None and lo[0] != hi[0]:
            # hi + ch >= lo + cl  <=>  hi >= lo + (cl - ch)
            out.append((hi[0], lo[0], lo[1] - hi[1]))
    return out


def interval_conditions(node: Join) -> List[Tuple[int, int, int]]:
    """``(x, y, c)`` (joined-row columns, microseconds): a pair of rows joins only if ``x >= y + c``, read off
    the conjuncts of the join's residual condition; ``x`` and ``y`` on different sides of the join.

    >>> from planner.logical import Expr, Field, Scan
    >>> from planner.types import BOOLEAN, SqlType
    >>> s = Scan("t", (Field("ts", SqlType("TIMESTAMP")),))
    >>> interval_conditions(Join(s, s, (), (), Expr("c1 BETWEEN c0 - INTERVAL '10' SECOND AND c0", BOOLEAN)))
    [(1, 0, -10000000), (0, 1, 0)]
    >>> interval_conditions(Join(s, s, (), (), Expr("c0 >= c1 OR c1 >= c0", BOOLEAN)))
    []
    """
    width = len(node.left.fields)
    out = []
    for term in conjuncts(node.residual):
        for x, y, c in _at_least(term.sql):
            if (x < width) != (y < width):
                out.append((x, y, c))
    return out


def _join_classes(node: Join) -> List[List[int]]:
    """Equivalence classes (joined-row indexes) of the join's equi-keys that are plain columns."""
    parent: Dict[int, int] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in zip(_keys(node.left_keys), _keys(node.right_keys)):
        if a is not None and b is not None:
            parent[find(a)] = find(b)
    classes: Dict[int, List[int]] = {}
    for x in list(parent):
        classes.setdefault(find(x), []).append(x)
    return [sorted(c) for c in classes.values()]


def _node_bounds(node: Node, events: Mapping[str, int], memo: Dict[int, Dict[int, Terms]]) -> Dict[int, Terms]:
    if id(node) in memo:
        return memo[id(node)]
    ins = [_node_bounds(c, events, memo) for c in node.inputs]
    out: Dict[int, Terms] = {}
    if isinstance(node, Scan):
        if node.table in events:
            out[events[node.table]] = ((node.table, 0),)
    elif isinstance(node, (Filter, Distinct)):
        out = dict(ins[0])
    elif isinstance(node, Project):
        for j, e in enumerate(node.exprs):
            b = expr_bound(e.sql, ins[0])
            if b is not None:
                out[j] = b
    elif isinstance(node, UnionAll):
        out = {c: merge(*(b[c] for b in ins)) for c in ins[0] if all(c in b for b in ins)}
    elif isinstance(node, Join):
        width = len(node.left.fields)
        for cls in _join_classes(node):
            left = [ins[0][c] for c in cls if c < width and c in ins[0]]
            right = [ins[1][c - width] for c in cls if c >= width and c - width in ins[1]]
            if left and right:
                terms = merge(*left, *right)
                for c in cls:
                    out[c] = terms
    elif isinstance(node, Aggregate):
        for j, k in enumerate(node.keys):
            b = expr_bound(k.sql, ins[0])
            if b is not None:
                out[j] = b
    elif isinstance(node, Window):
        for p in _keys(node.partition):
            if p is not None and p in ins[0]:
                out[p] = ins[0][p]
    elif isinstance(node, SetOp):
        out = {c: merge(ins[0][c], ins[1][c]) for c in ins[0] if c in ins[1]}
    fields = node.fields
    out = {c: t for c, t in sorted(out.items()) if c < len(fields) and fields[c].type.base == "TIMESTAMP"}
    memo[id(node)] = out
    return out


def node_bounds(node: Node, events: Mapping[str, int], memo: Optional[Dict[int, Dict[int, Terms]]] = None
                ) -> Dict[int, Terms]:
    """Output column -> terms of the columns of ``node`` bounded by the watermarks of ``events`` (table ->
    event-time column index).  ``memo``: shared between calls on subplans of the same plans."""
    if not events:
        return {}
    return _node_bounds(node, events, {} if memo is None else memo)


def op_bounds(circuit: Circuit, events: Mapping[str, int]) -> Dict[int, Dict[int, Terms]]:
    """op id -> its bounded output columns (an integrate op: those of the node it sums)."""
    memo: Dict[int, Dict[int, Terms]] = {}
    return {op.id: node_bounds(op.node, events, memo) for op in circuit.ops}


# ------------------------------------------------------------------------------------ closed state
def _restrict(cands: Dict[int, Terms], allowed: Mapping[int, Terms]) -> Dict[int, Terms]:
    return {c: merge(t, allowed[c]) for c, t in cands.items() if c in allowed}


def _reader_allows(reader: Op, integral: int, bounds: Mapping[int, Dict[int, Terms]]) -> Dict[int, Terms]:
    """Columns of ``integral``'s rows by which ``reader`` reads them only for keys a future change touches,
    each with the bound of those changes' keys (merged with the integral's own bound by the caller)."""
    node = reader.node
    if reader.kind == "aggregate" and reader.mode in ("recompute", "retract"):   # (retract: its own output, by key)
        assert isinstance(node, Aggregate)
        return {k: () for k in _keys(node.keys) if k is not None}
    if reader.kind == "distinct":
        return {c: () for c in range(len(node.fields))}
    if reader.kind == "window":
        assert isinstance(node, Window)
        return {p: () for p in _keys(node.partition) if p is not None}
    if reader.kind in ("join", "setop"):
        allowed: Optional[Dict[int, Terms]] = None
        for role, r in enumerate(reader.reads):
            if r != integral:
                continue
            other = bounds[reader.inputs[1 - role]]
            mine: Dict[int, Terms] = {}
            if reader.kind == "setop":
                mine = dict(other)
            else:
                assert isinstance(node, Join)
                width = len(node.left.fields)
                for a, b in zip(_keys(node.left_keys), _keys(node.right_keys)):
                    if a is None or b is None:
                        continue
                    own, theirs = (a, b - width) if role == 0 else (b - width, a)
                    if theirs in other:
                        mine[own] = merge(mine.get(own, ()), other[theirs])
                if node.kind == "inner":
                    for x, y, c in interval_conditions(node):
                        if (x < width) != (role == 0) or (y < width) == (role == 0):
                            continue   # x must be a column of this side, y one of the other side
                        own, theirs = (x, y - width) if role == 0 else (x - width, y)
                        if theirs in other:
                            mine[own] = merge(mine.get(own, ()), shift(other[theirs], c))
            allowed = mine if allowed is None else _restrict(allowed, mine)
        return allowed or {}
    return {}


def _pick(cands: Mapping[int, Terms]) -> Optional[Bound]:
    cands = {c: t for c, t in cands.items() if t}
    if not cands:
        return None
    c = min(cands)
    return Bound(c, cands[c])


def closing_bounds(circuit: Circuit, tables: Mapping, views: Mapping) -> Tuple[Dict[int, Bound], Dict[str, Bound]]:
    """(``gc``: state op id -> the bound below which its rows may be deleted, ``final``: emit-final view ->
    the bound of its ``emit_final`` column) for the program's tables and views."""
    events = event_columns(tables)
    if not events:
        return {}, {}
    bounds = op_bounds(circuit, events)
    final: Dict[str, Bound] = {}
    for name, v in views.items():
        column = getattr(v, "emit_final", None)
        if column is None:
            continue
        out = circuit.outputs[name]
        idx = list(out.names).index(column)
        terms = bounds[out.delta].get(idx)
        if terms is None or out.integral is None:
            raise InternalError(f"emit-final view {name}: column {column} has no bound or the view no integral")
        final[name] = Bound(idx, terms)
    readers: Dict[int, List[Op]] = {}
    for op in circuit.ops:
        for r in dict.fromkeys(op.reads):
            readers.setdefault(r, []).append(op)
    table_of = {integral: name for name, (_, integral) in circuit.tables.items()}
    outputs_of: Dict[int, List[str]] = {}
    for name, out in circuit.outputs.items():
        if out.integral is not None:
            outputs_of.setdefault(out.integral, []).append(name)
    gc: Dict[int, Bound] = {}
    for op in circuit.ops:
        if op.kind == "aggregate" and op.mode == "accumulate":
            assert isinstance(op.node, Aggregate)
            cands = {c: t for c, t in bounds[op.id].items() if c < len(op.node.keys)}
        elif op.kind == "integrate":
            cands = dict(bounds[op.id])
            if op.id in table_of:
                t = tables[table_of[op.id]]
                if t.lateness is None or getattr(t, "materialized", False):
                    continue
            keep = False
            for name in outputs_of.get(op.id, ()):
                v = views[name]
                if v.materialized and dict(v.options).get("closed_windows", "keep") == "keep":
                    keep = True   # queried ad hoc: its closed windows stay (unless 'closed_windows' = 'drop')
                elif name in final:   # its rows go once emitted: by the emit_final column only
                    cands = _restrict(cands, {final[name].column: final[name].terms})
            if keep:
                continue
            for reader in readers.get(op.id, ()):
                cands = _restrict(cands, _reader_allows(reader, op.id, bounds))
        else:
            continue
        b = _pick(cands)
        if b is not None:
            gc[op.id] = b
    return gc, final


def describe_bounds(circuit: Circuit, op_ids: Iterable[int], events: Mapping[str, int], gc: Mapping[int, Bound],
                    final: Mapping[str, Bound]) -> List[str]:
    """``explain`` lines: the bounds of the ops ``op_ids``, which of them may drop state, and the emit-final
    bound ('' without event time)."""
    if not events:
        return []
    bounds = op_bounds(circuit, events)
    ids = list(op_ids)
    lines = [f"  #{i} {Bound(c, t).describe()}" for i in ids for c, t in bounds[i].items()]
    out = ["watermark bounds:"] + (lines or ["  (none)"])
    dropped = [f"  #{i} drop rows with {gc[i].describe('<')}" for i in ids if i in gc]
    if dropped:
        out += ["gc:"] + dropped
    for name, b in final.items():
        column = circuit.outputs[name].names[b.column]
        out.append(f"emit final: {column} (c{b.column}) >= {format_terms(b.terms)}")
    return out


__all__ = ["Bound", "Terms", "closing_bounds", "describe_bounds", "event_columns", "expr_bound", "format_terms",
           "interval_conditions", "merge", "node_bounds", "op_bounds"]
