"""Start-up benchmark: how long from a program to its first result.

Each figure is measured in a fresh Python process (``--child``), so module imports and the JVM count
where they should:

* ``warm``: the process has imported the engine and started its SparkSession first (not timed); then
  ``from_sql`` + ``start()`` + a first step of 10 rows per table + ``wait_for_idle()`` is timed;
* ``cold``: the process has imported the engine but started no SparkSession; the same is timed
  (a step on the driver never waits for Spark, which starts in the background);
* ``restart``: a storage directory holding ``--rows`` rows of state (a GROUP BY and a join-aggregate
  view over table ``t``) is reopened in a warm process: ``from_sql`` + ``start()`` + a first step of a
  100-row change, timed;
* ``quickstart``: ``python`` running the README's quick start from nothing, until its first query
  result is printed (a whole cold process: interpreter, imports, compile, first step).

Programs: 1 view (the quick start), the 22 TPC-H views, and 60 views (TPC-H and Nexmark schemas,
their 44 views and 16 simple ones).  ``--repo DIR`` runs the same measurements against another checkout
(e.g. the commit before this benchmark), so the before/after ratio comes from one run on one machine.

    python -m benchmarks.startup [--rows 10000000] [--repo DIR] [--out benchmarks/RESULTS.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

QUICKSTART = """
CREATE TABLE bid (auction BIGINT NOT NULL, bidder BIGINT, price BIGINT);
CREATE MATERIALIZED VIEW stats AS
  SELECT auction, COUNT(*) AS n, MAX(price) AS top FROM bid GROUP BY auction;
"""
STATE_SQL = """CREATE TABLE t (k BIGINT NOT NULL, g BIGINT, x BIGINT);
CREATE TABLE dim (g BIGINT NOT NULL, name VARCHAR);
CREATE MATERIALIZED VIEW by_k AS SELECT k % 100000 AS kk, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k % 100000;
CREATE MATERIALIZED VIEW by_name AS SELECT d.name, COUNT(*) AS n, SUM(t.x) AS s FROM t JOIN dim d ON t.g = d.g
  GROUP BY d.name;
"""


def program(views: int) -> str:
    import workloads
    if views == 1:
        return QUICKSTART
    if views == 22:
        return workloads.program("tpch")
    tpch, nex = workloads.program("tpch"), workloads.program("nexmark")
    extra = [f"CREATE MATERIALIZED VIEW extra{i} AS SELECT l_orderkey % {i + 2} AS g, COUNT(*) AS n, "
             f"SUM(l_quantity) AS q FROM lineitem WHERE l_linenumber > {i % 4} GROUP BY l_orderkey % {i + 2};"
             for i in range(16)]
    return tpch + "\n" + nex + "\n" + "\n".join(extra)


def first_rows(prog: str, n: int = 10):
    """``n`` rows for every table of ``prog``, as JSON records, from its column types."""
    from planner import compile_program
    p = compile_program(prog)
    out = {}
    for name, t in p.tables.items():
        rows = []
        for i in range(n):
            r = {}
            for f in t.fields:
                b = f.type.base
                r[f.name] = (i if b in ("TINYINT", "SMALLINT", "INT", "BIGINT") else
                             float(i) + 0.5 if b in ("REAL", "DOUBLE", "DECIMAL") else
                             f"2024-01-0{1 + i % 9}" if b == "DATE" else
                             f"2024-01-01 00:00:0{i % 10}" if b == "TIMESTAMP" else
                             bool(i % 2) if b == "BOOLEAN" else f"s{i}")
            rows.append(r)
        out[name] = rows
    return out


def child(args) -> dict:
    t_import = time.perf_counter()
    from sqlengine import Pipeline
    from sqlengine.executor.session import get_spark
    import pandas as pd
    import_s = time.perf_counter() - t_import
    if args.child in ("warm", "restart"):
        get_spark()
    if args.child == "restart":
        t0 = time.perf_counter()
        p = Pipeline.from_sql(STATE_SQL, name="restart", storage_dir=args.storage)
        p.start()
        k = 10 ** 9 + args.seed * 1000
        p.input_pandas("t", pd.DataFrame({"k": range(k, k + 50), "g": [i % 100 for i in range(50)],
                                          "x": range(50)}))
        p.input_pandas("t", pd.DataFrame({"k": range(50), "g": [i % 100 for i in range(50)], "x": range(50)}),
                       delete=True)
        p.wait_for_idle()
        total = time.perf_counter() - t0
        st = p.status()
        p.stop()
        return {"total_s": total, "import_s": import_s, "steps": st["steps_run_on"],
                "spark_started": st.get("spark_started", True)}
    prog = program(args.views)
    rows = first_rows(prog)
    t0 = time.perf_counter()
    p = Pipeline.from_sql(prog, name="startup")
    t1 = time.perf_counter()
    p.start()
    t2 = time.perf_counter()
    for table, rs in rows.items():
        p.input_json(table, rs)
    p.wait_for_idle()
    t3 = time.perf_counter()
    st = p.status()
    p.stop(force=True)
    return {"from_sql_s": t1 - t0, "start_s": t2 - t1, "first_step_s": t3 - t2, "total_s": t3 - t0,
            "import_s": import_s, "steps": st["steps_run_on"], "spark_started": st.get("spark_started", True)}


def build_state(storage: str, rows: int, repo: str) -> float:
    code = f"""
