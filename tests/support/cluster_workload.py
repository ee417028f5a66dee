"""The workload the Spark-cluster tests run: a join-aggregate view, a windowed view (TUMBLE), a window
function and a view calling three Python functions (a scalar and an aggregate given with ``udfs=``, a scalar
declared inline) over two tables, fed deterministic random inserts and deletes (with duplicates and NULLs), every
view checked against DuckDB's recomputation after every step.  The same steps run on a cluster (in a child
process: one SparkContext per process) and in local mode, and their per-step view contents must agree.

Run on a cluster: ``python -m tests.support.cluster_workload --master spark://... --storage DIR --out FILE``
(``--kill-pgid PID --kill-at-step K`` SIGKILLs that process group, a worker and its executor, while step K
runs on Spark; ``--kill-driver-at-step K`` SIGKILLs this process, the driver, while step K runs on Spark, and
``--resume-after K`` reopens the storage after that, checks that the views hold steps 0 to K exactly, and runs
the rest).
"""
from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import random
import signal
import threading
import time
from typing import Dict, List, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sqlengine.udf import udaf, udf

from .oracle import Model, bag, bag_from_changes, diff

@udf("BIGINT", ["DECIMAL(10, 2)"])
def cents(amount: pa.Array) -> pa.Array:
    """A vectorised Python function: its module is not importable on the cluster's executors (it travels by value)."""
    return pc.cast(pc.multiply(amount, pa.scalar(decimal.Decimal(100), pa.decimal128(3, 0))), pa.int64())


@udaf("BIGINT", ["DECIMAL(10, 2)"])
class DistinctAmounts:
    """A Python aggregate (COUNT(DISTINCT amount)), run on the executors over the group's rows."""

    def create(self):
        return set()

    def accumulate(self, acc, amount):
        if amount is not None:
            acc.add(amount)

    def finish(self, acc):
        return len(acc)


UDFS = [cents, DistinctAmounts]
# a Python function declared in the program, with its code inline (a module of its own, made on the driver)
FUNCTIONS = """CREATE FUNCTION tagged(region VARCHAR) RETURNS VARCHAR LANGUAGE PYTHON AS $$
def tagged(region):
    return None if region is None else "r:" + region
$$;
"""
SCHEMA = """
CREATE TABLE orders (id BIGINT, customer INT, amount DECIMAL(10,2), ts TIMESTAMP);
CREATE TABLE customers (id INT, region VARCHAR);
"""
COLUMNS = {"orders": ["id", "customer", "amount", "ts"], "customers": ["id", "region"]}
T0 = dt.datetime(2026, 11, 23, 9, 0, 0)

# (name, engine SQL, DuckDB SQL)
VIEWS = [
    ("region_totals",
     "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total, MAX(o.amount) AS top "
     "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region",
     None),
    ("per_minute",
     "SELECT window_start, window_end, COUNT(*) AS n, SUM(amount) AS total "
     "FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) GROUP BY window_start, window_end",
     "SELECT time_bucket(INTERVAL 1 MINUTE, ts) AS ws, time_bucket(INTERVAL 1 MINUTE, ts) + INTERVAL 1 MINUTE, "
     "COUNT(*), SUM(amount) FROM orders WHERE ts IS NOT NULL GROUP BY ws"),
    ("top_orders",
     "SELECT customer, id, amount FROM (SELECT customer, id, amount, ROW_NUMBER() OVER "
     "(PARTITION BY customer ORDER BY amount DESC, id) AS rn FROM orders) t WHERE rn <= 2",
     None),
    ("python_functions",
     "SELECT tagged(c.region) AS r, COUNT(*) AS n, SUM(cents(o.amount)) AS c, distinctamounts(o.amount) AS d "
     "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY tagged(c.region)",
     "SELECT 'r:' || c.region, COUNT(*), SUM(CAST(o.amount * 100 AS BIGINT)), COUNT(DISTINCT o.amount) "
     "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY 1"),
]


def program() -> str:
    """The workload's program (its pipelines take ``udfs=UDFS``)."""
    return FUNCTIONS + SCHEMA + "\n".join(f"CREATE MATERIALIZED VIEW {n} AS {s};" for n, s, _ in VIEWS)


