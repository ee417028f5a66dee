"""Optimizer benchmark: the planner's rules on and off (``SQLENGINE_RULES=off``), measured side by side.

* **Join graphs**: a view joining N tables of 10 rows through comma joins with equality predicates in WHERE,
  the tables listed in a scrambled FROM order, connected as a chain (t_i.v = t_{i+1}.k) or a tree
  (t_i.v = t_{(i-1)/2}.k).  Every table changes in the first step (the initial load), then one table per
  step (an insert and a delete).  Reported: compile, ``start()``, the first step, the median later step.
* **TPC-H**: the 22 views over SF ``--sf`` data (one load step per table): circuit operators, state rows and
  bytes after the load, and the median step of a 100-row change (50 lineitem inserts, 50 deletes).
* **Compile time** of the 22 TPC-H views and of a 60-view program.

Each configuration runs in its own process with a time limit (``--limit``); one that does not finish is
reported as stopped.

    python -m benchmarks.optimizer [--sizes 8,16,32,64] [--sf 0.1] [--limit 300] [--out benchmarks/RESULTS.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def join_program(n: int, shape: str, seed: int = 7) -> str:
    tables = [f"CREATE TABLE t{i} (k INT, v INT);" for i in range(n)]
    order = list(range(n))
    random.Random(seed).shuffle(order)
    if shape == "chain":
        preds = [f"t{i}.v = t{i + 1}.k" for i in range(n - 1)]
    else:
        preds = [f"t{i}.k = t{(i - 1) // 2}.v" for i in range(1, n)]
    random.Random(seed + 1).shuffle(preds)
    view = (f"CREATE MATERIALIZED VIEW j AS SELECT t0.k AS k0, t{n - 1}.v AS vn FROM "
            f"{', '.join(f't{i}' for i in order)} WHERE {' AND '.join(preds)};")
    return "\n".join(tables + [view])


def child_joins(n: int, shape: str) -> dict:
    import pandas as pd
    from sqlengine import Pipeline
    from sqlengine.executor.session import get_spark
    get_spark()
    sql = join_program(n, shape)
    t0 = time.perf_counter()
    p = Pipeline.from_sql(sql, name="joins")
    t1 = time.perf_counter()
    p.start()
    t2 = time.perf_counter()
    p.pause()
    rows = pd.DataFrame({"k": range(10), "v": range(10)})
    for i in range(n):
        p.input_pandas(f"t{i}", rows)
    t3 = time.perf_counter()
    p.resume()
    p.wait_for_idle()
    t4 = time.perf_counter()
    later = []
    for s in range(4):
        t = f"t{(s * 7) % n}"
        a = time.perf_counter()
        p.input_pandas(t, pd.DataFrame({"k": [s % 10], "v": [(s + 3) % 10]}))
        p.input_pandas(t, pd.DataFrame({"k": [(s + 1) % 10], "v": [(s + 1) % 10]}), delete=True)
        p.wait_for_idle()
        later.append(time.perf_counter() - a)
    rows_out = list(p.query("SELECT COUNT(*) AS n FROM j"))[0]["n"]
    ops = len(p.program.circuit.ops)
    p.stop()
    return {"compile_s": t1 - t0, "start_s": t2 - t1, "first_step_s": t4 - t3,
            "later_step_s": sorted(later)[len(later) // 2], "ops": ops, "rows": rows_out}


def child_tpch(sf: float) -> dict:
    import numpy as np
    from sqlengine import Pipeline
    from sqlengine.executor.session import get_spark
    import workloads
    from workloads.tpch import gen
    get_spark()
    tables = gen.generate(sf, 0)
    t0 = time.perf_counter()
    p = Pipeline.from_sql(workloads.program("tpch"), name="tpch")
    compile_s = time.perf_counter() - t0
    p.start()
    t1 = time.perf_counter()
    for name, df in tables.items():
        p.input_pandas(name, df)
    p.wait_for_idle()
    load_s = time.perf_counter() - t1
    st = p.status()["state_size"]
    state_rows = sum(v["rows"] for v in st.values())
    state_bytes = sum(v["bytes"] for v in st.values())
    li = tables["lineitem"]
    steps = []
    for s in range(5):
        new = li.iloc[s * 50:(s + 1) * 50].copy()
        new["l_orderkey"] = new["l_orderkey"] + 10 ** 9    # fresh orders' lines: no match in orders
        old = li.iloc[len(li) - (s + 1) * 50:len(li) - s * 50]
        a = time.perf_counter()
        p.input_pandas("lineitem", new)
        p.input_pandas("lineitem", old, delete=True)
        p.wait_for_idle()
        steps.append(time.perf_counter() - a)
    ops = len(p.program.circuit.ops)
    p.stop()
    return {"compile_s": compile_s, "load_s": load_s, "state_rows": state_rows, "state_bytes": state_bytes,
            "step_s": float(np.median(steps)), "ops": ops}


def child_compile() -> dict:
    from planner import compile_program
    import workloads
    from benchmarks.startup import program
    out = {}
    for name, sql in (("tpch22", workloads.program("tpch")), ("views60", program(60))):
        t0 = time.perf_counter()
        prog = compile_program(sql)
        out[name] = {"compile_s": time.perf_counter() - t0, "ops": len(prog.circuit.ops)}
    return out


def run_child(args_list, rules: bool, limit: float):
    work = tempfile.mkdtemp(prefix="sqlengine-optimizer-")
    try:   # a child killed by the limit or the kernel leaves its storage behind: removed with this directory
        return _run_child(args_list, rules, limit, {**os.environ, "PYSPARK_PYTHON": sys.executable, "TMPDIR": work})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_child(args_list, rules: bool, limit: float, env):
    if not rules:
        env["SQLENGINE_RULES"] = "off"
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.optimizer", "--child"] + args_list, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)   # its own process group: the JVM goes with it
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    if proc.returncode != 0:   # e.g. out of memory: reported as failed, with the code and the last error line
        lines = [l for l in err.splitlines() if "Error" in l or "error" in l] or [f"exit code {proc.returncode}"]
        return {"failed": f"exit {proc.returncode}: {lines[-1][:120]}"}
    return json.loads(out.strip().splitlines()[-1])


def fmt(x, unit="s"):
    return "stopped" if x is None else f"{x:.2f}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs="*")
    ap.add_argument("--sizes", default="8,16,32,64")
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--limit", type=float, default=300, help="seconds per configuration")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.child is not None:
        kind = args.child[0]
        if kind == "joins":
            out = child_joins(int(args.child[1]), args.child[2])
        elif kind == "tpch":
            out = child_tpch(float(args.child[1]))
        else:
            out = child_compile()
        print(json.dumps(out))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    load = os.getloadavg()[0]
    lines = ["## Optimizer: the planner's rules on and off",
             "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores; load before the run {load:.2f}. Command: "
             f"`python -m benchmarks.optimizer --sizes {args.sizes} --sf {args.sf} --limit {args.limit:g}`. "
             "Rules off: `SQLENGINE_RULES=off` (the plan as bound, tables joined in FROM order). Each "
             "configuration in its own process, limited to "
             f"{args.limit:g} s (\"stopped\").",
             "",
             "### Join graphs (N tables of 10 rows, scrambled FROM order), seconds",
             "",
             "| shape | N | rules | compile | start | first step (all tables) | later step (one table) | ops |",
             "|---|---|---|---|---|---|---|---|"]
    for shape in ("chain", "tree"):
        for n in sizes:
            for rules in (True, False):
                r = run_child(["joins", str(n), shape], rules, args.limit)
                print(shape, n, rules, r, flush=True)
                if r is None or "failed" in r:
                    what = "stopped" if r is None else f"failed ({r['failed']})"
                    lines.append(f"| {shape} | {n} | {'on' if rules else 'off'} | {what} | | | | |")
                else:
                    lines.append(f"| {shape} | {n} | {'on' if rules else 'off'} | {r['compile_s']:.2f} | "
                                 f"{r['start_s']:.2f} | {r['first_step_s']:.2f} | {r['later_step_s']:.3f} | "
                                 f"{r['ops']} |")
    lines += ["", f"### TPC-H, 22 views, SF {args.sf}", "",
              "| rules | compile s | load s | circuit ops | state rows | state MiB | 100-row change (median) s |",
              "|---|---|---|---|---|---|---|"]
    tp = {}
    for rules in (True, False):
        r = tp[rules] = run_child(["tpch", str(args.sf)], rules, args.limit * 4)
        print("tpch", rules, r, flush=True)
        if r is None or "failed" in r:
            tp[rules] = None
            lines.append(f"| {'on' if rules else 'off'} | {'stopped' if r is None else r['failed']} | | | | | |")
        else:
            lines.append(f"| {'on' if rules else 'off'} | {r['compile_s']:.2f} | {r['load_s']:.1f} | {r['ops']} | "
                         f"{r['state_rows']:,} | {r['state_bytes'] / 2 ** 20:.1f} | {r['step_s']:.3f} |")
    if tp[True] and tp[False]:
        lines += ["", f"State rows off ÷ on: {tp[False]['state_rows'] / max(1, tp[True]['state_rows']):.2f}×; "
                      f"bytes: {tp[False]['state_bytes'] / max(1, tp[True]['state_bytes']):.2f}×."]
    lines += ["", "### Compile time", "", "| program | rules | compile s | circuit ops |", "|---|---|---|---|"]
    for rules in (True, False):
        r = run_child(["compile"], rules, args.limit)
        for name, v in r.items():
            lines.append(f"| {name} | {'on' if rules else 'off'} | {v['compile_s']:.2f} | {v['ops']} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        from benchmarks.report import write_section
        write_section(args.out, "optimizer", text)


if __name__ == "__main__":
    main()
