"""Reading a run's rows by the values of its sort column on the driver, through its row groups' statistics.

Runs that Spark may read by key are written sorted by a sort column, in small row groups
(``store.ROW_GROUP_ROWS``; see ``executor.keyed_reads``).  The min/max statistics in a run's parquet footer
then say which row groups can hold a given value, so the driver can read a key's rows from a run that its
state cache does not hold by decoding those row groups only: a step whose change is small runs on the driver
(DuckDB) even when its state is only on disk, without a Spark job (``LocalExecutor.read``).  The rows read are
a superset of those with the values asked for (a whole row group, filtered by the sort column only); every
reader applies its exact key match afterwards.
"""
from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


@dataclass(frozen=True)
class GroupStats:
    rows: List[int]
    mins: List[object]    # None: no statistics (the group may hold anything)
    maxs: List[object]
    nulls: List[int]      # -1: unknown


def group_stats(path: str, column: str) -> GroupStats:
    """Per row group of the parquet file at ``path``: its rows, and min, max and NULL count of ``column``."""
    md = pq.read_metadata(path)
    names = [md.schema.column(j).path for j in range(md.num_columns)]
    j = names.index(column)
    rows, mins, maxs, nulls = [], [], [], []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        st = rg.column(j).statistics
        rows.append(rg.num_rows)
        known = st is not None and st.has_min_max
        mins.append(st.min if known else None)
        maxs.append(st.max if known else None)
        nulls.append(st.null_count if st is not None and st.has_null_count else -1)
    return GroupStats(rows, mins, maxs, nulls)


def column_min(paths: Sequence[str], column: str) -> Optional[object]:
    """The least value of ``column`` over the parquet files at ``paths``, from their footers' statistics alone;
    None when a non-empty row group has none (or only NULLs), or there are no rows."""
    least = None
    for path in paths:
        stats = group_stats(path, column)
        for rows, lo in zip(stats.rows, stats.mins):
            if rows == 0:
                continue
            if lo is None:
                return None
            least = lo if least is None or lo < least else least
    return least


def matching_groups(stats: GroupStats, values: Sequence, has_null: bool) -> List[int]:
    """The row groups that can hold one of ``values`` (sorted, no NULL), or a NULL when ``has_null``."""
    out = []
    for i, (lo, hi, n) in enumerate(zip(stats.mins, stats.maxs, stats.nulls)):
        if has_null and n != 0:
            out.append(i)
            continue
        if lo is None:
            if n != stats.rows[i]:   # no statistics, or only NULLs (then nothing matches a value)
                out.append(i)
            continue
        k = bisect.bisect_left(values, lo)
        if k < len(values) and values[k] <= hi:
            out.append(i)
    return out


class RowGroupReader:
    """Reads runs' rows by sort-column values, keeping each run's row-group statistics (runs never change)."""

    def __init__(self, root: str):
        self.root = root
        self._stats: Dict[tuple, GroupStats] = {}
        self._lock = threading.Lock()
        self.rows_read = 0     # rows decoded, for tests and benchmarks

    def read(self, path: str, schema: pa.Schema, column: str, values: list, has_null: bool,
             limit: int) -> Optional[pa.Table]:
        """Rows of run ``path`` (relative to the state dir) whose ``column`` is one of ``values`` or (with
        ``has_null``) NULL: a superset of them (a whole row group is filtered by ``column`` alone); None when
        the row groups that can hold them have more than ``limit`` rows."""
        full = os.path.join(self.root, path)
        with self._lock:
            stats = self._stats.get((path, column))
        if stats is None:
            stats = group_stats(full, column)
            with self._lock:
                self._stats[(path, column)] = stats
        values = sorted(values)
        groups = matching_groups(stats, values, has_null)
        if sum(stats.rows[i] for i in groups) > limit:
            return None
        if not groups:
            return schema.empty_table()
        t = pq.ParquetFile(full).read_row_groups(groups).cast(schema)
        self.rows_read += t.num_rows
        c = t.column(column)
        keep = pc.is_in(c, value_set=pa.array(values, c.type))
        if has_null:
            keep = pc.or_(keep, pc.is_null(c))
        return t.filter(keep)

    def retain(self, live: Sequence[str]) -> None:
        """Forget the statistics of runs no longer listed (merged away or dropped)."""
        live = set(live)
        with self._lock:
            for k in [k for k in self._stats if k[0] not in live]:
                del self._stats[k]
