"""Bulk loads: N rows into a GROUP BY and a join-aggregate, pushed without waiting, beside Flink SQL.

The program and the data are ``benchmarks/scale.py``'s: ``t`` (id, k, v) with N/10 keys, ``d`` one row a key,
``g`` = ``SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k`` and ``j`` = the join of ``t`` and ``d`` grouped by
``d.name``.  For each N, each form loads ``t`` into a new pipeline (Spark not started: the steps run on the
driver) after ``d`` is in, timed from the first input call until ``wait_for_idle`` returns (every row
queryable):

* ``calls``: one ``input_pandas`` call per 500,000 rows, none waiting for a step; the engine steps them as
  they come, each step taking what is pending (up to ``RuntimeConfig.max_step_bytes``);
* ``one-call``: the N rows in one ``input_pandas`` call (the issue's bulk load).

Both views are then checked against DuckDB.  ``--flink`` loads the same rows into the same two views on Flink
SQL in the same run (``benchmarks.scale.flink_load``: CSV files written before timing, streaming mode,
parallelism 2, blackhole sinks).

    python -m benchmarks.bulk_load --n 1000000,10000000 --flink
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile
import time
from typing import Dict, List

import pandas as pd

from benchmarks.report import write_section
from benchmarks.scale import CHUNK, G, J, SQL, flink_load, rows, views_match, workload

CALL_ROWS = 500_000
SECTION = "bulk_loads"   # of benchmarks/RESULTS.md
FORMS = ("calls", "one-call")


def data(n: int):
    """``t``'s N rows (generated in CHUNK pieces, as flink_load writes them) and ``d``."""
    rng, nk, d = workload(n)
    return pd.concat([rows(s, min(CHUNK, n - s), nk, rng) for s in range(0, n, CHUNK)], ignore_index=True), d


def load(n: int, form: str, log) -> Dict[str, object]:
    from sqlengine import Pipeline
    t, d = data(n)
    work = tempfile.mkdtemp(prefix="sqlengine-bulk-")
    p = Pipeline.from_sql(SQL, storage_dir=os.path.join(work, "s"), spark_conf={"sqlengine.spark.start": "lazy"})
    try:
        p.start()
        p.input_pandas("d", d)
        p.wait_for_idle()
        step0 = p.status()["step"]
        t0 = time.time()
        if form == "calls":
            for s in range(0, n, CALL_ROWS):
                p.input_pandas("t", t.iloc[s:s + CALL_ROWS])
        else:
            p.input_pandas("t", t)
        p.wait_for_idle(timeout_s=7200)
        secs = time.time() - t0
        steps = p.status()["step"] - step0
        ok = views_match(p, t, d, [("g", G), ("j", J)])
    finally:
        p.stop()
        shutil.rmtree(work, ignore_errors=True)
    r = {"n": n, "form": form, "s": secs, "steps": steps, "ok": ok}
    log(f"N={n:,} {form}: {secs:.1f} s, {n / secs:,.0f} rows/s, {steps} steps, check {'OK' if ok else 'FAILED'}")
    return r


def report(results: List[dict], flinks: Dict[int, dict], cmd: str, load_before: str, load_after: str) -> str:
    ns = sorted({r["n"] for r in results})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = ["## Bulk loads: N rows into a GROUP BY and a join-aggregate, beside Flink (issue 33)", "",
             f"`{cmd}` at commit `{commit}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"{os.cpu_count()} CPUs, {platform.platform()}; load average before / after {load_before} / "
             f"{load_after}). The program and rows of `benchmarks/scale.py`: `t` (id, k, v) with N/10 keys, `g` = "
             "GROUP BY k (COUNT, SUM), `j` = `t` JOIN `d` (one row a key) GROUP BY name. Each form loads `t` into a "
             "new pipeline (Spark not started) once `d` is in, timed from the first input call to "
             "`wait_for_idle()`: *calls* is an `input_pandas` call per 500,000 rows, none waiting (the engine "
             "steps them as they come, each step taking what is pending, up to `RuntimeConfig.max_step_bytes`); "
             "*one call* is the N rows in one `input_pandas` call. Both views checked against DuckDB after each "
             "load. Flink SQL 2.3.0 loads the same rows into the same two views in the same run (CSV files "
             "written before timing, streaming mode, parallelism 2, blackhole sinks; *net*: Flink's own runtime "
             "of the job, without its start).", "",
             "| form | N | engine s | engine steps | engine rows/s | check | Flink rows/s (incl. startup) | "
             "Flink rows/s (net) | engine ÷ Flink (incl.) | engine ÷ Flink (net) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for form in FORMS:
        for n in ns:
            r = next((x for x in results if x["n"] == n and x["form"] == form), None)
            if r is None:
                continue
            f = flinks.get(n, {})
            rate = n / r["s"]
            incl = n / f["wall_s"] if f.get("wall_s") else None
            net = n / f["net_s"] if f.get("net_s") else None
            lines.append(f"| {form.replace('-', ' ')} | {n:,} | {r['s']:.1f} | {r['steps']} | {rate:,.0f} | "
                         f"{'OK' if r['ok'] else 'FAILED'} | {f'{incl:,.0f}' if incl else '-'} | "
                         f"{f'{net:,.0f}' if net else '-'} | {f'{rate / incl:.2f}×' if incl else '-'} | "
                         f"{f'{rate / net:.2f}×' if net else '-'} |")
    if len(ns) > 1:
        lines += ["", "Growth, largest N ÷ smallest N, in seconds (the target: at most 11× for 10× the rows):", ""]
        for form in FORMS:
            rs = {x["n"]: x["s"] for x in results if x["form"] == form}
            if ns[0] in rs and ns[-1] in rs:
                lines.append(f"- {form.replace('-', ' ')}: {rs[ns[-1]] / rs[ns[0]]:.1f}× "
                             f"({rs[ns[0]]:.1f} s → {rs[ns[-1]]:.1f} s)")
        fs = [flinks[n] for n in (ns[0], ns[-1]) if flinks.get(n, {}).get("wall_s")]
        if len(fs) == 2:
            lines.append(f"- Flink (incl. startup): {fs[1]['wall_s'] / fs[0]['wall_s']:.1f}×")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1000000,10000000", help="rows of t, comma-separated")
    ap.add_argument("--forms", default=",".join(FORMS), help=f"of {', '.join(FORMS)}")
    ap.add_argument("--flink", action="store_true", help="also load the same rows on Flink SQL (.peer-flink)")
    ap.add_argument("--out", help="replace the section 'bulk_loads' of this file (benchmarks/RESULTS.md)")
    args = ap.parse_args()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = [load(n, form, print) for n in map(int, args.n.split(",")) for form in args.forms.split(",")]
    flinks = {}
    if args.flink:
        for n in map(int, args.n.split(",")):
            f = flink_load(n, print)
            if "error" not in f:
                flinks[n] = f
    cmd = "python -m benchmarks.bulk_load --n " + args.n + (" --flink" if args.flink else "")
    text = report(results, flinks, cmd, load_before, " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(text)
    if args.out:
        write_section(args.out, SECTION, text)


if __name__ == "__main__":
    main()
