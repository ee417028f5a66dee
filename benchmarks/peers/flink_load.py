"""Flink SQL side of ``benchmarks/scale.py --flink``: the load of the scale program; run by the ``.peer-flink``
venv's Python:

    JVM_ARGS="-Xms6g -Xmx6g" .peer-flink/bin/python benchmarks/peers/flink_load.py --t DIR --d DIR --empty DIR

Reads header-less CSV files of ``t`` (id, k, v) and ``d`` (k, name) with the filesystem connector into the two
views of the scale benchmark, ``g`` (GROUP BY k) and ``j`` (join then GROUP BY name), as one statement set
into two blackhole sinks (streaming mode, so the join and both aggregates keep state and emit updates, as the
engine does).  First the same job over empty directories (``startup_s``: the fixed cost of a job), then over
the data (``wall_s``; ``net_s``: Flink's own net runtime of the job).  Prints one ``RESULT {json}`` line.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flink_env import blackhole, make_env  # noqa: E402

T = "id BIGINT, k BIGINT, v BIGINT"
D = "k BIGINT, name STRING"
VIEWS = {
    "g": "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k",
    "j": "SELECT d.name, COUNT(*) AS n, SUM(t.v) AS s FROM t JOIN d ON t.k = d.k GROUP BY d.name",
}


def run(env, t_dir: str, d_dir: str):
    for name, cols, path in (("t", T, t_dir), ("d", D, d_dir)):
        env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {name}")
        env.execute_sql(f"CREATE TEMPORARY TABLE {name} ({cols}) WITH ('connector' = 'filesystem', "
                        f"'path' = '{path}', 'format' = 'csv')")
    stmts = env.create_statement_set()
    for name, q in VIEWS.items():
        table = env.sql_query(q)
        blackhole(env, f"sink_{name}", table)
        stmts.add_insert(f"sink_{name}", table)
    t0 = time.perf_counter()
    result = stmts.execute()
    client = result.get_job_client()
    job = client.get_job_execution_result().result()
    wall = time.perf_counter() - t0
    return wall, job.get_net_runtime() / 1000.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--t", required=True)
    ap.add_argument("--d", required=True)
    ap.add_argument("--empty", required=True)
    ap.add_argument("--parallelism", type=int, default=2)
    a = ap.parse_args()
    env = make_env(True, a.parallelism)
    run(env, a.empty, a.empty)   # warm-up
    startup, _ = run(env, a.empty, a.empty)
    wall, net = run(env, a.t, a.d)
    print("RESULT " + json.dumps({"startup_s": startup, "wall_s": wall, "net_s": net}), flush=True)


if __name__ == "__main__":
    main()
