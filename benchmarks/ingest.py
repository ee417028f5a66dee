"""Ingest benchmark: one huge ``input_pandas`` call (10M rows by default) and the steps that process it.

Usage: python -m benchmarks.ingest [--rows 10000000] [--chunk 1000000] [--out benchmarks/RESULTS.md]

The DataFrame (id BIGINT, k INT, v BIGINT, x DOUBLE; 100,000 keys) is generated
first; then one ``input_pandas`` call validates, converts and logs it in chunks
of ``--chunk`` rows (``sqlengine.ingest.batches.CHUNK_ROWS``) as one atomic batch, and
``wait_for_idle`` processes it (steps of up to ``RuntimeConfig.max_step_bytes``) into a GROUP BY view.
A background thread samples the RSS of the driver (this Python process) and of
the JVM (its ``java`` child) every 0.1 s, so the report gives the peak of each
during the input call and during the steps, next to the memory of the
DataFrame itself.  The report goes between ``<!-- BEGIN ingest -->`` and
``<!-- END ingest -->`` in ``--out``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pandas as pd

from benchmarks.report import write_section
from benchmarks.memory import Sampler, rss
from benchmarks.soak import ROOT, machine, mib

SQL = """CREATE TABLE ev (id BIGINT NOT NULL, k INT, v BIGINT, x DOUBLE);
CREATE MATERIALIZED VIEW by_k AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k;"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--chunk", type=int, default=1_000_000)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from sqlengine import Pipeline
    from sqlengine.ingest import batches
    from sqlengine.executor.session import get_spark
    batches.CHUNK_ROWS = args.chunk
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    host = machine()
    storage = tempfile.mkdtemp(prefix="sqlengine-ingest-")
    sampler = Sampler()
    sampler.start()
    spark = get_spark({"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "4g"})
    p = Pipeline.from_sql(SQL, name="ingest", storage_dir=storage, spark=spark)
    p.start()
    p.wait_for_idle()
    base = rss()
    sampler.phase = "generate"
    rng = np.random.default_rng(1)
    n = args.rows
    df = pd.DataFrame({"id": np.arange(n, dtype=np.int64), "k": rng.integers(0, 100_000, n).astype(np.int32),
                       "v": rng.integers(0, 1_000_000, n, dtype=np.int64), "x": rng.random(n)})
    df_bytes = int(df.memory_usage(index=True, deep=True).sum())
    after_gen = rss()
    try:
        sampler.phase = "input"
        t0 = time.perf_counter()
        p.input_pandas("ev", df)
        t_input = time.perf_counter() - t0
        log_bytes = sum(os.path.getsize(os.path.join(p.log.root, f)) for f in os.listdir(p.log.root))
        sampler.phase = "steps"
        t1 = time.perf_counter()
        steps0 = p.status()["step"]
        p.wait_for_idle()
        t_steps = time.perf_counter() - t1
        steps = p.status()["step"] - steps0
        sampler.phase = "check"
        got = list(p.query("SELECT SUM(n) AS n, SUM(s) AS s FROM by_k"))[0]
        ok = got["n"] == n and got["s"] == int(df["v"].sum())
        state = sum(x["bytes"] for x in p.status()["state_size"].values())
    finally:
        p.stop(force=True)
        sampler.stop_flag = True
        shutil.rmtree(storage, ignore_errors=True)
    pk = sampler.peaks
    lines = [
        f"## Ingest: one input_pandas call of {n:,} rows", "",
        f"- Date: {started} UTC. Command: `nice -n 10 .venv/bin/python -m benchmarks.ingest --rows {n} "
        f"--chunk {args.chunk}`",
        f"- Machine: {host} (other agents' work was running on the same 2 cores, so times are noisy)",
        f"- Data: a pandas DataFrame of {n:,} rows (id BIGINT, k INT, v BIGINT, x DOUBLE; 100,000 keys), "
        f"{mib(df_bytes)} MiB in memory; view `SELECT k, COUNT(*), SUM(v) FROM ev GROUP BY k`; "
        f"spark.driver.memory 4g.",
        f"- `input_pandas` validated, converted and logged it in chunks of {args.chunk:,} rows as one atomic batch "
        f"({mib(log_bytes)} MiB of Arrow IPC in the input log); the steps then processed it in slices of up to "
        f"`RuntimeConfig.max_step_bytes`.",
        "",
        "| phase | wall time (s) | rows/s | driver RSS peak (MiB) | JVM RSS peak (MiB) |",
        "|---|---|---|---|---|",
        f"| before (pipeline started, no data) | | | {mib(base['driver_rss'])} | {mib(base['jvm_rss'])} |",
        f"| DataFrame generated | | | {mib(after_gen['driver_rss'])} | {mib(after_gen['jvm_rss'])} |",
        f"| `input_pandas` (validate, convert, log, fsync) | {t_input:.1f} | {n / t_input:,.0f} | "
        f"{mib(pk['input']['driver_rss'])} | {mib(pk['input']['jvm_rss'])} |",
        f"| steps until `wait_for_idle` returns ({steps} steps) | {t_steps:.1f} | {n / t_steps:,.0f} | "
        f"{mib(pk['steps']['driver_rss'])} | {mib(pk['steps']['jvm_rss'])} |",
        f"| total | {t_input + t_steps:.1f} | {n / (t_input + t_steps):,.0f} | | |",
        "",
        f"Driver memory added by the input call: {mib(pk['input']['driver_rss'] - after_gen['driver_rss'])} MiB above "
        f"the process with the DataFrame in it (the DataFrame itself: {mib(df_bytes)} MiB). State after the steps: "
        f"{mib(state)} MiB. Check (view sums equal the input): **{'OK' if ok else 'FAILED'}**.",
        "",
        "The driver peak during the steps includes the DataFrame (still referenced by the benchmark) and the "
        "size-tiered merges of the table's state runs, which bring the merged rows to the driver (O(state) for "
        "that merge); the JVM grows to its heap limit.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section(args.out, "ingest", text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
