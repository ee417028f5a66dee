"""Operator state held on the driver as Arrow, indexed by key hash, for small steps.

Every state run is an immutable parquet file (``state.StateStore``); this
cache keeps the same runs in driver memory as Arrow tables, so a step whose
change is small reads only the state rows of the keys it touches instead of
scanning the runs.  Per run and per *key spec* (the SQL expressions an
operator matches state on: group keys, join keys, all columns), the cache
builds an index once: the 64-bit hash of every row's key, sorted, with the
row positions.  A lookup hashes the probe keys the same way and binary-searches
each run, so its cost follows the number of probe keys and matching rows,
not the size of the state.

Hash equality is necessary but not sufficient for key equality: a lookup
returns a superset of the matching rows, and every consumer applies its exact
(NULL-safe) key match afterwards.  Values are normalized before hashing so
that keys that compare equal in SQL hash equally: every number, date and
timestamp as a DOUBLE.

The cache is bounded (``budget_bytes``); a run that does not fit is not cached,
and an operator whose runs are not all cached is read by Spark.
"""
from __future__ import annotations

import os
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

Spec = Tuple[str, ...]   # key expressions (DuckDB SQL over c0..) a state is looked up by

DEFAULT_BUDGET_BYTES = int(os.environ.get("SQLENGINE_STATE_CACHE_BYTES", str(8 << 30)))


def _normalized(t: pa.Table) -> pd.DataFrame:
    """Key columns as pandas, with values that compare equal in SQL made identical: every number, date,
    timestamp and boolean as a DOUBLE (-0.0 as 0.0; NULL as NaN), everything else as it is."""
    out = {}
    for i, c in enumerate(t.columns):
        ty = c.type
        if pa.types.is_date(ty):
            c = c.cast(pa.timestamp("us"))
            ty = c.type
        if pa.types.is_timestamp(ty):
            c = c.cast(pa.int64())
        if pa.types.is_integer(c.type) or pa.types.is_floating(c.type) or pa.types.is_decimal(c.type) \
                or pa.types.is_boolean(c.type):
            v = c.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False) + 0.0
        else:
            v = c.to_pandas()
        out[f"k{i}"] = v
    return pd.DataFrame(out)


def _is_column(e: str) -> bool:
    return e.startswith("c") and e[1:].isdigit()


class KeyHasher:
    """Hashes of key expressions over Arrow tables.  Plain columns are read directly; other expressions are
    evaluated by a private DuckDB connection."""

    def __init__(self):
        self.con = duckdb.connect(":memory:")
        self.con.execute("SET TimeZone = 'UTC'")
        self.lock = threading.Lock()

    def keys(self, t: pa.Table, spec: Spec) -> pa.Table:
        """The key expressions' values for every row of ``t`` (columns k0..)."""
        if all(_is_column(e) for e in spec):
            return t.select(list(spec))
        with self.lock:
            self.con.register("__t", t)
            try:
                return self.con.sql(f"SELECT {', '.join(f'({e}) AS k{i}' for i, e in enumerate(spec))} "
                                    "FROM __t").to_arrow_table()
            finally:
                self.con.unregister("__t")

    @staticmethod
    def hash_keys(keys: pa.Table) -> np.ndarray:
        """uint64 hash of each row of a key table (as returned by :meth:`keys`)."""
        if keys.num_rows == 0:
            return np.zeros(0, np.uint64)
        return pd.util.hash_pandas_object(_normalized(keys), index=False).to_numpy()

    def hashes(self, t: pa.Table, spec: Spec) -> np.ndarray:
        return self.hash_keys(self.keys(t, spec))


class StateCache:
    """Runs of operator state as Arrow tables on the driver, with per-spec key-hash indexes."""

    def __init__(self, root: str, budget_bytes: int = DEFAULT_BUDGET_BYTES):
        self.root = root
        self.budget = budget_bytes
        self.hasher = KeyHasher()
        self.tables: Dict[str, pa.Table] = {}                       # run path -> rows
        self.index: Dict[Tuple[str, Spec], Tuple[np.ndarray, np.ndarray]] = {}
        self.used = 0
        self.lock = threading.RLock()

    # ------------------------------------------------------------ contents
    def put(self, path: str, table: pa.Table) -> bool:
        """Cache a run written by this process (its rows are already in memory)."""
        with self.lock:
            if path in self.tables:
                return True
            if self.used + table.nbytes > self.budget:
                return False
            table = table.combine_chunks()   # so that take() of a few rows does not concatenate the chunks
            self.tables[path] = table
            self.used += table.nbytes
            return True

    def drop(self, path: str) -> None:
        """Forget one run (and its indexes)."""
        with self.lock:
            t = self.tables.pop(path, None)
            if t is not None:
                self.used -= t.nbytes
            for k in [k for k in self.index if k[0] == path]:
                self.index.pop(k)

    def load(self, path: str, schema: pa.Schema) -> Optional[pa.Table]:
        with self.lock:
            t = self.tables.get(path)
            if t is not None:
                return t
            meta = pq.read_metadata(os.path.join(self.root, path))
            size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if self.used + size > self.budget:
                return None
            t = pq.read_table(os.path.join(self.root, path)).cast(schema)
            return t if self.put(path, t) else None

    def retain(self, live: Sequence[str]) -> None:
        """Forget runs no longer listed by the current manifest (merged away or dropped)."""
        live = set(live)
        with self.lock:
            for p in [p for p in self.tables if p not in live]:
                self.used -= self.tables.pop(p).nbytes
            for k in [k for k in self.index if k[0] not in live]:
                self.index.pop(k)

    def all_cached(self, paths: Sequence[str], schema: pa.Schema) -> bool:
        return all(self.load(p, schema) is not None for p in paths)

    # ------------------------------------------------------------ reads
    def full(self, paths: Sequence[str], schema: pa.Schema) -> pa.Table:
        """Every row of the runs (unconsolidated)."""
        parts = [self.load(p, schema) for p in paths]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _run_index(self, path: str, spec: Spec) -> Tuple[np.ndarray, np.ndarray]:
        key = (path, spec)
        with self.lock:
            ix = self.index.get(key)
        if ix is None:
            h = self.hasher.hashes(self.tables[path], spec)
            order = np.argsort(h, kind="stable")
            ix = (h[order], order)
            with self.lock:
                self.index[key] = ix
        return ix

    def lookup(self, paths: Sequence[str], schema: pa.Schema, spec: Spec, probe: np.ndarray) -> pa.Table:
        """Rows of the runs whose key hash is in ``probe`` (a superset of the rows whose key equals a probe
        key), unconsolidated."""
        probe = np.unique(probe)
        parts = []
        for p in paths:
            t = self.load(p, schema)
            hs, order = self._run_index(p, spec)
            lo = np.searchsorted(hs, probe, side="left")
            hi = np.searchsorted(hs, probe, side="right")
            hit = hi > lo
            if not hit.any():
                continue
            idx = np.concatenate([order[a:b] for a, b in zip(lo[hit], hi[hit])])
            parts.append(t.take(pa.array(np.sort(idx))))
        return pa.concat_tables(parts) if parts else schema.empty_table()
