"""ASOF JOIN, bound as a composition of operators the engine maintains incrementally.

``FROM a ASOF [LEFT] JOIN b ON a.k = b.k AND a.t >= b.t`` (DuckDB's spelling) joins each row of ``a`` with
the rows of ``b`` with the same key(s) and the greatest ``b.t`` with ``b.t <= a.t``.  The inequality may be
``>=``, ``>`` (``b.t < a.t``), ``<=`` (the least ``b.t >= a.t``) or ``<``, written either way round.  If
several ``b`` rows of a key tie at the chosen time, every one of them matches (DuckDB picks one of them).
NULL keys or times never match; ASOF LEFT JOIN keeps the unmatched ``a`` rows with NULLs for ``b``.

Plan, with ``A`` the relations joined so far and ``B`` the relation after ASOF JOIN::

    l = DISTINCT (k.., t) of A                        -- the distinct probe points
    r = (k.., t) of B
    m = SELECT l.k.., l.t, MAX(r.t) FROM l JOIN r ON l.k = r.k AND r.t <= l.t GROUP BY l.k.., l.t
    out = A [LEFT] JOIN m ON A.k = m.k AND A.t = m.lt [LEFT] JOIN B ON B.k = m.k AND B.t = m.rt
    -- projected to A's columns then B's, like an ordinary join

(MIN instead of MAX for the ``<=`` / ``<`` directions.)  All of it is joins, DISTINCT and a MAX aggregate,
so inserts and deletes on both sides are maintained: a change to ``B`` at key k reaches the probe points
of k (those the inequality admits) and recomputes the MAX of each of them; a change to ``A`` adds or
removes probe points, each joined with the rows of ``B`` at its key.
"""
from __future__ import annotations

from typing import List, Optional

from sqlglot import exp

from .logical import AggCall, Aggregate, Distinct, Expr, Filter, Join, Node, Project, col
from .scope import DIALECT
from .types import BOOLEAN

# ``A.t <op> B.t`` -> (aggregate picking B's time, residual comparing B's time with A's: "r <op> l")
DIRECTIONS = {exp.GTE: ("MAX", "<="), exp.GT: ("MAX", "<"), exp.LTE: ("MIN", ">="), exp.LT: ("MIN", ">")}
FLIPPED = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}


class AsofBinder:
    """Mixin for :class:`planner.bind.Binder`."""

    def bind_asof(self, join: exp.Join, left: Node, right: Node, scope, i: int, on: List[exp.Expression],
                  left_outer: bool) -> Node:
        """Plan ``left ASOF [LEFT] JOIN right`` where ``right`` is relation ``i`` of ``scope`` and ``left`` the
        join of the relations before it; its columns are ``left``'s then ``right``'s."""
        if join.args.get("using"):
            raise self.unsupported("ASOF JOIN with USING (write ON a.k = b.k AND a.t >= b.t)", join)
        if not on:
            raise self.bind_error("ASOF JOIN needs an ON condition: equalities on keys and one inequality on time",
                                  join)
        before = set(range(i))
        lkeys, rkeys = [], []
        time: Optional[exp.Expression] = None
        for c in on:
            self.check_scalar(c, allow_agg=False, clause="ON")
            sides = None
            if isinstance(c, (exp.EQ, exp.GTE, exp.GT, exp.LTE, exp.LT)):
                ra, rb = self.rels_of(c.this, scope), self.rels_of(c.expression, scope)
                if ra and ra <= before and rb == {i}:
                    sides = (c.this, c.expression, type(c))
                elif rb and rb <= before and ra == {i}:
                    sides = (c.expression, c.this, type(c) if isinstance(c, exp.EQ) else FLIPPED[type(c)])
            if sides is None:
                raise self.unsupported(
                    f"ASOF JOIN condition {c.sql(dialect='duckdb')} (an ASOF JOIN's ON takes equalities between "
                    "an expression of each side, and one >=, >, <= or < between their times)", c)
            if sides[2] is exp.EQ:
                lkeys.append(self.bind_scalar(sides[0], scope))
                rkeys.append(self.bind_scalar(sides[1], scope, base=scope.rels[i].offset))
                self.bind_scalar(c, scope)   # type check across the sides
            elif time is not None:
                raise self.unsupported("a second inequality in an ASOF JOIN condition", c)
            else:
                time = c
                op = sides[2]
                lt = self.bind_scalar(sides[0], scope)
                rt = self.bind_scalar(sides[1], scope, base=scope.rels[i].offset)
                self.bind_scalar(c, scope)
        if time is None:
            raise self.unsupported("ASOF JOIN without an inequality (>=, >, <= or <) between the two sides' times",
                                   join)
        func, cmp = DIRECTIONS[op]
        n = len(lkeys)
        nl, nr = len(left.fields), len(right.fields)
        # distinct probe points (k.., t) of the left side, and (k.., t) of the right side
        kn = tuple(f"k{j}" for j in range(n))
        probe = Distinct(Filter(Project(left, tuple(lkeys) + (lt,), kn + ("t",)), Expr(f"NOT {col(n)} IS NULL",
                                                                                         BOOLEAN)))
        points = Project(right, tuple(rkeys) + (rt,), kn + ("t",))
        # m: per probe point, the best right time
        pairs = Join(probe, points,
                     tuple(Expr(col(j), lkeys[j].type) for j in range(n)),
                     tuple(Expr(col(n + 1 + j), rkeys[j].type) for j in range(n)),
                     Expr(f"{col(2 * n + 1)} {cmp} {col(n)}", BOOLEAN))
        pre = Project(pairs, tuple(Expr(col(j), probe.fields[j].type) for j in range(n + 1)) +
                      (Expr(col(2 * n + 1), rt.type),), kn + ("lt", "rt"))
        best = Aggregate(pre, tuple(Expr(col(j), f.type) for j, f in enumerate(pre.fields[:n + 1])),
                         (AggCall(func, (Expr(col(n + 1), rt.type),), False, None, rt.type.with_nullable(True)),),
                         kn + ("lt", "rt"))
        kind = "left" if left_outer else "inner"
        # A [LEFT] JOIN m ON A.k = m.k AND A.t = m.lt
        with_best = Join(left, best, tuple(lkeys) + (lt,),
                         tuple(Expr(col(nl + j), f.type) for j, f in enumerate(best.fields[:n + 1])), None, kind)
        # ... [LEFT] JOIN B ON B.k = m.k AND B.t = m.rt
        base = nl + n + 2
        shifted = [self.shift(e, base) for e in rkeys + [rt]]
        matched = Join(with_best, right,
                       tuple(Expr(col(nl + j), best.fields[j].type) for j in range(n)) +
                       (Expr(col(nl + n + 1), best.fields[n + 1].type),),
                       tuple(shifted), None, kind)
        fields = matched.fields
        keep = list(range(nl)) + list(range(base, base + nr))
        names = tuple(f.name for f in left.fields) + tuple(f.name for f in right.fields)
        return Project(matched, tuple(Expr(col(j), fields[j].type) for j in keep), names)

    @staticmethod
    def shift(e: Expr, by: int) -> Expr:
        """``e`` (over a row starting at c0) with every column ``c<j>`` renamed ``c<j + by>``."""
        import sqlglot

        tree = sqlglot.parse_one(e.sql, read=DIALECT)

        def fn(node):
            if isinstance(node, exp.Column) and not node.table and node.name.startswith("c") and node.name[1:].isdigit():
                return exp.column(col(int(node.name[1:]) + by))
            return node
        return Expr(tree.transform(fn).sql(dialect=DIALECT), e.type)
