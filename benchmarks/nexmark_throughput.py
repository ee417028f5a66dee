"""Nexmark throughput: the engine, Spark Structured Streaming and Flink SQL on the same events.

    python -m benchmarks.nexmark_throughput --events N --step 100000 [--queries q0,q1,q2,q3,q4]
        [--peers flink,sss|none] [--out benchmarks/RESULTS.md] [--quick]

The events come from ``workloads.nexmark.gen`` (deterministic; 1 person : 3 auctions : 46 bids per 50
events, event ``i`` at ``base_time + i`` ms) and are cut into steps of ``--step`` consecutive events.
Every system reads, for each query, only the tables the query references (q0-q2: ``bid``, 92% of
the events); events/s is always the total ``--events`` divided by the time.

1. **Engine**: one pipeline per query (the three tables and the query as a plain, non-materialized
   view), the view's output going to a ``foreach_chunk`` callback.  Plain view + callback is the
   closest to a sink that discards its output: a non-materialized view without a listener is not
   computed at all; a materialized view would also write its whole contents to state.  The callback
   only folds each change chunk into an order-independent fingerprint (a weighted sum of row
   hashes), used for the correctness check.  Each step is ``input_pandas`` per table, then
   ``wait_for_idle``; the time runs from the first input to the last ``wait_for_idle``.  Measured
   alongside: peak RSS of this (driver) process and of the Spark JVM (its ``java`` child), sampled
   every 0.5 s, and the state on disk per operator (``status()["state_size"]``).  After all queries,
   DuckDB recomputes each over the same events (``tests/support/workload_oracle.Tables``); its result must have
   the same row count and fingerprint as the integrated change stream (row count only for q19 and
   q105, whose result depends on tie order).
2. **Spark Structured Streaming** (same pyspark, same JVM as the engine): the query text translated
   from DuckDB to Spark SQL by sqlglot, over a parquet file source per table (one file per step,
   written before timing) with ``maxFilesPerTrigger=1``, a ``noop`` sink (append mode, update mode
   for aggregates), ``trigger(availableNow=True)``; the time runs from ``start()`` to the end of
   ``awaitTermination()``.  The input rows of all micro-batches must add up to the rows of the
   tables read.
3. **Flink SQL** (``apache-flink`` in ``.peer-flink``, a subprocess running
   ``benchmarks/peers/flink_nexmark.py``): the queries of ``benchmarks/peers/flink_queries.py`` over
   the same steps as CSV files (filesystem connector), streaming mode, a ``blackhole`` sink.  Reported
   including startup (wall time from submission to the job's result) and excluding it (the job's net
   runtime as Flink reports it); the same job over empty tables gives the fixed cost per job.
   The query's row count in batch mode must equal DuckDB's.

Unless ``--quick``, each system first runs the first query over the first step, untimed (JIT, code
generation), so that none of them pays its warm-up in the first measured query.

A query a peer cannot run is reported with the peer's own error.  The report replaces the
``nexmark`` section of ``--out`` (``benchmarks.report.write_section``).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import sqlglot
from sqlglot import exp

import workloads
from benchmarks.memory import Sampler, rss
from benchmarks.peers.flink_queries import QUERIES as FLINK_QUERIES
from benchmarks.report import write_section
from benchmarks.soak import mib
from benchmarks.step_latency import (EngineProbe, _fmt_ratio, code_version, log, machine_info, md_table, text_table,
                                     versions)
from tests.support.workload_oracle import Tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLINK_PYTHON = os.path.join(ROOT, ".peer-flink", "bin", "python")
FLINK_SCRIPT = os.path.join(ROOT, "benchmarks", "peers", "flink_nexmark.py")
TABLE_NAMES = ("person", "auction", "bid")
TARGET_STATELESS, TARGET_STATEFUL = 200_000, 50_000
SECTION = "nexmark"


# --------------------------------------------------------------------------- queries and events
def view_name(q: str) -> str:
    """'q0' / 'q00' / 'Q101' -> the view name in workloads/nexmark ('q00', 'q101')."""
    n = int(q.strip().lower().lstrip("q"))
    return f"q{n:02d}"


def tables_of(select: str) -> List[str]:
    names = {t.name.lower() for t in sqlglot.parse_one(select, read="duckdb").find_all(exp.Table)}
    return [t for t in TABLE_NAMES if t in names]


def is_stateless(select: str) -> bool:
    """Projection/filter of one table (no join, aggregate, window, DISTINCT, subquery or LIMIT)."""
    tree = sqlglot.parse_one(select, read="duckdb")
    stateful = (exp.Join, exp.AggFunc, exp.Group, exp.Window, exp.Distinct, exp.Subquery, exp.Limit)
    return len(tables_of(select)) == 1 and not any(tree.find(k) for k in stateful)


def is_aggregate(select: str) -> bool:
    tree = sqlglot.parse_one(select, read="duckdb")
    return any(tree.find(k) for k in (exp.AggFunc, exp.Group, exp.Distinct))


def cut_steps(tables: Dict[str, pd.DataFrame], n_events: int, step: int) -> List[Dict[str, pd.DataFrame]]:
    """[{table: its rows of events [k*step, (k+1)*step)}]; event i has date_time base_time + i ms."""
    from workloads.nexmark import gen
    base = np.datetime64(pd.Timestamp(gen.generate.__kwdefaults__["base_time"]), "ms")
    bounds = base + np.arange(0, n_events + step, step).astype("timedelta64[ms]")
    out: List[Dict[str, pd.DataFrame]] = [{} for _ in range(len(bounds) - 1)]
    for name, df in tables.items():
        cuts = np.searchsorted(df["date_time"].to_numpy().astype("datetime64[ms]"), bounds)
        for k in range(len(out)):
            out[k][name] = df.iloc[cuts[k]:cuts[k + 1]]
    return out


def write_files(steps: List[Dict[str, pd.DataFrame]], root: str) -> None:
    """root/parquet/<table>/step-NNNNN.parquet (SSS), root/csv/<table>/step-NNNNN.csv (Flink), root/empty/<table>/."""
    for fmt in ("parquet", "csv", "empty"):
        for t in TABLE_NAMES:
            os.makedirs(os.path.join(root, fmt, t), exist_ok=True)
    for k, tables in enumerate(steps):
        for t, df in tables.items():
            base = os.path.join(root, "{}", t, f"step-{k:05d}.{{}}")
            df.to_parquet(base.format("parquet", "parquet"), index=False)
            df.to_csv(base.format("csv", "csv"), index=False, header=False, date_format="%Y-%m-%d %H:%M:%S.%f")
            for fmt in ("parquet", "csv"):   # the file source orders files by modification time
                os.utime(base.format(fmt, fmt), ns=(k * 10**9 + 10**18, k * 10**9 + 10**18))


# --------------------------------------------------------------------------- fingerprint of a bag
NULL_HASH = np.uint64(0x9E3779B97F4A7C15)


def column_hashes(col: pd.Series) -> np.ndarray:
    """64-bit hashes of a column's values that do not depend on its dtype: times hash as int64 ns (UTC),
    numbers (int, float, Decimal) as float64 rounded to 36 mantissa bits (the engine and DuckDB may
    differ in the last bits), strings as strings, and every NULL as ``NULL_HASH``."""
    null = col.isna().to_numpy()
    col = col[~null] if null.any() else col
    if col.dtype == object and len(col) and not isinstance(col.iloc[0], str):
        col = pd.to_datetime(col) if isinstance(col.iloc[0], dt.date) else col.astype("float64")
    if isinstance(col.dtype, pd.DatetimeTZDtype):
        col = col.dt.tz_convert("UTC").dt.tz_localize(None)
    if pd.api.types.is_datetime64_any_dtype(col):
        values = col.to_numpy().astype("datetime64[ns]").astype(np.int64)
    elif col.dtype == object:
        values = col.to_numpy(object)
    else:
        m, e = np.frexp(col.to_numpy(np.float64))
        values = np.ldexp(np.round(m * 2.0 ** 36) / 2.0 ** 36, e)
    out = np.full(len(null), NULL_HASH, dtype=np.uint64)
    out[~null] = pd.util.hash_array(values, categorize=False)
    return out


class Fingerprint:
    """Order-independent summary of a bag of rows given as weighted chunks: the sum of weights
    (row count) and the weighted sum of 64-bit row hashes (mod 2**64)."""

    def __init__(self):
        self.rows = 0
        self.hash = 0

    def add(self, df: pd.DataFrame, weights: Optional[np.ndarray] = None) -> None:
        if not len(df):
            return
        w = np.ones(len(df), dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
        h = np.zeros(len(df), dtype=np.uint64)
        for c in df.columns:                    # combine the columns' hashes in column order
            h = (h ^ column_hashes(df[c])) * np.uint64(0x100000001B3)
        self.rows += int(w.sum())
        self.hash = (self.hash + int((h * w.astype(np.uint64)).sum())) % 2 ** 64

    def add_chunk(self, chunk: pd.DataFrame, seq_no: int = 0) -> None:
        """A ``foreach_chunk`` callback: the view's columns plus ``__weight``."""
        self.add(chunk.drop(columns="__weight"), chunk["__weight"].to_numpy())


