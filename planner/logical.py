"""Logical plan: immutable relational nodes.

Every node is a frozen dataclass whose children sit in tuples, so equal
subplans compare (and hash) equal; the circuit builder relies on that to share
work between views.  Scalar expressions are :class:`Expr`: SQL text in
sqlglot's generic dialect whose column references are positional names
``c0, c1, ...`` into the node's input row (for a join: the left row followed
by the right row).

Each node class declares ``algebra``, which incrementalization reads:

* ``source``   - a table's change stream;
* ``constant`` - a fixed relation, emitted once in the first step;
* ``linear``   - apply the node to the change itself, no state;
* ``bilinear`` - needs the integrated value of both inputs (joins);
* ``stateful`` - keeps per-key state and emits -old/+new for touched keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

from .types import SqlType, set_operation_type


def col(i: int) -> str:
    """Positional column name used inside expressions and on the data plane."""
    return f"c{i}"


@dataclass(frozen=True)
class Field:
    name: str
    type: SqlType

    def __str__(self) -> str:
        return f"{self.name} {self.type}"


@dataclass(frozen=True)
class Expr:
    """A bound scalar expression over positional columns ``c<i>``."""

    sql: str
    type: SqlType

    def __str__(self) -> str:
        return self.sql


@dataclass(frozen=True)
class AggCall:
    """One aggregate call: ``func(args)`` with optional DISTINCT and FILTER."""

    func: str  # COUNT_STAR, COUNT, SUM, AVG, MIN, MAX, STDDEV_SAMP, ...
    args: Tuple[Expr, ...]
    distinct: bool
    filter: Optional[Expr]
    type: SqlType
    params: Tuple[str, ...] = ()   # constants after the arguments (planner.aggregate_functions): a fraction, ...

    def __str__(self) -> str:
        if self.func == "COUNT_STAR":
            text = "COUNT(*)"
        else:
            args = [a.sql for a in self.args] + list(self.params)
            text = f"{self.func}({'DISTINCT ' if self.distinct else ''}{', '.join(args)})"
        return text + (f" FILTER (WHERE {self.filter.sql})" if self.filter else "")


@dataclass(frozen=True)
class Node:
    algebra: ClassVar[str] = ""

    @property
    def inputs(self) -> Tuple["Node", ...]:
        return ()

    @property
    def fields(self) -> Tuple[Field, ...]:  # pragma: no cover - overridden
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Scan(Node):
    """The rows of a table.  Delta: the table's input change, as is."""

    algebra: ClassVar[str] = "source"
    table: str
    table_fields: Tuple[Field, ...]

    @property
    def fields(self):
        return self.table_fields

    def describe(self):
        return f"Scan {self.table}"


@dataclass(frozen=True)
class OneRow(Node):
    """One row with no columns: the FROM of a SELECT without FROM.  Its change is that row, once, in the
    pipeline's first step (and in the backfill of a view added later)."""

    algebra: ClassVar[str] = "constant"

    @property
    def fields(self):
        return ()

    def describe(self):
        return "OneRow"


@dataclass(frozen=True)
class Filter(Node):
    """Rows where ``predicate`` is TRUE.  Linear: d(filter(A)) = filter(dA)."""

    algebra: ClassVar[str] = "linear"
    input: Node
    predicate: Expr

    @property
    def inputs(self):
        return (self.input,)

    @property
    def fields(self):
        return self.input.fields

    def describe(self):
        return f"Filter {self.predicate}"


@dataclass(frozen=True)
class Project(Node):
    """Computes ``exprs`` per row.  Linear: d(project(A)) = project(dA), weights kept."""

    algebra: ClassVar[str] = "linear"
    input: Node
    exprs: Tuple[Expr, ...]
    names: Tuple[str, ...]

    @property
    def inputs(self):
        return (self.input,)

    @property
    def fields(self):
        return tuple(Field(n, e.type) for n, e in zip(self.names, self.exprs))

    def describe(self):
        return "Project " + ", ".join(f"{e} AS {n}" for e, n in zip(self.exprs, self.names))


def _set_operation_fields(branches) -> Tuple["Field", ...]:
    """The first branch's names, with each column's type widened over the branches (``set_operation_type``)."""
    fields = list(branches[0].fields)
    for b in branches[1:]:
        fields = [Field(f.name, set_operation_type(f.type, g.type)) for f, g in zip(fields, b.fields)]
    return tuple(fields)


@dataclass(frozen=True)
class UnionAll(Node):
    """Bag union.  Linear: d(A + B) = dA + dB."""

    algebra: ClassVar[str] = "linear"
    branches: Tuple[Node, ...]

    @property
    def inputs(self):
        return self.branches

    @property
    def fields(self):
        return _set_operation_fields(self.branches)

    def describe(self):
        return f"UnionAll ({len(self.branches)} inputs)"


