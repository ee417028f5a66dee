"""Acceptance run: every TPC-H and Nexmark query as an incremental view, checked against recomputation.

    python -m benchmarks.acceptance [--tpch-sf 0.01] [--nexmark-events 20000] [--inserts 4]
                                    [--suites tpch,nexmark] [--out benchmarks/RESULTS.md]

For each suite, one pipeline holds every query that compiles (as materialized views).
Generated data goes in as ``--inserts`` insert batches, with delete batches in between
(TPC-H: whole orders with their lineitems plus a few customers and parts; Nexmark: 5%
of the rows inserted so far).  After every batch, each view's query result and its
integrated change stream are compared with DuckDB recomputing the view over the same
current tables (``tests/support/workload_oracle.py``).  Queries whose header says their result
depends on tie order are compared on a tie-insensitive projection.

The report goes to ``--out`` between ``<!-- BEGIN acceptance -->`` and
``<!-- END acceptance -->`` (appended if the markers are absent); the rest of the
file is left as it is.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import workloads  # noqa: E402
from tests.support.workload_oracle import (NEXMARK_TIE_CHECKS, classify, nexmark_batches,  # noqa: E402
                                           run_suite, tpch_batches)
from benchmarks import report  # noqa: E402

BEGIN, END = "<!-- BEGIN acceptance -->", "<!-- END acceptance -->"


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def _first_line(e: Exception) -> str:
    s = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {s}"


def run(suite: str, size, n_inserts: int, spark) -> dict:
    from sqlengine import Pipeline
    t0 = time.time()
    code = _code_version()   # the code this process runs (the checkout may change during the run)
    compiled = classify(suite)
    det = workloads.deterministic(suite)
    hdr = workloads.headers(suite)
    tie = NEXMARK_TIE_CHECKS if suite == "nexmark" else {}
    views = [v for v, e in compiled.items() if e is None and (det[v] or v in tie)]
    if suite == "tpch":
        like, batches = tpch_batches(size, n_inserts)
    else:
        like, batches = nexmark_batches(int(size), n_inserts)
    rows = {t: len(df) for t, df in like.items()}
    log(f"{suite}: {len(views)} of {len(compiled)} views in the pipeline, {len(batches)} batches, rows {rows}")
    d = tempfile.mkdtemp(prefix=f"accept-{suite}-")
    r = run_suite(suite, views, like, batches,
                  lambda sql: Pipeline.from_sql(sql, name=suite, storage_dir=d, spark=spark),
                  tie_checks={v: c for v, c in tie.items() if v in views}, log=log)
    return {"suite": suite, "size": size, "compiled": compiled, "det": det, "hdr": hdr, "views": views,
            "run": r, "batches": [(lab, [(k, t, len(df)) for k, t, df in ops]) for lab, ops in batches],
            "rows": rows, "total_s": time.time() - t0, "tie": tie, "code": code}


def _code_version():
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "planner", "sqlengine"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        commit, dirty = "?", ""
    return commit, dirty


def _preamble() -> List[str]:
    return [BEGIN, "## Acceptance: TPC-H and Nexmark views vs. recomputation", "",
            "`python -m benchmarks.acceptance` (see its docstring): per suite, one pipeline with every query "
            "that compiles, as materialized views; generated data in insert batches with delete batches in "
            "between. After every batch each view is checked twice: its ad-hoc query result and its change "
            "stream integrated from the start, both against DuckDB recomputing the view over the same current "
            "tables (multisets with exact multiplicities, the test oracle's: decimals exact, NULL and NaN apart, "
            "floats within a relative tolerance of 1e-9 between rows matched one to one). *Check time* is the "
            "time spent comparing that view (query, DuckDB recomputation, comparison); the engine's step time "
            "is shared by all views of the pipeline and given per batch. The machine is shared (2 CPUs, other "
            "work running), so times are wall-clock including waiting for the CPU.", ""]


def suite_section(r: dict, started: float, load0: float) -> List[str]:
    commit, dirty = r["code"]
    run = r["run"]
    name = "TPC-H" if r["suite"] == "tpch" else "Nexmark"
    size = f"SF {r['size']}" if r["suite"] == "tpch" else f"{int(r['size']):,} events"
    n_ok = sum(1 for v in r["views"] if run.results[v].ok)
    out = [f"### {name} ({size})", "",
           f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}; command "
           f"`python -m benchmarks.acceptance {' '.join(sys.argv[1:])}`; git commit `{commit}`"
           + (" plus uncommitted changes in planner/ or sqlengine/ (work in progress in the same checkout)"
              if dirty else ""),
           f"- Load average (1 min) at start / end: {load0:.1f} / {os.getloadavg()[0]:.1f} on "
           f"{os.cpu_count()} CPUs; Python {platform.python_version()}, one local Spark session "
           "(shuffle partitions 1)",
           "- Rows generated: " + ", ".join(f"{t} {n:,}" for t, n in r["rows"].items()),
           "- Batches: " + "; ".join(f"{lab}: " + ", ".join(f"{k} {t} {n:,}" for k, t, n in ops)
                                     for lab, ops in r["batches"]),
           f"- Pipeline start (compile + Spark) {run.start_s:.1f} s; batches processed in "
           + ", ".join(f"{x:.1f}" for x in run.step_s) + f" s; whole suite {r['total_s'] / 60:.1f} min", "",
           f"**{n_ok} of {len(r['compiled'])} queries run and match the recomputation after every batch.**", "",
           "| query | supported | compared | batches checked | result | check time (s) |",
           "|---|---|---|---|---|---|"]
    for v, err in r["compiled"].items():
        if err is not None:
            out.append(f"| {v} | no: {_md(_first_line(err))} | - | 0 | not run | - |")
            continue
        if v not in r["views"]:
            out.append(f"| {v} | yes | skipped: result depends on tie order "
                       f"({_md(r['hdr'][v].get('Deterministic', ''))}) | 0 | not compared | - |")
            continue
        vr = run.results[v]
        how = "tie-insensitive projection" if v in r["tie"] else "exact (float tol.)"
        res_s = "pass" if vr.ok else "FAIL: " + _md(vr.failures[0][:300])
        out.append(f"| {v} | yes | {how} | {vr.steps} | {res_s} | {vr.check_s:.1f} |")
    out.append("")
    return out


def _old_suites(path: str) -> Dict[str, List[str]]:
    """{heading: lines} of the suite sections (``### ...``) already in the report."""
    if not os.path.exists(path):
        return {}
    old = open(path).read()
    if BEGIN not in old or END not in old:
        return {}
    block = old[old.index(BEGIN) + len(BEGIN):old.index(END)].splitlines()
    out: Dict[str, List[str]] = {}
    cur = None
    for line in block:
        if line.startswith("### "):
            cur = line.split(" (")[0]
            out[cur] = []
        if cur:
            out[cur].append(line)
    return out


def section(path: str, res: list, started: float, load0: float) -> str:
    """The report block: this run's suites, plus suite sections of earlier runs for other suites."""
    new = {}
    for r in res:
        lines = suite_section(r, started, load0)
        new[lines[0].split(" (")[0]] = lines
    old = _old_suites(path)
    out = _preamble()
    for head in ("### TPC-H", "### Nexmark"):
        if head in new:
            out += new[head]
        elif head in old:
            out += [l for l in old[head]]
    out.append(END)
    return "\n".join(out)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def write_section(path: str, text: str) -> None:
    """``text`` is the whole section, markers included (see :func:`section`)."""
    inner = text.strip()
    inner = inner[len(BEGIN):] if inner.startswith(BEGIN) else inner
    inner = inner[:-len(END)] if inner.endswith(END) else inner
    report.write_section(path, "acceptance", inner.strip())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.acceptance", description=__doc__.split("\n")[0])
    ap.add_argument("--tpch-sf", type=float, default=0.01, help="TPC-H scale factor (default 0.01)")
    ap.add_argument("--nexmark-events", type=int, default=20000, help="Nexmark events (default 20000)")
    ap.add_argument("--inserts", type=int, default=4, help="insert batches per suite (default 4)")
    ap.add_argument("--suites", default="tpch,nexmark")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.time()
    load0 = os.getloadavg()[0]
    from sqlengine.executor.session import get_spark
    spark = get_spark({"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "4g"})
    res = []
    for suite in [s.strip() for s in args.suites.split(",") if s.strip()]:
        size = args.tpch_sf if suite == "tpch" else args.nexmark_events
        res.append(run(suite, size, args.inserts, spark))
        write_section(args.out, section(args.out, res, started, load0))
    for r in res:
        for v in r["views"]:
            vr = r["run"].results[v]
            log(f"{r['suite']} {v}: {'pass' if vr.ok else 'FAIL ' + vr.failures[0][:200]}")
    log(f"report written to {args.out}")
    return 0 if all(r["run"].results[v].ok for r in res for v in r["views"]) else 1


if __name__ == "__main__":
    sys.exit(main())
