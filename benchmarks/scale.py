"""Steps on the Spark path at growing state, beside Spark batch recomputation, and on a standalone cluster.

For each N (rows of table ``t``; ``d`` has N/10 keys):

1. load ``t`` in 1M-row steps on the driver path (the default) and report rows/s, with the driver's disk tier
   off (as below), so the runs are written sorted by key for Spark's keyed reads
   (:mod:`sqlengine.executor.keyed_reads`);
2. then force every step onto Spark with the state *not* cached on the driver (the cache budget set to 0),
   as when the state outgrows the driver: Spark reads the operators' parquet runs;
3. time changes of ``--small`` rows (half inserts of new rows, half deletes of rows inserted before, one step
   each: the pipeline is paused while both go in) and of ``--large`` rows, from the first input call to
   ``wait_for_idle``; the first small change is a warm-up; nobody listens to the views' changes, so a step
   only adds the change to the aggregates' state (the views are read by queries); then ``listen()`` on both
   views and time ``--small`` changes again, which also compute and deliver the views' changes, and then the
   ``--large`` changes (listened too); then, with the default routing (still nothing cached), time ``--small``
   changes again: they run on the driver, reading the state of their keys from the runs' row groups
   (``sqlengine/state/row_groups.py``);
4. time Spark batch recomputing both views from the same table contents written once as parquet (read +
   aggregate/join + ``noop`` write), in the same Spark session;
5. check both views against DuckDB at the end.

Views: ``g`` = ``SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k`` and ``j`` = ``SELECT d.name, COUNT(*), SUM(t.v)
FROM t JOIN d ON t.k = d.k GROUP BY d.name`` (a join-aggregate).

``--cluster-workers 1,2`` also runs the smallest N in a child process against a standalone cluster of that
many one-core workers (``tests/support/spark_cluster.py``), for the cost model in ``docs/SCALING.md``.

``--spark-load 1000000,10000000`` first loads ``t`` for each of those N with every step and every op on Spark
(a child process with ``SPARK_ONLY``'s environment: nothing cached on the driver, no disk tier), in 1M-row
steps, then restarts the pipeline with two more views (``SQL_MORE``) and times their backfill on Spark; the
cluster runs do the same against the cluster.

``--flink`` also loads the same rows into the same two views on Flink SQL (``.peer-flink``, see
``benchmarks/peers/flink_load.py``), in the same run, for each N: CSV files of ``t`` and ``d`` (written before
timing), streaming mode, parallelism 2, blackhole sinks.

    python -m benchmarks.scale --n 1000000,10000000 --cluster-workers 1,2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQL = """CREATE TABLE t (id BIGINT NOT NULL, k BIGINT NOT NULL, v BIGINT);
