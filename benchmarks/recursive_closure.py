"""Transitive closure of a 100k-edge graph: one-edge inserts and deletes against DuckDB's recursive recomputation
(issue 31).

The graph is a random recursive forest (node ``i`` gets a parent drawn uniformly from the nodes before it, so
the closure holds each node's ancestors: about ``edges x ln(edges)`` pairs), plus ``--extra`` random forward
edges.  The engine keeps ``reach`` (``WITH RECURSIVE ... UNION``, materialized); each measured step is one
``input_arrow`` of one edge, inserted or deleted (``delete=True``), timed to ``wait_for_idle`` (the input log,
the fixed point's change, the state runs and the commit).  (A ``DELETE FROM edges WHERE ...`` through
``execute`` would add a scan of the table for the rows the WHERE matches: the cost of that statement, not of the
recursion.)  Three kinds of step:

* insert an edge ``u -> v`` with ``u < v`` (no cycle), then delete it again (the delete removes what it added);
* delete an edge of the forest, then insert it back (the delete removes the subtree's ancestors: DRed's
  over-delete and rederive).

DuckDB recomputes the same closure with its own ``WITH RECURSIVE`` over the same edges (an in-memory table,
its default threads), timed per run.  After the steps, the view is compared with DuckDB's closure (exactly, as
sets).  The ratio is DuckDB's recomputation over the engine's median step.

    .venv/bin/python -m benchmarks.recursive_closure --edges 100000 --trials 5 [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa

from sqlengine import Pipeline, RuntimeConfig

LAZY = {"sqlengine.spark.start": "lazy"}   # every step runs on the driver: no JVM starting beside the steps
CLOSURE = ("WITH RECURSIVE r (a, b) AS (SELECT src, dst FROM edges UNION "
           "SELECT r.a, edges.dst FROM r JOIN edges ON r.b = edges.src) SELECT a, b FROM r")


def graph(edges: int, extra: int, seed: int) -> pa.Table:
    rnd = np.random.default_rng(seed)
    child = np.arange(1, edges - extra + 1, dtype=np.int64)
    parent = (rnd.random(len(child)) * child).astype(np.int64)
    u = rnd.integers(0, edges - extra, extra)
    v = rnd.integers(0, edges - extra, extra)
    src, dst = np.minimum(u, v), np.maximum(u, v)
    keep = src != dst
    return pa.table({"src": np.concatenate([parent, src[keep]]), "dst": np.concatenate([child, dst[keep]])})


def duckdb_closure(edges: pa.Table, runs: int):
    con = duckdb.connect()
    con.register("e", edges)
    con.execute("CREATE TABLE edges AS SELECT * FROM e").fetchall()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = con.sql(CLOSURE).to_arrow_table()
        times.append(time.perf_counter() - t0)
    return times, out, con


def step_floor(edges: pa.Table, trials: int) -> list:
    """One-edge inserts into a pipeline whose view is a GROUP BY over the same edges: what any step costs."""
    with tempfile.TemporaryDirectory() as d:
        p = Pipeline.from_sql("CREATE TABLE edges (src BIGINT, dst BIGINT);"
                              "CREATE MATERIALIZED VIEW n AS SELECT src, COUNT(*) AS c FROM edges GROUP BY src;",
                              storage_dir=d, runtime_config=RuntimeConfig(placement={"local_step_rows": 10 ** 9}),
                              spark_conf=LAZY)
        p.start()
        p.input_arrow("edges", edges)
        p.wait_for_idle()
        times = []
        for i in range(2 * trials):
            t = time.perf_counter()
            p.input_arrow("edges", pa.table({"src": [i], "dst": [i + 1]}))
            p.wait_for_idle()
            times.append(time.perf_counter() - t)
        p.stop()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edges", type=int, default=100_000)
    ap.add_argument("--extra", type=int, default=100, help="random forward edges beside the forest's")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out")
    a = ap.parse_args()
    edges = graph(a.edges, a.extra, a.seed)
    rnd = np.random.default_rng(a.seed + 1)
    n_nodes = a.edges - a.extra + 1
    with tempfile.TemporaryDirectory() as d:
        p = Pipeline.from_sql("CREATE TABLE edges (src BIGINT, dst BIGINT);"
                              f"CREATE MATERIALIZED VIEW reach AS {CLOSURE};", storage_dir=d,
                              runtime_config=RuntimeConfig(placement={"local_step_rows": 10 ** 9}),
                              spark_conf=LAZY)
        p.start()
        t0 = time.perf_counter()
        p.input_arrow("edges", edges)
        p.wait_for_idle()
        load = time.perf_counter() - t0
        size = next(iter(p.query("SELECT COUNT(*) AS n FROM reach")))["n"]
        times = {"insert an edge": [], "delete that edge": [], "delete a forest edge": [], "insert it back": []}

        def step(src: int, dst: int, kind: str, delete: bool = False) -> None:
            t = time.perf_counter()
            p.input_arrow("edges", pa.table({"src": [src], "dst": [dst]}), delete=delete)
            p.wait_for_idle()
            times[kind].append(time.perf_counter() - t)

        for _ in range(a.trials):
            u, v = sorted(int(x) for x in rnd.integers(0, n_nodes, 2))
            if u == v:
                v = u + 1
            step(u, v, "insert an edge")
            step(u, v, "delete that edge", delete=True)
            c = int(rnd.integers(1, n_nodes))
            parent = int(edges.column("src")[c - 1].as_py())
            step(parent, c, "delete a forest edge", delete=True)
            step(parent, c, "insert it back")
        view = p.query_arrow("SELECT a, b FROM reach")
        p.stop()
    floor = step_floor(edges, a.trials)
    recompute, oracle, con = duckdb_closure(edges, max(3, a.trials // 2))
    con.register("v", view)
    con.register("o", oracle)
    diff = con.sql("SELECT (SELECT COUNT(*) FROM (SELECT * FROM v EXCEPT ALL SELECT * FROM o)) + "
                   "(SELECT COUNT(*) FROM (SELECT * FROM o EXCEPT ALL SELECT * FROM v))").fetchall()[0][0]
    assert diff == 0 and view.num_rows == oracle.num_rows, f"the view differs from DuckDB's closure ({diff} rows)"
    dk = statistics.median(recompute)
    lines = [f"machine: {platform.machine()}, {os.cpu_count()} cores; graph: {edges.num_rows:,} edges "
             f"({a.edges - a.extra:,} in a random forest, {edges.num_rows - a.edges + a.extra:,} random forward); "
             f"closure: {size:,} rows; the view equals DuckDB's closure after the steps",
             f"first step (the whole closure from scratch, in the engine): {load:.2f} s",
             f"DuckDB WITH RECURSIVE, from scratch: median {dk * 1000:.0f} ms over {len(recompute)} runs",
             f"step floor (a one-edge insert under a GROUP BY over the same edges): median "
             f"{statistics.median(floor) * 1000:.0f} ms, so at most {dk / statistics.median(floor):.1f}× is possible "
             "for any step here", "",
             "| step (one edge) | engine median ms | min-max ms | DuckDB recompute ÷ engine |", "|---|---|---|---|"]
    for kind, ts in times.items():
        m = statistics.median(ts)
        lines.append(f"| {kind} | {m * 1000:.0f} | {min(ts) * 1000:.0f}-{max(ts) * 1000:.0f} | {dk / m:.1f}× |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