def check_engine(results: Dict[str, dict], tables: Dict[str, pd.DataFrame], selects: Dict[str, str]) -> None:
    """Compare each query's engine output with DuckDB recomputing it over all events (one DuckDB
    database for all queries, built after the engine runs so that its memory is not in their RSS;
    results fetched in chunks).  Sets ``expected_rows``, ``check`` and ``check_detail``."""
    oracle = Tables(workloads.schema("nexmark"), {})
    oracle.data = tables           # the whole event set, inserted once (no copies)
    con = oracle.duck()
    deterministic = workloads.deterministic("nexmark")
    for v, r in results.items():
        expected = Fingerprint()
        res = con.execute(selects[v])
        while True:
            chunk = res.fetch_df_chunk(50)          # 50 vectors of 2,048 rows
            if not len(chunk):
                break
            expected.add(chunk)
        r["expected_rows"] = expected.rows
        got = r["engine"].pop("output", None)
        if got is None:
            continue
        exact = deterministic[v]       # tie-dependent queries (q19, q105): row count only
        ok = got.rows == expected.rows and (got.hash == expected.hash or not exact)
        r["check"] = ("OK" if exact else "OK (rows)") if ok else "MISMATCH"
        r["check_detail"] = (f"{got.rows:,} rows" + ("" if exact else " (result depends on tie order: row count "
                                                     "compared, not the rows)")
                             + ("" if ok else f" vs DuckDB {expected.rows:,} rows"
                                + ("" if got.rows != expected.rows else ", row hashes differ")))
        log(f"{v}: engine check {r['check']}: {r['check_detail']}")
    con.close()