@dataclass(frozen=True)
class Join(Node):
    """Equi-join with an optional residual predicate (keys may be empty: a cross join).

    ``kind`` is inner, left, right or full.  The inner part is bilinear:
    d(A join B) = dA join B + A join dB + dA join dB = dA join B_new + A_old join dB,
    where A_old/B_old are the integrated inputs before the step.  NULL keys never
    match.  Outer joins add the NULL-padded rows without a match; their change is
    recomputed for the join keys the step touched: padded(A_new, B_new) -
    padded(A_old, B_old), restricted to keys in dA or dB.
    """

    algebra: ClassVar[str] = "bilinear"
    left: Node
    right: Node
    left_keys: Tuple[Expr, ...]   # over the left row: c0 .. c(L-1)
    right_keys: Tuple[Expr, ...]  # over the joined row: c(L) .. c(L+R-1)
    residual: Optional[Expr]      # over the joined row
    kind: str = "inner"           # inner | left | right | full | semi | anti
    null_safe: bool = False       # keys match when both are NULL (IS NOT DISTINCT FROM); inner joins only

    @property
    def inputs(self):
        return (self.left, self.right)

    @property
    def fields(self):
        left, right = self.left.fields, self.right.fields
        if self.kind in ("semi", "anti"):   # EXISTS / IN and their negations keep the left row only
            return left
        if self.kind in ("right", "full"):
            left = tuple(Field(f.name, f.type.with_nullable(True)) for f in left)
        if self.kind in ("left", "full"):
            right = tuple(Field(f.name, f.type.with_nullable(True)) for f in right)
        return left + right

    def describe(self):
        eq = "IS NOT DISTINCT FROM" if self.null_safe else "="
        keys = " AND ".join(f"{l} {eq} {r}" for l, r in zip(self.left_keys, self.right_keys)) or "TRUE"
        extra = f" AND {self.residual}" if self.residual else ""
        name = {"inner": "Join", "semi": "SemiJoin", "anti": "AntiJoin"}.get(self.kind,
                                                                           f"{self.kind.capitalize()}OuterJoin")
        return f"{name} ON {keys}{extra}"


@dataclass(frozen=True)
class Aggregate(Node):
    """GROUP BY ``keys`` computing ``aggs``; output row = keys then aggregates.

    Stateful: for the groups a change touches, emit -old row and +new row.
    With no keys (a global aggregate) there is always exactly one output row.
    """

    algebra: ClassVar[str] = "stateful"
    input: Node
    keys: Tuple[Expr, ...]
    aggs: Tuple[AggCall, ...]
    names: Tuple[str, ...]

    @property
    def inputs(self):
        return (self.input,)

    @property
    def fields(self):
        types = [k.type for k in self.keys] + [a.type for a in self.aggs]
        return tuple(Field(n, t) for n, t in zip(self.names, types))

    def describe(self):
        keys = ", ".join(map(str, self.keys)) or "()"
        return f"Aggregate keys=[{keys}] aggs=[{', '.join(map(str, self.aggs))}]"


@dataclass(frozen=True)
class Distinct(Node):
    """Set semantics: a row appears once if its weight is positive.

    Stateful: emits +1 when a row's integrated weight becomes positive and -1
    when it drops to zero or below.
    """

    algebra: ClassVar[str] = "stateful"
    input: Node

    @property
    def inputs(self):
        return (self.input,)

    @property
    def fields(self):
        return self.input.fields


@dataclass(frozen=True)
class SetOp(Node):
    """INTERSECT or EXCEPT, with bag (ALL) or set semantics; output columns are the left input's.

    Stateful: for the rows a change touches, recompute their multiplicity from both integrals
    (a copies on the left, b on the right): INTERSECT ALL min(a, b), INTERSECT 1 if a > 0 and b > 0,
    EXCEPT ALL max(a - b, 0), EXCEPT 1 if a > 0 and b = 0; emit new minus old.  NULLs compare equal.
    """

    algebra: ClassVar[str] = "stateful"
    left: Node
    right: Node
    op: str      # intersect | except
    all: bool

    @property
    def inputs(self):
        return (self.left, self.right)

    @property
    def fields(self):
        return _set_operation_fields((self.left, self.right))

    def describe(self):
        return f"{self.op.capitalize()}{'All' if self.all else ''}"


@dataclass(frozen=True)
class Window(Node):
    """Window functions sharing one PARTITION BY; output row = input row then one column per call.

    ``calls`` are whole window expressions (``ROW_NUMBER() OVER (PARTITION BY c0 ORDER BY c2)``) over the
    input row.  Stateful: for the partitions a change touches, recompute the calls over the partition's
    old and new contents and emit new minus old (an empty ``partition`` is one partition: the whole input).
    """

    algebra: ClassVar[str] = "stateful"
    input: Node
    partition: Tuple[Expr, ...]
    calls: Tuple[Expr, ...]
    names: Tuple[str, ...]

    @property
    def inputs(self):
        return (self.input,)

    @property
    def fields(self):
        return self.input.fields + tuple(Field(n, c.type) for n, c in zip(self.names, self.calls))

    def describe(self):
        return "Window " + ", ".join(f"{c} AS {n}" for c, n in zip(self.calls, self.names))


