"""Oracle and driver for the TPC-H and Nexmark workload tests (and benchmarks/acceptance.py).

A :class:`WorkloadRun` builds one pipeline with every supported view of a suite
(materialized, one listener each), applies the generator's batches of inserts and
deletes, and after every batch compares each view's ad-hoc query result and its
integrated change stream with DuckDB recomputing the view over the same current
tables.  Values and bags are the test oracle's (:mod:`tests.support.oracle`: exact
multiplicities, a float tolerance only between rows matched one to one), read
through Arrow and DuckDB's ``fetchall`` so that NULL and NaN stay apart; views
whose result depends on tie order are compared on a projection that leaves out
the tie-dependent columns.

Queries are classified once, before the pipeline is built, by compiling each one
alone (``planner.program.compile_program``, pure Python): a query that raises
``UnsupportedError`` (or any other compile error) is left out of the pipeline.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import duckdb
import numpy as np
import pandas as pd

import workloads

from .oracle import bag, bag_from_changes, bag_of_arrow, canon, diff, to_arrow


# ------------------------------------------------------------------ table contents


def bag_minus(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    """``left`` without one copy of each row of ``right`` (bag difference; rows of
    ``right`` that are not in ``left`` are ignored, as the engine clamps deletes)."""
    if len(left) == 0 or len(right) == 0:
        return left.reset_index(drop=True)
    cols = list(left.columns)
    need = Counter(tuple(canon(v) for v in r) for r in right[cols].itertuples(index=False, name=None))
    keep = []
    for r in (tuple(canon(v) for v in r) for r in left[cols].itertuples(index=False, name=None)):
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
        """DuckDB over the current contents.  DuckDB reads a NaN of a pandas float column as NULL; the
        generators' frames hold neither (no NULLs in TPC-H or Nexmark), so nothing is lost here."""
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

    def _select(self, view: str, sel: str) -> str:
        """``sel`` (the view, or its recomputation), or the view's tie-insensitive projection over it."""
        return f"WITH v AS ({sel}) {self.tie_checks[view]}" if view in self.tie_checks else sel

    def _expected(self, con, view: str) -> Counter:
        return bag(con.execute(self._select(view, self.selects[view])).fetchall())

    def _actual_query(self, view: str) -> Counter:
        return bag_of_arrow(self.pipeline.query_arrow(self._select(view, f"SELECT * FROM {view}")))

    def _actual_stream(self, view: str) -> Tuple[Counter, Counter]:
        """(the bag the view's change stream integrates to, or its tie-insensitive projection; its rows with a
        negative weight)."""
        changes = bag_from_changes(self.handlers[view].to_pandas())
        neg = Counter({r: n for r, n in changes.items() if n < 0})
        if view not in self.tie_checks:
            return +changes, neg
        schema = self.pipeline.query_arrow(f"SELECT * FROM {view} WHERE false").schema
        con = duckdb.connect()
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.register("v", to_arrow(+changes, schema))
            return bag(con.execute(self.tie_checks[view]).fetchall()), neg
        finally:
            con.close()

    def check(self, label: str) -> None:
        con = self.tables.duck()
        for v in self.views:
            r = self.results[v]
            t0 = time.time()
            try:
                expected = self._expected(con, v)
                d = diff(self._actual_query(v), expected)
                if d:
                    r.failures.append(f"after batch {label}, query: {d}")
                pos, neg = self._actual_stream(v)
                if neg:
                    r.failures.append(f"after batch {label}, change stream: rows with negative weight "
                                      f"{sorted(neg.items(), key=repr)[:3]}")
                d = diff(pos, expected)
                if d:
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
    """The per-query assertions of tests/executor/test_tpch.py and tests/executor/test_nexmark.py: an expected-unsupported
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