# --------------------------------------------------------------------------- the engine
def append_only(program: str) -> str:
    r"""``program`` with every CREATE TABLE declared ``WITH ('append_only' = 'true')`` (Nexmark's streams only
    insert, as Flink's sources do).

    >>> append_only("CREATE TABLE bid (\n  a BIGINT\n);\nCREATE VIEW v AS SELECT a FROM bid;")
    "CREATE TABLE bid (\n  a BIGINT\n) WITH ('append_only' = 'true');\nCREATE VIEW v AS SELECT a FROM bid;"
    """
    return re.sub(r"(CREATE TABLE \w+ \([^;]*?\))\s*;", r"\1 WITH ('append_only' = 'true');", program)


def run_engine(view: str, used: List[str], steps, spark, work: str, sampler: Sampler,
               tables: str = "stored", ingest: str = "pandas", push: str = "calls") -> dict:
    from sqlengine import Pipeline
    storage = tempfile.mkdtemp(prefix=f"engine-{view}-", dir=work)
    program = workloads.program("nexmark", [view], materialized=False)
    if tables == "append-only":
        program = append_only(program)
    p = Pipeline.from_sql(program, name=f"nexmark-{view}", storage_dir=storage, spark=spark)
    out, kept = Fingerprint(), []
    # the sink: each change chunk kept as Arrow (nearly free, as Flink's blackhole); folded into the fingerprint
    # after timing, so that the check costs the engine nothing
    p.foreach_chunk(view, lambda chunk, seq: kept.append(chunk), format="arrow")
    try:
        p.start()
        p.wait_for_idle()
        step0 = p.status()["step"]
        probe = EngineProbe(p.engine, p.store, spark, p._compactor)   # where the step thread's time goes
        inputs = 0.0   # seconds in the input calls (this thread)
        phase = sampler.phase = f"engine {view}"
        t0 = time.perf_counter()
        for tables in steps:
            with (p.transaction() if push == "transaction" else contextlib.nullcontext()):
                for t in used:
                    if len(tables[t]):
                        t1 = time.perf_counter()
                        if ingest == "arrow":
                            p.input_arrow(t, tables[t])
                        else:
                            p.input_pandas(t, tables[t])
                        inputs += time.perf_counter() - t1
            if push != "queued":
                p.wait_for_idle()
        p.wait_for_idle()
        wall = time.perf_counter() - t0
        sampler.phase = "between"
        peak = {k: max(v, sampler.peaks.get(phase, {}).get(k, 0)) for k, v in rss().items()}  # short runs
        st = p.status()
        for chunk in kept:
            out.add_chunk(chunk.to_pandas(integer_object_nulls=True))
        kept.clear()
        phases = {"input calls": inputs * 1000, **probe.snapshot()}
        return {"wall_s": wall, "engine_steps": st["step"] - step0, "state": st["state_size"], "output": out,
                "phases_ms": phases,
                "driver_peak": peak["driver_rss"], "jvm_peak": peak["jvm_rss"]}
    finally:
        p.stop(force=True)
        shutil.rmtree(storage, ignore_errors=True)


