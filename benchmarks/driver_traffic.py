"""What passes through the driver when steps run on Spark (issue 34): ``python -m benchmarks.driver_traffic``.

The pipeline of ``benchmarks/scale.py`` (``t`` into a GROUP BY ``g`` and a join-aggregate ``j`` with ``d``), with
every step and every operator on Spark, is loaded with ``--state`` rows of ``t`` (one transaction: one step);
then each change of ``--changes`` rows (inserts of new rows of ``t``) is pushed as one step. For each change, it
reports the counters of ``status()["driver_traffic"]`` that the step added: Arrow rows and bytes brought from
Spark to the driver and shipped from it, and the bytes of state runs the driver process wrote, beside the
change's own Arrow bytes. The issue's target is at most 1% of the change's bytes through the driver; the views
are checked against DuckDB at the end.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import subprocess
import tempfile
import time
from typing import Dict, List

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.scale import G, J, SQL

KEYS = 100_000


def _rows(start: int, n: int, rng) -> pd.DataFrame:
    return pd.DataFrame({"id": np.arange(start, start + n, dtype=np.int64),
                         "k": rng.integers(0, KEYS, n, dtype=np.int64),
                         "v": rng.integers(0, 1000, n, dtype=np.int64)})


def measure(state: int, changes: List[int]) -> Dict:
    from sqlengine import Pipeline, RuntimeConfig
    rng = np.random.default_rng(0)
    d = pd.DataFrame({"k": np.arange(KEYS, dtype=np.int64), "name": [f"n{i % 1000}" for i in range(KEYS)]})
    work = tempfile.mkdtemp(prefix="driver-traffic-")
    rc = dataclasses.replace(RuntimeConfig(), placement={"local_step_rows": 0, "driver_rows": 0})
    p = Pipeline.from_sql(SQL, name="driver-traffic", storage_dir=os.path.join(work, "p"), runtime_config=rc,
                          spark_conf={"spark.driver.memory": "8g"})
    p.start()
    out = {"state": state, "rows": []}
    try:
        t = _rows(0, state, rng)
        with p.transaction():
            p.input_pandas("d", d)
            p.input_pandas("t", t)
        p.wait_for_idle(timeout_s=7200)
        live = [t]
        start = state
        for n in changes:
            change = _rows(start, n, rng)
            start += n
            before = dict(p.status()["driver_traffic"])
            t0 = time.time()
            p.input_pandas("t", change)
            p.wait_for_idle(timeout_s=7200)
            secs = time.time() - t0
            after = dict(p.status()["driver_traffic"])
            live.append(change)
            grew = {k: after[k] - before[k] for k in after}
            out["rows"].append({"change": n, "change_bytes": pa.Table.from_pandas(change, preserve_index=False).nbytes,
                                "seconds": secs, **grew})
        con = duckdb.connect()
        con.register("t", pd.concat(live, ignore_index=True))
        con.register("d", d)
        ok = True
        for name, q in (("g", G), ("j", J)):
            got = sorted(tuple(r.values()) for r in p.query(f"SELECT * FROM {name}"))
            ok = ok and got == sorted(con.execute(q).fetchall())
        out["check"] = "OK" if ok else "DIFFERS"
        out["steps_on_spark"] = p.status()["steps_run_on"]
    finally:
        p.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


def report(res: Dict, command: str) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        "## What passes through the driver on the Spark path (issue 34)", "",
        f"`{command}` at commit `{commit}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{os.cpu_count()} CPUs, {platform.platform()}, local Spark; load average before "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}). `t` holds {res['state']:,} rows (`g`: GROUP BY over "
        f"{KEYS:,} keys; `j`: a join with `d` ({KEYS:,} rows), grouped); every step and every operator on Spark. "
        "Per change (inserts into `t`, one step), the counters of `status()[\"driver_traffic\"]` the step added, "
        f"beside the change's own Arrow bytes. Views checked against DuckDB: **{res['check']}**.", "",
        "| change rows | change MB | step s | rows from Spark | MB from Spark | rows to Spark | MB to Spark | "
        "state MB written by the driver | driver MB ÷ change MB |",
        "|---|---|---|---|---|---|---|---|---|"]
    mb = 1 << 20
    for r in res["rows"]:
        through = r["bytes_from_spark"] + r["bytes_to_spark"] + r["state_bytes_written"]
        lines.append(f"| {r['change']:,} | {r['change_bytes'] / mb:.1f} | {r['seconds']:.2f} | {r['rows_from_spark']:,} | "
                     f"{r['bytes_from_spark'] / mb:.1f} | {r['rows_to_spark']:,} | {r['bytes_to_spark'] / mb:.1f} | "
                     f"{r['state_bytes_written'] / mb:.1f} | {through / max(r['change_bytes'], 1):.2f}× |")
    lines += ["", "The issue's target is at most 0.01× (1% of the change's bytes) with O(files + keys) metadata on the "
              "driver; today every change passes through it: collected from Spark, shipped back for the operators "
              "that read it, and written as state runs by the driver process."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", type=int, default=1_000_000, help="rows of t before the changes (default 1M)")
    ap.add_argument("--changes", default="1000,100000,1000000", help="rows of each change (comma-separated)")
    ap.add_argument("--out", help="write the report into this RESULTS file (section driver_traffic)")
    args = ap.parse_args(argv)
    res = measure(args.state, [int(x) for x in args.changes.split(",")])
    text = report(res, "python -m benchmarks.driver_traffic " + " ".join(argv or __import__("sys").argv[1:]))
    print(text)
    if args.out:
        from benchmarks.report import write_section
        write_section(args.out, "driver_traffic", text)


if __name__ == "__main__":
    main()
