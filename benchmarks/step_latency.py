"""Step latency of incremental views vs. recomputing them from scratch.

For each workload (a table shape plus one materialized view) and each table size N:

1. generate the tables deterministically (seeded numpy) as pandas DataFrames;
2. load them into a fresh :class:`sqlengine.Pipeline` with ``input_pandas`` in chunks of
   500k rows and ``wait_for_idle`` (the load time);
3. run ``--steps`` timed changes of ``--change`` rows each - half new inserts, half deletes
   of rows inserted earlier and not yet deleted - timing the wall time from the first
   ``input_pandas`` to ``wait_for_idle`` returning; the first is discarded as warm-up;
4. recompute the view from scratch over the same final table contents with DuckDB
   (in-memory tables, ``CREATE TABLE r AS <select>``) and with Spark batch (parquet
   written once, then ``spark.read.parquet`` + ``spark.sql`` + a ``noop`` write),
   median of 3 each;
5. check the pipeline's view contents against DuckDB's result (a multiset, floats with
   tolerance).

Everything runs in one process, side by side, so the ratios (recompute time / step
time) are comparable even on a noisy machine; absolute numbers are not.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
from benchmarks.memory import Sampler
from benchmarks.report import write_section

CHUNK = 500_000
SPARK_CONF = {"spark.driver.memory": "8g"}
RECOMPUTE_REPEATS = 3
WARMUP_N = 10_000
WARMUP_STEPS = 3


# --------------------------------------------------------------------------- workloads
def _t_rows(n: int, n_keys: int, rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({
        "k": rng.integers(0, n_keys, n, dtype=np.int64),
        "v": rng.integers(0, 1_000_000, n, dtype=np.int64),
        "x": rng.random(n),
    })


def _f_rows(first_id: int, n: int, n_keys: int, rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({
        "id": np.arange(first_id, first_id + n, dtype=np.int64),
        "k": rng.integers(0, n_keys, n, dtype=np.int64),
        "v": rng.integers(0, 1_000_000, n, dtype=np.int64),
    })


def n_keys_of(n: int) -> int:
    return max(1, n // 10)


@dataclass
class Workload:
    name: str
    program: str
    view: str
    select: str                      # the view's query, run as-is by DuckDB and Spark SQL
    changed: str                     # the table that receives the timed changes
    sort_keys: List[str]             # unique key of the view's rows (for the comparison)
    generate: Callable[[int, np.random.Generator], Dict[str, pd.DataFrame]]
    new_rows: Callable[[int, int, np.random.Generator, pd.DataFrame], pd.DataFrame]  # (N, count, rng, current)
    describe: str = ""


T_SCHEMA = "CREATE TABLE t (k BIGINT NOT NULL, v BIGINT, x DOUBLE);"
GROUPBY_SELECT = "SELECT k, COUNT(*) AS n, SUM(v) AS sv, AVG(x) AS ax FROM t GROUP BY k"
MINMAX_SELECT = "SELECT k, MIN(v) AS lo, MAX(v) AS hi FROM t GROUP BY k"
JOIN_SELECT = "SELECT f.id, f.v, d.name FROM f JOIN d ON f.k = d.k"


def _gen_t(n: int, rng: np.random.Generator) -> Dict[str, pd.DataFrame]:
    return {"t": _t_rows(n, n_keys_of(n), rng)}


def _new_t(n: int, count: int, rng: np.random.Generator, current: pd.DataFrame) -> pd.DataFrame:
    return _t_rows(count, n_keys_of(n), rng)


def _gen_join(n: int, rng: np.random.Generator) -> Dict[str, pd.DataFrame]:
    nk = n_keys_of(n)
    d = pd.DataFrame({"k": np.arange(nk, dtype=np.int64),
                      "name": [f"name-{i}" for i in range(nk)]})
    return {"d": d, "f": _f_rows(0, n, nk, rng)}


def _new_f(n: int, count: int, rng: np.random.Generator, current: pd.DataFrame) -> pd.DataFrame:
    first = int(current["id"].max()) + 1 if len(current) else 0
    return _f_rows(first, count, n_keys_of(n), rng)


Q3_SCHEMA = """CREATE TABLE customer (c_custkey BIGINT NOT NULL, c_mktsegment VARCHAR);
CREATE TABLE orders (o_orderkey BIGINT NOT NULL, o_custkey BIGINT, o_orderdate DATE, o_shippriority INT);
CREATE TABLE lineitem (l_orderkey BIGINT NOT NULL, l_linenumber INT, l_extendedprice DOUBLE, l_discount DOUBLE,
                       l_shipdate DATE);"""
Q3_SELECT = ("SELECT l_orderkey, SUM(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority "
             "FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
             "WHERE c_mktsegment = 'BUILDING' AND o_orderdate < DATE '1995-03-15' "
             "AND l_shipdate > DATE '1995-03-15' GROUP BY l_orderkey, o_orderdate, o_shippriority")
SEGMENTS = np.array(["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"])


def _lineitems(first: int, n: int, n_orders: int, rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({
        "l_orderkey": rng.integers(0, n_orders, n, dtype=np.int64),
        "l_linenumber": np.arange(first, first + n, dtype=np.int64) % 1_000_000,
        "l_extendedprice": rng.integers(100, 10_000_000, n) / 100.0,
        "l_discount": rng.integers(0, 11, n) / 100.0,
        "l_shipdate": pd.to_datetime("1992-01-01") + pd.to_timedelta(rng.integers(0, 2400, n), unit="D"),
    }).assign(l_shipdate=lambda d: d.l_shipdate.dt.date)


def _gen_q3(n: int, rng: np.random.Generator) -> Dict[str, pd.DataFrame]:
    n_orders, n_cust = max(1, n // 4), max(1, n // 40)
    customer = pd.DataFrame({"c_custkey": np.arange(n_cust, dtype=np.int64),
                             "c_mktsegment": SEGMENTS[rng.integers(0, 5, n_cust)]})
    orders = pd.DataFrame({
        "o_orderkey": np.arange(n_orders, dtype=np.int64),
        "o_custkey": rng.integers(0, n_cust, n_orders, dtype=np.int64),
        "o_orderdate": (pd.to_datetime("1992-01-01") + pd.to_timedelta(rng.integers(0, 2400, n_orders), unit="D")
                        ).date,
        "o_shippriority": rng.integers(0, 2, n_orders).astype(np.int32)})
    return {"customer": customer, "orders": orders, "lineitem": _lineitems(0, n, n_orders, rng)}


def _new_lineitems(n: int, count: int, rng: np.random.Generator, current: pd.DataFrame) -> pd.DataFrame:
    return _lineitems(int(rng.integers(0, 1 << 40)), count, max(1, n // 4), rng)


WORKLOADS: Dict[str, Workload] = {
    "groupby": Workload(
        "groupby", f"{T_SCHEMA}\nCREATE MATERIALIZED VIEW agg AS {GROUPBY_SELECT};", "agg", GROUPBY_SELECT,
        "t", ["k"], _gen_t, _new_t,
        "COUNT/SUM/AVG per key over t (N rows, N/10 keys, ~10 rows per group); changes to t"),
    "minmax": Workload(
        "minmax", f"{T_SCHEMA}\nCREATE MATERIALIZED VIEW mm AS {MINMAX_SELECT};", "mm", MINMAX_SELECT,
        "t", ["k"], _gen_t, _new_t,
        "MIN/MAX per key over t (same shape as groupby); changes to t"),
    "join": Workload(
        "join",
        "CREATE TABLE f (id BIGINT NOT NULL, k BIGINT, v BIGINT);\n"
        "CREATE TABLE d (k BIGINT NOT NULL, name VARCHAR);\n"
        f"CREATE MATERIALIZED VIEW j AS {JOIN_SELECT};", "j", JOIN_SELECT,
        "f", ["id"], _gen_join, _new_f,
        "f (N rows) JOIN d (N/10 rows) on k; changes to f"),
    "q3": Workload(
        "q3", f"{Q3_SCHEMA}\nCREATE MATERIALIZED VIEW q3 AS {Q3_SELECT};", "q3", Q3_SELECT,
        "lineitem", ["l_orderkey"], _gen_q3, _new_lineitems,
        "TPC-H q3 shape: customer (N/40) JOIN orders (N/4) JOIN lineitem (N rows), filters, SUM per order; "
        "changes to lineitem"),
}


# --------------------------------------------------------------------------- instrumentation
class EngineProbe:
    """Wall time spent in the engine's phases, by wrapping methods of one pipeline's objects.

    Read-only instrumentation (nothing in sqlengine/ is changed).  Top-level phases of a step
    (disjoint): ``clamp_deletes`` (turning a delete batch into deletes of existing copies),
    ``run_step`` (the circuit), ``compact`` (waiting for and putting in place the background merges of
    state runs, see ``sqlengine.executor.compaction``) and ``commit`` (writing the
    manifest).  Nested in them: ``spark_actions`` (every ``DataFrame.toArrow`` call, i.e. every
    Spark action the engine runs; ``actions`` counts them) and ``write_run`` (state files).
    All of these run on the pipeline's step thread, except the state files of background merges, which
    ``write_run`` counts too.
    """

    TOP = ("clamp_deletes", "run_step", "compact", "commit")
    NESTED = ("spark_actions", "write_run")
    _df_class = None
    _active: Optional["EngineProbe"] = None

    def __init__(self, engine, store, spark, compactor):
        self.ms: Dict[str, float] = defaultdict(float)
        self.calls: Dict[str, int] = defaultdict(int)
        engine.inputs.clamp_deletes = self._wrap("clamp_deletes", engine.inputs.clamp_deletes)
        engine.run_step = self._wrap("run_step", engine.run_step)
        setattr(compactor, "take", self._wrap("compact", compactor.take))
        setattr(store, "write_run", self._wrap("write_run", store.write_run))
        setattr(store, "commit", self._wrap("commit", store.commit))
        self._patch_to_arrow(spark)
        EngineProbe._active = self

    @classmethod
    def _patch_to_arrow(cls, spark) -> None:
        if cls._df_class is not None:
            return
        klass = type(spark.range(1))
        orig = klass.toArrow

        def to_arrow(df, *a, **kw):
            probe = cls._active
            t0 = time.perf_counter()
            try:
                return orig(df, *a, **kw)
            finally:
                if probe is not None:
                    probe.ms["spark_actions"] += (time.perf_counter() - t0) * 1000
                    probe.calls["spark_actions"] += 1

        klass.toArrow = to_arrow
        cls._df_class = klass

    def _wrap(self, name, fn):
        def wrapped(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.ms[name] += (time.perf_counter() - t0) * 1000
                self.calls[name] += 1
        return wrapped

    def reset(self) -> None:
        self.ms.clear()
        self.calls.clear()

    def snapshot(self) -> Dict[str, float]:
        out = {p: self.ms.get(p, 0.0) for p in self.TOP + self.NESTED}
        out["actions"] = self.calls.get("spark_actions", 0)
        return out


def spark_jobs_so_far(spark) -> Optional[int]:
    """Number of Spark jobs started in this process so far (the newest job id + 1), or None."""
    try:   # the scheduler's job counter covers every job group (the engine tags each step's jobs)
        return int(spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs())
    except Exception:  # noqa: BLE001 - best effort
        return None


# --------------------------------------------------------------------------- results
@dataclass
class Result:
    workload: str
    n: int
    rows: Dict[str, int] = field(default_factory=dict)
    load_s: Optional[float] = None
    load_steps: Optional[int] = None
    step_ms: List[float] = field(default_factory=list)             # every timed change, warm-up included
    engine_steps: List[int] = field(default_factory=list)          # engine steps taken per change
    jobs_last_step: List[int] = field(default_factory=list)        # status()["spark_jobs_last_step"]
    spark_jobs: List[Optional[int]] = field(default_factory=list)  # all Spark jobs per change (status tracker)
    phases: List[Dict[str, float]] = field(default_factory=list)   # EngineProbe per change
    duckdb_ms: List[float] = field(default_factory=list)
    spark_ms: List[float] = field(default_factory=list)
    check: str = "not run"
    check_detail: str = ""
    error: Optional[str] = None
    steps_on: Dict[str, int] = field(default_factory=dict)         # status()["steps_run_on"] over the timed changes
    state: Dict[str, Dict[str, int]] = field(default_factory=dict)  # status()["state_size"] at the end
    adhoc_first_ms: Optional[float] = None                         # first query after a step (loads the snapshot)
    adhoc_point_ms: List[float] = field(default_factory=list)
    adhoc_agg_ms: List[float] = field(default_factory=list)
    view_rows: Optional[int] = None
    driver_peak_mib: Optional[float] = None
    jvm_peak_mib: Optional[float] = None

    # after discarding the warm-up change
    def _rest(self, xs):
        return xs[1:] if len(xs) > 1 else xs

    @property
    def step_median(self) -> Optional[float]:
        r = self._rest(self.step_ms)
        return statistics.median(r) if r else None

    def median_of(self, xs) -> Optional[float]:
        r = [x for x in self._rest(xs) if x is not None]
        return statistics.median(r) if r else None

    def phase_median(self, phase: str) -> Optional[float]:
        r = self._rest(self.phases)
        return statistics.median(p[phase] for p in r) if r else None

    @property
    def duckdb_median(self) -> Optional[float]:
        return statistics.median(self.duckdb_ms) if self.duckdb_ms else None

    @property
    def spark_median(self) -> Optional[float]:
        return statistics.median(self.spark_ms) if self.spark_ms else None


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _fmt(x, nd=1, suffix="") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        return f"{x:,.{nd}f}{suffix}"
    return f"{x}{suffix}"


def _fmt_ratio(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x >= 10:
        return f"{x:,.0f}×"
    if x >= 0.1:
        return f"{x:.2f}×"
    return f"{x:.2g}×"


def _fmt_counts(xs) -> str:
    r = [x for x in xs if x is not None]
    if not r:
        return "-"
    lo, hi = min(r), max(r)
    med = statistics.median(r)
    med_s = f"{med:g}"
    return med_s if lo == hi else f"{med_s} ({lo}-{hi})"


def _rows_text(r: Result) -> str:
    return ", ".join(f"{t}={n:,}" for t, n in r.rows.items())


# --------------------------------------------------------------------------- comparison
def compare(actual: pa.Table, expected: pa.Table, keys: List[str]) -> (bool, str):
    """Multiset equality of two results; numbers with a relative tolerance of 1e-9."""
    a = actual.to_pandas()
    e = expected.to_pandas()
    if list(a.columns) != list(e.columns):
        return False, f"columns differ: {list(a.columns)} vs {list(e.columns)}"
    if len(a) != len(e):
        return False, f"row counts differ: pipeline {len(a):,} vs DuckDB {len(e):,}"
    order = keys + [c for c in a.columns if c not in keys]
    a = a.sort_values(order, kind="mergesort").reset_index(drop=True)
    e = e.sort_values(order, kind="mergesort").reset_index(drop=True)
    for c in a.columns:
        try:
            an = pd.to_numeric(a[c]).astype("float64").to_numpy()
            en = pd.to_numeric(e[c].map(lambda v: float(v) if v is not None and not pd.isna(v) else np.nan)
                               if e[c].dtype == object else e[c]).astype("float64").to_numpy()
            ok = np.isclose(an, en, rtol=1e-9, atol=1e-9, equal_nan=True)
        except (ValueError, TypeError):
            av = a[c].astype(object).where(a[c].notna(), None).to_numpy()
            ev = e[c].astype(object).where(e[c].notna(), None).to_numpy()
            ok = np.array([x == y for x, y in zip(av, ev)], dtype=bool)
        if not ok.all():
            i = int(np.argmin(ok))
            return False, (f"{int((~ok).sum()):,} rows differ in column {c}; first: pipeline "
                           f"{a.iloc[i].to_dict()} vs DuckDB {e.iloc[i].to_dict()}")
    return True, f"{len(a):,} rows equal"


# --------------------------------------------------------------------------- recomputation
def duckdb_recompute(w: Workload, tables: Dict[str, pd.DataFrame], res: Result) -> pa.Table:
    import duckdb
    con = duckdb.connect(":memory:")
    for name, df in tables.items():
        con.register("__src", df)
        con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM __src')
        con.unregister("__src")
    for _ in range(RECOMPUTE_REPEATS):
        con.execute("DROP TABLE IF EXISTS r")
        t0 = time.perf_counter()
        con.execute(f"CREATE TABLE r AS {w.select}")
        res.duckdb_ms.append((time.perf_counter() - t0) * 1000)
    out = con.sql("SELECT * FROM r").to_arrow_table()
    con.close()
    return out


def spark_recompute(spark, w: Workload, tables: Dict[str, pd.DataFrame], res: Result, tmp: str) -> None:
    paths = {}
    for name, df in tables.items():
        path = os.path.join(tmp, f"{name}.parquet")
        spark.createDataFrame(df).write.mode("overwrite").parquet(path)
        paths[name] = path
    for _ in range(RECOMPUTE_REPEATS):
        t0 = time.perf_counter()
        for name, path in paths.items():
            spark.read.parquet(path).createOrReplaceTempView(name)
        spark.sql(w.select).write.format("noop").mode("overwrite").save()
        res.spark_ms.append((time.perf_counter() - t0) * 1000)
    for name in paths:
        spark.catalog.dropTempView(name)


# --------------------------------------------------------------------------- one workload at one size
def log(msg: str) -> None:
    print(f"[{dt.datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def run_one(w: Workload, n: int, args, seed: int) -> Result:
    from sqlengine import Pipeline
    from sqlengine.executor.session import get_spark

    res = Result(w.name, n)
    rng = np.random.default_rng([seed, n, list(WORKLOADS).index(w.name)])
    tables = w.generate(n, rng)
    res.rows = {t: len(df) for t, df in tables.items()}
    work = tempfile.mkdtemp(prefix=f"sqlengine-bench-{w.name}-{n}-")
    p = None
    rss = Sampler(0.5)
    rss.start()
    try:
        # The SparkSession is process-wide: spark_conf only matters for the first pipeline that starts.
        p = Pipeline.from_sql(w.program, name=f"bench-{w.name}-{n}", storage_dir=os.path.join(work, "pipeline"),
                              spark_conf=SPARK_CONF)
        p.start()
        spark = get_spark()
        probe = EngineProbe(p.engine, p.store, spark, p._compactor)

        log(f"{w.name} N={n:,}: loading {_rows_text(res)}")
        t0 = time.perf_counter()
        with (p.transaction() if getattr(args, "load", "calls") == "transaction" else contextlib.nullcontext()):
            for name, df in tables.items():   # (in a transaction: one step, however many rows)
                for i in range(0, len(df), CHUNK):
                    p.input_pandas(name, df.iloc[i:i + CHUNK])
        p.wait_for_idle()
        res.load_s = time.perf_counter() - t0
        res.load_steps = p.status()["step"]
        log(f"{w.name} N={n:,}: loaded in {res.load_s:.1f} s ({res.load_steps} engine steps)")

        current = tables[w.changed]
        on0 = dict(p.status()["steps_run_on"])
        n_ins = args.change - args.change // 2
        n_del = args.change // 2
        for s in range(args.steps):
            ins = w.new_rows(n, n_ins, rng, current)
            del_pos = rng.choice(len(current), size=n_del, replace=False)
            dels = current.iloc[del_pos]
            step0 = p.status()["step"]
            jobs0 = spark_jobs_so_far(spark)
            probe.reset()
            t0 = time.perf_counter()
            if getattr(args, "push", "calls") == "transaction":   # one step for the change
                with p.transaction():
                    p.input_pandas(w.changed, ins)
                    p.input_pandas(w.changed, dels, delete=True)
            else:
                p.input_pandas(w.changed, ins)
                p.input_pandas(w.changed, dels, delete=True)
            p.wait_for_idle()
            ms = (time.perf_counter() - t0) * 1000
            st = p.status()
            jobs1 = spark_jobs_so_far(spark)
            res.step_ms.append(ms)
            res.engine_steps.append(st["step"] - step0)
            res.jobs_last_step.append(st["spark_jobs_last_step"])
            res.spark_jobs.append(None if jobs0 is None or jobs1 is None else jobs1 - jobs0)
            res.phases.append(probe.snapshot())
            current = pd.concat([current.drop(current.index[del_pos]), ins], ignore_index=True)
            ph = res.phases[-1]
            log(f"{w.name} N={n:,}: change {s + 1}/{args.steps}{' (warm-up)' if s == 0 else ''}: {ms:,.0f} ms, "
                f"{res.engine_steps[-1]} engine steps, {res.spark_jobs[-1]} Spark jobs; clamp_deletes "
                f"{ph['clamp_deletes']:,.0f} ms, run_step {ph['run_step']:,.0f} ms, compact {ph['compact']:,.0f} ms, "
                f"commit {ph['commit']:,.0f} ms; {ph['actions']} Spark actions {ph['spark_actions']:,.0f} ms, "
                f"state writes {ph['write_run']:,.0f} ms")
        tables[w.changed] = current
        res.rows = {t: len(df) for t, df in tables.items()}
        st = p.status()
        res.steps_on = {k: v - on0.get(k, 0) for k, v in st["steps_run_on"].items()}
        res.state = st["state_size"]
        adhoc(p, w, current, rng, res)
        actual = p.query_arrow(f"SELECT * FROM {w.view}")
        p.stop()
        p = None

        log(f"{w.name} N={n:,}: recomputing with DuckDB")
        expected = duckdb_recompute(w, tables, res)
        ok, detail = compare(actual, expected, w.sort_keys)
        res.check, res.check_detail = ("OK" if ok else "MISMATCH"), detail
        log(f"{w.name} N={n:,}: check {res.check}: {detail}")
        log(f"{w.name} N={n:,}: recomputing with Spark batch")
        spark_recompute(spark, w, tables, res, os.path.join(work, "spark"))
    except Exception:  # noqa: BLE001 - recorded in the report; the other workloads still run
        res.error = traceback.format_exc()
        log(f"{w.name} N={n:,}: FAILED\n{res.error}")
        if p is not None:
            try:
                p.stop(force=True)
            except Exception:  # noqa: BLE001
                pass
    finally:
        peak = rss.finish()
        res.driver_peak_mib, res.jvm_peak_mib = peak["driver_rss"] / 2**20, peak["jvm_rss"] / 2**20
        shutil.rmtree(work, ignore_errors=True)
    return res


ADHOC_QUERIES = 21


def adhoc(p, w: Workload, current: pd.DataFrame, rng: np.random.Generator, res: Result) -> None:
    """Ad-hoc query latency on the view after the timed changes: the first query after a step (it loads the
    committed snapshot), then point lookups and small range aggregates on the view's key."""
    col = w.sort_keys[0]               # also a column of the changed table, so its values are real keys
    src = current[col].to_numpy()
    t0 = time.perf_counter()
    res.view_rows = p.query_arrow(f"SELECT COUNT(*) AS n FROM {w.view}").column(0)[0].as_py()
    res.adhoc_first_ms = (time.perf_counter() - t0) * 1000
    for _ in range(ADHOC_QUERIES):
        x = int(src[rng.integers(0, len(src))])
        t0 = time.perf_counter()
        p.query_arrow(f"SELECT * FROM {w.view} WHERE {col} = {x}")
        res.adhoc_point_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        p.query_arrow(f"SELECT COUNT(*) AS n, MIN({col}) AS lo FROM {w.view} WHERE {col} BETWEEN {x} AND {x + 1000}")
        res.adhoc_agg_ms.append((time.perf_counter() - t0) * 1000)


