"""The cost of a Python UDF per million rows, beside the same expression in SQL, on both executors (issue 31).

A view counts the rows whose ``f(x) > 0`` over an append-only table (a filter and a COUNT: the table is a
stream, so a step is the filter over its rows), with ``f`` written three ways: ``x * 2.0 + 1.0`` in SQL, a
vectorised UDF over Arrow (``pc.add(pc.multiply(x, 2.0), 1.0)``), and a row-at-a-time UDF.  Each step inserts
``--rows`` rows (one ``input_arrow`` call); the step time is from the call to ``wait_for_idle``.  The driver runs
the steps in DuckDB (its Arrow UDFs); ``spark`` runs every step and operator on Spark (Arrow UDFs on the
executors).  Each count is checked against the rows inserted.

    .venv/bin/python -m benchmarks.udf_cost --rows 1000000 --steps 3 [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlengine import Pipeline, RuntimeConfig, udf


@udf("DOUBLE", ["DOUBLE"])
def lin(x: pa.Array) -> pa.Array:
    return pc.add(pc.multiply(x, 2.0), 1.0)


@udf("DOUBLE", ["DOUBLE"], vectorized=False)
def lin_rows(x):
    return None if x is None else x * 2.0 + 1.0


VARIANTS = {"sql": "x * 2.0 + 1.0", "vectorised UDF": "lin(x)", "row-at-a-time UDF": "lin_rows(x)"}


def run(variant: str, executor: str, rows: int, steps: int, spark) -> list:
    sql = ("CREATE TABLE t (id BIGINT, x DOUBLE) WITH ('append_only' = 'true');"
           f"CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t WHERE {VARIANTS[variant]} > 0;")
    placement = {"local_step_rows": 0, "driver_rows": 0} if executor == "spark" else {"local_step_rows": 10 ** 9}
    rnd = np.random.default_rng(7)
    times, want = [], 0
    with tempfile.TemporaryDirectory() as d:
        p = Pipeline.from_sql(sql, storage_dir=d, spark=spark, udfs=[lin, lin_rows],
                              runtime_config=RuntimeConfig(placement=placement))
        p.start()
        for s in range(steps + 1):   # the first step is a warm-up
            x = rnd.normal(0, 10, rows)
            batch = pa.table({"id": pa.array(np.arange(s * rows, (s + 1) * rows), pa.int64()), "x": x})
            t0 = time.perf_counter()
            p.input_arrow("t", batch)
            p.wait_for_idle()
            if s:
                times.append(time.perf_counter() - t0)
            want += int((x * 2.0 + 1.0 > 0).sum())
            got = next(iter(p.query("SELECT n FROM c")))["n"]
            assert got == want, (variant, executor, got, want)
        ran = p.status()["steps_run_on"]
        p.stop()
    assert (ran["spark"] > 0) == (executor == "spark"), ran
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--executors", default="driver,spark")
    ap.add_argument("--out", help="write the Markdown table to this file")
    a = ap.parse_args()
    from sqlengine.executor.session import start_spark
    spark = start_spark({"spark.master": "local[2]"}).result()
    out = {}
    for executor in a.executors.split(","):
        for variant in VARIANTS:
            out[executor, variant] = statistics.median(run(variant, executor, a.rows, a.steps, spark))
            print(f"{executor:7s} {variant:18s} {out[executor, variant] * 1000:9.1f} ms per step", flush=True)
    per_m = 1_000_000 / a.rows
    lines = [f"- Command: `python -m benchmarks.udf_cost --rows {a.rows} --steps {a.steps}`; "
             f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}; load average "
             f"{os.getloadavg()[0]:.1f} at the end.", "",
             "| executor | expression | step, ms (median) | per 1M rows, ms | UDF minus SQL per 1M rows, ms | ÷ SQL |",
             "|---|---|---:|---:|---:|---:|"]
    for executor in a.executors.split(","):
        base = out[executor, "sql"]
        for variant in VARIANTS:
            t = out[executor, variant]
            lines.append(f"| {executor} | {variant} | {t * 1000:.1f} | {t * per_m * 1000:.1f} | "
                         f"{(t - base) * per_m * 1000:.1f} | {t / base:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
