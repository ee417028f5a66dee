"""Derived integrals (:mod:`planner.rules.share_table_state`, :mod:`planner.rules.aggregate_contents`): how the
executors read an integral that stores nothing.

A derived integral is the integral of a chain of maps over either a table (read: the table's rows of the
same key, through the maps) or an inner join (read: one side's rows of the key, the other side's rows that
join them, joined, through the maps) or an accumulating aggregate (read whole: the final rows of its summed
state, through the maps).  Both executors read them with their own operators; this module says
which state is read by which key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from planner.circuit import Op
from planner.errors import InternalError
from planner.rules.share_table_state import maps_below, passes_through


@dataclass(frozen=True)
class Derivation:
    """``base``: the integral(s) it is read from (the table's; or the join's left and right inputs');
    ``join``: the join op (None over a table); ``chain``: the map ops above (bottom up); ``columns``: for
    each column the chain only picks, the column below the chain it is."""

    base: Tuple[int, ...]
    join: Optional[Op]
    chain: Tuple[Op, ...]
    columns: Dict[int, int]
    aggregate: Optional[Op] = None   # a view's contents: the final rows of this accumulating aggregate's state

    def below(self, spec: Tuple[str, ...]) -> Tuple[int, ...]:
        """A lookup key over the integral's columns (plain columns, as the planner made sure) as columns of
        the rows below the chain."""
        return tuple(self.columns[int(c[1:])] for c in spec)

    def side_of(self, spec: Tuple[str, ...]) -> Tuple[int, Tuple[str, ...]]:
        """Over a join, for a non-empty key: the side whose rows hold it (0 left, 1 right) and the key over
        that side's columns."""
        nl = len(self.join.node.left.fields)
        below = self.below(spec)
        side = 0 if below[0] < nl else 1
        return side, tuple(f"c{j - nl * side}" for j in below)


def derivation(circuit, op: Op) -> Derivation:
    chain, bottom = maps_below(circuit, op)
    width = len(op.node.fields)
    columns = passes_through([c.node for c in chain], width)
    if bottom.kind == "input" and chain:
        return Derivation(op.reads, None, tuple(reversed(chain)), columns)
    if bottom.kind == "aggregate" and op.reads == (bottom.id,):   # planner.rules.aggregate_contents
        return Derivation(op.reads, None, tuple(reversed(chain)), columns, aggregate=bottom)
    if bottom.kind == "join" and bottom.reads == op.reads:
        return Derivation(op.reads, bottom, tuple(reversed(chain)), columns)
    raise InternalError(f"derived integral #{op.id} is not a chain of maps over a table or an inner join")
