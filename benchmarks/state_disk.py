"""State larger than the driver's memory budget: steps on the driver through the disk tier of the state cache.

Two pipelines, one after the other, each with a GROUP BY view and a join-aggregate view over ``t`` (``d``
has N/10 keys), loaded in 1M-row steps on the driver, Spark never started:

* **cached**: N = ``--cached`` rows (5M), the default budget (8 GiB): every run in memory;
* **disk**: N = ``--big`` rows (50M), the state cache's budget set to ``--budget`` (1 GiB): runs that do
  not fit are memory-mapped from their Arrow copies and their key indexes are memory-mapped files.

Then ``--steps`` changes of 100 rows (50 inserts of new rows, 50 deletes of existing rows; one step each),
timed from the first input call to ``wait_for_idle``, the first discarded as a warm-up.  The process's
resident memory is sampled every 50 ms during the changes: ``RssAnon`` (heap: what the budget bounds) and
``RssFile`` (pages of memory-mapped files: the operating system's page cache, dropped under pressure).
Both views are checked against DuckDB at the end.

    python -m benchmarks.state_disk --cached 5000000 --big 50000000 --budget-gib 1
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
from typing import Dict

import numpy as np
import pandas as pd

from benchmarks.memory import Sampler, proc_status
from benchmarks.scale import G, J, SQL, rows, timed_change

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(n: int, budget: int, steps: int, log) -> Dict[str, object]:
    from sqlengine import Pipeline
    rng = np.random.default_rng(n)
    nk = max(1, n // 10)
    work = tempfile.mkdtemp(prefix="sqlengine-disk-", dir=os.environ.get("SQLENGINE_BENCH_DIR"))
    p = Pipeline.from_sql(SQL, storage_dir=os.path.join(work, "s"), spark_conf={"sqlengine.spark.start": "lazy"})
    p.start()
    if budget:
        p.engine.local.cache.budget = budget
    gen = os.path.join(work, "gen")
    os.makedirs(gen)
    d = pd.DataFrame({"k": np.arange(nk, dtype=np.int64), "name": [f"n{i % 1000}" for i in range(nk)]})
    d.to_parquet(os.path.join(gen, "d.parquet"))
    t0 = time.time()
    p.input_pandas("d", d)
    first = None
    for s in range(0, n, 1_000_000):
        chunk = rows(s, min(1_000_000, n - s), nk, rng)
        chunk.to_parquet(os.path.join(gen, f"t-{s}.parquet"))
        if first is None:
            first = chunk.iloc[:50 * (steps + 1)].copy()
        p.input_pandas("t", chunk)
        p.wait_for_idle(timeout_s=7200)
        del chunk
    load_s = time.time() - t0
    cache = p.engine.local.cache
    after_load = proc_status()
    log(f"N={n:,}: loaded in {load_s:.1f} s; cache in memory {cache.used / 2**20:,.0f} MiB, "
        f"{len(cache.tables)} runs in memory, {len(cache.mapped)} memory-mapped; rss {proc_status()}")
    peaks = Sampler(0.05, measure=proc_status)
    peaks.start()
    times = []
    next_id = n
    for i in range(steps + 1):
        ins = rows(next_id, 50, nk, rng)
        next_id += 50
        ins.to_parquet(os.path.join(gen, f"t-ins-{i}.parquet"))
        times.append(timed_change(p, ins, first.iloc[50 * i:50 * (i + 1)], timeout_s=600))
    peak = peaks.finish()
    times = times[1:]
    steps_on = p.status()["steps_run_on"]
    log(f"N={n:,}: 100-row changes {[round(x * 1000) for x in times]} ms; peaks {peak}; steps {steps_on}")
    import duckdb
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{gen}/t-*.parquet') WHERE id >= {50 * (steps + 1)}")
    con.execute(f"CREATE VIEW d AS SELECT * FROM read_parquet('{gen}/d.parquet')")
    ok = True
    for name, q in (("g", G), ("j", J)):
        got = p.query_pandas(f"SELECT * FROM {name}")
        con.register("got", got)
        bad = con.execute(f"SELECT (SELECT COUNT(*) FROM (SELECT * FROM got EXCEPT ALL ({q}))) + "
                          f"(SELECT COUNT(*) FROM (({q}) EXCEPT ALL SELECT * FROM got))").fetchall()[0][0]
        con.unregister("got")
        ok &= bad == 0
    p.stop()
    shutil.rmtree(work, ignore_errors=True)
    return {"n": n, "load_s": load_s, "step_ms": statistics.median(times) * 1000, "steps_ms": times,
            "peak": peak, "after_load": after_load, "check": ok, "cache_used": cache.used, "spark_steps": steps_on["spark"],
            "mapped_runs": len(cache.mapped)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cached", type=int, default=5_000_000)
    ap.add_argument("--big", type=int, default=50_000_000)
    ap.add_argument("--budget-gib", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("N", "BUDGET", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    log = lambda s: print(s, flush=True)   # noqa: E731
    if a.child:
        r = run(int(a.child[0]), int(a.child[1]), a.steps, log)
        with open(a.child[2], "w") as f:
            json.dump(r, f)
        return
    budget = int(a.budget_gib * 2 ** 30)

    def in_child(n: int, b: int) -> Dict[str, object]:   # a fresh process each: its memory is its own
        out = tempfile.mktemp(suffix=".json")
        subprocess.run([sys.executable, "-m", "benchmarks.state_disk", "--steps", str(a.steps),
                        "--child", str(n), str(b), out], cwd=ROOT, check=True)
        with open(out) as f:
            return json.load(f)
    cached = in_child(a.cached, 0)
    disk = in_child(a.big, budget)
    mib = lambda b: f"{b / 2**20:,.0f}"   # noqa: E731
    lines = ["# State beyond the driver's memory: the disk tier of the state cache", "",
             f"Command: `python -m benchmarks.state_disk --cached {a.cached} --big {a.big} --budget-gib {a.budget_gib} "
             f"--steps {a.steps}`", "",
             f"Machine: {os.cpu_count()} CPUs, Linux {platform.release()}; Python {platform.python_version()}; "
             f"Spark never started (every step on the driver); load average at the end "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.", "",
             "A GROUP BY view and a join-aggregate view over `t` (`d` has N/10 keys), loaded in 1M-row steps; then "
             f"{a.steps} timed changes of 100 rows (50 inserts, 50 deletes; one step each) after a warm-up. Peaks "
             "are sampled every 50 ms during the changes: RssAnon is the process's heap (what the budget bounds), "
             "RssFile the pages of memory-mapped runs and indexes it touched (page cache, reclaimable). Each run is a "
             "fresh process (the benchmark itself holds the first 550 loaded rows and Python, pandas, DuckDB and "
             "pyarrow, about 200 MiB).", "",
             "| run | N | cache budget | load s | 100-row change ms (median) | cache in memory MiB | "
             "RssAnon after load MiB | peak RssAnon MiB | peak RssFile MiB | runs memory-mapped | steps on Spark | "
             "check |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r, b in (("cached", cached, "8 GiB (default)"), ("disk", disk, f"{a.budget_gib:g} GiB")):
        lines.append(f"| {name} | {r['n']:,} | {b} | {r['load_s']:.0f} | {r['step_ms']:.0f} | "
                     f"{mib(r['cache_used'])} | {mib(r['after_load']['RssAnon'])} | "
                     f"{mib(r['peak']['RssAnon'])} | {mib(r['peak']['RssFile'])} | {r['mapped_runs']} | "
                     f"{r['spark_steps']} | {'OK' if r['check'] else 'WRONG'} |")
    lines += ["", f"Disk ÷ cached step time: {disk['step_ms'] / cached['step_ms']:.2f}× for "
                  f"{disk['n'] / cached['n']:.0f}× the state (target ≤ 2×). Per-change times (ms): cached "
                  f"{[round(x * 1000) for x in cached['steps_ms']]}, disk {[round(x * 1000) for x in disk['steps_ms']]}."]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        from benchmarks.report import write_section
        write_section(os.path.join(ROOT, "benchmarks", "RESULTS.md"), "state_disk", text)


if __name__ == "__main__":
    main()
