"""Running a small step on the driver: DuckDB over Arrow, state read through the key-hash cache.

A Spark job has a fixed cost of tens of milliseconds even for ten rows, and a
step of a realistic circuit needs several, so a step of a few hundred changed
rows would cost a large fraction of a second on Spark whatever the size of the state; and with a
local master, Spark runs on the same cores as the driver, where DuckDB loads a
million rows several times faster (benchmarks/RESULTS.md).  When every state a step
reads is in the driver's state cache, and Spark is local or the step's input
is small (see :mod:`sqlengine.executor.placement`), the engine runs the step here: the same operators,
lowered to DuckDB SQL (:mod:`sqlengine.executor.backends.duckdb`), reading only the state
rows of the keys the change touches.  The step writes the same runs and
commits the same manifest as a Spark step, so the two paths interleave freely
(a bulk load on Spark, then small steps on the driver).  A Spark step also runs single operators here,
where their changes are (``SparkStep._driver_op``, ``Placement.ops_on_driver``), reading their state with
``op_reads(scan=True)``: by key, or by a scan of the runs' files for the changes' keys (``scanner``: DuckDB's
``scan_runs`` with a local master, a Spark job with a cluster master).
"""
from __future__ import annotations

import functools
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Set, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sqlengine import nested
from sqlengine.executor import arrow_ops
from sqlengine.executor import keyed_reads
from sqlengine.executor import ops, step as step_loop
from sqlengine.executor.casts import cast_to
from sqlengine.executor.context import StepContext
from sqlengine.executor.delta_rules import cols
from sqlengine.executor.backends.python_calls import register_duckdb
from sqlengine.executor.backends.duckdb import DuckDBBackend, quoted
from sqlengine.executor.ops import aggregate as agg_op, join as join_op, map as map_op
from sqlengine.executor.row_errors import RowErrors, field_labels, named_row
from sqlengine.executor.state_lookups import Lookup
from sqlengine.state.store import Manifest, Run
from sqlengine.state.cache import StateCache, is_column
from sqlengine.state.row_groups import RowGroupReader
from sqlengine.zset import W, all_positive, consolidate_arrow, total_weight, with_zero_signs

SQL_INTEGER = {8: "TINYINT", 16: "SMALLINT", 32: "INT", 64: "BIGINT"}


class NeedsSpark(Exception):
    """A driver step cannot read some state it needs: not cached, and not readable by key from its files."""


def scannable(schema: pa.Schema, spec: tuple, probes: List[tuple]) -> bool:
    """Can a scan find the rows of a state (``schema``) whose ``spec`` columns equal those of some probe row
    (``(table, its key columns)``)?  NeedsSpark when a key is not a plain column; False when there is no probe
    (nothing to find)."""
    if not all(is_column(c) and c in schema.names for c in spec) or \
            not all(is_column(c) and c in t.column_names for t, ps in probes for c in ps):
        raise NeedsSpark(f"a read by {spec} is not by columns: it cannot be scanned")
    return bool(probes)


def release_memory() -> None:
    """Return the memory a big step freed to the operating system: Arrow's pool (see
    ``sqlengine.arrow_memory``; an allocator keeps freed pages for reuse) and glibc's heap, so that the
    process's resident heap follows the state cache's budget rather than the biggest step it ever ran."""
    pa.default_memory_pool().release_unused()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc
        pass


FIRST_DAY, LAST_DAY = -719162, 2932896   # 0001-01-01 and 9999-12-31, in days since 1970-01-01


def outside_years(c) -> Optional[pa.ChunkedArray]:
    """Which values of a DATE or TIMESTAMP column fall outside the years 1 to 9999, or of a nested column hold
    such a value at any depth (None: none do)."""
    if nested.is_nested_arrow(c.type):
        if not _holds_dates(c.type):
            return None
        arr = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
        outside = pa.array(_nested_outside(arr), pa.bool_())
        return outside if pc.any(outside).as_py() else None
    if pa.types.is_date(c.type):
        days = c.cast(pa.date32()).cast(pa.int32())
        lo, hi = FIRST_DAY, LAST_DAY
    else:
        days = c.cast(pa.timestamp("us"), safe=False).cast(pa.int64())
        lo, hi = FIRST_DAY * 86_400_000_000, (LAST_DAY + 1) * 86_400_000_000 - 1
    outside = pc.fill_null(pc.or_(pc.less(days, lo), pc.greater(days, hi)), False)
    return outside if pc.any(outside).as_py() else None


