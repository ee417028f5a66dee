"""Join ordering from the join graph: ``order_joins(plan, ctx) -> plan``.

The binder joins the relations of a FROM clause strictly in the written order and attaches each
condition to the first join where all its relations are present, so a scrambled FROM list can build
cross products whose conditions only apply later, and a chain of N tables is always a left-deep tree
of depth N - 1.  This rule rebuilds every maximal tree of inner joins from its *join graph*:

* A **region** is a maximal tree of inner joins (cross joins included, null-safe joins excluded) and
  the Filters directly on top of or between them.  Every other subplan under it is a **leaf**
  (rewritten on its own, so regions nested in subqueries are ordered too).  The region's row is its
  leaves' rows in the written order.
* Its **conjuncts** are the join keys (as equalities), the residuals and the Filter predicates, split
  at AND.  A conjunct over one leaf becomes a Filter on that leaf; an equality whose two sides are over
  disjoint sets of leaves is an **edge** (a join key once its two sides are on the two inputs of a
  join); any other conjunct over several leaves is applied (as a residual) at the first join where all
  its leaves are present; a conjunct over no leaf at all is a Filter on top.
* **Order.** Joins are built in rounds that pair up the current units (leaves, then joined pairs) along
  edges: a maximal matching, taking first a unit with a single possible partner (Karp-Sipser: optimal on
  trees, so a chain of 2^k tables pairs up completely in every round) and otherwise the cheapest pair.
  So no cross product is built while an equality connects two units, and a chain of N tables gets depth
  ceil(log2 N) instead of N - 1: a change of one table passes through log2 N joins instead of up to N - 1,
  and when all tables change at once, every level joins changes of about the same size.  A pair's cost
  is the estimated size of its join output, then the state the join keeps (the integrals of both
  inputs), with the written order breaking ties.  Sizes: a table's row count when ``ctx`` gives it
  (``ctx["table_rows"]``), else all leaves alike, one row for a global aggregate; an equi-join's output
  is the larger of its inputs, a cross join's their product.
* Units no equality connects are joined at the end: first pairs that another multi-relation predicate
  connects (it becomes the join's residual), then cross products, smallest first.
* A Project on top restores the written column order (folded into a Project above the region), so the
  output schema, names and types, never changes.  The result depends on the plan alone (deterministic).

``ctx["join_order"] == "as_written"`` (or ``ctx.options["join_order"]``: a per-view option) leaves the plan
alone.  Another view's plan inside this one (``ctx.view_plan_ids()``) is a leaf, kept as it is (shared).

Place in the rules: after ``push_down_filters`` (the conjuncts it moves into joins are the edges an order
is chosen from) and before ``prune_columns`` (the narrowing Projects it puts between joins end a region,
and it must see the final order to decide what each integral keeps).

>>> from planner.program import compile_program
>>> p = compile_program('''CREATE TABLE a (k INT, x INT); CREATE TABLE b (k INT, y INT);
...     CREATE TABLE c (y INT, z INT);
...     CREATE VIEW v AS SELECT a.x, c.z FROM a, c, b WHERE a.k = b.k AND b.y = c.y''')
>>> from planner.logical import format_plan
>>> print(format_plan(order_joins(p.views["v"].bound)))   # as bound: no cross join of a and c
Project c1 AS x, c5 AS z  -> (x INT, z INT)
  Join ON c3 = c4  -> (k INT, x INT, k INT, y INT, y INT, z INT)
    Join ON c0 = c2  -> (k INT, x INT, k INT, y INT)
      Scan a  -> (k INT, x INT)
      Scan b  -> (k INT, y INT)
    Scan c  -> (y INT, z INT)
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from ..logical import Aggregate, Expr, Filter, Join, Node, OneRow, Project, Scan, UnionAll, col
from ..semantics import typed
from ..types import BOOLEAN, SqlType

DIALECT = "duckdb"
DEFAULT_ROWS = 1000.0   # the estimated size of a leaf without statistics
_POSITIONAL = re.compile(r"c(\d+)\Z")


def order_joins(plan: Node, ctx=None) -> Node:
    """``plan`` with every region of inner joins rebuilt from its join graph (see the module docstring)."""
    if _option(ctx, "join_order") == "as_written":
        return plan
    shared = ctx.view_plan_ids() if hasattr(ctx, "view_plan_ids") else frozenset()
    return _Rewriter(_option(ctx, "table_rows") or {}, shared).rewrite(plan)


def _option(ctx, name: str):
    """``name`` from a mapping, from a context's ``options`` mapping, or as a context's attribute."""
    if ctx is None:
        return None
    if isinstance(ctx, Mapping):
        return ctx.get(name)
    options = getattr(ctx, "options", None)
    if isinstance(options, Mapping) and name in options:
        return options[name]
    return getattr(ctx, name, None)


# ---------------------------------------------------------------- expression text helpers
@lru_cache(maxsize=1)
def _tokenizer():
    return Dialect.get_or_raise(DIALECT).tokenizer_class()


@lru_cache(maxsize=16384)
def _column_tokens(sql: str) -> Tuple[Tuple[int, int, int], ...]:
    """(start, end, position) of every positional column ``c<i>`` in ``sql`` (not in strings or quotes)."""
    out = []
    for t in _tokenizer().tokenize(sql):
        if t.token_type == TokenType.VAR:
            m = _POSITIONAL.match(t.text)
            if m:
                out.append((t.start, t.end, int(m.group(1))))
    return tuple(out)


def columns_of(sql: str) -> FrozenSet[int]:
    """The positional columns ``sql`` reads.

    >>> sorted(columns_of("c3 + c10 = 'c4'"))
    [3, 10]
    """
    return frozenset(p for _, _, p in _column_tokens(sql))


def rename_columns(sql: str, fn: Callable[[int], int]) -> str:
    """``sql`` with every positional column ``c<i>`` renamed ``c<fn(i)>``; the rest of the text is kept.

    >>> rename_columns("c0 = c12 AND c1 LIKE 'c1%'", lambda i: i + 2)
    "c2 = c14 AND c3 LIKE 'c1%'"
    """
    out, last = [], 0
    for start, end, p in _column_tokens(sql):
        out.append(sql[last:start])
        out.append(col(fn(p)))
        last = end + 1
    out.append(sql[last:])
    return "".join(out)


@lru_cache(maxsize=4096)
def _parse(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read=DIALECT)


def split_conjuncts(sql: str) -> List[str]:
    """The AND-ed terms of a predicate (one term keeps its text as it is).

    >>> split_conjuncts("(c0 = c2) AND (c1 < 3 AND (c2 = 1 OR c3 = 1))")
    ['c0 = c2', 'c1 < 3', 'c2 = 1 OR c3 = 1']
    """
    def split(e):
        if isinstance(e, exp.Paren):
            return split(e.this)
        if isinstance(e, exp.And):
            return split(e.this) + split(e.expression)
        return [e]

    e = _parse(sql)
    parts = split(e)
    if len(parts) == 1 and parts[0] is e:
        return [sql]
    return [p.sql(dialect=DIALECT) for p in parts]


def _and(texts: Sequence[str]) -> str:
    if len(texts) == 1:
        return texts[0]
    return exp.and_(*[_parse(t).copy() for t in texts]).sql(dialect=DIALECT)


# ---------------------------------------------------------------- the region model
@dataclass(frozen=True)
class Leaf:
    plan: Node
    offset: int          # first column in the region's (written) row
    width: int


@dataclass
class Conjunct:
    """One AND-ed term over the region's row; an equality also keeps its two sides."""

    sql: str
    leaves: FrozenSet[int]
    sides: Optional[Tuple[Tuple[str, SqlType, FrozenSet[int]], Tuple[str, SqlType, FrozenSet[int]]]] = None

    def key_sides(self, left: FrozenSet[int], right: FrozenSet[int]):
        """(side over ``left``, side over ``right``) if this equality can be a key of a join of them."""
        if self.sides is None:
            return None
        a, b = self.sides
        if not a[2] or not b[2]:
            return None
        if a[2] <= left and b[2] <= right:
            return a, b
        if b[2] <= left and a[2] <= right:
            return b, a
        return None


