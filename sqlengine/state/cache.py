"""Operator state held on the driver as Arrow, indexed by key hash, for small steps.

Every state run is an immutable parquet file (``store.StateStore``); this
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
timestamp as a DOUBLE (see ``_column_hash``).

The cache's memory is bounded (``budget_bytes``).  A run that does not fit goes to
the **disk tier**: its rows are read from an uncompressed Arrow IPC copy of the run
(written once, streaming from the parquet file when needed), memory-mapped, so a
lookup reads only the pages of the rows it takes and the operating system's page
cache keeps the hot ones; such runs count nothing against the budget.  Key indexes
of big runs are built segment by segment (``SEGMENT_ROWS`` rows hashed and sorted at
a time) straight into a memory-mapped file, so neither building nor searching one
holds the whole index in memory.  With ``SQLENGINE_STATE_DISK=0`` a run that does not
fit is not cached, and an operator whose runs are not all cached is read by Spark.

Big runs (``SIDECAR_ROWS`` rows and more) leave two kinds of *sidecar* files
beside their parquet file, so that a restarted pipeline does not decode,
re-hash and re-sort them: ``<run>.arrow``, the rows as one uncompressed Arrow
IPC batch that is memory-mapped on load (pages are read when a lookup touches
them), and ``<run>.<spec>.idx.npy``, the sorted hashes and row positions of one
key spec, memory-mapped too.  Sidecars are caches: written atomically, never
fsynced, ignored when missing, and removed with their run.
"""
from __future__ import annotations

import hashlib
import os
import threading
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sqlengine import nested, private_duckdb

Spec = Tuple[str, ...]   # key expressions (DuckDB SQL over c0..) a state is looked up by

DEFAULT_BUDGET_BYTES = int(os.environ.get("SQLENGINE_STATE_CACHE_BYTES", str(8 << 30)))
SIDECAR_ROWS = int(os.environ.get("SQLENGINE_SIDECAR_ROWS", "100000"))
# Runs that do not fit the budget are read from their memory-mapped Arrow sidecar (the disk tier) unless this
# is "0"; then they are not cached at all and steps that read them run on Spark.
DISK_TIER = os.environ.get("SQLENGINE_STATE_DISK", "1") != "0"
SEGMENT_ROWS = 1 << 22   # an index is built and searched in sorted segments of this many rows (bounded memory)


def sidecar_of(name: str) -> Optional[str]:
    """The run file a sidecar file name belongs to (None for a file that is not a sidecar)."""
    if ".parquet." in name and not name.endswith(".tmp"):
        return name.split(".parquet.", 1)[0] + ".parquet"
    return None


def _atomic(path: str, write) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError:   # a sidecar is only a cache: without it the run is read from parquet
        try:
            os.remove(tmp)
        except OSError:
            pass


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, vectorized (uint64 arithmetic wraps)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _column_hash(c) -> np.ndarray:
    """uint64 hash per value, equal for values that compare equal in SQL: every number, date, timestamp and
    boolean as a DOUBLE (-0.0 as 0.0; NULL and NaN as one NaN), a nested value by its key's text, everything
    else by pandas' value hash."""
    ty = c.type
    if pa.types.is_date(ty):
        c = c.cast(pa.timestamp("us"))
        ty = c.type
    if pa.types.is_timestamp(ty):
        c = c.cast(pa.int64())
    if pa.types.is_integer(c.type) or pa.types.is_floating(c.type) or pa.types.is_decimal(c.type) \
            or pa.types.is_boolean(c.type):
        v = np.array(c.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64) + 0.0
        v[np.isnan(v)] = np.nan
        return _mix(v.view(np.uint64))
    if nested.is_nested_arrow(c.type):   # by its canonical key (sqlengine.nested)
        c = nested.hash_key(c)
    return pd.util.hash_array(np.asarray(c.to_pandas(), dtype=object))


def is_column(e: str) -> bool:
    """Is key expression ``e`` a plain column (``c<n>``)?"""
    return e.startswith("c") and e[1:].isdigit()


