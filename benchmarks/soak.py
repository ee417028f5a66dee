"""Soak test: a pipeline fed continuously with inserts and deletes over bounded live data.

Usage: python -m benchmarks.soak [--minutes 30] [--window 5000] [--batch 500] [--interval 30]
                                 [--out benchmarks/RESULTS.md]

Three materialized views (a GROUP BY with COUNT/SUM, a join with a dimension
table, a MIN/MAX per key) over one table ``ev`` that slides: every round inserts
``--batch`` new rows and deletes the ``--batch`` oldest live ones once
``--window`` rows are live, then waits for the step(s).  So the live data is
bounded and the state (LSM runs, merged size-tiered) must stay bounded too.

Every ``--interval`` seconds it samples the RSS of the Python driver and of the
JVM (the driver's ``java`` child process), the state size from ``status()``
(runs, rows, bytes over all operators), the storage directory's size on disk and
the step latency.  At the end it checks the views against DuckDB recomputing
them from the tables, asserts that after the warm-up (until the second sample with the window full) the
maximum over the last third of the samples is at most 1.5x the maximum over the
first third for state bytes, state rows, driver RSS and JVM RSS, prints the
table, and writes it to ``--out`` between ``<!-- BEGIN soak -->`` and
``<!-- END soak -->`` (appended if the markers are absent).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np
import pandas as pd
from benchmarks.memory import rss
from benchmarks.report import write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SQL = """
CREATE TABLE ev (id BIGINT NOT NULL, k INT, v BIGINT);
CREATE TABLE dim (k INT NOT NULL, name VARCHAR);
CREATE MATERIALIZED VIEW by_k AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k;
CREATE MATERIALIZED VIEW joined AS SELECT e.id, e.v, d.name FROM ev e JOIN dim d ON e.k = d.k;
CREATE MATERIALIZED VIEW minmax AS SELECT k, MIN(v) AS lo, MAX(v) AS hi FROM ev GROUP BY k;
"""
VIEWS = {
    "by_k": "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k",
    "joined": "SELECT e.id, e.v, d.name FROM ev e JOIN dim d ON e.k = d.k",
    "minmax": "SELECT k, MIN(v) AS lo, MAX(v) AS hi FROM ev GROUP BY k",
}
N_KEYS = 200
BOUND = 1.5
METRICS = ("state_bytes", "state_rows", "driver_rss", "jvm_rss")


# ------------------------------------------------------------------ report
def machine(when: str = "at start") -> str:
    import pyspark
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    return (f"{os.cpu_count()} CPUs, {mem:.1f} GiB RAM, {platform.platform()}; Python {platform.python_version()}, "
            f"pyspark {pyspark.__version__}, {java}; git commit `{commit}`; load average {when} {load}")


# ------------------------------------------------------------------ memory
def du(path: str) -> int:
    total = 0
    for d, _, files in os.walk(path):
        for n in files:
            try:
                total += os.path.getsize(os.path.join(d, n))
            except OSError:
                pass
    return total


def mib(x: float) -> str:
    return f"{x / 2 ** 20:,.1f}"


# ------------------------------------------------------------------ the soak
def run(minutes: float, window: int, batch: int, interval: float, seed: int = 1) -> dict:
    from sqlengine import Pipeline
    from sqlengine.executor.session import get_spark
    rng = np.random.default_rng(seed)
    storage = tempfile.mkdtemp(prefix="sqlengine-soak-")
    spark = get_spark({"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
    p = Pipeline.from_sql(SQL, name="soak", storage_dir=storage, spark=spark)
    p.start()
    p.input_pandas("dim", pd.DataFrame({"k": np.arange(N_KEYS), "name": [f"key-{i}" for i in range(N_KEYS)]}))
    live: List[pd.DataFrame] = []     # inserted batches still live, oldest first
    live_rows = 0
    next_id = 0
    inserted = deleted = rounds = 0
    samples = []
    t0 = time.monotonic()
    end = t0 + minutes * 60
    next_sample = t0

    def sample():
        st = p.status()
        sizes = st["state_size"].values()
        s = {"t": time.monotonic() - t0, "step": st["step"], "live": live_rows, "window": window, "inserted": inserted,
             "deleted": deleted, "state_runs": sum(x["runs"] for x in sizes),
             "state_rows": sum(x["rows"] for x in sizes), "state_bytes": sum(x["bytes"] for x in sizes),
             "disk": du(storage), "p50_ms": st["step_latency_ms"]["p50"], "backlog": st["backlog_batches"]}
        s.update(rss())
        samples.append(s)
        print(f"[{s['t']:7.0f}s] step {s['step']:6d} live {s['live']:7,d} state {s['state_runs']:4d} runs "
              f"{s['state_rows']:9,d} rows {mib(s['state_bytes'])} MiB, disk {mib(s['disk'])} MiB, "
              f"driver {mib(s['driver_rss'])} MiB, JVM {mib(s['jvm_rss'])} MiB, p50 {s['p50_ms']} ms", flush=True)

    try:
        while True:
            now = time.monotonic()
            if now >= next_sample:
                sample()
                next_sample += interval
            if now >= end:
                break
            new = pd.DataFrame({"id": np.arange(next_id, next_id + batch, dtype=np.int64),
                                "k": rng.integers(0, N_KEYS, batch, dtype=np.int64),
                                "v": rng.integers(0, 1_000_000, batch, dtype=np.int64)})
            next_id += batch
            p.input_pandas("ev", new)
            live.append(new)
            live_rows += batch
            inserted += batch
            while live_rows > window:
                old = live.pop(0)
                p.input_pandas("ev", old, delete=True)
                live_rows -= len(old)
                deleted += len(old)
            p.wait_for_idle()
            rounds += 1
        problems = []
        for view, sql in VIEWS.items():
            got = sorted(tuple(r.values()) for r in p.query(f"SELECT * FROM {view}"))
            want = sorted(tuple(r.values()) for r in p.query(sql))
            if got != want:
                problems.append(f"{view}: {len(got)} rows differ from recomputation ({len(want)} rows)")
        n = list(p.query("SELECT COUNT(*) AS n FROM ev"))[0]["n"]
        if n != live_rows:
            problems.append(f"ev has {n} rows, expected {live_rows}")
    finally:
        p.stop(force=True)
        shutil.rmtree(storage, ignore_errors=True)
    return {"samples": samples, "rounds": rounds, "problems": problems, "inserted": inserted, "deleted": deleted,
            "elapsed": time.monotonic() - t0}


def steady(samples: List[dict]) -> List[dict]:
    """The samples after the warm-up: from the second sample taken with the window full on."""
    full = [i for i, x in enumerate(samples) if x["live"] >= x.get("window", 0) > 0]
    s = samples[full[0] + 1:] if full else samples[1:]
    return s if len(s) >= 3 else samples[1:]


def bounded(samples: List[dict]) -> Dict[str, tuple]:
    """Per metric: (max over the first third, max over the last third, ratio) after the warm-up."""
    s = steady(samples)
    third = max(1, len(s) // 3)
    first, last = s[:third], s[-third:]
    out = {}
    for m in METRICS:
        a, b = max(x[m] for x in first), max(x[m] for x in last)
        out[m] = (a, b, (b / a) if a else float("inf") if b else 1.0)
    return out


def report(res: dict, args, started: str, host: str) -> str:
    s = res["samples"]
    b = bounded(s)
    lines = [
        "## Soak: 30 minutes of inserts and deletes over bounded live data" if args.minutes >= 30 else
        f"## Soak: {args.minutes:g} minutes of inserts and deletes over bounded live data", "",
        f"- Date: {started} UTC; ran {res['elapsed'] / 60:.1f} min, {res['rounds']:,} rounds, "
        f"{res['inserted']:,} rows inserted and {res['deleted']:,} deleted in {s[-1]['step']:,} steps",
        f"- Command: `nice -n 10 .venv/bin/python -m benchmarks.soak --minutes {args.minutes:g} --window {args.window} "
        f"--batch {args.batch} --interval {args.interval:g}`",
        f"- Machine: {host} (other agents' work was running on the same 2 cores)",
        f"- Workload: table `ev` (id, k, v) with {N_KEYS} keys, a sliding window of {args.window:,} live rows: each "
        f"round inserts {args.batch:,} new rows, deletes the {args.batch:,} oldest, and waits for the steps. Views: "
        "`by_k` (GROUP BY k: COUNT, SUM), `joined` (ev JOIN dim on k, 200-row dimension table), "
        "`minmax` (GROUP BY k: MIN, MAX). After the window first filled, the live rows were replaced "
        f"{max(0, res['deleted']) / args.window:.1f} times over.",
        "- Driver RSS: the Python process; JVM RSS: its `java` child process (Spark driver JVM, "
        "`spark.driver.memory` 2g). State: all operators' LSM runs as listed by the committed manifest "
        "(`status()[\"state_size\"]`); disk: the whole storage directory (state, manifests, input log).",
        "",
        "| time (min) | step | live rows | state runs | state rows | state MiB | disk MiB | driver RSS MiB | JVM RSS MiB | step p50 (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in s:
        lines.append(f"| {x['t'] / 60:.1f} | {x['step']:,} | {x['live']:,} | {x['state_runs']} | {x['state_rows']:,} | "
                     f"{mib(x['state_bytes'])} | {mib(x['disk'])} | {mib(x['driver_rss'])} | {mib(x['jvm_rss'])} | "
                     f"{x['p50_ms']} |")
    st = steady(s)
    lines += ["", f"Boundedness (after the warm-up, i.e. from {st[0]['t'] / 60:.1f} min, the second sample with the "
                  f"window full: {len(st)} samples; max over the last third vs. the first third, limit {BOUND}x):", "",
              "| metric | first third max | last third max | ratio | bounded |", "|---|---|---|---|---|"]
    for m, (a, c, r) in b.items():
        fmt = (lambda v: f"{v:,}") if m == "state_rows" else (lambda v: mib(v) + " MiB")
        lines.append(f"| {m} | {fmt(a)} | {fmt(c)} | {r:.2f}x | {'yes' if r <= BOUND else '**no**'} |")
    lines += ["", "Views vs. DuckDB recomputation at the end: " +
              ("**OK** (all three equal)" if not res["problems"] else "**FAILED**: " + "; ".join(res["problems"]))]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--window", type=int, default=5_000, help="live rows in ev (default 5000)")
    ap.add_argument("--batch", type=int, default=500, help="rows inserted and deleted per round (default 500)")
    ap.add_argument("--interval", type=float, default=30, help="seconds between samples (default 30)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    ap.add_argument("--no-write", action="store_true", help="only print the report")
    args = ap.parse_args(argv)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    host = machine()
    res = run(args.minutes, args.window, args.batch, args.interval)
    text = report(res, args, started, host)
    print(text)
    if not args.no_write:
        write_section(args.out, "soak", text)
    ok = not res["problems"] and all(r <= BOUND for _, _, r in bounded(res["samples"]).values())
    if not ok:
        print("SOAK FAILED: " + "; ".join(res["problems"] + [m for m, (_, _, r) in bounded(res["samples"]).items()
                                                              if r > BOUND]), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