CREATE TABLE d (k BIGINT NOT NULL, name VARCHAR);
CREATE MATERIALIZED VIEW g AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k;
CREATE MATERIALIZED VIEW j AS SELECT d.name, COUNT(*) AS n, SUM(t.v) AS s FROM t JOIN d ON t.k = d.k GROUP BY d.name;"""
G = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k"
J = "SELECT d.name, COUNT(*) AS n, SUM(t.v) AS s FROM t JOIN d ON t.k = d.k GROUP BY d.name"
CHUNK = 1_000_000


def rows(first: int, n: int, nk: int, rng) -> pd.DataFrame:
    return pd.DataFrame({"id": np.arange(first, first + n, dtype=np.int64),
                         "k": rng.integers(0, nk, n, dtype=np.int64), "v": rng.integers(0, 1000, n, dtype=np.int64)})


def workload(n: int):
    """The random generator of ``t``'s rows for N = ``n``, the number of keys, and table ``d`` (one row a key)."""
    nk = max(1, n // 10)
    d = pd.DataFrame({"k": np.arange(nk, dtype=np.int64), "name": [f"n{i % 1000}" for i in range(nk)]})
    return np.random.default_rng(n), nk, d


def spark_conf(master: Optional[str]) -> Dict[str, str]:
    return {"spark.driver.memory": "8g"} if master is None else {"spark.executor.memory": "1g",
                                                                 "spark.task.maxFailures": "8"}


def load_t(p, n: int, nk: int, rng) -> Tuple[List[pd.DataFrame], List[float]]:
    """Load ``n`` rows of ``t`` into ``p`` in CHUNK-row steps, each until its rows are queryable: the chunks
    loaded, and each step's seconds."""
    live: List[pd.DataFrame] = []
    steps: List[float] = []
    for s in range(0, n, CHUNK):
        chunk = rows(s, min(CHUNK, n - s), nk, rng)
        live.append(chunk)
        t = time.time()
        p.input_pandas("t", chunk)
        p.wait_for_idle(timeout_s=7200)
        steps.append(time.time() - t)
    return live, steps


def views_match(p, table: pd.DataFrame, d: pd.DataFrame, views) -> bool:
    """Does each view of ``views`` ((name, query) pairs), read from ``p``, equal DuckDB's query over the contents
    ``table`` of ``t`` and ``d``?"""
    import duckdb
    con = duckdb.connect()
    con.register("t", table)
    con.register("d", d)
    ok = True
    for name, q in views:
        want = sorted(con.execute(q).fetchall())
        got = sorted(tuple(r.values()) for r in p.query(f"SELECT * FROM {name}"))
        ok &= [tuple(map(str, r)) for r in want] == [tuple(map(str, r)) for r in got]
    return ok


def timed_change(p, ins: pd.DataFrame, gone: pd.DataFrame, timeout_s: float = 7200) -> float:
    """Seconds from the first input call to ``wait_for_idle`` for inserting ``ins`` and deleting ``gone`` into
    ``t`` as one step (the pipeline is paused while both go in)."""
    t = time.time()
    p.pause()
    p.input_pandas("t", ins)
    p.input_pandas("t", gone, delete=True)
    p.resume()
    p.wait_for_idle(timeout_s=timeout_s)
    return time.time() - t


def settle(p, timeout_s: float = 7200) -> float:
    """Seconds until no background merge of state runs is running (see sqlengine.executor.compaction), so that
    the next timed step does not share the machine with one."""
    t = time.time()
    while p.status()["state_merges"]["running"]:
        if time.time() - t > timeout_s:
            raise TimeoutError("a background merge did not end")
        time.sleep(0.02)
    return time.time() - t


def measure(n: int, small: int, large: int, repeats: int, master: Optional[str], log) -> Dict[str, object]:
    from sqlengine import Pipeline
    rng, nk, d = workload(n)
    work = tempfile.mkdtemp(prefix="sqlengine-scale-")
    conf = spark_conf(master)
    p = Pipeline.from_sql(SQL, storage_dir=os.path.join(work, "s"), spark_conf=conf, spark_master=master)
    p.start()
    p.engine.local.cache.disk = False   # no disk tier: state beyond the cache is read by Spark (runs sorted by key)
    t0 = time.time()
    p.input_pandas("d", d)
    live, _ = load_t(p, n, nk, rng)
    load_s = time.time() - t0   # every row queryable
    load_merged_s = load_s + settle(p)   # and the background merges the load started have ended
    log(f"N={n:,}: loaded in {load_s:.1f} s ({n / load_s:,.0f} rows/s), merges settled at {load_merged_s:.1f} s, "
        f"steps {p.status()['steps_run_on']}, merges {p.status()['state_merges']}")
    eng = p.engine
    spark = eng.spark
    placed = eng.placement                    # every step on Spark, reading state from its runs, as when
    eng.placement = placed.replace(local_step_rows=0, driver_ops=placed.ops_on_driver())
    eng.local.cache.hold_nothing()            # it outgrows the driver's cache with the disk tier off
    table = pd.concat(live, ignore_index=True)
    next_id = n
    pos = 0

    def change(size: int) -> float:
        nonlocal next_id, pos, table
        ins = rows(next_id, size // 2, nk, rng)
        next_id += size // 2
        gone = table.iloc[pos:pos + size // 2]
        pos += size // 2
        settle(p)   # the last change's background merges, not timed
        took = timed_change(p, ins, gone)
        table = pd.concat([table, ins], ignore_index=True)   # the first ``pos`` rows are the deleted ones
        return took

    before = p.status()["steps_run_on"]["spark"]
    driver_ops = eng.placement.ops_on_driver()
    eng.placement = eng.placement.replace(driver_ops=False)   # Spark jobs only: every op of these steps runs on
    #                                                           Spark (but maps and partial sums)
    smalls = [change(small) for _ in range(repeats + 1)][1:]
    # with a listener on both views, a step also computes (and delivers) the views' changes
    handlers = [p.listen("g"), p.listen("j")]
    listened = [change(small) for _ in range(repeats)]
    larges = [change(large) for _ in range(max(1, repeats // 2))]
    after_large = settle(p)   # the merges the last large change started, in the background
    hybrid: Dict[str, object] = {}
    if driver_ops:   # the default: an op runs on the driver when its changes are there and the state rows they
        eng.placement = eng.placement.replace(driver_ops=True)   # meet can be read by key or scanned
        ops0, declined0, scanned0 = eng.stats.ops_on_driver, eng.stats.ops_declined, eng.stats.rows_scanned
        hybrid["listened_all"] = [change(small) for _ in range(repeats)]
        hybrid["large_all"] = [change(large) for _ in range(repeats)]   # (a few seconds each: the median of all)
        hybrid.update(listened=statistics.median(hybrid["listened_all"]),
                      large=statistics.median(hybrid["large_all"]), ops=eng.stats.ops_on_driver - ops0,
                      declined=eng.stats.ops_declined - declined0, scanned=eng.stats.rows_scanned - scanned0)
        settle(p)   # the merges the last large change started
        log(f"N={n:,}: ops on the driver: {small}-row change, listened {[round(x, 2) for x in hybrid['listened_all']]} "
            f"s, {large:,}-row change, listened {[round(x, 2) for x in hybrid['large_all']]} s ({hybrid['ops']} ops "
            f"on the driver, {hybrid['declined']} on Spark, {hybrid['scanned']:,} state rows found by scans)")
    spark_steps = p.status()["steps_run_on"]["spark"] - before
    # the default routing: a small step runs on the driver, reading the state of its keys from the runs' row
    # groups (nothing cached); still nothing cached, disk tier off
    eng.placement = placed
    on_driver = p.status()["steps_run_on"]["driver"]
    read0 = eng.local.files.rows_read
    by_key = [change(small) for _ in range(repeats + 1)][1:]
    on_driver = p.status()["steps_run_on"]["driver"] - on_driver
    rows_read = (eng.local.files.rows_read - read0) / (repeats + 1)
    log(f"N={n:,}: {small}-row change {[round(x, 2) for x in smalls]} s, {small}-row change with both views "
        f"listened {[round(x, 2) for x in listened]} s, {large:,}-row change (listened) "
        f"{[round(x, 2) for x in larges]} s ({spark_steps} Spark steps; {sum(len(h.to_pandas()) for h in handlers)} "
        f"change rows delivered); on the driver by key, listened {[round(x, 3) for x in by_key]} s "
        f"({on_driver} driver steps, {rows_read:,.0f} state rows decoded per step); background merges ran on for "
        f"{after_large:.2f} s after the last large change; merges {p.status()['state_merges']}")
    # the table as it is now, for the check and the recompute (deleted rows are the first ``pos`` rows)
    table = table.iloc[pos:].reset_index(drop=True)
    pq_dir = os.path.join(work, "pq")
    os.makedirs(pq_dir)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), os.path.join(pq_dir, "t.parquet"))
    pq.write_table(pa.Table.from_pandas(d, preserve_index=False), os.path.join(pq_dir, "d.parquet"))
    recompute = []
    settle(p)
    for _ in range(max(2, repeats // 2)):
        t = time.time()
        spark.read.parquet(os.path.join(pq_dir, "t.parquet")).createOrReplaceTempView("t")
        spark.read.parquet(os.path.join(pq_dir, "d.parquet")).createOrReplaceTempView("d")
        for q in (G, J):
            spark.sql(q).write.format("noop").mode("overwrite").save()
        recompute.append(time.time() - t)
    log(f"N={n:,}: Spark batch recompute {[round(x, 2) for x in recompute]} s")
    import duckdb
    duck = []   # DuckDB recomputing both views from the same files, in this process (its default threads: all cores)
    for _ in range(max(2, repeats // 2)):
        t = time.time()
        c = duckdb.connect()
        c.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{os.path.join(pq_dir, 't.parquet')}')")
        c.execute(f"CREATE VIEW d AS SELECT * FROM read_parquet('{os.path.join(pq_dir, 'd.parquet')}')")
        for q in (G, J):
            c.sql(q).to_arrow_table()
        c.close()
        duck.append(time.time() - t)
    log(f"N={n:,}: DuckDB recompute {[round(x, 2) for x in duck]} s")
    ok = views_match(p, table, d, (("g", G), ("j", J)))
    merges_seen = p.status()["state_merges"]
    p.stop()
    shutil.rmtree(work, ignore_errors=True)
    return {"n": n, "load_s": load_s, "load_merged_s": load_merged_s, "after_large": after_large,
            "merges": merges_seen, "small": statistics.median(smalls), "small_all": smalls,
            "listened": statistics.median(listened), "listened_all": listened,
            "large": statistics.median(larges), "large_all": larges, "recompute": statistics.median(recompute),
            "by_key": statistics.median(by_key), "by_key_all": by_key, "by_key_driver_steps": on_driver,
            "by_key_rows_read": rows_read,
            "spark_steps": spark_steps, "check": ok, "hybrid": hybrid, "duck": statistics.median(duck)}

SQL_MORE = SQL + """
CREATE MATERIALIZED VIEW h AS SELECT v, COUNT(*) AS n, SUM(k) AS s FROM t GROUP BY v;
CREATE MATERIALIZED VIEW j2 AS SELECT d.name, MAX(t.v) AS m, COUNT(*) AS n FROM t JOIN d ON t.k = d.k GROUP BY d.name;"""
H = "SELECT v, COUNT(*) AS n, SUM(k) AS s FROM t GROUP BY v"
J2 = "SELECT d.name, MAX(t.v) AS m, COUNT(*) AS n FROM t JOIN d ON t.k = d.k GROUP BY d.name"
SPARK_ONLY = {"SQLENGINE_LOCAL_STEP_ROWS": "0", "SQLENGINE_STATE_CACHE_BYTES": "0", "SQLENGINE_STATE_DISK": "0"}


def spark_load(n: int, master: Optional[str], log) -> Dict[str, object]:
    """A bulk load of ``t`` (the rows ``measure(n)`` loads) in 1M-row steps with every step and every op on
    Spark, then the backfill of two new views (``SQL_MORE``) on Spark when the pipeline restarts with them.
    Run in a process with the ``SPARK_ONLY`` environment (nothing cached on the driver, no disk tier)."""
    from sqlengine import Pipeline
    assert all(os.environ.get(k) == v for k, v in SPARK_ONLY.items()), "run with SPARK_ONLY's environment"
    rng, nk, d = workload(n)
    work = tempfile.mkdtemp(prefix="sqlengine-scale-load-")
    conf = spark_conf(master)
    store = os.path.join(work, "s")
    p = Pipeline.from_sql(SQL, storage_dir=store, spark_conf=conf, spark_master=master)
    p.start()
    spark = p.engine.spark   # started before timing, as in measure()
    p.input_pandas("d", d)
    p.wait_for_idle(timeout_s=7200)
    t0 = time.time()
    live, steps = load_t(p, n, nk, rng)
    load_s = time.time() - t0
    load_merged_s = load_s + settle(p)
    on = dict(p.status()["steps_run_on"])
    log(f"N={n:,}: Spark load {load_s:.1f} s ({n / load_s:,.0f} rows/s), incl. merges {load_merged_s:.1f} s, steps "
        f"{[round(x, 2) for x in steps]} s, {on}")
    p.stop()
    p = Pipeline.from_sql(SQL_MORE, storage_dir=store, spark=spark)   # (its master is the session's)
    t0 = time.time()
    p.start()   # backfills h and j2 from t's and d's stored contents: one step
    p.wait_for_idle(timeout_s=7200)
    backfill_s = time.time() - t0
    on_after = dict(p.status()["steps_run_on"])
    ok = views_match(p, pd.concat(live, ignore_index=True), d, (("g", G), ("j", J), ("h", H), ("j2", J2)))
    log(f"N={n:,}: backfill of h and j2 on Spark {backfill_s:.1f} s ({n / backfill_s:,.0f} rows/s), {on_after}, "
        f"check {'OK' if ok else 'WRONG'}")
    p.stop()
    shutil.rmtree(work, ignore_errors=True)
    return {"n": n, "load_s": load_s, "load_merged_s": load_merged_s, "steps": steps, "spark_steps": on["spark"],
            "driver_steps": on["driver"], "backfill_s": backfill_s, "backfill_on_spark": on_after["spark"],
            "check": ok}


def spark_load_child(n: int, log, master: Optional[str] = None) -> Dict[str, object]:
    """``spark_load(n, master)`` in a child process with the ``SPARK_ONLY`` environment."""
    out = tempfile.mktemp(suffix=".json")
    cmd = [sys.executable, "-m", "benchmarks.scale", "--child", out, "--spark-load-child", "--n", str(n)]
    cmd += ["--master", master] if master else []
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, **SPARK_ONLY), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    text = proc.stdout.decode(errors="replace")
    if proc.returncode:
        raise RuntimeError(text[-3000:])
    log("\n".join(x for x in text.splitlines() if x.startswith("N=")))
    with open(out) as f:
        return json.load(f)


FLINK_PYTHON = os.path.join(ROOT, ".peer-flink", "bin", "python")


def flink_load(n: int, log) -> Dict[str, object]:
    """Flink loading the rows ``measure(n)`` loads (the same generator and seed) into the two views."""
    if not os.path.exists(FLINK_PYTHON):
        return {"n": n, "error": f"N={n:,}: not run: .peer-flink missing (python3 -m venv .peer-flink && "
                                 ".peer-flink/bin/pip install apache-flink==2.3.0)"}
    import pyarrow as pa
    import pyarrow.csv as pcsv
    rng, nk, d = workload(n)
    work = tempfile.mkdtemp(prefix="sqlengine-scale-flink-")
    dirs = {x: os.path.join(work, x) for x in ("t", "d", "empty")}
    for x in dirs.values():
        os.makedirs(x)
    no_header = pcsv.WriteOptions(include_header=False)
    pcsv.write_csv(pa.Table.from_pandas(d, preserve_index=False), os.path.join(dirs["d"], "d.csv"), no_header)
    for i, s in enumerate(range(0, n, CHUNK)):
        chunk = pa.Table.from_pandas(rows(s, min(CHUNK, n - s), nk, rng), preserve_index=False)
        pcsv.write_csv(chunk, os.path.join(dirs["t"], f"t{i:04d}.csv"), no_header)
    env = dict(os.environ, JVM_ARGS="-Xms6g -Xmx6g")
    try:
        out = subprocess.run([FLINK_PYTHON, os.path.join(ROOT, "benchmarks", "peers", "flink_load.py"),
                              "--t", dirs["t"], "--d", dirs["d"], "--empty", dirs["empty"]],
                             capture_output=True, text=True, env=env, timeout=3600)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:   # the root cause of a Java stack trace, else the end of the output
        text = (out.stderr or out.stdout).strip()
        causes = [x.strip() for x in text.splitlines() if x.strip().startswith("Caused by:")]
        r = {"n": n, "error": f"N={n:,}: " + (causes[-1] if causes else text[-300:])}
        log(f"Flink load failed: {r['error']}")
        return r
    r = json.loads(line[len("RESULT "):])
    r["n"] = n
    log(f"N={n:,}: Flink load {r}")
    return r


def cluster_run(workers: int, n: int, small: int, large: int, repeats: int, log) -> Dict[str, object]:
    sys.path.insert(0, ROOT)
    from tests.support.spark_cluster import SparkCluster
    out = tempfile.mktemp(suffix=".json")
    with SparkCluster(workers=workers) as c:
        cmd = [sys.executable, "-m", "benchmarks.scale", "--child", out, "--master", c.master_url, "--n", str(n),
               "--small", str(small), "--large", str(large), "--repeats", str(repeats)]
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.returncode:
            raise RuntimeError(proc.stdout.decode(errors="replace")[-3000:])
        loaded = spark_load_child(n, log, c.master_url)
    with open(out) as f:
        r = json.load(f)
    r["spark_load"] = loaded
    r["workers"] = workers
    log(f"cluster, {workers} worker(s): {r}")
    return r


def report(results, clusters, args, load_avg) -> str:
    lines = ["# Scale: the Spark path at growing state, and a standalone cluster", "",
             f"Command: `python -m benchmarks.scale --n {args.n} --small {args.small} --large {args.large} "
             f"--repeats {args.repeats}" + (f" --cluster-workers {args.cluster_workers}" if args.cluster_workers else "")
             + (f" --spark-load {args.spark_load}" if args.spark_load else "")
             + (" --flink" if args.flink else "") + "`", "",
             f"Machine: {os.cpu_count()} CPUs, Linux {platform.release()}; Python {platform.python_version()}; "
             f"local Spark `local[2]`, driver memory 8g; load average at the end {load_avg}.", "",
             "Every timed step of the first table ran on Spark with the driver's state cache emptied, its budget set to 0 and its disk "
             "tier off (the state read by Spark from parquet runs, as when it outgrows the driver without the disk "
             "tier; `benchmarks/state_disk.py` measures the driver path with it), and with every op of the step on "
             "Spark but the filters, projections and partial sums of a change already on the driver "
             "(`Placement.driver_ops` off: *Spark jobs only*). A change is half inserts of new rows "
             "and half deletes of existing rows, one step. Nobody listens to the views' changes (the views are "
             "queried), so a step only adds to the aggregates' state (`aggregate_contents`); *listened*: the same "
             "change after `listen()` on both views, so the step also computes and delivers their changes; the "
             f"{args.large:,}-row changes come last, listened too. "
             "*Spark recompute*: the same Spark session reads the final tables from parquet and computes both "
             "views (`noop` sink). State runs are merged in the background (`sqlengine/executor/compaction.py`): "
             "a timed change or load ends when its rows are queryable and its changes delivered "
             "(`wait_for_idle`); *incl. merges* also waits for the background merges it started to end, and "
             "*merging after* is how long those ran on after the large change. Every timed change starts with no "
             "merge running.", "",
             f"| N (rows of t) | driver load s | driver load rows/s | load incl. merges s | {args.small:,}-row change s | "
             f"{args.small:,}-row change, listened s | {args.large:,}-row change, listened s | merging after s | "
             f"Spark recompute s | recompute ÷ {args.large:,}-row change | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['n']:,} | {r['load_s']:.2f} | {r['n'] / r['load_s']:,.0f} | {r['load_merged_s']:.2f} | "
                     f"{r['small']:.2f} | {r.get('listened', float('nan')):.2f} | {r['large']:.2f} | "
                     f"{r['after_large']:.2f} | {r['recompute']:.2f} | {r['recompute'] / r['large']:.2f}× | "
                     f"{'OK' if r['check'] else 'WRONG'} |")
    hyb = [r for r in results if r.get("hybrid")]
    if hyb:
        lines += ["", f"**Ops on the driver where their changes are** (the default, `Placement.driver_ops`), measured "
                      "after the table above, in the same pipelines, still nothing cached and the disk tier off: the "
                      "steps still go the Spark path, but an op whose changes are Arrow on the driver runs there "
                      "(DuckDB) when the state rows its changes meet can be read by their keys: from the row groups "
                      "of the runs that can hold them, or by a scan of the runs' parquet files that semi-joins them "
                      "with the change's keys (at most 4M rows, else the op runs on Spark): DuckDB's with a local "
                      "master, as here, a Spark job's with a cluster master (the cluster table below). *DuckDB "
                      "recompute*: DuckDB computing both views from the same parquet files in this process, beside "
                      "Spark's.", "",
                  f"| N | {args.small:,}-row change, listened s | {args.large:,}-row change, listened s | ops on the "
                  f"driver / on Spark | state rows the scans found | Spark recompute ÷ {args.large:,}-row change | "
                  f"DuckDB recompute s | DuckDB recompute ÷ {args.large:,}-row change |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in hyb:
            h = r["hybrid"]
            lines.append(f"| {r['n']:,} | {h['listened']:.2f} | {h['large']:.2f} | {h['ops']} / {h['declined']} | "
                         f"{h['scanned']:,} | {r['recompute'] / h['large']:.2f}× | {r['duck']:.2f} | "
                         f"{r['duck'] / h['large']:.2f}× |")
    lines += ["", f"**Small steps on the driver, state read by key from files** (the default routing, after the "
                  f"Spark steps above): still nothing cached and the disk tier off, a {args.small:,}-row change, "
                  "both views listened, runs on the driver (DuckDB), reading only the row groups of the runs that "
                  "can hold its keys (`sqlengine/state/row_groups.py`); no Spark job.", "",
              f"| N | {args.small:,}-row change, listened, on the driver ms | on Spark (above) ms | Spark ÷ driver | "
              "steps on the driver | state rows decoded per step |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['n']:,} | {r['by_key'] * 1000:.0f} | {r['listened'] * 1000:.0f} | "
                     f"{r['listened'] / r['by_key']:.1f}× | {r['by_key_driver_steps']} of {args.repeats + 1} | "
                     f"{r['by_key_rows_read']:,.0f} |")
    for a, b in zip(results, results[1:]):
        lines += ["", f"From N = {a['n']:,} to {b['n']:,} ({b['n'] / a['n']:.0f}× the state): the load took "
                      f"{b['load_s'] / a['load_s']:.2f}× as long ({b['load_merged_s'] / a['load_merged_s']:.2f}× incl. "
                      f"merges), the {args.small:,}-row change "
                      f"{b['small'] / a['small']:.2f}× (listened {b['listened'] / a['listened']:.2f}×), the "
                      f"{args.large:,}-row change {b['large'] / a['large']:.2f}×, Spark's recompute "
                      f"{b['recompute'] / a['recompute']:.2f}×; on the driver by key, the listened "
                      f"{args.small:,}-row change {b['by_key'] / a['by_key']:.2f}×" +
                      (f"; with ops on the driver, the listened {args.small:,}-row change "
                       f"{b['hybrid']['listened'] / a['hybrid']['listened']:.2f}× and the {args.large:,}-row change "
                       f"{b['hybrid']['large'] / a['hybrid']['large']:.2f}×, DuckDB's recompute "
                       f"{b['duck'] / a['duck']:.2f}×" if a.get("hybrid") and b.get("hybrid") else "") + "."]
    if args.spark_loads:
        driver = {r["n"]: r for r in results}
        lines += ["", "**Bulk loads and backfills with every step on Spark** (`--spark-load`; each N in a fresh process "
                      "with `SQLENGINE_LOCAL_STEP_ROWS=0`, `SQLENGINE_STATE_CACHE_BYTES=0` and "
                      "`SQLENGINE_STATE_DISK=0`: every step and every op on Spark, nothing cached on the driver, the "
                      "state read from its parquet runs): `t` loaded into `g` and `j` in 1M-row steps, timed from the "
                      "first `input_pandas` to `wait_for_idle` (SparkSession started before); then the pipeline "
                      "restarts with two more views, `h` (`GROUP BY v`, COUNT, SUM) and `j2` (the join with `d`, "
                      "MAX, COUNT), which the restart backfills from the stored contents of `t` and `d` in one step "
                      "on Spark, timed from `start()` to `wait_for_idle` (same SparkSession). *check*: all four "
                      "views equal DuckDB's recomputation. *driver load*: the first table's load of the same rows "
                      "on the driver path.", "",
                  "| N | Spark load s | Spark load rows/s | 1M-row steps s (first, last) | driver load rows/s | "
                  "driver ÷ Spark | backfill of 2 views s | backfill rows/s | steps on Spark | check |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in args.spark_loads:
            dr = driver.get(r["n"])
            drv = r["n"] / dr["load_s"] if dr else float("nan")
            lines.append(f"| {r['n']:,} | {r['load_s']:.2f} | {r['n'] / r['load_s']:,.0f} | "
                         f"{r['steps'][0]:.2f}, {r['steps'][-1]:.2f} | {drv:,.0f} | "
                         f"{drv / (r['n'] / r['load_s']):.2f}× | {r['backfill_s']:.2f} | "
                         f"{r['n'] / r['backfill_s']:,.0f} | {r['spark_steps']} of {r['spark_steps'] + r['driver_steps']}"
                         f" + backfill {r['backfill_on_spark']} | {'OK' if r['check'] else 'WRONG'} |")
        for a, b in zip(args.spark_loads, args.spark_loads[1:]):
            lines += ["", f"On Spark, from N = {a['n']:,} to {b['n']:,}: the load took {b['load_s'] / a['load_s']:.2f}× "
                          f"as long, the backfill {b['backfill_s'] / a['backfill_s']:.2f}×."]
    if args.flink_results:
        flinks = {f["n"]: f for f in args.flink_results if "error" not in f}
        lines += ["", "**Loads beside Flink SQL**, in the same run (`--flink`): the same rows of `t` and `d` into the "
                      "same two views; Flink reads them from CSV files written before timing (it bundles no parquet), "
                      "streaming mode, parallelism 2, `JVM_ARGS=-Xms6g -Xmx6g`, blackhole sinks; *incl. startup* is "
                      "the job's wall time from submission, *net* Flink's own net runtime of the job; the engine's "
                      "load is `input_pandas` of in-memory chunks of 1M rows, each one step, until `wait_for_idle`.",
                  "", "| N | engine rows/s | Flink rows/s (incl. startup) | Flink rows/s (net) | "
                      "engine ÷ Flink (incl.) | engine ÷ Flink (net) |", "|---|---|---|---|---|---|"]
        for r in results:
            f = flinks.get(r["n"])
            if f is None:
                continue
            e = r["n"] / r["load_s"]
            fi, fn = r["n"] / f["wall_s"], r["n"] / f["net_s"]
            lines.append(f"| {r['n']:,} | {e:,.0f} | {fi:,.0f} | {fn:,.0f} | {e / fi:.2f} | {e / fn:.2f} |")
        lines += [f"\nFlink, {f['error']}" for f in args.flink_results if "error" in f]
    if clusters:
        lines += ["", "Standalone cluster (master and one-core workers on this machine, `spark.executor.memory` 1g), "
                      f"N = {clusters[0]['n']:,}; *Spark load* and *backfill*: as in the table of loads on Spark above, "
                      "against the cluster (every step and op on Spark):", "",
                  f"| workers | Spark load rows/s | backfill of 2 views s | {args.small:,}-row change s | "
                  f"{args.small:,}-row change, listened s | "
                  f"{args.large:,}-row change, listened s | the same, ops on the driver (state scanned by Spark "
                  f"jobs) s | Spark recompute s | check |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in clusters:
            h = r.get("hybrid") or {}
            sl = r["spark_load"]
            lines.append(f"| {r['workers']} | {sl['n'] / sl['load_s']:,.0f} | {sl['backfill_s']:.2f} | "
                         f"{r['small']:.2f} | {r['listened']:.2f} | {r['large']:.2f} | "
                         f"{h.get('large', float('nan')):.2f} | {r['recompute']:.2f} | "
                         f"{'OK' if r['check'] and sl['check'] else 'WRONG'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="1000000,10000000")
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--large", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cluster-workers", default="")
    ap.add_argument("--master")
    ap.add_argument("--child")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--flink", action="store_true", help="also load the same rows on Flink SQL (.peer-flink)")
    ap.add_argument("--spark-load", default="", help="N's to load (and backfill) with every step on Spark")
    ap.add_argument("--spark-load-child", action="store_true")
    args = ap.parse_args()
    log = lambda s: print(s, flush=True)   # noqa: E731
    ns = [int(x) for x in args.n.split(",")]
    if args.child and args.spark_load_child:
        r = spark_load(ns[0], args.master, log)
        with open(args.child, "w") as f:
            json.dump(r, f)
        return
    if args.child:
        r = measure(ns[0], args.small, args.large, args.repeats, args.master, log)
        with open(args.child, "w") as f:
            json.dump(r, f)
        return
    # first, in child processes, while this one holds no state
    args.spark_loads = [spark_load_child(int(x), log) for x in args.spark_load.split(",") if x]
    results, args.flink_results = [], []
    for n in ns:
        results.append(measure(n, args.small, args.large, args.repeats, None, log))
        if args.flink:
            args.flink_results.append(flink_load(n, log))
    clusters = [cluster_run(int(w), ns[0], args.small, args.large, args.repeats, log)
                for w in args.cluster_workers.split(",") if w]
    text = report(results, clusters, args, " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(text)
    if not args.no_write:
        from benchmarks.report import write_section
        write_section(os.path.join(ROOT, "benchmarks", "RESULTS.md"), "scale", text)


if __name__ == "__main__":
    main()
