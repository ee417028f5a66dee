"""Flink SQL side of ``benchmarks/connector_ingest.py``; run by the ``.peer-flink`` venv's Python:

    JVM_ARGS="-Xms2g -Xmx2g" .peer-flink/bin/python benchmarks/peers/flink_ingest.py --csv DIR --empty DIR

Reads a directory of header-less CSV files (id, k, v, ts) with the filesystem connector into
``SELECT k, COUNT(*), SUM(v) FROM ev GROUP BY k`` (streaming mode, a blackhole sink).  First the same
job over an empty directory (``startup_s``: the fixed cost of a job), then over the data (``wall_s``).
Prints one ``RESULT {json}`` line.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flink_env import blackhole, make_env  # noqa: E402

COLS = "id BIGINT, k INT, v BIGINT, ts TIMESTAMP(3)"
QUERY = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k"


def run(env, path: str) -> float:
    env.execute_sql("DROP TEMPORARY TABLE IF EXISTS ev")
    env.execute_sql(f"CREATE TEMPORARY TABLE ev ({COLS}) WITH ('connector' = 'filesystem', 'path' = '{path}', "
                    "'format' = 'csv')")
    table = env.sql_query(QUERY)
    blackhole(env, "sink", table)
    t0 = time.perf_counter()
    table.execute_insert("sink").wait()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--empty", required=True)
    ap.add_argument("--parallelism", type=int, default=2)
    a = ap.parse_args()
    env = make_env(True, a.parallelism)
    run(env, a.empty)   # warm-up
    startup = run(env, a.empty)
    wall = run(env, a.csv)
    print("RESULT " + json.dumps({"startup_s": startup, "wall_s": wall}), flush=True)


if __name__ == "__main__":
    main()