@dataclass(frozen=True)
class Unnest(Node):
    """Each input row once per element of the ARRAY ``expr`` (``UNNEST``), with columns appended: the element,
    or (``fields``) an element ROW's fields, one column each (a MAP is unnested as its entries' key and value);
    with ``ordinality``, the element's position from 1.  ``outer`` (LEFT JOIN UNNEST): a row whose array is NULL
    or empty is kept once, with NULLs.  Linear: d(unnest(A)) = unnest(dA), each row with its input row's
    weight, so deleting a row deletes every row it unnested into."""

    algebra: ClassVar[str] = "linear"
    input: Node
    expr: Expr
    names: Tuple[str, ...]
    types: Tuple[SqlType, ...]
    fields_of: Tuple[str, ...] = ()    # the element ROW's field names, one column each ("": the element itself)
    ordinality: bool = False
    outer: bool = False

    @property
    def inputs(self):
        return (self.input,)

    @property
    def fields(self):
        return self.input.fields + tuple(Field(n, t) for n, t in zip(self.names, self.types))

    def describe(self):
        return (f"Unnest{' outer' if self.outer else ''} {self.expr}{' WITH ORDINALITY' if self.ordinality else ''}"
                f" AS {', '.join(self.names)}")


def tables_under(node: Node) -> set:
    """The names of the tables ``node`` reads (its ``Scan`` leaves)."""
    if isinstance(node, Scan):
        return {node.table}
    return set().union(*(tables_under(x) for x in node.inputs)) if node.inputs else set()


def walk(node: Node):
    """Yield ``node`` and its descendants, children first, each once."""
    seen = set()
    order = []

    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        for c in n.inputs:
            visit(c)
        order.append(n)

    visit(node)
    return order


@dataclass(frozen=True)
class Recursive(Node):
    """The rows of recursive relations (``planner.bind_recursive``): the fixed point of each relation's branches,
    which the executor iterates (``sqlengine.executor.ops.recursive``).  One relation for a ``WITH RECURSIVE``
    CTE; the views of a group declared with DECLARE RECURSIVE VIEW that read each other.

    ``bases[i]``: relation i's branches that read no recursive relation; ``steps``: (i, j, SQL), a branch of
    relation i that reads recursive relation j once, as ``__rec``.  The SQL is DuckDB's, in which occurrence
    ``k`` of a relation of the program is ``__o<k>``, read from ``relations[occurrences[k]]`` (whose columns the
    SQL names ``relation_columns[...]``); ``monotone[k]``: new rows of that occurrence only add rows.
    ``distinct[i]``: UNION (a set) rather than UNION ALL (a bag).  The node's rows: relation 0's columns when it
    has one relation, else the relation's number (``__relation``) then each relation's columns in turn (NULL in
    the other relations' columns).

    Its relations are not children for the planner's rules (``inputs`` is empty: the rules leave it as it is,
    with its relations' plans as bound); the circuit reads their changes and contents."""

    algebra: ClassVar[str] = "stateful"
    name: str
    names: Tuple[str, ...]
    columns: Tuple[Tuple[Field, ...], ...]
    distinct: Tuple[bool, ...]
    bases: Tuple[Tuple[str, ...], ...]
    steps: Tuple[Tuple[int, int, str], ...]
    relations: Tuple[Node, ...]
    relation_columns: Tuple[Tuple[str, ...], ...]
    relation_names: Tuple[str, ...]
    occurrences: Tuple[int, ...]
    monotone: Tuple[bool, ...]
    max_iterations: int

    @property
    def fields(self):
        if len(self.names) == 1:
            return self.columns[0]
        from .types import SqlType
        out = [Field("__relation", SqlType("BIGINT"))]
        for name, cols in zip(self.names, self.columns):
            out += [Field(f"{name}.{f.name}", f.type) for f in cols]
        return tuple(out)

    def slots(self, i: int) -> Tuple[int, ...]:
        """The positions of relation ``i``'s columns among the node's (several relations)."""
        start = 1 + sum(len(c) for c in self.columns[:i])
        return tuple(range(start, start + len(self.columns[i])))

    def describe(self):
        kinds = {"UNION" if d else "UNION ALL" for d in self.distinct}
        return f"Recursive {self.name} ({', '.join(sorted(kinds))}) over " + ", ".join(self.relation_names)


def format_plan(node: Node, indent: int = 0) -> str:
    """Indented tree text of a plan, one node per line."""
    lines = ["  " * indent + node.describe() + "  -> (" + ", ".join(str(f) for f in node.fields) + ")"]
    for child in node.inputs:
        lines.append(format_plan(child, indent + 1))
    return "\n".join(lines)
