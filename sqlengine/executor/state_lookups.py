"""A state that an operator looks up by key while it runs, rather than receiving it read before it starts.

Most operators know before they run which keys of a state they need: the keys of their input changes
(``ops.ProbeSpec``).  The recursive op learns them as it iterates (each iteration's new rows are the next
one's probe keys), so its reads are :class:`Lookup` objects (``ProbeSpec(None, [])``): on the driver, reads
through the state cache's key index (``LocalExecutor.read``); on Spark, the state collected once
(:class:`ArrowLookup`).  A lookup returns a superset of the rows whose key equals a probe row's (the rows whose
key hashes like one, NULL-safely, numbers compared as numbers: ``sqlengine.state.cache.KeyHasher``),
unconsolidated: the caller filters and consolidates them as it would the whole state.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import pyarrow as pa

from sqlengine.state.cache import KeyHasher
from sqlengine.zset import total_weight


class Lookup:
    """A state read by key: ``read(spec, probe)`` (``spec``: state columns, ``c<n>``; ``probe``: a table with one
    column per key column, in the same order), or whole (``spec`` empty)."""

    def __init__(self, read: Callable[[tuple, Optional[pa.Table]], pa.Table],
                 weight: Optional[Callable[[], int]] = None):
        self._read = read
        self._weight = weight

    def rows(self, spec: Sequence[str] = (), probe: Optional[pa.Table] = None) -> pa.Table:
        """Raw rows (a Z-set's runs: columns, then the weight) whose ``spec`` columns can equal a row of
        ``probe``; every row when ``spec`` is empty."""
        if not spec:
            return self._read((), None)
        return self._read(tuple(spec), probe)

    def weight(self) -> int:
        """The sum of the state's weights: how many rows it holds."""
        return self._weight() if self._weight is not None else total_weight(self.rows())


class ArrowLookup(Lookup):
    """A state held whole in memory (on Spark: collected): a lookup filters it by the same key hash."""

    def __init__(self, table: pa.Table):
        self.table = table
        super().__init__(self._filter)

    def _filter(self, spec: tuple, probe: Optional[pa.Table]) -> pa.Table:
        if not spec:
            return self.table
        if probe is None or not probe.num_rows or not self.table.num_rows:
            return self.table.slice(0, 0)
        held = KeyHasher.hash_keys(self.table.select(list(spec)))
        return self.table.filter(pa.array(np.isin(held, KeyHasher.hash_keys(probe))))