# --------------------------------------------------------------------------- Spark Structured Streaming
def run_sss(view: str, select: str, used: List[str], data: str, spark, work: str) -> dict:
    try:
        sql = sqlglot.transpile(select, read="duckdb", write="spark")[0]
        for t in used:
            path = os.path.join(data, "parquet", t)
            schema = spark.read.parquet(path).schema
            spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(path).createOrReplaceTempView(t)
        mode = "update" if is_aggregate(select) else "append"
        writer = (spark.sql(sql).writeStream.format("noop").outputMode(mode).trigger(availableNow=True)
                  .option("checkpointLocation", tempfile.mkdtemp(prefix=f"sss-{view}-", dir=work)))
        t0 = time.perf_counter()
        q = writer.start()
        q.awaitTermination()
        wall = time.perf_counter() - t0
        progress = q.recentProgress
        return {"wall_s": wall, "mode": mode, "batches": len(progress),
                "input_rows": sum(p["numInputRows"] for p in progress)}
    except Exception as e:  # noqa: BLE001 - the query is not expressible (or failed): reported
        return {"error": _first_line(e)}
    finally:
        for t in used:
            spark.catalog.dropTempView(t)


def _first_line(e: BaseException, limit: int = 300) -> str:
    """The exception's type and first line, cut at a sentence end within ``limit`` characters."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    msg = lines[0] if lines else ""
    if len(msg) > limit:
        msg = msg[:msg.rfind(". ", 0, limit) + 1] or msg[:limit] + "..."
    return f"{type(e).__name__}: {msg}"


# --------------------------------------------------------------------------- Flink
def run_flink(views: List[str], data: str, warmup: Optional[str], work: str, heap: str, timeout: float,
              parallelism: int = 2) -> Dict[str, dict]:
    supported = [v for v in views if v in FLINK_QUERIES]
    out = {v: {"error": "not translated to Flink SQL (benchmarks/peers/flink_queries.py)"}
           for v in views if v not in FLINK_QUERIES}
    if not supported:
        return out
    if not os.path.exists(FLINK_PYTHON):
        return {v: {"error": "not run: .peer-flink missing (python3 -m venv .peer-flink && "
                             ".peer-flink/bin/pip install apache-flink==2.3.0)"} for v in views}
    cmd = [FLINK_PYTHON, FLINK_SCRIPT, "--csv", os.path.join(data, "csv"), "--empty", os.path.join(data, "empty"),
           "--queries", ",".join(supported), "--parallelism", str(parallelism), "--check",
           "--timeout", str(timeout)]
    if warmup:
        cmd += ["--warmup", os.path.join(warmup, "csv")]
    env = dict(os.environ, JVM_ARGS=f"-Xms{heap} -Xmx{heap}")
    env.pop("PYTHONPATH", None)
    err_log = os.path.join(work, "flink.stderr")
    with open(err_log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=work)
        for line in proc.stdout:
            if line.startswith("RESULT "):
                r = json.loads(line[len("RESULT "):])
                v = r.pop("query")
                out[v] = r
                log(f"{v}: Flink " + (r["error"] if "error" in r else f"{r['wall_s']:.1f} s incl. startup"))
        proc.wait()
    for v in supported:
        if v not in out:
            tail = open(err_log).read().strip().splitlines()[-3:]
            out[v] = {"error": f"Flink process exited with {proc.returncode}: {' | '.join(tail)[:400]}"}
    return out


# --------------------------------------------------------------------------- report
def _eps(n: int, secs: Optional[float]) -> Optional[float]:
    return n / secs if secs else None


def _n(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return _fmt_ratio(a / b) if a and b else "-"


def _failure(d: dict) -> str:
    return "timed out" if d["error"].startswith("TimeoutError") else "cannot run"


def _cell(r: dict, peer: str, eps: Optional[float]) -> str:
    if peer not in r:
        return "not run"
    return _failure(r[peer]) if "error" in r[peer] else _n(eps)


def summary_rows(results: Dict[str, dict], n: int) -> List[List[str]]:
    rows = []
    for v, r in results.items():
        e, s, f = r["engine"], r.get("sss") or {}, r.get("flink") or {}
        eng = _eps(n, e.get("wall_s"))
        sss = _eps(n, s.get("wall_s"))
        fl_in = _eps(n, f.get("wall_s"))
        fl_ex = _eps(n, f["net_ms"] / 1000) if f.get("net_ms") else None
        target = TARGET_STATELESS if r["stateless"] else TARGET_STATEFUL
        met = "-" if eng is None else ("met" if eng >= target else "missed")
        rows.append([v, "stateless" if r["stateless"] else "join/agg", ", ".join(r["tables"]), _n(eng),
                     r["check"], _cell(r, "sss", sss), _cell(r, "flink", fl_in), _cell(r, "flink", fl_ex),
                     _ratio(eng, sss), _ratio(eng, fl_in),
                     _ratio(eng, fl_ex), f"≥{target:,}", met])
    return rows


SUMMARY = ["query", "kind", "tables read", "engine ev/s", "engine check", "SSS ev/s", "Flink ev/s (incl. startup)",
           "Flink ev/s (excl. startup)", "engine÷SSS", "engine÷Flink (incl.)", "engine÷Flink (excl.)",
           "target (engine)", "target met"]
ENGINE = ["query", "wall (s)", "engine steps", "driver RSS peak (MiB)", "JVM RSS peak (MiB)",
          "state on disk (MiB)", "state per operator: MiB (runs, rows)"]


def engine_rows(results: Dict[str, dict]) -> List[List[str]]:
    rows = []
    for v, r in results.items():
        e = r["engine"]
        if "error" in e:
            rows.append([v, "error"] + ["-"] * 5)
            continue
        ops = "; ".join(f"`{k}` {mib(s['bytes'])} ({s['runs']}, {s['rows']:,})" for k, s in e["state"].items()
                       if s["runs"])
        rows.append([v, f"{e['wall_s']:.1f}", str(e["engine_steps"]), mib(e["driver_peak"]), mib(e["jvm_peak"]),
                     mib(sum(s["bytes"] for s in e["state"].values())), ops])
    return rows


BREAKDOWN = ["query", "wall (s)", "input calls (s)", "clamp deletes (s)", "circuit (s)", "of it: Spark actions (s)",
             "commit (s)", "merges put in place (s)", "state runs written (s, any thread)", "rest (s)"]


def breakdown_rows(results: Dict[str, dict]) -> List[List[str]]:
    """Where each query's engine time went (``benchmarks.step_latency.EngineProbe``'s phases of the step thread,
    and the input calls of the pushing thread); *rest*: the wall time minus the input calls and the step
    thread's phases (the hand-over to the step thread, the delivery, waiting), negative where steps ran while
    the next input calls were made."""
    rows = []
    for v, r in results.items():
        e = r["engine"]
        if "error" in e or "phases_ms" not in e:
            continue
        ph = {k: x / 1000 for k, x in e["phases_ms"].items()}
        top = ph["input calls"] + sum(ph.get(k, 0.0) for k in EngineProbe.TOP)
        rows.append([v, f"{e['wall_s']:.2f}", f"{ph['input calls']:.2f}", f"{ph.get('clamp_deletes', 0):.2f}",
                     f"{ph.get('run_step', 0):.2f}", f"{ph.get('spark_actions', 0):.2f}", f"{ph.get('commit', 0):.2f}",
                     f"{ph.get('compact', 0):.2f}", f"{ph.get('write_run', 0):.2f}", f"{e['wall_s'] - top:.2f}"])
    return rows


def peer_lines(results: Dict[str, dict], n: int) -> List[str]:
    out = []
    for v, r in results.items():
        s, f = r.get("sss"), r.get("flink")
        if s is not None:
            if "error" in s:
                out.append(f"- {v} SSS: **{_failure(s)}**: {s['error']}")
            else:
                ok = "OK" if s["input_rows"] == r["input_rows"] else f"MISMATCH (expected {r['input_rows']:,})"
                out.append(f"- {v} SSS: {s['wall_s']:.1f} s, {s['mode']} mode, {s['batches']} micro-batches, "
                           f"{s['input_rows']:,} input rows: {ok}")
        if f is not None:
            if "error" in f:
                out.append(f"- {v} Flink: **{_failure(f)}**: {f['error']}")
            else:
                rows = f.get("rows")
                ok = "OK" if rows == r["expected_rows"] else f"MISMATCH (DuckDB {r['expected_rows']:,})"
                out.append(f"- {v} Flink: {f['wall_s']:.1f} s wall incl. startup, startup (same job over empty "
                           f"tables) {f['startup_s']:.1f} s, net job runtime {f['net_ms'] / 1000:.1f} s; "
                           f"batch-mode row count {rows:,}: {ok}")
    return out


def render(results, args, cmdline, started, machine, vers, flink_version, load, elapsed, code, gen_mib) -> str:
    n = args.events
    out = [
        "# Nexmark throughput: engine vs. Spark Structured Streaming vs. Flink SQL", "",
        f"- Date: {started} (run took {elapsed / 60:.1f} min)",
        f"- Machine: {machine['nproc']} CPUs (`nproc`), {machine['memory']} RAM, {machine['cpu']}; {machine['os']}",
        f"- Load average (1/5/15 min) before / after: {load[0]} / {load[1]} (the machine is shared; compare "
        "figures within this run)",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + f"; Flink (apache-flink) {flink_version}",
        f"- Command: `{cmdline}`",
        f"- Code: git commit {code}",
        f"- Events: {n:,} from `workloads.nexmark.gen` (seed {args.seed}), in {-(-n // args.step)} steps of "
        f"{args.step:,} events ({gen_mib} MiB as pandas in the driver during the whole run).",
        "",
        "## Results", "",
        md_table(SUMMARY, summary_rows(results, n)), "",
        "*ev/s* is all generated events divided by the wall time; each system reads only the tables the "
        "query references (bids are 92% of the events). **Engine**: plain (non-materialized) view with a "
        "`foreach_chunk(..., format=\"arrow\")` callback keeping each change chunk, folded into a fingerprint "
        "after timing (the closest to a discarding sink: an unlistened plain view is not computed; a "
        "materialized one also stores its contents), "
        f"`input_{args.ingest}` per table ({'steps converted to Arrow before timing, ' if args.ingest == 'arrow' else ''}"
        f"tables {'declared append-only: a table no view reads as state keeps no rows' if args.tables == 'append-only' else 'stored'}) "
        + ("the step's input calls in one `Pipeline.transaction()` (one engine step per step of events) "
           if args.push == "transaction" else "") +
        ("every step's calls pushed without waiting (queued: the engine takes what is pending, up to "
         "`RuntimeConfig.max_step_bytes` a step), then one `wait_for_idle`, timed from the first input to it."
         if args.push == "queued" else "and `wait_for_idle` per step, timed from the first input to the last "
         "`wait_for_idle`.") + " *engine check*: the integrated change stream equals DuckDB's recomputation over the "
        "same events (row count and an order-independent hash of the rows, numbers rounded to 36 mantissa "
        "bits; *OK (rows)*: the result depends on tie order, so only the row count is compared). **SSS**: "
        "same Spark session, DuckDB text translated by sqlglot, parquet file source (one file "
        "per step and table, written before timing), `maxFilesPerTrigger=1`, `noop` sink, "
        "`trigger(availableNow=True)`, timed from `start()` to `awaitTermination()`. **Flink**: streaming "
        f"mode, parallelism 2, `JVM_ARGS=\"-Xms{args.flink_heap} -Xmx{args.flink_heap}\"`, CSV files (one per "
        "step and table; Flink bundles no parquet), `blackhole` sink, queries in "
        "`benchmarks/peers/flink_queries.py`; *incl. startup* is the wall time "
        "from submission until the job's result is available (mini-cluster start, submission, deployment, run), "
        "*excl. startup* the job's net runtime as Flink reports it (`JobExecutionResult.getNetRuntime`: from "
        "job start to finish, so task deployment is still in it). The details below also give the wall time "
        "of the same job over empty tables, i.e. the fixed cost per job. Targets: "
        f"≥{TARGET_STATELESS:,} ev/s for stateless queries (projection/filter: q0-q2 and the like), "
        f"≥{TARGET_STATEFUL:,} ev/s for join/aggregate queries. " + (
            "No warm-up (`--quick`)." if args.quick else
            f"Warm-up: each system first ran {args.queries[0]} over the first step, untimed."), "",
        "## Engine resources", "",
        md_table(ENGINE, engine_rows(results)), "",
        "RSS peaks are sampled every 0.5 s during the query's timed run: the driver is this Python process "
        "(it holds the generated events, see above), the JVM is the Spark driver JVM (its `java` child, "
        "shared by all queries and by SSS, so it does not shrink between queries). State: "
        "`status()[\"state_size\"]` after the last step (operator key: size (parquet runs, rows)).", "",
        "## Where the engine's time goes", "",
        md_table(BREAKDOWN, breakdown_rows(results)), "",
        "Seconds of each query's timed run: the input calls (the pushing thread), then the step thread's phases "
        "(`benchmarks.step_latency.EngineProbe`): turning deletes into deletes of existing copies, the circuit "
        "(the operators; Spark actions are part of it), the manifest commit, putting background merges in "
        "place; state runs written are counted on every thread (mostly overlapping the circuit). *rest* is the "
        "wall time minus the input calls and the step thread's phases: the hand-over to the step thread, the "
        "delivery to the callback and waiting; negative when steps overlapped the input calls (queued pushes).", "",
    ]
    peers = peer_lines(results, n)
    if peers:
        out += ["## Peers: details and what they cannot run", ""] + peers + [""]
    problems = [f"- {v}: {r['engine']['error']}" for v, r in results.items() if "error" in r["engine"]]
    problems += [f"- {v}: {r['check_detail']}" for v, r in results.items() if r["check"] == "MISMATCH"]
    if problems:
        out += ["## Engine errors and mismatches", ""] + problems + [""]
    return "\n".join(out)


# --------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.nexmark_throughput", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events to generate (default 1,000,000)")
    ap.add_argument("--step", type=int, default=100_000, help="events per step / per file (default 100,000)")
    ap.add_argument("--queries", default="q0,q1,q2,q3,q4",
                    help="comma-separated Nexmark queries, or all (default q0,q1,q2,q3,q4)")
    ap.add_argument("--peers", default="flink,sss", help="comma-separated subset of flink,sss, or none")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    ap.add_argument("--quick", action="store_true", help="smoke run: 20,000 events in steps of 10,000, no warm-ups")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ingest", choices=("pandas", "arrow"), default="pandas",
                    help="how the engine takes each step's rows: input_pandas (the default) or input_arrow (the "
                         "steps converted to Arrow before timing, as the peers' files are written before theirs)")
    ap.add_argument("--tables", choices=("stored", "append-only"), default="stored",
                    help="the engine's tables: stored (queryable, take deletes; the default) or declared "
                         "'append_only' (a table no view reads as state keeps no rows)")
    ap.add_argument("--push", choices=("calls", "transaction", "queued"), default="calls",
                    help="how the engine takes a step's tables: one input call each (the default: a step per "
                         "table read), or the calls in one Pipeline.transaction() (one step for all of them), "
                         "each then waited for with wait_for_idle; queued: every step's calls pushed without "
                         "waiting (the engine takes what is pending, up to RuntimeConfig.max_step_bytes a "
                         "step), then one wait_for_idle")
    ap.add_argument("--spark-memory", default="4g", help="spark.driver.memory if this process starts Spark")
    ap.add_argument("--flink-heap", default=None, help="Flink JVM heap (default 2g up to 1M events, else 6g)")
    ap.add_argument("--flink-timeout", type=float, default=1800,
                    help="cancel a Flink query's job after this many seconds (default 1800; 0: never)")
    ap.add_argument("--work-dir", default=None, help="where data files and state go (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.step = 20_000, 10_000
    views = workloads.select_sql("nexmark")
    try:
        args.queries = list(views) if args.queries.strip() == "all" else \
            [view_name(q) for q in args.queries.split(",") if q.strip()]
    except ValueError:
        ap.error(f"--queries: names like q0,q3,q101, got {args.queries!r}")
    unknown = [q for q in args.queries if q not in views]
    if unknown:
        ap.error(f"unknown queries {unknown}; known: {', '.join(views)}")
    args.peers = [] if args.peers.strip() in ("", "none") else [p.strip() for p in args.peers.split(",")]
    if set(args.peers) - {"flink", "sss"}:
        ap.error("--peers: flink, sss or none")
    if args.events < 1 or args.step < 1:
        ap.error("--events and --step must be positive")
    args.flink_heap = args.flink_heap or ("2g" if args.events <= 1_000_000 else "6g")
    return args


def main(argv=None, spark=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cmdline = " ".join(["python -m benchmarks.nexmark_throughput"] + [shlex.quote(a) for a in argv])
    started = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t_start = time.perf_counter()
    code = code_version()
    selects = workloads.select_sql("nexmark")
    work = tempfile.mkdtemp(prefix="nexmark-tp-", dir=args.work_dir)
    sampler = Sampler(period=0.5)
    sampler.start()
    try:
        from sqlengine.executor.session import get_spark
        spark = spark or get_spark({"spark.driver.memory": args.spark_memory})
        log(f"generating {args.events:,} events")
        from workloads.nexmark import gen
        tables = gen.generate(args.events, args.seed)
        gen_mib = mib(sum(int(df.memory_usage(deep=True).sum()) for df in tables.values()))
        steps = cut_steps(tables, args.events, args.step)
        engine_steps = steps if args.ingest == "pandas" else \
            [{t: pa.Table.from_pandas(df, preserve_index=False) for t, df in s.items()} for s in steps]
        data, warm = os.path.join(work, "data"), None if args.quick else os.path.join(work, "warmup")
        if args.peers:
            log(f"writing {len(steps)} steps as parquet and CSV files")
            write_files(steps, data)
            if warm:
                write_files(steps[:1], warm)
            spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(max(100, 2 * len(steps) + 10)))
        if warm:
            first = args.queries[0]
            log(f"warm-up (untimed): engine{' and SSS' if 'sss' in args.peers else ''} {first} over one step")
            run_engine(first, tables_of(selects[first]), engine_steps[:1], spark, work, sampler, args.tables,
                       args.ingest)
            if "sss" in args.peers:
                run_sss(first, selects[first], tables_of(selects[first]), warm, spark, work)
        results: Dict[str, dict] = {}
        for v in args.queries:
            used = tables_of(selects[v])
            r = results[v] = {"tables": used, "stateless": is_stateless(selects[v]),
                              "input_rows": sum(len(tables[t]) for t in used), "check": "-"}
            log(f"{v}: engine")
            try:
                r["engine"] = run_engine(v, used, engine_steps, spark, work, sampler, args.tables, args.ingest,
                                         args.push)
            except Exception as e:  # noqa: BLE001 - reported, the other queries still run
                r["engine"] = {"error": _first_line(e)}
            log(f"{v}: engine {r['engine'].get('error') or _n(_eps(args.events, r['engine']['wall_s'])) + ' ev/s'}")
            if "sss" in args.peers:
                log(f"{v}: Spark Structured Streaming")
                r["sss"] = run_sss(v, selects[v], used, data, spark, work)
                log(f"{v}: SSS {r['sss'].get('error') or _n(_eps(args.events, r['sss']['wall_s'])) + ' ev/s'}")
        log("checking the engine's results against DuckDB")
        check_engine(results, tables, selects)
        flink_version = "-"
        if "flink" in args.peers:
            log(f"Flink SQL: {', '.join(args.queries)}")
            for v, f in run_flink(args.queries, data, warm, work, args.flink_heap, args.flink_timeout).items():
                results[v]["flink"] = f
                flink_version = f.get("flink", flink_version)
    finally:
        sampler.stop_flag = True
        shutil.rmtree(work, ignore_errors=True)
    load1 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = render(results, args, cmdline, started, machine_info(), versions(spark), flink_version, (load0, load1),
                  time.perf_counter() - t_start, code, gen_mib)
    print("\n" + text_table(SUMMARY, summary_rows(results, args.events)))
    print("\n" + text_table(ENGINE[:-1], [r[:-1] for r in engine_rows(results)]) + "\n")
    for line in peer_lines(results, args.events):
        print(line)
    write_section(args.out, SECTION, text)
    print(f"\nwrote section '{SECTION}' of {args.out}")
    bad = [v for v, r in results.items() if not r["check"].startswith("OK")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
