"""Whether an accumulating aggregate's integer SUMs can leave BIGINT's range: a bound kept with the state.

Per aggregate, durably with each step (``meta["sum_bounds"]``): B = the sum over steps and groups of |partial
sum|, which bounds every group's |SUM| (a group's SUM is the sum of its partials).  While B fits BIGINT a step
need not compute the aggregate's change to find the groups whose SUM does not fit (row errors, see
``LocalExecutor._in_range``); past it, or for state from before B was kept, it does.
"""
from __future__ import annotations

from typing import Dict, Optional

import pyarrow as pa
import pyarrow.compute as pc

from planner.circuit import Op

from sqlengine.executor.ops import accumulators
from sqlengine.state.store import StateStore

BIGINT_MAX = (1 << 63) - 1


class SumBounds:
    """This step's bounds, per state key, started from the committed ones by each attempt at a step."""

    def __init__(self, store: StateStore, keys: Dict[int, str]):
        self.store = store
        self.keys = keys   # op id -> its state key
        self.bounds: Dict[str, int] = {}

    def start(self) -> None:
        """Each attempt at a step (on Spark, then maybe on the driver) starts from the committed bounds."""
        self.bounds = dict(self.store.current.meta.get("sum_bounds", {}))

    def fit(self, op: Op, partial: Optional[pa.Table], write: bool) -> bool:
        """Add ``partial`` (the step's partial sums of ``op``) to the bound; can no group
        hold an integer SUM outside BIGINT's range after this step?  Not ``write`` (a backfill that does not
        write the state): unknown, so False."""
        cols = accumulators.integer_sums(op.node)
        if not cols:
            return True
        if not write:
            return False
        key = self.keys[op.id]
        b = self.bounds.get(key)
        if b is None:
            if self.store.current.runs.get(key):   # state written before the bound was kept
                return False
            b = 0
        if partial is not None and partial.num_rows:
            try:
                b += sum(int(pc.sum(pc.abs(partial.column(c))).as_py() or 0) for c in cols)
            except (pa.ArrowInvalid, OverflowError):   # beyond DECIMAL(38): no bound
                b = 1 << 127
        self.bounds[key] = b
        return b <= BIGINT_MAX