import sys, time, numpy as np, pandas as pd
from sqlengine import Pipeline
from benchmarks.startup import STATE_SQL
p = Pipeline.from_sql(STATE_SQL, name="build", storage_dir={storage!r})
p.start()
p.input_pandas("dim", pd.DataFrame({{"g": range(100), "name": [f"n{{i % 10}}" for i in range(100)]}}))
t0 = time.perf_counter()
step = 1_000_000
for lo in range(0, {rows}, step):
    n = min(step, {rows} - lo)
    k = np.arange(lo, lo + n, dtype=np.int64)
    p.input_pandas("t", pd.DataFrame({{"k": k, "g": k % 100, "x": k % 1000}}))
p.wait_for_idle()
p.stop()
print(time.perf_counter() - t0)
"""
    out = run([sys.executable, "-c", code], repo)
    return float(out.strip().splitlines()[-1])


def run(cmd, repo: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, ROOT]), "PYSPARK_PYTHON": sys.executable}
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=repo, timeout=3600)  # cwd is sys.path[0]
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed:\n{res.stderr[-3000:]}")
    return res.stdout


def measure(mode: str, repo: str, views: int = 1, storage: str = "", seed: int = 0) -> dict:
    out = run([sys.executable, "-m", "benchmarks.startup", "--child", mode, "--views", str(views),
               "--storage", storage, "--seed", str(seed)], repo)
    return json.loads(out.strip().splitlines()[-1])


def quickstart(repo: str) -> float:
    """Wall time of a new process running the README's quick start up to its first query result."""
    code = ("import pandas as pd\nfrom sqlengine import Pipeline\n"
            f"p = Pipeline.from_sql({QUICKSTART!r}, name='quickstart')\n"
            "p.start()\n"
            "p.input_pandas('bid', pd.DataFrame({'auction': [1, 1, 2], 'bidder': [7, 8, 7], 'price': [10, 20, 5]}))\n"
            "p.wait_for_idle()\n"
            "print(list(p.query('SELECT * FROM stats ORDER BY auction')), flush=True)\n"
            "import os; os._exit(0)\n")
    t0 = time.perf_counter()
    run([sys.executable, "-c", code], repo)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", choices=["warm", "cold", "restart"])
    ap.add_argument("--views", type=int, default=1)
    ap.add_argument("--storage", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows of state for the restart figure")
    ap.add_argument("--repo", default="", help="another checkout to measure side by side")
    ap.add_argument("--runs", type=int, default=2, help="runs per figure (the median is reported)")
    ap.add_argument("--out", default=None, help="write the section into this RESULTS.md")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    repos = [("this", ROOT)] + ([("before", os.path.abspath(args.repo))] if args.repo else [])
    results = {}
    for label, repo in repos:
        r = results[label] = {}
        for views in (1, 22, 60):
            for mode in ("warm", "cold"):
                runs = [measure(mode, repo, views) for _ in range(args.runs)]
                r[(mode, views)] = sorted(runs, key=lambda x: x["total_s"])[len(runs) // 2]
                print(label, mode, views, json.dumps(r[(mode, views)]), flush=True)
        with tempfile.TemporaryDirectory(prefix="startup-state-") as storage:
            r["build_s"] = build_state(storage, args.rows, repo)
            runs = [measure("restart", repo, storage=storage, seed=i) for i in range(max(2, args.runs))]
            r["restart"] = runs[0]        # the first restart after the load indexes what it looks up
            r["restart_again"] = sorted(runs[1:], key=lambda x: x["total_s"])[(len(runs) - 1) // 2]
            print(label, "restart", json.dumps(r["restart"]), json.dumps(r["restart_again"]), flush=True)
        qs = sorted(quickstart(repo) for _ in range(args.runs))
        r["quickstart"] = qs[len(qs) // 2]
        print(label, "quickstart", r["quickstart"], flush=True)
    text = report(results, args)
    print(text)
    if args.out:
        from benchmarks.report import write_section
        write_section(args.out, "startup", text)


def report(results: dict, args) -> str:
    import multiprocessing
    this = results["this"]
    before = results.get("before")
    lines = ["## Start-up: from a program to its first result",
             "",
             f"Machine: {platform.machine()}, {multiprocessing.cpu_count()} cores, Python {platform.python_version()}; "
             f"load before the run {os.getloadavg()[0]:.2f}. Command: `python -m benchmarks.startup --rows {args.rows}"
             + (" --repo <checkout of the commit before>" if before else "") + f" --runs {args.runs}` "
             "(each figure a median, each run a fresh process).",
             "",
             "`from_sql` + `start()` + a first step of 10 rows per table + `wait_for_idle()`, in seconds. "
             "warm: the process's SparkSession was already running; cold: it was not (the engine starts it "
             "in the background).",
             "",
             "| program | warm | cold | steps on driver/Spark | Spark up by then (cold) |"
             + (" before: warm | before: cold | warm: before ÷ now |" if before else ""),
             "|---|---|---|---|---|" + ("---|---|---|" if before else "")]
    for views, name in ((1, "1 view (quick start)"), (22, "22 TPC-H views"), (60, "60 views")):
        w, c = this[("warm", views)], this[("cold", views)]
        row = (f"| {name} | {w['total_s']:.2f} (compile {w['from_sql_s']:.2f}, start {w['start_s']:.2f}, "
               f"step {w['first_step_s']:.2f}) | {c['total_s']:.2f} | {w['steps']['driver']}/{w['steps']['spark']} | "
               f"{'yes' if c['spark_started'] else 'no'} |")
        if before:
            bw, bc = before[("warm", views)], before[("cold", views)]
            row += f" {bw['total_s']:.2f} | {bc['total_s']:.2f} | {bw['total_s'] / w['total_s']:.1f}× |"
        lines.append(row)
    r = this["restart"]
    lines += ["",
              f"Restart from storage with {args.rows:,} rows of state in table `t` (a GROUP BY and a join-aggregate "
              f"view; building it took {this['build_s']:.1f} s): `from_sql` + `start()` + a first step of a 100-row "
              f"change (50 inserts, 50 deletes), in a warm process: **{r['total_s']:.2f} s** the first time after "
              f"the load (it builds the key index its delete lookups need), **{this['restart_again']['total_s']:.2f} s** "
              f"on later restarts (steps on driver/Spark: {r['steps']['driver']}/{r['steps']['spark']})"
              + (f"; before: {before['restart']['total_s']:.2f} s and {before['restart_again']['total_s']:.2f} s."
                 if before else "."),
              "",
              f"A cold process running the README's quick start to its first query result: "
              f"**{this['quickstart']:.2f} s**" + (f" (before: {before['quickstart']:.2f} s)." if before else "."),
              "",
              "Targets (issue 10): TPC-H warm under 2 s; the restart with 10M rows under 2 s; the quick start "
              "under 12 s."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
