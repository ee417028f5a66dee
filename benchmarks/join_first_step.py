"""The first step of a many-table comma join (issue 11): every table changes in the same step.

A view joins N tables of 10 rows through comma joins and a chain of equalities ``t0.v = t1.k AND
t1.v = t2.k ...``, the tables listed in a scrambled FROM order.  Every table gets its 10 rows in one step
(the pipeline is paused while they are pushed), then one table changes in a second step.  Each row
``(j, j)`` matches one row of the next table, so the view has 10 rows whatever N.

    .venv/bin/python -m benchmarks.join_first_step --n 8 12 16 20 --rule off on --path driver spark

``--rule on`` runs planner/rules/order_joins.py in the pass manager (``off`` takes it out of the rules); ``--path spark`` runs every step on Spark (SQLENGINE_LOCAL_STEP_ROWS=0),
``driver`` on the driver (the default with a local master).  ``--budget`` skips larger N once a step took
longer than that many seconds.
"""
from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

import pandas as pd

ROWS = 10


def chain_sql(n: int, seed: int = 11) -> str:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    tables = "\n".join(f"CREATE TABLE t{i} (k INT, v INT);" for i in range(n))
    preds = " AND ".join(f"t{i}.v = t{i + 1}.k" for i in range(n - 1))
    return (f"{tables}\nCREATE MATERIALIZED VIEW j AS SELECT t0.k, t{n - 1}.v "
            f"FROM {', '.join(f't{i}' for i in order)} WHERE {preds};")


def use_rule(on: bool) -> None:
    """Put ``order_joins`` into the pass manager's rules (after pushdown, before pruning), or take it out."""
    from planner.rules import manager
    from planner.rules.order_joins import order_joins
    rules = [r for r in manager.RULES if r is not order_joins]
    if on:
        names = [r.__name__ for r in rules]
        rules.insert(names.index("prune_columns") if "prune_columns" in names else len(rules), order_joins)
    manager.RULES = tuple(rules)


def run(spark, n: int, path: str) -> dict:
    from sqlengine import Pipeline
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        p = Pipeline.from_sql(chain_sql(n), name=f"chain{n}", storage_dir=d, spark=spark)
        compiled = time.perf_counter() - t0
        t0 = time.perf_counter()
        p.start()
        started = time.perf_counter() - t0
        p.pause()
        rows = pd.DataFrame({"k": list(range(ROWS)), "v": list(range(ROWS))})
        for i in range(n):
            p.input_pandas(f"t{i}", rows)
        t0 = time.perf_counter()
        p.resume()
        p.wait_for_idle()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        p.input_pandas(f"t{n // 2}", pd.DataFrame({"k": [3], "v": [3]}))
        p.wait_for_idle()
        second = time.perf_counter() - t0
        got = sorted((r["k"], r["v"]) for r in p.query("SELECT * FROM j"))
        st = p.status()
        p.stop(force=True)
    expected = sorted([(j, j) for j in range(ROWS)] + [(3, 3)] * 1)
    return {"n": n, "path": path, "compile_s": compiled, "start_s": started, "first_step_s": first,
            "next_step_s": second, "view_rows": len(got), "correct": got == expected,
            "ran_on": st.get("steps_run_on")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[8, 12, 16, 20])
    ap.add_argument("--rule", nargs="+", default=["off", "on"], choices=["off", "on"])
    ap.add_argument("--path", nargs="+", default=["driver", "spark"], choices=["driver", "spark"])
    ap.add_argument("--budget", type=float, default=60.0)
    args = ap.parse_args(argv)
    from sqlengine.executor.session import get_spark
    spark = get_spark({"spark.sql.shuffle.partitions": "1"})
    for path in args.path:
        if path == "spark":
            os.environ["SQLENGINE_LOCAL_STEP_ROWS"] = "0"
        else:
            os.environ.pop("SQLENGINE_LOCAL_STEP_ROWS", None)
        for rule in args.rule:
            use_rule(rule == "on")
            for n in args.n:
                r = run(spark, n, path)
                print(f"path={path:6} rule={rule:3} N={n:3}  compile {r['compile_s']:.2f} s  start "
                      f"{r['start_s']:.2f} s  first step {r['first_step_s']:.2f} s  next step "
                      f"{r['next_step_s']:.2f} s  rows {r['view_rows']} correct={r['correct']} on={r['ran_on']}",
                      flush=True)
                if r["first_step_s"] > args.budget:
                    break


if __name__ == "__main__":
    main()
