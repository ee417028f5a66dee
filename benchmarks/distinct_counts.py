"""A small change to a large group: COUNT(DISTINCT x) kept per group and value (rule ``distinct_aggregates``)
against the same view recomputed from the group's rows (the rule switched off), issue 33.

A view ``SELECT g, COUNT(*), COUNT(DISTINCT x), COUNT(DISTINCT x) FILTER (WHERE y > 0) FROM t GROUP BY g`` over
groups of ``--group`` rows (Nexmark q15's shape: few groups, many rows each).  Each step inserts ``--change`` rows
into one group and deletes as many of its rows; the step time is from the first input call to
``wait_for_idle`` (medians), and every step's view is checked against DuckDB over the rows kept here.  Both
variants run in this process, one after the other, on the driver executor.

    .venv/bin/python -m benchmarks.distinct_counts --groups 4 --group 10000 100000 1000000 --steps 7 [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa

from sqlengine import Pipeline

from benchmarks.report import date_and_machine

SQL = ("CREATE TABLE t (id BIGINT, g INT, x BIGINT, y INT);"
       "CREATE MATERIALIZED VIEW v AS SELECT g, COUNT(*) AS n, COUNT(DISTINCT x) AS dx, "
       "COUNT(DISTINCT x) FILTER (WHERE y > 0) AS dxp FROM t GROUP BY g;")
VIEW = "SELECT g, COUNT(*) AS n, COUNT(DISTINCT x) AS dx, COUNT(DISTINCT x) FILTER (WHERE y > 0) AS dxp FROM t GROUP BY g"
VARIANTS = {"kept per group and value (distinct_aggregates)": "",
            "recomputed from the group's rows (rule off)": "-distinct_aggregates"}


def _rows(ids: np.ndarray, groups: int, values: int) -> pa.Table:
    """Rows ``ids``, in group ``id % groups``, of about ``values`` distinct x per group."""
    return pa.table({"id": ids, "g": (ids % groups).astype(np.int32), "x": (ids * 7919) % (values * groups),
                     "y": ((ids % 5) - 2).astype(np.int32)})


def run(rules: str, groups: int, size: int, change: int, steps: int) -> list:
    old = os.environ.get("SQLENGINE_RULES")
    os.environ["SQLENGINE_RULES"] = rules
    try:
        n = groups * size
        values = max(10, size // 3)
        rows = _rows(np.arange(n, dtype=np.int64), groups, values)
        times = []
        with tempfile.TemporaryDirectory() as d:
            p = Pipeline.from_sql(SQL, storage_dir=d, spark_conf={"sqlengine.spark.start": "lazy"})
            p.start()
            mode = [line for line in p.explain("v").splitlines() if " aggregate " in line]
            p.input_arrow("t", rows)
            p.wait_for_idle()
            live = np.ones(n, dtype=bool)
            for s in range(steps + 1):   # the first step is a warm-up
                g = s % groups
                new = _rows(np.arange(n + s * change, n + (s + 1) * change, dtype=np.int64), groups, values)
                new = new.set_column(1, "g", pa.array(np.full(change, g, np.int32)))
                gone_ids = np.flatnonzero(live & (rows.column("g").to_numpy() == g))[:change]
                live[gone_ids] = False
                t0 = time.perf_counter()
                with p.transaction():
                    p.input_arrow("t", new)
                    p.input_arrow("t", rows.take(pa.array(gone_ids)), delete=True)
                p.wait_for_idle()
                if s:
                    times.append(time.perf_counter() - t0)
                rows = pa.concat_tables([rows, new])
                live = np.concatenate([live, np.ones(change, dtype=bool)])
            con = duckdb.connect()
            con.register("kept", rows.filter(pa.array(live)))
            want = sorted(con.execute(VIEW.replace("FROM t", "FROM kept")).fetchall())
            got = sorted(tuple(r.values()) for r in p.query("SELECT * FROM v"))
            assert got == want, f"{rules or 'all rules'}: the view differs from DuckDB"
            p.stop()
        return times, mode
    finally:
        if old is None:
            os.environ.pop("SQLENGINE_RULES", None)
        else:
            os.environ["SQLENGINE_RULES"] = old


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group", type=int, nargs="+", default=[10000, 100000, 1000000])
    ap.add_argument("--change", type=int, default=100, help="rows inserted and rows deleted per step")
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for size in a.group:
        base = None
        for name, rules in VARIANTS.items():
            times, mode = run(rules, a.groups, size, a.change, a.steps)
            t = statistics.median(times) * 1000
            base = t if base is None else base
            how = "accumulate" if "mode=accumulate" in mode[0] else "recompute"
            rows.append(f"| {size:,} | {name} | {how} | {t:.1f} | {t / base:.2f} |")
            print(rows[-1], flush=True)
    text = "\n".join([
        date_and_machine(),
        f"- Command: `python -m benchmarks.distinct_counts --groups {a.groups} --group "
        f"{' '.join(map(str, a.group))} --change {a.change} --steps {a.steps}` (a warm-up step first; medians; "
        "each step inserts and deletes that many rows of one group; the views checked against DuckDB at the end).",
        "", "| rows per group | COUNT(DISTINCT) | aggregate mode | step, ms (median) | ÷ kept per value |",
        "|---:|---|---|---:|---:|", *rows])
    print(text)
    if a.out:
        from benchmarks.report import write_section
        write_section(a.out, "distinct_counts", text)


if __name__ == "__main__":
    main()
