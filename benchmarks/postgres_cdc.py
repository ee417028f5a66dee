"""End-to-end latency of PostgreSQL change data capture: from COMMIT in PostgreSQL to the row in the
output table that a view's ``postgres_output`` sink keeps.

    python -m benchmarks.postgres_cdc [--rates 1000 10000] [--seconds 20] [--bulk 1000000] [--out benchmarks/RESULTS.md]

A PostgreSQL 15 server is started for the run (``tests/support/postgres_server.py``).  A writer process commits
transactions into ``events (id bigint primary key, k int, t0 timestamptz)`` every 10 ms at the given rate
of changes per second (inserts, plus updates and deletes of earlier rows, 10% each); ``t0`` is
``clock_timestamp()`` at the statement, just before its COMMIT.  The pipeline reads ``events`` with
``postgres_input`` (cdc) into ``SELECT id, k, t0 FROM events`` with a ``postgres_output`` sink keyed by
``id``; the output table has an extra column ``arrived timestamptz DEFAULT clock_timestamp()``, set when
the sink's transaction inserts the row.  Latency = ``arrived - t0`` per inserted row, both read from the
server's clock, over the rows written after a warm-up.  ``--bulk``: the time ``postgres_output`` takes to
write a 1M-row view into a new table (COPY, not one round trip per row).  After each rate the output table is compared with
the source table (they must be equal).  The steps run on the driver (Spark is not started).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time

from benchmarks.report import write_section
from benchmarks.soak import machine
from tests.support.postgres_server import PostgresServer


def writer(uri: str, rate: int, seconds: float, start_id: int, stop_at: mp.Value) -> None:
    import random

    import psycopg
    rng = random.Random(rate)
    tick = 0.01
    per_tick = max(1, round(rate * tick))
    next_id = start_id
    t_end = time.monotonic() + seconds
    with psycopg.connect(uri, autocommit=True) as c:
        t = time.monotonic()
        while t < t_end:
            ins = max(1, round(per_tick * 0.8))
            c.execute("INSERT INTO events SELECT g, g %% 100, clock_timestamp() FROM generate_series(%s::bigint, %s::bigint) g",
                      (next_id, next_id + ins - 1))
            next_id += ins
            for _ in range(per_tick - ins):
                victim = rng.randrange(start_id, next_id)
                if rng.random() < 0.5:
                    c.execute("UPDATE events SET k = k + 1, t0 = clock_timestamp() WHERE id = %s", (victim,))
                else:
                    c.execute("DELETE FROM events WHERE id = %s", (victim,))
            t += tick
            time.sleep(max(0.0, t - time.monotonic()))
    stop_at.value = next_id


def run(rates, seconds: float, warmup: float, poll_ms: int) -> list:
    from sqlengine import Pipeline
    results = []
    with PostgresServer() as pg:
        uri = pg.create_database("bench")
        with pg.connect("bench") as c:
            c.execute("CREATE TABLE events (id bigint PRIMARY KEY, k int, t0 timestamptz)")
            c.execute("CREATE TABLE out_events (id bigint PRIMARY KEY, k int, t0 timestamp, "
                      "arrived timestamptz DEFAULT clock_timestamp())")
        src = [{"name": "pg", "transport": {"name": "postgres_input", "config": {
            "uri": uri, "table": "events", "poll_interval_ms": poll_ms}}}]
        out = [{"name": "out", "transport": {"name": "postgres_output", "config": {
            "uri": uri, "table": "out_events", "key": ["id"]}}}]
        sql = (f"CREATE TABLE events (id BIGINT NOT NULL PRIMARY KEY, k INT, t0 TIMESTAMP) "
               f"WITH ('connectors' = '{json.dumps(src)}');\n"
               f"CREATE MATERIALIZED VIEW out_events WITH ('connectors' = '{json.dumps(out)}') AS "
               f"SELECT id, k, t0 FROM events")
        storage = tempfile.mkdtemp(prefix="pgcdc-")
        p = Pipeline.from_sql(sql, name="pgcdc", storage_dir=storage, spark_conf={"sqlengine.spark.start": "lazy"})
        p.start()
        next_id = 1
        try:
            for rate in rates:
                stop_at = mp.Value("q", 0)
                t_begin = time.time()
                w = mp.Process(target=writer, args=(uri, rate, seconds, next_id, stop_at))
                w.start()
                w.join()
                assert w.exitcode == 0, f"the writer failed ({w.exitcode})"
                first_measured = next_id
                next_id = stop_at.value
                # wait until the output equals the source
                deadline = time.monotonic() + 120
                with pg.connect("bench") as c:
                    while True:
                        diff = c.execute("SELECT count(*) FROM (SELECT id, k FROM events EXCEPT ALL "
                                         "SELECT id, k FROM out_events) a").fetchone()[0] + c.execute(
                            "SELECT count(*) FROM (SELECT id, k FROM out_events EXCEPT ALL "
                            "SELECT id, k FROM events) a").fetchone()[0]
                        if diff == 0:
                            break
                        assert time.monotonic() < deadline, f"output differs from the source by {diff} rows"
                        time.sleep(0.2)
                    row = c.execute(
                        "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), "
                        "percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms) FROM (SELECT extract(epoch FROM "
                        "(arrived - (t0 AT TIME ZONE 'UTC'))) * 1000 AS ms FROM out_events WHERE id >= %s AND "
                        "t0 AT TIME ZONE 'UTC' > to_timestamp(%s)) x",
                        (first_measured, t_begin + warmup)).fetchone()
                st = p.status()
                results.append({"rate": rate, "rows": row[0], "p50": row[1], "p99": row[2], "max": row[3],
                                "steps": st["step"], "source_errors": st["connectors"]["events.pg"]["errors"]})
                print(results[-1], flush=True)
        finally:
            p.stop()
            shutil.rmtree(storage, ignore_errors=True)
    return results


def bulk(rows: int) -> dict:
    """A view of ``rows`` rows loaded in one step into a new ``postgres_output`` table (COPY, one transaction)."""
    import numpy as np
    import pandas as pd

    from sqlengine import Pipeline
    with PostgresServer() as pg:
        uri = pg.create_database("bulk")
        out = [{"name": "out", "transport": {"name": "postgres_output", "config": {
            "uri": uri, "table": "big", "key": ["id"]}}}]
        sql = (f"CREATE TABLE t (id BIGINT NOT NULL, k INT, s VARCHAR);\n"
               f"CREATE MATERIALIZED VIEW big WITH ('connectors' = '{json.dumps(out)}') AS SELECT id, k, s FROM t")
        storage = tempfile.mkdtemp(prefix="pgbulk-")
        p = Pipeline.from_sql(sql, name="pgbulk", storage_dir=storage, spark_conf={"sqlengine.spark.start": "lazy"})
        p.start()
        try:
            df = pd.DataFrame({"id": np.arange(rows, dtype=np.int64), "k": np.arange(rows, dtype=np.int32) % 1000,
                               "s": [f"row {i}" for i in range(rows)]})
            t0 = time.perf_counter()
            p.input_pandas("t", df)
            p.wait_for_idle()
            t1 = time.perf_counter()
            with pg.connect("bulk") as c:
                while (c.execute("SELECT to_regclass('public.sqlengine_sink_progress')").fetchone()[0] is None or
                       not c.execute("SELECT step FROM sqlengine_sink_progress").fetchall()):
                    time.sleep(0.05)
                t2 = time.perf_counter()
                n = c.execute("SELECT count(*) FROM big").fetchone()[0]
            assert n == rows, (n, rows)
        finally:
            p.stop()
            shutil.rmtree(storage, ignore_errors=True)
    return {"rows": rows, "step_s": t1 - t0, "sink_s": t2 - t1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--poll-ms", type=int, default=100, help="the source's poll_interval_ms (its default)")
    ap.add_argument("--bulk", type=int, default=1_000_000, help="rows of the bulk-load measurement (0: skip it)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "RESULTS.md"))
    a = ap.parse_args()
    at_start = machine()
    res = run(a.rates, a.seconds, a.warmup, a.poll_ms)
    lines = [f"Machine: {at_start}.", "",
             f"Command: `python -m benchmarks.postgres_cdc --rates {' '.join(map(str, a.rates))} --seconds {a.seconds:g} "
             f"--poll-ms {a.poll_ms}`. PostgreSQL 15 (Debian) started for the run, wal2json; a writer process commits "
             "every 10 ms (80% inserts, 10% updates, 10% deletes); latency = time the sink's transaction wrote the "
             "row in the output table minus `clock_timestamp()` at the source INSERT or UPDATE, both on the server's clock; the "
             "output table equalled the source table after each rate.", "",
             "| changes/s | rows measured | p50 latency | p99 latency | max |", "|---|---|---|---|---|"]
    for r in res:
        lines.append(f"| {r['rate']:,} | {r['rows']:,} | {r['p50']:.0f} ms | {r['p99']:.0f} ms | {r['max']:.0f} ms |")
    if a.bulk:
        b = bulk(a.bulk)
        total = b["step_s"] + b["sink_s"]
        lines += ["", f"Bulk load into a new output table (`--bulk {a.bulk}`): {b['rows']:,} rows pushed with "
                      f"`input_pandas` into a view whose `postgres_output` writes them in one transaction (COPY into a "
                      f"temporary table, then INSERT ... ON CONFLICT): {total:.1f} s from the push until all rows were "
                      f"committed in PostgreSQL ({b['rows'] / total:,.0f} rows/s), the engine's step included."]
    text = "\n".join(lines)
    print(text)
    if a.out:
        write_section(a.out, "postgres_cdc", "## PostgreSQL CDC end to end (COMMIT to row in the output table)\n\n" + text)


if __name__ == "__main__":
    main()
