"""Flink SQL side of ``benchmarks/nexmark_throughput.py``; run by the ``.peer-flink`` venv's Python:

    JVM_ARGS="-Xms2g -Xmx2g" .peer-flink/bin/python benchmarks/peers/flink_nexmark.py \\
        --csv DIR --empty DIR --queries q00,q03 [--warmup DIR] [--parallelism 2] [--check] [--timeout S]

``--csv DIR`` holds one directory per table (``person/``, ``auction/``, ``bid/``) of header-less CSV
files; ``--empty DIR`` the same directories, empty.  One local mini-cluster job per run, in streaming
mode, each query inserting into a ``blackhole`` sink.  Before the queries, one untimed warm-up job
(the first query over the tables under ``--warmup``, default the empty ones) warms the JVM.  Then per
query:

1. ``startup_s``: wall time of the query's job over the empty tables (mini-cluster start, job
   submission and deployment, teardown: the fixed cost of a job);
2. ``wall_s``: wall time of the query's job over the data, from submission until the job finished,
   and ``net_ms``, the job's net runtime as Flink reports it (``JobExecutionResult``);
3. with ``--check``: ``rows``, the query's row count in batch mode (untimed), to compare with DuckDB.

Prints one ``RESULT {json}`` line per query on stdout (``error`` set if the query failed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flink_env import blackhole, make_env  # noqa: E402
from flink_queries import QUERIES, TABLES  # noqa: E402


def declare_tables(env, root: str) -> None:
    for name, cols in TABLES.items():
        env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {name}")
        env.execute_sql(f"CREATE TEMPORARY TABLE {name} ({cols}) WITH ("
                        f"'connector' = 'filesystem', 'path' = '{os.path.join(root, name)}', 'format' = 'csv')")


def run_job(env, select: str, root: str, timeout: float = 0):
    """(wall seconds, net runtime ms) of inserting ``select`` over the tables under ``root`` into a blackhole;
    after ``timeout`` seconds (if > 0) the job is cancelled and TimeoutError raised."""
    declare_tables(env, root)
    table = env.sql_query(select)
    blackhole(env, "sink", table)
    t0 = time.perf_counter()
    client = table.execute_insert("sink").get_job_client()
    done = client.get_job_execution_result()
    while not done.done():
        if timeout and time.perf_counter() - t0 > timeout:
            client.cancel().result()
            raise TimeoutError(f"timed out after {timeout:.0f} s (job cancelled)")
        time.sleep(0.05)
    return time.perf_counter() - t0, done.result().get_net_runtime()


def batch_rows(env, select: str) -> int:
    with env.execute_sql(f"SELECT COUNT(*) FROM ({select}) AS q").collect() as rows:
        return int(next(iter(rows))[0])


def describe(e: Exception) -> str:
    """The root cause of a Java exception (py4j), else the Python exception; first line."""
    j = getattr(e, "java_exception", None)
    while j is not None and j.getCause() is not None:
        j = j.getCause()
    text = str(j.toString()) if j is not None else f"{type(e).__name__}: {e}"
    return text.strip().splitlines()[0][:500]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--empty", required=True)
    ap.add_argument("--queries", required=True, help="comma-separated names of flink_queries.QUERIES")
    ap.add_argument("--warmup", default=None, help="tables (as --csv) for the untimed warm-up job; default --empty")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="also count each query's rows in batch mode")
    ap.add_argument("--timeout", type=float, default=0, help="cancel a query's job after this many seconds")
    args = ap.parse_args()
    import pyflink.version
    queries = args.queries.split(",")
    env = make_env(True, args.parallelism)
    batch = None
    if args.check:
        batch = make_env(False, args.parallelism)
        declare_tables(batch, args.csv)
    run_job(env, QUERIES[queries[0]], args.warmup or args.empty)
    for q in queries:
        out = {"query": q, "flink": pyflink.version.__version__, "parallelism": args.parallelism}
        try:
            out["startup_s"] = run_job(env, QUERIES[q], args.empty)[0]
            out["wall_s"], out["net_ms"] = run_job(env, QUERIES[q], args.csv, args.timeout)
            if batch is not None:
                out["rows"] = batch_rows(batch, QUERIES[q])
        except Exception as e:  # noqa: BLE001 - reported per query
            out["error"] = describe(e)
        print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
