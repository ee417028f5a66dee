"""Oracle and driver for the TPC-H and Nexmark workload tests (and benchmarks/acceptance.py).

A :class:`WorkloadRun` builds one pipeline with every supported view of a suite
(materialized, one listener each), applies the generator's batches of inserts and
deletes, and after every batch compares each view's ad-hoc query result and its
integrated change stream with DuckDB recomputing the view over the same current
tables.  Multisets are compared with a float tolerance (:func:`compare_bags`);
views whose result depends on tie order can be compared on a projection that
leaves out the tie-dependent columns, or only on their row count.

Queries are classified once, before the pipeline is built, by compiling each one
alone (``planner.program.compile_program``, pure Python): a query that raises
``UnsupportedError`` (or any other compile error) is left out of the pipeline.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import duckdb
import numpy as np
import pandas as pd

import workloads

REL_TOL = 1e-6
ABS_TOL = 1e-6


# ------------------------------------------------------------------ values and bags


def _canon(v):
    """An exact, hashable form of one value: NaN/NaT -> None, numpy -> Python,
    timestamps naive, midnight timestamps equal to dates."""
    if v is None or v is pd.NaT or v is pd.NA:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, decimal.Decimal):
        return None if v.is_nan() else v
    if isinstance(v, (pd.Timestamp, _dt.datetime, np.datetime64)):
        t = pd.Timestamp(v)
        if t is pd.NaT:
            return None
        if t.tzinfo is not None:
            t = t.tz_convert("UTC").tz_localize(None)
        if t == t.normalize():
            return ("date", t.date().isoformat())
        return ("ts", t.value)
    if isinstance(v, _dt.date):
        return ("date", v.isoformat())
    if isinstance(v, str):
        return v
    return repr(v)


def rows_of(df: pd.DataFrame) -> List[tuple]:
    return [tuple(_canon(v) for v in r) for r in df.itertuples(index=False, name=None)]


def integrate(changes: pd.DataFrame, weight: str = "__weight") -> Tuple[List[tuple], List[tuple]]:
    """Sum a stream of weighted changes: (rows repeated by positive weight, rows left with a negative weight)."""
    c: Counter = Counter()
    cols = [x for x in changes.columns if x != weight]
    for r, w in zip(changes[cols].itertuples(index=False, name=None), changes[weight].tolist()):
        c[tuple(_canon(x) for x in r)] += int(w)
    pos = [r for r, w in c.items() if w > 0 for _ in range(w)]
    neg = [r for r, w in c.items() if w < 0]
    return pos, neg


@dataclass
class BagDiff:
    ok: bool
    n_actual: int
    n_expected: int
    missing: List[tuple] = field(default_factory=list)   # expected, not produced
    extra: List[tuple] = field(default_factory=list)     # produced, not expected
    note: str = ""

    def __str__(self):
        if self.ok:
            return f"ok ({self.n_actual} rows)"
        return (f"{self.note} actual {self.n_actual} rows, expected {self.n_expected}; "
                f"missing e.g. {self.missing}; extra e.g. {self.extra}")


def compare_bags(actual: Sequence[tuple], expected: Sequence[tuple], rel_tol: float = REL_TOL,
                 abs_tol: float = ABS_TOL, examples: int = 3) -> BagDiff:
    """Multiset equality of canonical rows, positionally; a column holding a float or a
    Decimal on either side is compared with ``math.isclose(rel_tol, abs_tol)``."""
    A, E = list(actual), list(expected)
    width = len(A[0]) if A else (len(E[0]) if E else 0)
    for rows in (A, E):
        if any(len(r) != width for r in rows):
            return BagDiff(False, len(A), len(E), note="arity differs:")
    approx = [False] * width
    for rows in (A, E):
        for r in rows:
            for j, v in enumerate(r):
                if isinstance(v, (float, decimal.Decimal)):
                    approx[j] = True

    def split(r):
        key = tuple(None if approx[j] else v for j, v in enumerate(r))
        nums = tuple(None if r[j] is None else float(r[j]) for j in range(width) if approx[j])
        return key, nums

    ga, ge = defaultdict(list), defaultdict(list)
    for rows, g in ((A, ga), (E, ge)):
        for r in rows:
            k, f = split(r)
            g[k].append((f, r))

    def skey(item):
        return tuple((0, 0.0) if x is None else (1, x) for x in item[0])

    def close(x, y):
        if x is None or y is None:
            return x is None and y is None
        if math.isinf(x) or math.isinf(y):
            return x == y
        return math.isclose(x, y, rel_tol=rel_tol, abs_tol=abs_tol)

    missing, extra = [], []
    for k in set(ga) | set(ge):
        xs, ys = sorted(ga.get(k, []), key=skey), sorted(ge.get(k, []), key=skey)
        i = j = 0
        while i < len(xs) and j < len(ys):
            if all(close(a, b) for a, b in zip(xs[i][0], ys[j][0])):
                i, j = i + 1, j + 1
            elif skey(xs[i]) < skey(ys[j]):
                extra.append(xs[i][1])
                i += 1
            else:
                missing.append(ys[j][1])
                j += 1
        extra.extend(x[1] for x in xs[i:])
        missing.extend(y[1] for y in ys[j:])
    ok = not missing and not extra
    return BagDiff(ok, len(A), len(E), missing[:examples], extra[:examples],
                   note="" if ok else f"{len(missing)} missing, {len(extra)} extra;")


# ------------------------------------------------------------------ table contents


def bag_minus(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    """``left`` without one copy of each row of ``right`` (bag difference; rows of
    ``right`` that are not in ``left`` are ignored, as the engine clamps deletes)."""
    if len(left) == 0 or len(right) == 0:
        return left.reset_index(drop=True)
    cols = list(left.columns)
    lk = pd.Series(rows_of(left[cols]), dtype=object)
    need = Counter(rows_of(right[cols]))
    keep = []
    for r in lk:
        if need.get(r, 0) > 0:
            need[r] -= 1
            keep.append(False)
        else:
            keep.append(True)
    return left[np.array(keep, dtype=bool)].reset_index(drop=True)


class Tables:
    """The current contents of a suite's tables (pandas), and DuckDB over them."""

    def __init__(self, schema_sql: str, like: Dict[str, pd.DataFrame]):
        self.schema_sql = schema_sql
        self.data = {t: df.iloc[0:0].copy() for t, df in like.items()}

    def apply(self, kind: str, table: str, df: pd.DataFrame) -> None:
        if kind == "insert":
            self.data[table] = pd.concat([self.data[table], df], ignore_index=True)
        else:
            self.data[table] = bag_minus(self.data[table], df)

    def duck(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET threads = 1")
        con.execute(self.schema_sql)
        for t, df in self.data.items():
            if len(df):
                con.register("__df", df)
                con.execute(f"INSERT INTO {t} BY NAME SELECT * FROM __df")
                con.unregister("__df")
        return con


# ------------------------------------------------------------------ the run


@dataclass
class ViewResult:
    name: str
    supported: bool
    reason: str = ""                  # why unsupported / how compared / the mismatch
    compare: str = "exact"            # "exact", "projection", "count" or "skip"
    steps: int = 0                    # batches after which the view was checked
    failures: List[str] = field(default_factory=list)
    check_s: float = 0.0              # time spent comparing this view

    @property
    def ok(self) -> bool:
        return self.supported and not self.failures


def classify(suite: str) -> Dict[str, Optional[Exception]]:
    """{view: None if the view compiles alone, else the exception from compile_program}."""
    from planner.program import compile_program
    schema = workloads.schema(suite)
    out: Dict[str, Optional[Exception]] = {}
    for name, create in workloads.load_queries(suite).items():
        try:
            compile_program(schema + "\n" + create + ";")
            out[name] = None
        except Exception as e:  # noqa: BLE001 - reported per query
            out[name] = e
    return out


# A comparison that does not depend on tie order: a SELECT over the view (named
# ``v``) whose result must match the same SELECT over DuckDB's recomputation.
TieCheck = str


class WorkloadRun:
    """One pipeline with the given views of ``suite``; ``batches`` is a list of
    lists of ("insert"|"delete", table, DataFrame); after each batch every view
    is checked (query result and integrated change stream)."""

    def __init__(self, suite: str, views: Sequence[str], like: Dict[str, pd.DataFrame],
                 make_pipeline: Callable[[str], object], tie_checks: Optional[Dict[str, TieCheck]] = None,
                 log: Callable[[str], None] = lambda s: None):
        self.suite = suite
        self.selects = workloads.select_sql(suite)
        self.views = list(views)
        self.tie_checks = dict(tie_checks or {})
        self.tables = Tables(workloads.schema(suite), like)
        self.log = log
        self.results = {v: ViewResult(v, True, compare="projection" if v in self.tie_checks else "exact")
                        for v in self.views}
        self.step_s: List[float] = []
        t0 = time.time()
        self.pipeline = make_pipeline(workloads.program(suite, self.views, materialized=True))
        self.handlers = {v: self.pipeline.listen(v) for v in self.views}
        self.pipeline.start()
        self.start_s = time.time() - t0

    def run_batch(self, ops: Sequence[Tuple[str, str, pd.DataFrame]], label: str = "") -> None:
        p = self.pipeline
        t0 = time.time()
        for kind, table, df in ops:
            p.input_pandas(table, df, delete=(kind == "delete"))
            self.tables.apply(kind, table, df)
        p.wait_for_idle()
        self.step_s.append(time.time() - t0)
        self.log(f"{self.suite} batch {label}: processed in {self.step_s[-1]:.1f}s")
        self.check(label)

    def _expected(self, con, view: str) -> List[tuple]:
        sel = self.selects[view]
        if view in self.tie_checks:
            return rows_of(con.execute(f"WITH v AS ({sel}) {self.tie_checks[view]}").df())
        return rows_of(con.execute(sel).df())

    def _actual_query(self, view: str) -> List[tuple]:
        if view in self.tie_checks:
            return rows_of(self.pipeline.query_pandas(f"WITH v AS (SELECT * FROM {view}) {self.tie_checks[view]}"))
        return rows_of(self.pipeline.query_pandas(f"SELECT * FROM {view}"))

    def _actual_stream(self, view: str) -> Tuple[List[tuple], List[tuple]]:
        changes = self.handlers[view].to_pandas()
        pos, neg = integrate(changes)
        if view in self.tie_checks:
            cols = [c for c in changes.columns if c != "__weight"]
            if pos:
                df = pd.DataFrame([[_plain(x) for x in r] for r in pos], columns=cols)
            else:  # typed and empty
                df = self.pipeline.query_pandas(f"SELECT * FROM {view} WHERE false")
            con = duckdb.connect()
            con.execute("SET TimeZone = 'UTC'")
            con.register("v", df)
            pos = rows_of(con.execute(self.tie_checks[view]).df())
            con.close()
        return pos, neg

    def check(self, label: str) -> None:
        con = self.tables.duck()
        for v in self.views:
            r = self.results[v]
            t0 = time.time()
            try:
                expected = self._expected(con, v)
                got = self._actual_query(v)
                d = compare_bags(got, expected)
                if not d.ok:
                    r.failures.append(f"after batch {label}, query: {d}")
                pos, neg = self._actual_stream(v)
                if neg:
                    r.failures.append(f"after batch {label}, change stream: rows with negative weight {neg[:3]}")
                d = compare_bags(pos, expected)
                if not d.ok:
                    r.failures.append(f"after batch {label}, change stream: {d}")
            except Exception as e:  # noqa: BLE001 - reported per view
                r.failures.append(f"after batch {label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            r.steps += 1
            r.check_s += time.time() - t0
        con.close()

    def stop(self) -> None:
        try:
            self.pipeline.stop(force=True)
        except Exception:  # noqa: BLE001
            pass


def _plain(v):
    """Back from the canonical form to a value DuckDB can take from pandas."""
    if isinstance(v, tuple) and v and v[0] == "date":
        return pd.Timestamp(v[1])
    if isinstance(v, tuple) and v and v[0] == "ts":
        return pd.Timestamp(v[1])
    return v


# Tie-insensitive comparisons for the views whose header says the result depends on
# tie order (a SELECT over the view, named v): what both sides must agree on.
NEXMARK_TIE_CHECKS: Dict[str, str] = {
    # ROW_NUMBER top-10 per auction: which of several equal-price bids get the last places,
    # and which rank each of equal-price bids gets, is open; the multiset of prices per
    # auction, the number of rows and the highest rank are not.
    "q19": ("SELECT auction, price, COUNT(*) AS n, NULL AS top_rank FROM v GROUP BY auction, price "
            "UNION ALL SELECT auction, NULL, COUNT(*), MAX(rank_number) FROM v GROUP BY auction"),
    # top-1000 auctions by bid count: which auctions with the 1000th place's count are in is open;
    # the rows with a higher count and the number of rows per count are not.
    "q105": ("SELECT CASE WHEN bid_count > m THEN auction_id END AS auction_id, "
             "CASE WHEN bid_count > m THEN auction_item_name END AS item, bid_count, COUNT(*) AS n "
             "FROM v, (SELECT MIN(bid_count) AS m FROM v) GROUP BY ALL"),
}


# ------------------------------------------------------------------ data and batches


def tpch_batches(sf: float, n_inserts: int = 4, delete_fraction: float = 0.05, seed: int = 0):
    """(tables, [(label, ops)]) for TPC-H: the generator's batches grouped so that each insert
    batch (orders with their lineitems; the first also the dimension tables) is one
    checked batch and each group of deletes (whole orders with their lineitems, plus
    a few customers and parts) another."""
    from workloads.tpch import gen
    tables = gen.generate(sf, seed)
    ops = gen.make_batches(tables, n_inserts, delete_fraction, seed)
    return tables, _group(ops)


def nexmark_batches(n_events: int, n_inserts: int = 4, delete_fraction: float = 0.05, seed: int = 0):
    """(tables, [(label, ops)]) for Nexmark: event-time ordered insert batches, and after
    each but the first a batch deleting a random fraction of the rows inserted so far."""
    from workloads.nexmark import gen
    tables = gen.generate(n_events, seed)
    ops = gen.make_batches(tables, n_inserts, delete_fraction, seed)
    return tables, _group(ops)


def _group(ops):
    """Group consecutive ops into checked batches: a new batch starts where the kind of
    op changes or where a table is inserted into a second time (the generator's next
    insert batch)."""
    groups: List[Tuple[str, list]] = []
    n = {"insert": 0, "delete": 0}
    for op in ops:
        kind, table = op[0], op[1]
        cur = groups[-1] if groups else None
        if cur is None or cur[0] != kind or (kind == "insert" and any(o[1] == table for o in cur[1])):
            n[kind] += 1
            groups.append((kind, []))
        groups[-1][1].append(op)
    out, n = [], {"insert": 0, "delete": 0}
    for i, (kind, o) in enumerate(groups):
        n[kind] += 1
        out.append((f"{i + 1} ({kind} {n[kind]})", o))
    return out


def run_suite(suite: str, views: Sequence[str], like, batches, make_pipeline,
              tie_checks: Optional[Dict[str, str]] = None, log: Callable[[str], None] = lambda s: None):
    """Run every batch through one pipeline with ``views``; returns the :class:`WorkloadRun`
    (stopped) with per-view results.  A failure to build or start the pipeline, or a
    batch that fails, is recorded on every view."""
    run = None
    try:
        run = WorkloadRun(suite, views, like, make_pipeline, tie_checks=tie_checks, log=log)
        for label, ops in batches:
            run.run_batch(ops, label)
    except Exception as e:  # noqa: BLE001 - the pipeline itself failed
        msg = f"pipeline failed: {type(e).__name__}: {str(e).splitlines()[0][:500]}"
        if run is None:
            run = _FailedRun(suite, views, msg)
        else:
            for r in run.results.values():
                r.failures.append(msg)
    finally:
        if run is not None:
            run.stop()
    return run


class _FailedRun:
    def __init__(self, suite, views, msg):
        self.suite = suite
        self.results = {v: ViewResult(v, True, failures=[msg]) for v in views}
        self.step_s: List[float] = []
        self.start_s = 0.0

    def stop(self):
        pass


def check_view(suite: str, name: str, compiled, run, tmp_path, expected_unsupported, known_wrong,
               skip_reason=None) -> None:
    """The per-query assertions of tests/test_tpch.py and tests/test_nexmark.py: an expected-unsupported
    query must still fail to compile; otherwise it must have been checked, and match the recomputation
    (a known-wrong one must still differ).  ``skip_reason``: the query is not compared (tie order)."""
    import pytest
    from sqlengine import Pipeline
    from sqlengine.errors import BindError, UnsupportedError
    if name in expected_unsupported:
        err = BindError if expected_unsupported[name].startswith("BindError") else UnsupportedError
        with pytest.raises(err):
            Pipeline.from_sql(workloads.program(suite, [name]), storage_dir=str(tmp_path / "p"))
        return
    if skip_reason:
        pytest.skip(skip_reason)
    assert compiled[name] is None, f"{name} does not compile: {compiled[name]!r}"
    r = run.results[name]
    assert r.steps or r.failures, f"{name} was not checked"
    if name in known_wrong:
        assert r.failures, f"{name} now matches the recomputation; remove it from KNOWN_WRONG"
        return
    assert not r.failures, f"{name} differs from the recomputation:\n" + "\n".join(r.failures)