class KeyHasher:
    """Hashes of key expressions over Arrow tables.  Plain columns are read directly; other expressions are
    evaluated by a private DuckDB connection."""

    def __init__(self):
        self.con = private_duckdb.connect()
        self.lock = threading.Lock()

    def keys(self, t: pa.Table, spec: Spec) -> pa.Table:
        """The key expressions' values for every row of ``t`` (columns k0..); NULL where one fails on a row (an
        overflow in ``a + 1``: that row's key meets no probe's, and a read by key is a superset anyway)."""
        if all(is_column(e) for e in spec):
            return t.select(list(spec))
        with self.lock:
            self.con.register("__t", t)
            try:
                return self.con.sql(f"SELECT {', '.join(f'TRY({e}) AS k{i}' for i, e in enumerate(spec))} "
                                    "FROM __t").to_arrow_table()
            finally:
                self.con.unregister("__t")

    @staticmethod
    def hash_keys(keys: pa.Table) -> np.ndarray:
        """uint64 hash of each row of a key table (as returned by :meth:`keys`)."""
        if keys.num_rows == 0:
            return np.zeros(0, np.uint64)
        h = np.full(keys.num_rows, np.uint64(0x9E3779B97F4A7C15))
        for i, c in enumerate(keys.columns):
            h = _mix(h ^ (_column_hash(c) + np.uint64(i + 1)))
        return h

    def hashes(self, t: pa.Table, spec: Spec) -> np.ndarray:
        return self.hash_keys(self.keys(t, spec))


def distinct_sorted(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, ascending (a sort and a mask: faster than ``np.unique``'s hash table on
    a million hashes, and sorted probes make the binary searches that follow cache-friendly)."""
    a = np.sort(a)
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` for every i, without a Python loop (a lookup of a bulk
    change hits hundreds of thousands of keys)."""
    lens = hi - lo
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo - (np.cumsum(lens) - lens), lens)
    return starts + np.arange(total, dtype=starts.dtype)


def take_sorted(t: pa.Table, idx: np.ndarray, window: int = 1 << 16, mapped: bool = True) -> pa.Table:
    """Rows ``idx`` (ascending) of ``t``, taken from zero-copy slices of ``window`` rows: ``Table.take`` over
    the whole of a memory-mapped run reads all of its pages (and over many chunks concatenates them first).  A
    run in memory (not ``mapped``) of one chunk is taken from at once (a take per window cost a step
    milliseconds per run of millions of rows)."""
    if t.num_rows <= window or (not mapped and all(c.num_chunks == 1 for c in t.columns)):
        return t.take(pa.array(idx))
    starts = np.arange(0, t.num_rows, window)
    cuts = np.searchsorted(idx, np.append(starts, t.num_rows))
    parts = [t.slice(int(a), window).take(pa.array(idx[cuts[i]:cuts[i + 1]] - a))
             for i, a in enumerate(starts) if cuts[i + 1] > cuts[i]]
    return pa.concat_tables(parts) if parts else t.schema.empty_table()