def steps(seed: int, n: int, rows_per_step: int = 40) -> List[List[tuple]]:
    """``n`` steps of (table, "insert"|"delete", rows); deletes pick rows inserted earlier (and a few that
    do not exist)."""
    rnd = random.Random(seed)
    live: Dict[str, List[tuple]] = {"orders": [], "customers": []}
    out = []
    next_id = 0
    for i in range(n):
        step = []
        if i == 0 or rnd.random() < 0.3:
            cust = [(rnd.choice([None, *range(12)]), rnd.choice([None, "eu", "us", "apac"])) for _ in range(8)]
            step.append(("customers", "insert", cust))
            live["customers"] += cust
        orders = []
        for _ in range(rows_per_step):
            if live["orders"] and rnd.random() < 0.1:     # a duplicate of an existing row
                orders.append(rnd.choice(live["orders"]))
                continue
            next_id += 1
            orders.append((next_id, rnd.choice([None, *range(12)]),
                           None if rnd.random() < 0.05 else decimal.Decimal(rnd.randrange(1, 100000)) / 100,
                           None if rnd.random() < 0.05 else T0 + dt.timedelta(seconds=rnd.randrange(0, 600))))
        step.append(("orders", "insert", orders))
        live["orders"] += orders
        if i > 0:
            gone = rnd.sample(live["orders"], min(len(live["orders"]), rows_per_step // 3))
            step.append(("orders", "delete", gone + [(10 ** 9 + i, 1, decimal.Decimal("1.00"), T0)]))
            for r in gone:
                live["orders"].remove(r)
            if live["customers"] and rnd.random() < 0.5:
                c = rnd.choice(live["customers"])
                step.append(("customers", "delete", [c]))
                live["customers"].remove(c)
        out.append(step)
    return out


def _snapshot(p) -> Dict[str, list]:
    out = {}
    for name, _, _ in VIEWS:
        b = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")])
        out[name] = sorted(([list(map(_jsonable, k)), v] for k, v in b.items()), key=repr)
    return out


def _jsonable(v):
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def push(p, model: Model, step) -> None:
    """One step's input calls (each durable when it returns), and the same rows into ``model``."""
    for table, kind, rows in step:
        p.input_pandas(table, pd.DataFrame([list(r) for r in rows], columns=COLUMNS[table], dtype=object),
                       delete=(kind == "delete"))
        (model.insert if kind == "insert" else model.delete)(table, rows)


def check(p, model: Model, i: int, handlers=None) -> None:
    """Every view's query result (and, with ``handlers``, its change stream) equals DuckDB's recomputation."""
    con = model.duck()
    for name, select, oracle in VIEWS:
        expected = model.view(con, oracle or select)
        got = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")])
        assert not diff(got, expected), f"step {i}: view {name} differs from DuckDB: {diff(got, expected)}"
        if handlers is not None:
            stream = bag_from_changes(handlers[name].to_pandas())
            assert not diff(stream, expected), \
                f"step {i}: view {name} (change stream) differs: {diff(stream, expected)}"
    con.close()


def run(p, all_steps, on_step=None) -> List[Dict[str, list]]:
    """Feed ``all_steps`` to the started pipeline ``p``, one step each (``wait_for_idle`` between them); after
    each, every view's query result and change stream must equal DuckDB's recomputation.  Returns the view
    contents after each step."""
    handlers = {name: p.listen(name) for name, _, _ in VIEWS}
    model = Model(SCHEMA, COLUMNS)
    snapshots = []
    for i, step in enumerate(all_steps):
        if on_step:
            on_step(i)
        push(p, model, step)
        p.wait_for_idle(timeout_s=600)
        check(p, model, i, handlers)
        snapshots.append(_snapshot(p))
    return snapshots


def run_until_killed(p, all_steps, kill_at: int) -> None:
    """Steps before ``kill_at`` by :func:`run`; step ``kill_at``'s input calls in one transaction (durable
    together), then this process SIGKILLs itself as soon as a Spark job of that step runs."""
    run(p, all_steps[:kill_at])
    tracker = p.engine.spark.sparkContext.statusTracker()
    with p.transaction():
        push(p, Model(SCHEMA, COLUMNS), all_steps[kill_at])   # (the model dies with the process)
    end = time.monotonic() + 300
    while time.monotonic() < end:
        if tracker.getActiveJobsIds():
            print(f"killing the driver (pid {os.getpid()}) during a Spark job of step {kill_at}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.005)
    raise AssertionError(f"step {kill_at} ran no Spark job to be killed in")


def resume(p, all_steps, after: int) -> dict:
    """After a driver killed during step ``after``: the views hold exactly steps 0 to ``after`` (acknowledged,
    so neither lost nor applied twice), then the remaining steps run, each checked against DuckDB."""
    model = Model(SCHEMA, COLUMNS)
    for step in all_steps[:after + 1]:
        for table, kind, rows in step:
            (model.insert if kind == "insert" else model.delete)(table, rows)
    p.wait_for_idle(timeout_s=600)
    check(p, model, after)
    for i, step in enumerate(all_steps[after + 1:], start=after + 1):
        push(p, model, step)
        p.wait_for_idle(timeout_s=600)
        check(p, model, i)
    return {"resumed": True, "steps": len(all_steps)}


def kill_during_step(spark, pgid: int, deadline_s: float = 300) -> threading.Thread:
    """A thread that SIGKILLs process group ``pgid`` as soon as a Spark job is running (so: during a step)."""
    def watch():
        tracker = spark.sparkContext.statusTracker()
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if tracker.getActiveJobsIds():
                os.killpg(pgid, signal.SIGKILL)
                print(f"killed worker process group {pgid} during a Spark job", flush=True)
                return
            time.sleep(0.01)
    t = threading.Thread(target=watch, daemon=True)
    return t


CLUSTER_CONF = {"spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "2",
                # a lost executor's tasks are retried on the other worker
                "spark.task.maxFailures": "8"}


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--kill-pgid", type=int)
    ap.add_argument("--kill-at-step", type=int, default=1)
    ap.add_argument("--kill-driver-at-step", type=int, help="SIGKILL this process during that step's Spark job")
    ap.add_argument("--resume-after", type=int, help="reopen the storage of a driver killed during that step")
    ap.add_argument("--tpch", help="comma-separated TPC-H views to run instead (SF 0.001, checked per batch)")
    ap.add_argument("--start-only", action="store_true", help="only start the pipeline (the storage check)")
    ap.add_argument("--driver-ops", action="store_true",
                    help="Spark steps run their ops on the driver (Placement.driver_ops), nothing cached: the state "
                         "their changes meet is read by Spark jobs that scan it for their keys")
    a = ap.parse_args(argv)
    placement = {"local_step_rows": 1 if a.driver_ops else 0}    # (all but 1-row steps) on Spark
    if a.driver_ops:
        placement["max_keys"] = 1   # a read is narrowed to row groups for one key at most: scans, on the executors
    from sqlengine import Pipeline, RuntimeConfig

    def make(sql, name="cluster"):
        return Pipeline.from_sql(sql, name=name, storage_dir=a.storage, spark_master=a.master,
                                 spark_conf=CLUSTER_CONF, runtime_config=RuntimeConfig(placement=placement),
                                 udfs=UDFS)
    if a.start_only:
        p = make(program())
        try:
            p.start()
            result = {"started": True}
            p.stop()
        except Exception as e:   # noqa: BLE001 - reported to the test
            result = {"started": False, "error": f"{type(e).__name__}: {e}"}
        with open(a.out, "w") as f:
            json.dump(result, f)
        return
    if a.tpch:
        from .workload_oracle import run_suite, tpch_batches
        like, batches = tpch_batches(0.001, 2)
        t0 = time.time()
        suite = run_suite("tpch", a.tpch.split(","), like, batches, lambda sql: make(sql, "tpch"))
        with open(a.out, "w") as f:
            json.dump({"failures": {v: r.failures for v, r in suite.results.items()},
                       "checked": {v: r.steps for v, r in suite.results.items()}, "seconds": time.time() - t0,
                       "steps_run_on": suite.pipeline.status()["steps_run_on"]}, f)
        return
    p = make(program())
    p.start()
    if a.kill_driver_at_step is not None:
        run_until_killed(p, steps(a.seed, a.steps), a.kill_driver_at_step)
    if a.resume_after is not None:
        result = resume(p, steps(a.seed, a.steps), a.resume_after)
        result["steps_run_on"] = p.status()["steps_run_on"]
        p.stop()
        with open(a.out, "w") as f:
            json.dump(result, f)
        return
    if a.driver_ops:
        p.engine.local.cache.hold_nothing()
    killed = []

    def on_step(i):
        if a.kill_pgid and i == a.kill_at_step and not killed:
            t = kill_during_step(p.engine.spark, a.kill_pgid)
            t.start()
            killed.append(t)
    t0 = time.time()
    snaps = run(p, steps(a.seed, a.steps), on_step)
    st = p.status()
    p.stop()
    with open(a.out, "w") as f:
        json.dump({"snapshots": snaps, "seconds": time.time() - t0, "steps_run_on": st["steps_run_on"],
                   "killed": bool(killed), "spark_step_ops": st["spark_step_ops"],
                   "spark_scans": p.engine.stats.spark_scans}, f)


if __name__ == "__main__":
    main()