def _holds_dates(t: pa.DataType) -> bool:
    return nested.holds(t, lambda x: pa.types.is_date(x) or pa.types.is_timestamp(x))


def _nested_outside(a: pa.Array) -> np.ndarray:
    """Per value of ``a`` (any type): whether it is, or holds at any depth, a DATE or TIMESTAMP outside the years
    1 to 9999."""
    n = len(a)
    t = a.type
    if not _holds_dates(t):
        return np.zeros(n, bool)
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        got = outside_years(a)
        return np.zeros(n, bool) if got is None else got.to_numpy(zero_copy_only=False)
    if pa.types.is_struct(t):
        out = np.zeros(n, bool)
        for i in range(t.num_fields):
            out |= _nested_outside(pc.struct_field(a, [i]))
        return out
    offsets = a.offsets.to_numpy(zero_copy_only=False)   # (by the offsets: Arrow's list kernels abort on a map)
    values = a.values.slice(offsets[0], offsets[-1] - offsets[0])
    parents = np.repeat(np.arange(n), np.diff(offsets))
    if pa.types.is_map(t):
        inner = _nested_outside(pc.struct_field(values, [0])) | _nested_outside(pc.struct_field(values, [1]))
    else:
        inner = _nested_outside(values)
    out = np.zeros(n, bool)
    np.logical_or.at(out, parents[inner], True)
    return out & a.is_valid().to_numpy(zero_copy_only=False)