def _load_index(side: str, n: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """A run's index sidecar of ``n`` rows, memory-mapped: (hashes, positions); None if unreadable or of
    another length."""
    try:
        a = np.load(side, mmap_mode="r")
    except (OSError, ValueError):
        return None
    return (a[0], a[1].view(np.int64)) if a.shape == (2, n) else None


class StateCache:
    """Runs of operator state as Arrow tables on the driver, with per-spec key-hash indexes."""

    def __init__(self, root: str, budget_bytes: int = DEFAULT_BUDGET_BYTES, disk: Optional[bool] = None):
        self.root = root
        self.budget = budget_bytes
        self.disk = DISK_TIER if disk is None else disk
        self.hasher = KeyHasher()
        self.tables: Dict[str, pa.Table] = {}                       # run path -> rows in memory
        self.mapped: Dict[str, pa.Table] = {}                       # run path -> rows memory-mapped (disk tier)
        self.index: Dict[Tuple[str, Spec], Tuple[np.ndarray, np.ndarray]] = {}
        self.used = 0
        self.lock = threading.RLock()

    # ------------------------------------------------------------ contents
    def put(self, path: str, table: pa.Table) -> bool:
        """Cache a run written by this process (its rows are already in memory): in memory when it fits the
        budget, else (disk tier) as its memory-mapped Arrow copy."""
        with self.lock:
            if path in self.tables or path in self.mapped:
                return True
            fits = self.used + table.nbytes <= self.budget
            if fits:
                table = table.combine_chunks()   # so that take() of a few rows does not concatenate the chunks
                self.tables[path] = table
                self.used += table.nbytes
        if not fits and not self.disk:
            return False
        if (not fits or table.num_rows >= SIDECAR_ROWS) and not os.path.exists(self._ipc(path)):
            _atomic(self._ipc(path), lambda tmp: self._write_ipc(tmp, table))
        return True if fits else self._map(path, table.schema) is not None

    def _map(self, path: str, schema: pa.Schema) -> Optional[pa.Table]:
        """The run's Arrow copy, memory-mapped, in the disk tier (None if it cannot be read)."""
        t = self._read_ipc(path, schema)
        if t is not None:
            with self.lock:
                self.mapped[path] = t
        return t

    def _table(self, path: str) -> pa.Table:
        t = self.tables.get(path)
        return t if t is not None else self.mapped[path]

    @staticmethod
    def _copy_parquet(src: str, schema: pa.Schema):
        """A writer of ``src``'s rows as an Arrow IPC file, batch by batch (memory: one batch)."""
        def write(tmp: str) -> None:
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as w:
                for b in pq.ParquetFile(src).iter_batches(batch_size=1 << 16):
                    w.write_table(pa.Table.from_batches([b]).cast(schema))
        return write

    def _ipc(self, path: str) -> str:
        return os.path.join(self.root, path + ".arrow")

    @staticmethod
    def _write_ipc(tmp: str, table: pa.Table) -> None:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=max(1, table.num_rows))

    def _read_ipc(self, path: str, schema: pa.Schema) -> Optional[pa.Table]:
        try:
            t = pa.ipc.open_file(pa.memory_map(self._ipc(path))).read_all()
        except (OSError, pa.ArrowInvalid):
            return None
        if t.schema.equals(schema):
            return t
        try:
            return t.cast(schema)   # a copy in memory: only sidecars of another schema (older runs) need it
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None

    def drop(self, path: str) -> None:
        """Forget one run (and its indexes)."""
        with self.lock:
            t = self.tables.pop(path, None)
            if t is not None:
                self.used -= t.nbytes
            self.mapped.pop(path, None)
            for k in [k for k in self.index if k[0] == path]:
                self.index.pop(k)

    def load(self, path: str, schema: pa.Schema) -> Optional[pa.Table]:
        """The run's rows: from memory, else read into memory when they fit the budget, else (disk tier)
        memory-mapped from the run's Arrow copy, made now from the parquet file if there is none; None
        when the run does not fit and the disk tier is off."""
        with self.lock:
            t = self.tables.get(path)
            if t is None:
                t = self.mapped.get(path)
            if t is not None:
                return t
            t = self._read_ipc(path, schema) if os.path.exists(self._ipc(path)) else None
            if t is not None:
                if self.used + t.nbytes <= self.budget:
                    return t if self.put(path, t) else None
                if not self.disk:
                    return None
                self.mapped[path] = t
                return t
            src = os.path.join(self.root, path)
            meta = pq.read_metadata(src)
            size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if self.used + size <= self.budget:
                t = pq.read_table(src).cast(schema)
                if self.put(path, t):
                    return t
            if not self.disk:
                return None
            _atomic(self._ipc(path), self._copy_parquet(src, schema))
            return self._map(path, schema)

    def hold_nothing(self) -> None:
        """Drop every run and hold none from now on (budget 0, disk tier off): state is read from its files, as
        when it outgrows the driver with ``SQLENGINE_STATE_DISK=0``."""
        self.budget, self.disk = 0, False
        self.retain([])

    def retain(self, live: Sequence[str]) -> None:
        """Forget runs no longer listed by the current manifest (merged away or dropped)."""
        live = set(live)
        with self.lock:
            for p in [p for p in self.tables if p not in live]:
                self.used -= self.tables.pop(p).nbytes
            for p in [p for p in self.mapped if p not in live]:
                del self.mapped[p]
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
        """(hashes, row positions) of the run's keys, sorted within each segment of ``SEGMENT_ROWS`` rows;
        for big runs and runs in the disk tier, memory-mapped from a sidecar built segment by segment."""
        key = (path, spec)
        with self.lock:
            ix = self.index.get(key)
        if ix is None:
            table = self._table(path)
            n = table.num_rows
            tag = hashlib.sha1(repr(spec).encode()).hexdigest()[:12]
            side = os.path.join(self.root, f"{path}.{tag}.s{SEGMENT_ROWS.bit_length() - 1}.idx.npy")
            ix = _load_index(side, n) if os.path.exists(side) else None
            if ix is None and (n >= SIDECAR_ROWS or path in self.mapped):
                _atomic(side, lambda tmp: self._build_index(tmp, table, spec))
                ix = _load_index(side, n)
            if ix is None:   # a small run (or the sidecar could not be written): in memory
                h = self.hasher.hashes(table, spec)
                order = np.argsort(h)     # any order of equal hashes: lookups sort the positions they take
                ix = (h[order], order)
            with self.lock:
                self.index[key] = ix
        return ix

    def index_like(self, path: str, others: Sequence[str]) -> None:
        """Build the indexes of run ``path`` by every key runs ``others`` are indexed by: a merge's new run, on
        the merge's thread, so that the first step that looks it up does not wait for its indexes (hashing
        and sorting millions of rows)."""
        with self.lock:
            specs = {spec for (p, spec) in self.index if p in set(others)}
        if specs and self.load_cached(path) is not None:
            for spec in specs:
                self._run_index(path, spec)

    def load_cached(self, path: str) -> Optional[pa.Table]:
        with self.lock:
            t = self.tables.get(path)
            return t if t is not None else self.mapped.get(path)

    def _build_index(self, tmp: str, table: pa.Table, spec: Spec) -> None:
        """Write the (2, n) index of ``table`` to ``tmp``: hashes, then positions, sorted per segment; one
        segment's hashes are in memory at a time."""
        n = table.num_rows
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint64, shape=(2, n))
        for a in range(0, n, SEGMENT_ROWS):
            h = self.hasher.hashes(table.slice(a, SEGMENT_ROWS), spec)
            order = np.argsort(h)
            out[0, a:a + len(h)] = h[order]
            out[1, a:a + len(h)] = (order.astype(np.int64) + a).view(np.uint64)
        out.flush()
        del out

    def lookup(self, paths: Sequence[str], schema: pa.Schema, spec: Spec, probe: np.ndarray) -> pa.Table:
        """Rows of the runs whose key hash is in ``probe`` (a superset of the rows whose key equals a probe
        key), unconsolidated."""
        probe = distinct_sorted(probe)
        parts = []
        for p in paths:
            t = self.load(p, schema)
            hs, order = self._run_index(p, spec)
            found = []
            for a in range(0, len(hs), SEGMENT_ROWS):   # each segment is sorted on its own
                seg = hs[a:a + SEGMENT_ROWS]
                lo = np.searchsorted(seg, probe, side="left")
                hi = np.searchsorted(seg, probe, side="right")
                hit = hi > lo
                if hit.any():
                    found.append(order[a + expand_ranges(lo[hit], hi[hit])])   # reads only those positions
            if not found:
                continue
            idx = np.concatenate(found) if len(found) > 1 else np.asarray(found[0])
            parts.append(take_sorted(t, np.sort(idx), mapped=p not in self.tables))
        return pa.concat_tables(parts) if parts else schema.empty_table()