@dataclass
class Unit:
    """A joined set of leaves: its plan, whose row is its leaves' rows in ``leaves`` order."""

    leaves: Tuple[int, ...]
    plan: Node
    rows: float

    @property
    def members(self) -> FrozenSet[int]:
        return frozenset(self.leaves)

    @property
    def first(self) -> int:
        return min(self.leaves)


def _is_region(node: Node) -> bool:
    if isinstance(node, Join):
        return node.kind == "inner" and not node.null_safe
    if isinstance(node, Filter):
        return _is_region(node.input)
    return False


def _children(node: Node) -> List[Tuple[str, object]]:
    out = []
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if isinstance(v, Node) or (isinstance(v, tuple) and v and all(isinstance(x, Node) for x in v)):
            out.append((f.name, v))
    return out


class _Rewriter:
    def __init__(self, table_rows: Mapping[str, float], shared: FrozenSet[int] = frozenset()):
        self.table_rows = {str(k).lower(): float(v) for k, v in dict(table_rows).items()}
        self.shared = shared      # ids of other views' plans: kept as they are (and shared with those views)
        self.memo: Dict[int, Tuple[Node, Node]] = {}     # id(node) -> (node, rewritten): ids stay valid
        self.permutations: Dict[int, Node] = {}          # id of a Project this rule added -> that Project

    # ------------------------------------------------------------ the walk
    def rewrite(self, node: Node) -> Node:
        hit = self.memo.get(id(node))
        if hit is not None:
            return hit[1]
        if id(node) in self.shared:
            out = node
        elif _is_region(node):
            out = self.region(node)
        else:
            changes = {}
            for name, v in _children(node):
                new = tuple(self.rewrite(x) for x in v) if isinstance(v, tuple) else self.rewrite(v)
                if new != v:
                    changes[name] = new
            out = dataclasses.replace(node, **changes) if changes else node
            if isinstance(out, Project) and id(out.input) in self.permutations:
                out = self.fold(out)
        self.memo[id(node)] = (node, out)
        return out

    def fold(self, proj: Project) -> Project:
        """Project(Project(x, permutation), exprs) -> Project(x, exprs renamed): one map instead of two."""
        inner = proj.input
        pos = [int(_POSITIONAL.match(e.sql).group(1)) for e in inner.exprs]
        exprs = tuple(Expr(rename_columns(e.sql, lambda i: pos[i]), e.type) for e in proj.exprs)
        return Project(inner.input, exprs, proj.names)

    # ------------------------------------------------------------ estimates
    def rows(self, node: Node) -> float:
        if isinstance(node, OneRow) or (isinstance(node, Aggregate) and not node.keys):
            return 1.0
        if isinstance(node, Scan):
            return self.table_rows.get(node.table.lower(), DEFAULT_ROWS)
        if isinstance(node, Join):
            left, right = self.rows(node.left), self.rows(node.right)
            if node.kind in ("semi", "anti"):
                return left
            return max(left, right) if node.left_keys else left * right
        if isinstance(node, UnionAll):
            return sum(self.rows(b) for b in node.branches)
        return self.rows(node.inputs[0]) if node.inputs else DEFAULT_ROWS

    # ------------------------------------------------------------ one region
    def collect(self, node: Node, base: int, leaves: List[Leaf], conj: List[Tuple[str, Optional[tuple]]]):
        """Leaves and conjuncts (text over the region's row, plus key sides) of the region under ``node``."""
        shift = (lambda i: i + base)
        if id(node) in self.shared:
            leaves.append(Leaf(node, base, len(node.fields)))
        elif isinstance(node, Filter) and _is_region(node.input):
            self.collect(node.input, base, leaves, conj)
            conj.extend((rename_columns(t, shift), None) for t in split_conjuncts(node.predicate.sql))
        elif _is_region(node):
            nl = len(node.left.fields)
            self.collect(node.left, base, leaves, conj)
            self.collect(node.right, base + nl, leaves, conj)
            for lk, rk in zip(node.left_keys, node.right_keys):
                a, b = rename_columns(lk.sql, shift), rename_columns(rk.sql, shift)
                conj.append((f"({a}) = ({b})", ((a, lk.type), (b, rk.type))))
            if node.residual is not None:
                conj.extend((rename_columns(t, shift), None) for t in split_conjuncts(node.residual.sql))
        else:
            leaves.append(Leaf(self.rewrite(node), base, len(node.fields)))

    def region(self, root: Node) -> Node:
        leaves: List[Leaf] = []
        raw: List[Tuple[str, Optional[tuple]]] = []
        self.collect(root, 0, leaves, raw)
        if len(leaves) <= 2:   # nothing to order: keep the joins, order what is below them
            return self.keep(root)
        types = [f.type for f in root.fields]
        owner = [i for i, leaf in enumerate(leaves) for _ in range(leaf.width)]

        def leaves_of(sql: str) -> FrozenSet[int]:
            return frozenset(owner[p] for p in columns_of(sql))

        conjuncts: List[Conjunct] = []
        for sql, key in raw:
            if key is None:
                e = _parse(sql)
                if isinstance(e, exp.EQ):
                    a, b = e.this.sql(dialect=DIALECT), e.expression.sql(dialect=DIALECT)
                    key = ((a, typed(_parse(a).copy(), types)[1]), (b, typed(_parse(b).copy(), types)[1]))
            sides = None
            if key is not None:
                sides = tuple((s, t, leaves_of(s)) for s, t in key)
                if sides[0][2] & sides[1][2]:
                    sides = None
            conjuncts.append(Conjunct(sql, leaves_of(sql), sides))

        units = [self.leaf_unit(i, leaf, leaves, [c for c in conjuncts if c.leaves == {i}])
                 for i, leaf in enumerate(leaves)]
        pending = [c for c in conjuncts if len(c.leaves) >= 2]
        # rounds of pairs connected by an equality, then pairs connected by another predicate
        for connects in (self.equi_connected, self.pred_connected):
            while True:
                pairs = self.match(units, lambda a, b: connects(a, b, pending))
                if not pairs:
                    break
                paired = {i for p in pairs for i in p}
                units = [self.join(units[i], units[j], leaves, pending) for i, j in pairs] + \
                        [u for k, u in enumerate(units) if k not in paired]
                units.sort(key=lambda u: u.first)
        # disconnected components: cross products, smallest first
        units.sort(key=lambda u: (u.rows, u.first))
        top = units[0]
        for u in units[1:]:
            top = self.join(top, u, leaves, pending)
        plan = top.plan
        rest = [c for c in conjuncts if not c.leaves] + pending
        if rest:
            plan = Filter(plan, Expr(_and([self.local(c.sql, top, leaves) for c in rest]), BOOLEAN))
        order = [p for i in top.leaves for p in range(leaves[i].offset, leaves[i].offset + leaves[i].width)]
        if order == list(range(len(order))):
            return plan
        where = {p: j for j, p in enumerate(order)}
        proj = Project(plan, tuple(Expr(col(where[p]), t) for p, t in enumerate(types)),
                       tuple(f.name for f in root.fields))
        self.permutations[id(proj)] = proj
        return proj

    def keep(self, node: Node) -> Node:
        """The region as written, with its leaves rewritten."""
        if _is_region(node) and id(node) not in self.shared:
            changes = {name: self.keep(v) for name, v in _children(node)}
            return dataclasses.replace(node, **changes)
        return self.rewrite(node)

    def local(self, sql: str, unit: Unit, leaves: Sequence[Leaf], base: int = 0) -> str:
        """``sql`` (over the region's row) over ``unit``'s row, shifted by ``base``."""
        where: Dict[int, int] = {}
        at = base
        for i in unit.leaves:
            leaf = leaves[i]
            for k in range(leaf.width):
                where[leaf.offset + k] = at + k
            at += leaf.width
        return rename_columns(sql, lambda p: where[p])

    def leaf_unit(self, i: int, leaf: Leaf, leaves: Sequence[Leaf], own: List[Conjunct]) -> Unit:
        unit = Unit((i,), leaf.plan, self.rows(leaf.plan))
        if own:
            pred = _and([self.local(c.sql, unit, leaves) for c in own])
            plan = leaf.plan
            if isinstance(plan, Filter):   # one pass over the rows, as merge_filters does
                plan = Filter(plan.input, Expr(f"({plan.predicate.sql}) AND ({pred})", BOOLEAN))
            else:
                plan = Filter(plan, Expr(pred, BOOLEAN))
            unit = Unit((i,), plan, unit.rows)
        return unit

    # ------------------------------------------------------------ choosing pairs
    @staticmethod
    def equi_connected(a: Unit, b: Unit, pending: Sequence[Conjunct]) -> bool:
        return any(c.key_sides(a.members, b.members) is not None for c in pending)

    @staticmethod
    def pred_connected(a: Unit, b: Unit, pending: Sequence[Conjunct]) -> bool:
        both = a.members | b.members
        return any(c.leaves <= both and not c.leaves <= a.members and not c.leaves <= b.members
                   for c in pending)

    @staticmethod
    def joined_rows(a: Unit, b: Unit, equi: bool) -> float:
        return max(a.rows, b.rows) if equi else a.rows * b.rows

    def match(self, units: List[Unit], connected) -> List[Tuple[int, int]]:
        """A maximal set of disjoint connected pairs of ``units`` (indexes, left first)."""
        n = len(units)
        adj: Dict[int, List[int]] = {i: [] for i in range(n)}
        for i in range(n):
            for j in range(i + 1, n):
                if connected(units[i], units[j]):
                    adj[i].append(j)
                    adj[j].append(i)

        def cost(i, j):
            a, b = units[i], units[j]
            return (self.joined_rows(a, b, True), a.rows + b.rows, min(a.first, b.first), max(a.first, b.first))

        free = set(range(n))
        pairs = []
        while True:
            options = {i: [j for j in adj[i] if j in free] for i in sorted(free)}
            options = {i: js for i, js in options.items() if js}
            if not options:
                break
            forced = [(cost(i, js[0]), i, js[0]) for i, js in options.items() if len(js) == 1]
            candidates = forced or [(cost(i, j), i, j) for i, js in options.items() for j in js]
            _, i, j = min(candidates)
            free -= {i, j}
            pairs.append((i, j) if units[i].first < units[j].first else (j, i))
        return pairs

    # ------------------------------------------------------------ building a join
    def join(self, a: Unit, b: Unit, leaves: Sequence[Leaf], pending: List[Conjunct]) -> Unit:
        """Join units ``a`` (left) and ``b``: equalities between them are keys, the other conjuncts whose
        leaves are now all present the residual."""
        both, nl = a.members | b.members, len(a.plan.fields)
        lkeys, rkeys, residual = [], [], []
        for c in list(pending):
            if not c.leaves <= both or c.leaves <= a.members or c.leaves <= b.members:
                continue
            pending.remove(c)
            sides = c.key_sides(a.members, b.members)
            if sides is not None:
                (ls, lt, _), (rs, rt, _) = sides
                lkeys.append(Expr(self.local(ls, a, leaves), lt))
                rkeys.append(Expr(self.local(rs, b, leaves, base=nl), rt))
            else:
                residual.append(c.sql)
        unit = Unit(a.leaves + b.leaves, a.plan, 0.0)
        res = Expr(_and([self.local(s, unit, leaves) for s in residual]), BOOLEAN) if residual else None
        plan = Join(a.plan, b.plan, tuple(lkeys), tuple(rkeys), res)
        return Unit(a.leaves + b.leaves, plan, self.joined_rows(a, b, bool(lkeys)))