class LocalExecutor:
    """Runs steps of ``ctx``'s circuit on the driver, and reads and writes its state runs there."""

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self.cache = StateCache(ctx.store.root)
        if not ctx.placement.cache_state:
            self.cache.hold_nothing()
        self.files = RowGroupReader(ctx.store.root)   # uncached state read by key from its runs' files
        self.lowerer = DuckDBBackend()
        self.lowerer.op_views = ctx.op_views
        register_duckdb(self.lowerer.con, ctx.functions)   # the program's Python functions, where rules and keys run
        self.lowerer.python_names = frozenset(n.lower() for n in ctx.functions)
        register_duckdb(self.cache.hasher.con, ctx.functions)
        self._writer: Optional[ThreadPoolExecutor] = None   # writes a step's state runs while the step goes on
        self._writes: List[Future] = []
        self._bulk: Optional[DuckDBBackend] = None   # DuckDB for scans of whole states (scan_runs)
        self._run_weights: Dict[str, int] = {}   # run path -> the sum of its weights (_weight; a run never changes)
        # scans the runs of an op for the keys of probes: (op id, files, schema, spec, probes, limit) -> rows (set by
        # the engine: ``scan_runs`` with a local master, a Spark job with a cluster master)
        self.scanner: Optional[Callable] = None

    @property
    def placement(self):
        return self.ctx.placement

    def run_order(self, op_id: int) -> Optional[str]:
        """The column new runs of ``op_id`` are sorted by, when Spark may read them by key: with a cluster master
        (large steps run there), or with the driver's disk tier off (state beyond the cache's budget is read by
        Spark).  With a local master and the disk tier on, every step whose input is on the driver runs there,
        reading state through the cache's own key index, so the order would buy nothing."""
        if self.ctx.local_master and self.cache.disk:
            return None
        return self.ctx.sort_columns.get(op_id)

    def write_state_run(self, op_id: int, t: pa.Table, step: int, tag: str = "d") -> Tuple[Run, pa.Table]:
        """Write a run of ``op_id``'s state in its run order (sorted, in small row groups, where Spark may read it
        by key): the run, and its rows as written (for the cache)."""
        order = self.run_order(op_id)
        t = keyed_reads.sorted_run(t, order)
        run = self.ctx.store.write_run(self.ctx.keys[op_id], t, step, tag=tag, small_groups=order is not None)
        self._run_weights.pop(run.path, None)   # (a failed attempt of the step may have written one of that name)
        return run, t

    def scan_with_duckdb(self, op_id: int, files: List[str], schema: pa.Schema, spec: tuple, probes: List[tuple],
                         limit: Optional[int]) -> pa.Table:
        """``scan_runs`` as a ``scanner``."""
        return self.scan_runs(files, schema, spec, probes, limit)

    # ------------------------------------------------------------ state
    def _runs(self, op_id: int, m: Manifest) -> List[str]:
        return [r.path for r in self.ctx.store.runs(self.ctx.keys[op_id], m)]

    def cached(self, op_id: int, m: Manifest) -> bool:
        d = self.ctx.derived.get(op_id)
        if d is not None:
            return all(self.cached(b, m) for b in d.base)
        return self.cache.all_cached(self._runs(op_id, m), self.ctx.state_arrow[op_id])

    def read(self, op_id: int, m: Manifest, spec: tuple, probe_tables: List[pa.Table],
             probe_specs: List[tuple], scan: bool = False) -> pa.Table:
        """State rows of ``op_id`` (a superset of those) whose ``spec`` key equals the key of some probe row;
        an empty ``spec`` reads all of it.  ``scan``: runs not cached that the probes' keys cannot narrow to a
        few row groups are scanned whole by ``scanner`` (the engine's: DuckDB with a local master, a Spark job
        with a cluster master), up to ``placement.scan_rows`` matching rows, instead of raising NeedsSpark."""
        d = self.ctx.derived.get(op_id)
        if d is not None:   # the table's rows of the key (or the join's), through the chain of maps
            rows = self._read_below(d, m, spec, probe_tables, probe_specs, scan)
            for op in d.chain:
                rows = cast_to(map_op.local(self.lowerer, op, [rows]), self.ctx.arrow_schemas[op.id])
            return cast_to(rows, self.ctx.state_arrow[op_id])
        paths, schema = self._runs(op_id, m), self.ctx.state_arrow[op_id]
        cached, on_disk, held = [], [], 0
        for p in paths:
            run = self.cache.load(p, schema)
            (cached if run is not None else on_disk).append(p)
            held += run.num_rows if run is not None else 0
        parts = []
        if on_disk:
            parts.append(self._read_files(op_id, on_disk, schema, spec, probe_tables, probe_specs, scan))
        if not spec or sum(t.num_rows for t in probe_tables if t is not None) >= held:
            parts.append(self.cache.full(cached, schema))   # (as many probes as rows: hashing them saves nothing)
        elif cached:
            hashes = [self.cache.hasher.hashes(t, s) for t, s in zip(probe_tables, probe_specs) if t is not None]
            probe = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
            parts.append(self.cache.lookup(cached, schema, spec, probe))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts) if parts else schema.empty_table()

    def _read_files(self, op_id: int, paths: List[str], schema: pa.Schema, spec: tuple,
                    probe_tables: List[pa.Table], probe_specs: List[tuple], scan: bool = False) -> pa.Table:
        """Rows of runs not cached whose ``spec`` key can equal a probe row's, read from their files through the
        row groups that can hold the probes' values of the op's sort column; when the read cannot be narrowed
        so (see ``keyed_reads.key_filter``) or would decode more than ``placement.file_read_rows`` rows: scanned by DuckDB
        with ``scan``, else NeedsSpark."""
        column = self.ctx.sort_columns.get(op_id)
        found = keyed_reads.key_filter(column, spec, probe_tables, probe_specs, self.placement.max_keys) \
            if column and spec else None

        def scanned() -> pa.Table:
            return self.scanner(op_id, [os.path.join(self.ctx.store.root, p) for p in paths], schema, spec,
                                [(t, s) for t, s in zip(probe_tables, probe_specs) if t is not None], self.placement.scan_rows)
        scan = scan and self.scanner is not None
        if found is None:
            if scan:
                return scanned()
            raise NeedsSpark(f"state #{op_id} is not cached and its read by {spec or 'all rows'} cannot be narrowed")
        values, has_null = found
        parts, left = [], self.placement.file_read_rows
        for p in paths:
            t = self.files.read(p, schema, column, values, has_null, left)
            if t is None:
                if scan:
                    return scanned()
                raise NeedsSpark(f"state #{op_id}: reading {len(values)} keys would decode over {self.placement.file_read_rows} rows")
            left -= t.num_rows
            parts.append(t)
        return pa.concat_tables(parts)

    def scan_runs(self, files: List[str], schema: pa.Schema, spec: tuple, probes: List[tuple],
              limit: Optional[int]) -> pa.Table:
        """Rows of the run ``files`` whose ``spec`` columns equal, NULL-safely, those of some row of a probe
        (``(table, its key columns)``; an empty ``spec``: every row): DuckDB scans the files, in parallel and
        streaming, and semi-joins them with the probes' distinct keys, so memory follows the probes and the
        result, not the state.  More than ``limit`` rows raise NeedsSpark.  Several times faster than the same
        job on local Spark, which pays for its job and for moving the rows to the driver."""
        if self._bulk is None:
            self._bulk = DuckDBBackend(threads=None)   # one scan of the whole state: DuckDB's parallelism
            register_duckdb(self._bulk.con, self.ctx.functions)
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        sql = f"SELECT {', '.join(f's.{quoted(c)}' for c in schema.names)} FROM read_parquet([{listed}]) s"
        tables = {}
        if spec:
            if not scannable(schema, spec, probes):
                return schema.empty_table()
            keys = []
            for i, (t, ps) in enumerate(probes):
                tables[f"K{i}"] = t.select(list(dict.fromkeys(ps)))
                keys.append("SELECT " + ", ".join(f"{quoted(c)} AS k{j}" for j, c in enumerate(ps)) + f" FROM K{i}")
            # NULL-safe only where a probe has NULLs: with '=', DuckDB pushes the keys' range into the scan, which
            # skips the row groups of sorted runs that cannot hold a key
            nulls = [any(t.column(ps[j]).null_count for t, ps in probes) for j in range(len(spec))]
            on = " AND ".join(f"s.{quoted(c)} {'IS NOT DISTINCT FROM' if n else '='} k.k{j}"
                              for j, (c, n) in enumerate(zip(spec, nulls)))
            sql += f" SEMI JOIN (SELECT DISTINCT * FROM ({' UNION ALL '.join(keys)})) k ON {on}"
        if limit is not None:
            sql += f" LIMIT {limit + 1}"
        rows = self._bulk.run(sql, **tables)
        if limit is not None and rows.num_rows > limit:
            raise NeedsSpark(f"the state's rows of a change's keys are more than {limit}")
        self.ctx.stats.rows_scanned += rows.num_rows
        return cast_to(rows.rename_columns(schema.names), schema)

    def _read_below(self, d, m: Manifest, spec: tuple, probe_tables, probe_specs, scan: bool = False) -> pa.Table:
        """The rows under a derived integral's maps whose key is ``spec``'s: the table's; or, over a join, the
        rows of the side that holds the key joined with the other side's rows that match them."""
        if d.join is None:
            return self.read(d.base[0], m, tuple(f"c{j}" for j in d.below(spec)), probe_tables, probe_specs, scan)
        sides = [ops.probes(d.join)[k].spec for k in (0, 1)]   # each side's join key
        if not spec:
            left, right = (self.read(b, m, (), [], [], scan) for b in d.base)
        else:
            side, key = d.side_of(spec)
            found = self.read(d.base[side], m, key, probe_tables, probe_specs, scan)
            other = self.read(d.base[1 - side], m, sides[1 - side], [found], [sides[side]], scan)
            left, right = (found, other) if side == 0 else (other, found)
        return cast_to(join_op.pairs_local(self.lowerer, d.join, left, right), self.ctx.arrow_schemas[d.join.id]) \
            if left.num_rows and right.num_rows else self.ctx.arrow_schemas[d.join.id].empty_table()

    def stored_rows(self, op_id: int, probe: pa.Table, key_cols: List[str]) -> pa.Table:
        """Committed rows of integral ``op_id`` whose ``key_cols`` hash like those of a row of ``probe``,
        consolidated: a superset of the rows with an equal key, for callers that look rows up by exact key
        (clamping deletes, primary-key upserts)."""
        spec = tuple(key_cols)
        rows = self.read(op_id, self.ctx.store.current, spec, [probe], [spec])
        return consolidate_arrow(rows) if rows.num_rows else rows

    def usable(self, table_deltas: Dict[str, object], need: Set[int], m: Manifest) -> bool:
        """Can this step run here: small Arrow input, every state it touches cached."""
        rows = 0
        for d in table_deltas.values():
            if d is None:
                continue
            if not isinstance(d, pa.Table):
                return False
            rows += d.num_rows
        most = self.placement.step_rows(self.ctx.master)
        if not (0 < most and rows <= most):
            return False
        return self.fits(need, m) or (rows <= self.placement.file_step_rows and self.fits(need, m, by_key=True))

    def fits(self, need: Set[int], m: Manifest, by_key: bool = False) -> bool:
        """Is every state the ops in ``need`` read (as of ``m``) in the cache (loading it if it fits)?  With
        ``by_key``: or may it be read by key from its files (it has a sort column; whether a read can be
        narrowed is known only when it runs, see ``_read_files``)?"""
        eng = self.ctx
        for op in eng.ops:
            if op.id not in need:
                continue
            states = list(op.reads) + ([op.id] if agg_op.accumulates(op) else [])
            if not all(self.cached(s, m) or (by_key and self._by_key(s)) for s in states):
                return False
        return True

    def _by_key(self, op_id: int) -> bool:
        d = self.ctx.derived.get(op_id)
        if d is not None:
            return d.aggregate is None and all(self._by_key(b) for b in d.base)
        return op_id in self.ctx.sort_columns

    # ------------------------------------------------------------ the step
    def finish_change(self, op, out, schema: pa.Schema, consolidate: bool, unless_inserts: bool = False,
                record: bool = True) -> Optional[pa.Table]:
        """The op's change cast to its schema; consolidated when ``consolidate``, except that with
        ``unless_inserts`` a change whose weights are all positive (nothing to cancel) keeps its duplicate rows.
        ``record``: rows out of their type's range are recorded as row errors (see ``_in_range``)."""
        parts = [p for p in (out if isinstance(out, list) else [out]) if p is not None]
        consolidate = consolidate and not isinstance(out, arrow_ops.Consolidated)
        parts = [self._in_range(op, p.rename_columns(schema.names), schema, record) for p in parts if p.num_rows]
        parts = [cast_to(p, schema) for p in parts if p.num_rows]
        if not parts:
            return None
        t = pa.concat_tables(parts)
        if consolidate and not (unless_inserts and all_positive(t)):
            t = consolidate_arrow(t)
        return t if t.num_rows else None

    def _in_range(self, op, t: pa.Table, schema: pa.Schema, record: bool = True) -> pa.Table:
        """``t`` without the rows whose value does not fit its column's integer type (an integer SUM beyond
        BIGINT), or whose DATE or TIMESTAMP is outside the years 1 to 9999 (``DATE '9999-12-31' + 1``: neither
        Spark nor Python holds it): those are row errors, recorded where they are new (positive weight) when
        ``record``."""
        over = {}   # column -> rows out of its type's range
        for f in schema:
            c = t.column(f.name)
            if pa.types.is_date(c.type) or pa.types.is_timestamp(c.type) or nested.is_nested_arrow(c.type):
                outside = outside_years(c)
                if outside is not None:
                    over[f.name] = outside
                continue
            if f.name == W or not pa.types.is_integer(f.type) or c.type == f.type or \
                    not (pa.types.is_decimal(c.type) or pa.types.is_integer(c.type)) or \
                    (pa.types.is_integer(c.type) and c.type.bit_width <= f.type.bit_width):
                continue
            info = np.iinfo(f.type.to_pandas_dtype())
            lo, hi = pa.scalar(info.min).cast(c.type, safe=False), pa.scalar(info.max).cast(c.type, safe=False)
            over[f.name] = pc.fill_null(pc.or_(pc.less(c, lo), pc.greater(c, hi)), False)
        if not over:
            return t
        bad = functools.reduce(pc.or_, over.values())
        if not pc.any(bad).as_py():
            return t
        new = pc.and_(bad, pc.greater(t.column(W), 0))
        if record and self.lowerer.errors is not None and pc.any(new).as_py():
            names = field_labels(op.node)
            shown = t.filter(new)
            for c in over:   # a date beyond 9999 has no Python value: shown as text
                ct = shown.schema.field(c).type
                if pa.types.is_date(ct) or pa.types.is_timestamp(ct):
                    shown = shown.set_column(shown.schema.get_field_index(c), c, shown.column(c).cast(pa.string()))
                elif nested.is_nested_arrow(ct):
                    shown = shown.set_column(shown.schema.get_field_index(c), c, pa.array(
                        ["(a value holding a date outside the years 1 to 9999)"] * shown.num_rows))
            rows = shown.to_pylist()
            cols_over = {c: m.filter(new).to_pylist() for c, m in over.items()}
            what = op.node.describe()[:200]
            for i, r in enumerate(rows):
                values, w = named_row(r, names)
                failing = [c for c in cols_over if cols_over[c][i]]
                labels = [names[int(c[1:])] for c in failing]
                msg = "Out of Range Error: " + "; ".join(
                    f"{n} holds a DATE or TIMESTAMP outside the years 1 to 9999"
                    if nested.is_nested_arrow(schema.field(c).type) else
                    f"{n} = {r[c]} is outside the years 1 to 9999"
                    if not pa.types.is_integer(schema.field(c).type) else
                    f"{n} = {r[c]} does not fit in {SQL_INTEGER[schema.field(c).type.bit_width]}"
                    for n, c in zip(labels, failing))
                self.lowerer.errors.add(op.id, self.ctx.op_views.get(op.id, []), ", ".join(labels), msg,
                                        [values], [w], operator=what)
        return t.filter(pc.invert(bad))

    def write_run(self, op_id: int, t: pa.Table, step: int, new_runs: Dict[str, List[Run]]) -> None:
        """Write a run of ``op_id``'s state on the writer thread while the step goes on (sorting and encoding a
        big run take a good part of a step); its place in ``new_runs`` holds None until it is written.  The step's
        manifest is built only after ``finish_writes``."""
        runs = new_runs.setdefault(self.ctx.keys[op_id], [])
        slot = len(runs)
        runs.append(None)

        def write() -> None:
            run, rows = self.write_state_run(op_id, t, step)
            self.cache.drop(run.path)   # a failed attempt of this step may have cached a run of the same name
            self.cache.put(run.path, rows)
            runs[slot] = run

        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlengine-write")
        self._writes.append(self._writer.submit(write))

    def finish_writes(self, raise_errors: bool = True) -> None:
        """Wait until the runs ``write_run`` started are written; then raise the first error, if any and
        ``raise_errors`` (a failed attempt's writes are waited for, so that the next attempt's, of the same
        names, never race with them)."""
        writes, self._writes = self._writes, []
        first = None
        for f in writes:
            try:
                f.result()
            except BaseException as e:   # noqa: BLE001 - re-raised below
                first = first or e
        if first is not None and raise_errors:
            raise first

    def run_step(self, step: int, table_deltas: Dict[str, pa.Table], need: Set[int], initial: bool,
                 listened: Set[int], reads_from: Optional[Manifest] = None,
                 write_keys: Optional[Set[str]] = None) -> tuple:
        """The changes of every op in ``need`` as Arrow (``None``: empty), the step's new runs, and its row
        errors (``listened``: the ops whose changes are delivered).  For a backfill, ``reads_from`` is an
        empty manifest and only the state of ops whose key is in ``write_keys`` is written."""
        eng = self.ctx
        cur = eng.store.current
        old = cur if reads_from is None else reads_from
        deltas: Dict[int, Optional[pa.Table]] = {}
        new_runs: Dict[str, List[Run]] = {k: list(v) for k, v in cur.runs.items()}
        errors = self.lowerer.errors = RowErrors()

        def writes(op_id: int) -> bool:
            return write_keys is None or eng.keys[op_id] in write_keys

        outputs = {o.delta for o in eng.circuit.outputs.values()}

        def write_integral(op, d: pa.Table) -> None:
            if op.id in eng.keys and op.id not in eng.derived and writes(op.id):   # (a stream keeps nothing)
                self.write_run(op.id, d.cast(eng.state_arrow[op.id]), step, new_runs)

        def change(op, ins: List[Optional[pa.Table]]) -> Optional[pa.Table]:
            if agg_op.accumulates(op):
                out = self._accumulate(op, self.changes(op, ins)[0], old, step, initial, new_runs, writes(op.id),
                                       emit=eng.emits(op, need, listened))
            else:
                out = self.op_change(op, ins, old, initial)
            # linear ops pass duplicates on (still the right Z-set); what users receive is consolidated
            # a change with only positive weights has nothing to cancel: merging its duplicate rows is left to
            # whoever needs it (users get consolidated changes; operators accept duplicates, as from linear ops)
            return self.finish_change(op, out, eng.arrow_schemas[op.id],
                                      consolidate=eng.consolidates(op, need, outputs),
                                      unless_inserts=op.id not in outputs)

        try:
            step_loop.run_ops(eng.ops, need, deltas, table_deltas, initial, write_integral, change)
        finally:   # also when a read raises NeedsSpark: the step then runs on Spark
            self.lowerer.errors = None
        return deltas, new_runs, errors

    def changes(self, op, ins: List[Optional[pa.Table]]) -> List[Optional[pa.Table]]:
        """``op``'s input changes (None: no change) as its rules take them: None for the ops that skip the terms
        of unchanged inputs (``ops.skips_unchanged``: joins, unions, set operations), an empty table for the
        others."""
        if ops.skips_unchanged(op):
            return ins
        return [self.ctx.arrow_schemas[i].empty_table() if x is None else x for x, i in zip(ins, op.inputs)]

    def op_change(self, op, ins: List[Optional[pa.Table]], m: Manifest, initial: bool, scan: bool = False):
        """The change of ``op`` (all but accumulating aggregates) from its input changes ``ins`` (None: no
        change), reading the states it needs as of ``m`` by their keys (``scan``: see ``read``)."""
        ins = self.changes(op, ins)
        return self.lowerer.lower(op, ins, self.op_reads(op, ins, m, scan), initial=initial)

    def op_reads(self, op, ins: List[Optional[pa.Table]], m: Manifest, scan: bool = False) -> List[pa.Table]:
        """The states ``op`` reads (as of ``m``), each narrowed to the keys of the changes ``ins`` it meets
        (None: no change)."""
        reads = []
        kind = ops.of(op.kind)
        for j, (r, ps) in enumerate(zip(op.reads, kind.probes(op))):
            if ps.spec is None:   # looked up by the op as it runs (see sqlengine.executor.state_lookups)
                reads.append(Lookup(functools.partial(self._lookup, r, m, scan), functools.partial(self._weight, r, m)))
                continue
            if not kind.reads_state(op, j, ins):   # (an inner join's side whose other side did not change)
                reads.append(self.ctx.state_arrow[r].empty_table())
                continue
            reads.append(self.read(r, m, ps.spec, [ins[i] for i, _ in ps.sources], [s for _, s in ps.sources],
                                   scan))
        return reads

    def _lookup(self, op_id: int, m: Manifest, scan: bool, spec: tuple, probe: Optional[pa.Table]) -> pa.Table:
        if not spec:
            return self.read(op_id, m, (), [], [], scan)
        probe = probe.rename_columns([f"c{k}" for k in range(probe.num_columns)])   # (plain columns: hashed as they are)
        return self.read(op_id, m, spec, [probe], [tuple(probe.column_names)], scan)

    def _weight(self, op_id: int, m: Manifest) -> int:
        """The sum of the weights of ``op_id``'s state as of ``m``: each run's, summed once (runs are immutable)."""
        if op_id in self.ctx.derived:
            return total_weight(self.read(op_id, m, (), [], []))
        total, schema = 0, self.ctx.state_arrow[op_id]
        if len(self._run_weights) > 4096:   # (the runs of earlier steps, merged away since)
            self._run_weights.clear()
        for p in self._runs(op_id, m):
            w = self._run_weights.get(p)
            if w is None:
                w = self._run_weights[p] = total_weight(self.run_table(p, schema))
            total += w
        return total

    def _accumulate(self, op, d: pa.Table, old: Manifest, step: int, initial: bool,
                    new_runs: Dict[str, List[Run]], write: bool = True, emit: bool = True) -> Optional[pa.Table]:
        """Add the change's partial sums to the aggregate's state; its change, when ``emit``."""
        eng = self.ctx
        schema = eng.state_arrow[op.id]
        partial = cast_to(agg_op.partial_local(self.lowerer, op, d), schema)
        if partial.num_rows and write:
            self.write_run(op.id, partial, step, new_runs)
        emit = not eng.sums.fit(op, partial, write) or emit
        if not emit or (not partial.num_rows and not initial):
            return None
        return self.aggregate_change(op, partial, old, initial)

    def aggregate_change(self, op, partial: pa.Table, m: Manifest, initial: bool, scan: bool = False):
        """An accumulating aggregate's change from its partial sums ``partial``, reading the old sums of their
        groups (as of ``m``) by key (``scan``: see ``read``)."""
        keys = tuple(cols(len(op.node.keys)))
        own = self.read(op.id, m, keys, [partial], [keys], scan)
        return agg_op.output_local(self.lowerer, op, partial, own, initial=initial)

    def aggregate_contents(self, d, op_id: int, runs: pa.Table) -> pa.Table:
        """A view's contents derived from its accumulating aggregate (``d.aggregate``) whose runs are ``runs``:
        the final rows of the summed state, through the maps above it, with weight 1."""
        eng, agg = self.ctx, d.aggregate
        out = agg_op.output_local(self.lowerer, agg, runs, runs.slice(0, 0), initial=True)
        rows = self.finish_change(agg, out, eng.arrow_schemas[agg.id], consolidate=False, record=False)
        rows = eng.arrow_schemas[agg.id].empty_table() if rows is None else rows
        for m in d.chain:
            rows = cast_to(map_op.local(self.lowerer, m, [rows]), eng.arrow_schemas[m.id])
        return cast_to(rows, eng.state_arrow[op_id])

    # ------------------------------------------------------------ compaction
    def run_table(self, path: str, schema: pa.Schema) -> pa.Table:
        """One committed run: from the state cache, else read from its file."""
        t = self.cache.load(path, schema)
        return t if t is not None else pq.read_table(os.path.join(self.ctx.store.root, path)).cast(schema)

    def _cancel_deletes(self, t: pa.Table, lowerer: DuckDBBackend) -> pa.Table:
        """Runs of a table or an integral, concatenated (``t``), consolidated where a row may cancel: as they are
        when every weight is positive (a Z-set need not be consolidated), else summed per row, by DuckDB's
        parallel aggregation when they are big (Arrow's group-by runs on one thread)."""
        if not t.num_rows or pc.min(t.column(W)).as_py() > 0:
            return t
        cols = [c for c in t.column_names if c != W]
        if t.num_rows < self.placement.bulk_rows or not cols:
            return consolidate_arrow(t)
        signed, signs = with_zero_signs(t)   # DuckDB's GROUP BY makes -0.0 0.0: a row keeps the sign of its zeros
        keys = ', '.join(cols + signs)
        sql = f"SELECT {keys}, SUM({W})::BIGINT AS {W} FROM R GROUP BY {keys} HAVING SUM({W}) != 0"
        return cast_to(lowerer.rule(sql, R=signed).select(t.column_names), t.schema)

    def merge(self, op, paths: List[str], small: bool = False, lowerer: Optional[DuckDBBackend] = None
              ) -> Optional[pa.Table]:
        """The runs at ``paths`` merged into one (``None`` if they are not all cached, unless ``small``: then
        the runs not cached are read from their files); DuckDB runs on ``lowerer`` (default: the steps')."""
        lowerer = lowerer or self.lowerer
        schema = self.ctx.state_arrow[op.id]
        if self.cache.all_cached(paths, schema):
            t = self.cache.full(paths, schema)
        elif small:
            t = pa.concat_tables([self.run_table(p, schema) for p in paths])
        else:
            return None
        rule = ops.of(op.kind).merge_rule(op)
        if rule is None:
            return self._cancel_deletes(t, lowerer)
        return cast_to(lowerer.rule(rule, R=t), schema)