# --------------------------------------------------------------------------- report
def _sh(cmd: List[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        return "?"


def code_version() -> str:
    """The git commit measured, and whether the engine's sources differ from it."""
    sha = _sh(["git", "rev-parse", "--short", "HEAD"]) or "?"
    dirty = _sh(["git", "status", "--porcelain", "--", "planner", "sqlengine", "connectors"])
    return f"`{sha}`" + (" with uncommitted changes in planner/, sqlengine/ or connectors/" if dirty else
                         " (planner/, sqlengine/, connectors/ as committed)")


def machine_info() -> Dict[str, str]:
    mem = cpu = "?"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                    break
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": _sh(["nproc"]), "memory": mem, "cpu": cpu, "os": platform.platform()}


def versions(spark) -> Dict[str, str]:
    import duckdb
    import pyspark
    out = {"Python": platform.python_version(), "pyspark": pyspark.__version__, "duckdb": duckdb.__version__,
           "pyarrow": pa.__version__, "pandas": pd.__version__, "numpy": np.__version__}
    if spark is not None:
        try:
            out["Java"] = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
        except Exception:  # noqa: BLE001
            pass
    return out


def spark_info(spark) -> str:
    if spark is None:
        return "-"
    try:
        conf = spark.sparkContext.getConf()
        heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() / 2 ** 30
        return (f"master `{conf.get('spark.master')}`, spark.driver.memory `{conf.get('spark.driver.memory')}` "
                f"(JVM max heap {heap:.1f} GiB), spark.sql.shuffle.partitions "
                f"`{spark.conf.get('spark.sql.shuffle.partitions')}`")
    except Exception:  # noqa: BLE001
        return "?"


HEADER = ["workload", "N", "rows", "load (s)", "step median (ms)", "engine steps / change",
          "Spark jobs / step", "DuckDB recompute (ms)", "Spark recompute (ms)",
          "DuckDB ÷ step", "Spark ÷ step", "check"]


def summary_row(r: Result) -> List[str]:
    if r.error and r.step_median is None:
        return [r.workload, f"{r.n:,}", _rows_text(r), _fmt(r.load_s), "FAILED", "-", "-", "-", "-", "-", "-",
                "error"]
    return [r.workload, f"{r.n:,}", _rows_text(r), _fmt(r.load_s), _fmt(r.step_median),
            _fmt_counts(r._rest(r.engine_steps)), _fmt_counts(r._rest(r.jobs_last_step)),
            _fmt(r.duckdb_median), _fmt(r.spark_median),
            _fmt_ratio(_ratio(r.duckdb_median, r.step_median)), _fmt_ratio(_ratio(r.spark_median, r.step_median)),
            r.check + (" (error)" if r.error else "")]


TARGET_HEADER = ["workload", "N", "step median (ms)", "≤ 1,000 ms", "vs smallest N (≤ 2×)", "Spark ÷ step (≥ 20×)",
                 "DuckDB ÷ step (≥ 5×)", "steps on driver / Spark"]


def _met(ok: Optional[bool]) -> str:
    return "-" if ok is None else ("met" if ok else "**missed**")


def target_rows(results: List[Result], sizes: List[int]) -> List[List[str]]:
    """Issue 5's step-latency targets, per workload and size."""
    base = {r.workload: r.step_median for r in results if r.n == sizes[0]}
    rows = []
    for r in results:
        m = r.step_median
        if m is None:
            continue
        growth = _ratio(m, base.get(r.workload)) if r.n != sizes[0] else None
        sp, dd = _ratio(r.spark_median, m), _ratio(r.duckdb_median, m)
        rows.append([r.workload, f"{r.n:,}", _fmt(m), _met(m <= 1000),
                     "-" if growth is None else f"{growth:.2f}× {_met(growth <= 2)}",
                     "-" if sp is None else f"{_fmt_ratio(sp)} {_met(sp >= 20)}",
                     "-" if dd is None else f"{_fmt_ratio(dd)} {_met(dd >= 5)}",
                     f"{r.steps_on.get('driver', 0)} / {r.steps_on.get('spark', 0)}"])
    return rows


ADHOC_HEADER = ["workload", "N", "view rows", "first query after a step (ms)", "point lookup p50 (ms)",
                "small aggregate p50 (ms)", "< 50 ms p50", "peak driver RSS (MiB)", "peak JVM RSS (MiB)",
                "state: operators / runs / rows / MiB"]


def adhoc_row(r: Result) -> List[str]:
    pt = statistics.median(r.adhoc_point_ms) if r.adhoc_point_ms else None
    ag = statistics.median(r.adhoc_agg_ms) if r.adhoc_agg_ms else None
    st = r.state.values()
    state = (f"{len(r.state)} / {sum(x['runs'] for x in st)} / {sum(x['rows'] for x in st):,} / "
             f"{sum(x['bytes'] for x in st) / 2**20:,.1f}") if r.state else "-"
    return [r.workload, f"{r.n:,}", "-" if r.view_rows is None else f"{r.view_rows:,}", _fmt(r.adhoc_first_ms),
            _fmt(pt), _fmt(ag), _met(None if pt is None else max(pt, ag) < 50), _fmt(r.driver_peak_mib, 0),
            _fmt(r.jvm_peak_mib, 0), state]


def state_lines(results: List[Result]) -> List[str]:
    out = []
    for r in results:
        if r.state:
            out.append(f"- {r.workload} N={r.n:,}: " + "; ".join(
                f"`{k}` {v['runs']} runs, {v['rows']:,} rows, {v['bytes'] / 2**20:,.1f} MiB"
                for k, v in sorted(r.state.items())))
    return out


PHASE_HEADER = ["workload", "N", "step median (ms)", "clamp_deletes (ms)", "run_step (ms)", "compact (ms)",
                "commit (ms)", "outside these (ms)", "Spark actions: count / ms", "state writes (ms)",
                "Spark jobs / change (all)", "per-change wall times (ms, first = warm-up)"]


def phase_row(r: Result) -> List[str]:
    if not r.step_ms:
        return [r.workload, f"{r.n:,}"] + ["-"] * (len(PHASE_HEADER) - 2)
    rest = r._rest(list(zip(r.step_ms, r.phases)))
    outside = statistics.median(ms - sum(ph[k] for k in EngineProbe.TOP) for ms, ph in rest)
    return [r.workload, f"{r.n:,}", _fmt(r.step_median), _fmt(r.phase_median("clamp_deletes")),
            _fmt(r.phase_median("run_step")), _fmt(r.phase_median("compact")), _fmt(r.phase_median("commit")),
            _fmt(outside), f"{_fmt_counts([ph['actions'] for _, ph in rest])} / {_fmt(r.phase_median('spark_actions'))}",
            _fmt(r.phase_median("write_run")), _fmt_counts(r._rest(r.spark_jobs)),
            ", ".join(f"{x:,.0f}" for x in r.step_ms)]


def text_table(header: List[str], rows: List[List[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def md_table(header: List[str], rows: List[List[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def scaling_rows(results: List[Result], sizes: List[int]) -> List[List[str]]:
    rows = []
    for wname in dict.fromkeys(r.workload for r in results):
        by_n = {r.n: r for r in results if r.workload == wname}
        meds = [by_n[n].step_median if n in by_n else None for n in sizes]
        ratio = _ratio(meds[-1], meds[0]) if len(sizes) > 1 else None
        rows.append([wname] + [_fmt(m) for m in meds] +
                    ([_fmt_ratio(ratio), f"{sizes[-1] / sizes[0]:g}×"] if len(sizes) > 1 else []))
    return rows


def render_markdown(results: List[Result], args, cmdline: str, code: str, started: str, elapsed_s: float,
                    machine: Dict[str, str], vers: Dict[str, str], spark_desc: str, loadavg) -> str:
    n_ins = args.change - args.change // 2
    n_del = args.change // 2
    out = ["# Step-latency benchmark", "",
           f"- Date: {started} (run took {elapsed_s / 60:.1f} min)",
           f"- Machine: {machine['nproc']} CPUs (`nproc`), {machine['memory']} RAM, {machine['cpu']}; "
           f"{machine['os']}",
           f"- Load average (1/5/15 min) at start / end: {loadavg[0]} / {loadavg[1]} (other work was running on the "
           "machine; compare figures within this run, as ratios)",
           "- Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()),
           f"- Spark: {spark_desc}",
           f"- Command: `{cmdline}`",
           f"- Code: git commit {code}",
           f"- Each change: {n_ins} inserts + {n_del} deletes of existing rows ({args.change} rows), "
           f"{args.steps} timed changes per workload and size, the first discarded as warm-up; "
           f"recomputations: median of {RECOMPUTE_REPEATS}.",
           ("- Process warm-up: before the measurements, every workload ran once untimed at "
            f"N={WARMUP_N:,} with {WARMUP_STEPS} changes, so the JVM's JIT and Spark's code generation are "
            "warm for all workloads (the first timed change of each measurement is still discarded)."
            if args.warmup else "- Process warm-up: none (`--no-warmup`)."),
           "",
           "## Workloads", ""]
    for w in (WORKLOADS[x] for x in args.workloads):
        out.append(f"- **{w.name}** - {w.describe}: `{w.select}`")
    out += ["", "## Results", "", md_table(HEADER, [summary_row(r) for r in results]), ""]
    if len(args.sizes) > 1:
        out += ["### Does step latency follow the change or the table?", "",
                md_table(["workload"] + [f"step median at N={n:,} (ms)" for n in args.sizes] +
                         [f"N={args.sizes[-1]:,} ÷ N={args.sizes[0]:,}", "table grew"],
                         scaling_rows(results, args.sizes)), ""]
    out += ["## Targets (issue 5)", "", md_table(TARGET_HEADER, target_rows(results, args.sizes)), "",
            "## Ad-hoc queries, memory and state", "",
            "After the timed changes: the first query after a step loads the committed snapshot into DuckDB; then "
            f"{ADHOC_QUERIES} point lookups (`SELECT * FROM view WHERE key = x`) and {ADHOC_QUERIES} small "
            "aggregates (`COUNT(*), MIN(key)` over a key range of 1,000) on the materialized view, no step in "
            "between. Peak RSS is sampled every 0.5 s during the workload's load, changes and queries (the JVM is "
            "shared by all workloads of the run, so its peak includes earlier ones). State is "
            "`status()[\"state_size\"]` at the end: every operator's runs on disk.", "",
            md_table(ADHOC_HEADER, [adhoc_row(r) for r in results]), ""] + state_lines(results) + [""]
    out += ["## How to read this", "",
            "*step median* is the wall time of one change of "
            f"{args.change} rows, from the first `input_pandas` call to `wait_for_idle()` returning (median "
            "of the timed changes after the warm-up). If the latency follows the size of the change rather "
            "than the size of the table, the step median at the largest N is close to the one at the "
            "smallest N" + (" (the scaling table above shows the ratio; the table grew by the factor in its "
                           "last column)" if len(args.sizes) > 1 else "") + ". The *÷ step* columns are recompute time divided by step time: how many times faster "
            "the incremental step is than recomputing the view from scratch over the same final tables "
            "(DuckDB over in-memory tables; Spark batch reading parquet and writing to a `noop` sink). "
            "A ratio below 1× means recomputation is faster than the incremental step. *engine steps / "
            "change* is how many engine steps the insert and the delete batch took (`status()[\"step\"]` "
            "before/after); *Spark jobs / step* is `status()[\"spark_jobs_last_step\"]` after the change, "
            "i.e. the jobs the circuit of the last step ran (median, range in parentheses). *check* "
            "compares the pipeline's view contents at the end with DuckDB's recomputation (multiset, "
            "numbers with relative tolerance 1e-9). The machine had other work running, so absolute times "
            "are noisy; the ratios compare figures measured side by side in this run.",
            "",
            "## Where the step time goes", "",
            "Medians over the timed changes after the warm-up, measured by wrapping methods of the "
            "pipeline's `Engine` and `StateStore` instances and `DataFrame.toArrow` (read-only "
            "instrumentation, no engine code changed). The top-level phases of a step are disjoint: "
            "`clamp_deletes` (turning a delete batch into deletes of existing copies, a Spark query over the "
            "table's stored state), `run_step` (the circuit), `compact` (waiting for and putting in "
            "place the background merges of state runs; the merges themselves run on their own thread) and `commit` (the manifest); *outside these* is the rest of the wall time (input "
            "validation, the durable input log, taking the batch, waiting/wake-ups). Nested inside them: "
            "*Spark actions* are the engine's `toArrow` calls (each runs one or more Spark jobs; the time "
            "includes Spark's planning of that query) and *state writes* the parquet runs written. "
            "Whatever of `clamp_deletes` + `run_step` + `compact` is not Spark actions or state writes is "
            "driver-side work: building and analyzing the DataFrame plans over py4j, "
            "`createDataFrame` from Arrow, Arrow consolidation. *Spark jobs / change (all)* counts every "
            "Spark job the process started during the change (Spark's status tracker), including "
            "broadcast jobs and those of `clamp_deletes` and `compact`, which `spark_jobs_last_step` "
            "does not count.", "",
            md_table(PHASE_HEADER, [phase_row(r) for r in results]), ""]
    checks = [r for r in results if r.check_detail]
    if checks:
        out += ["## Correctness checks", ""]
        out += [f"- {r.workload} N={r.n:,}: **{r.check}** - {r.check_detail}" for r in checks]
        out.append("")
    errors = [r for r in results if r.error]
    if errors:
        out += ["## Errors", ""]
        for r in errors:
            out += [f"### {r.workload} N={r.n:,}", "", "```", r.error.rstrip(), "```", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- main
def main(args, argv: List[str]) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    exe = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable
    cmdline = " ".join([exe, "-m", "benchmarks.run"] + [shlex.quote(a) for a in argv])
    started = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t_start = time.perf_counter()
    machine = machine_info()
    # import the engine now, so the commit recorded below is the code that runs
    import sqlengine.api.pipeline, sqlengine.executor.runtime, sqlengine.executor.backends.spark  # noqa: F401,E401
    import sqlengine.state.store, sqlengine.api.query  # noqa: F401,E401
    code = code_version()
    log(f"step-latency benchmark: sizes {args.sizes}, change {args.change}, steps {args.steps}, "
        f"workloads {args.workloads}")
    results: List[Result] = []
    spark = None

    def write_report() -> str:
        vers = versions(spark)
        text = render_markdown(results, args, cmdline, code, started, time.perf_counter() - t_start, machine, vers,
                               spark_info(spark), (load0, " ".join(f"{x:.2f}" for x in os.getloadavg())))
        write_section(args.out, "latency", text)
        return text

    if args.warmup:
        import copy
        wargs = copy.copy(args)
        wargs.steps = WARMUP_STEPS
        for wname in args.workloads:
            log(f"process warm-up (untimed, not reported): {wname} N={WARMUP_N:,}")
            r = run_one(WORKLOADS[wname], WARMUP_N, wargs, args.seed + 1)
            if r.error or r.check != "OK":
                log(f"warm-up of {wname}: check {r.check} {r.check_detail} {r.error or ''}")
    for n in args.sizes:
        for wname in args.workloads:
            r = run_one(WORKLOADS[wname], n, args, args.seed)
            results.append(r)
            if spark is None:
                try:
                    from pyspark.sql import SparkSession
                    spark = SparkSession.getActiveSession()
                except Exception:  # noqa: BLE001
                    spark = None
            print("\n" + text_table(HEADER, [summary_row(r)]) + "\n", flush=True)
            write_report()  # keep partial results if the run is interrupted

    print("\n=== Results ===")
    print(text_table(HEADER, [summary_row(r) for r in results]))
    if len(args.sizes) > 1:
        print("\n=== Step median by size ===")
        print(text_table(["workload"] + [f"N={n:,} (ms)" for n in args.sizes] +
                         [f"N={args.sizes[-1]:,} / N={args.sizes[0]:,}", "table grew"],
                         scaling_rows(results, args.sizes)))
    print("\n=== Where the step time goes (medians, ms) ===")
    print(text_table(PHASE_HEADER, [phase_row(r) for r in results]))
    print()
    for r in results:
        if r.check_detail:
            print(f"check {r.workload} N={r.n:,}: {r.check} - {r.check_detail}")
    write_report()
    print(f"\nwrote {args.out}")
    bad = [r for r in results if r.error or r.check != "OK"]
    return 1 if bad else 0
