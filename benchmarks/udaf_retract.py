"""A one-row change to a large group: a Python aggregate with ``retract`` against one without (issue 31).

A view ``SELECT g, f(x), COUNT(*) FROM t GROUP BY g`` over groups of ``--group`` rows, with ``f`` a Python
aggregate summing integers: without ``retract`` a step recomputes each touched group from its stored rows;
with it the group's stored accumulator takes the step's rows alone (``mode=retract``); ``SUM(x)`` (per-group
sums, the engine's own) is the reference.  Each step inserts one row into one group and deletes another row
of it; the step time is from the call to ``wait_for_idle`` (medians), and every step's view is checked against
the sums kept here.

    .venv/bin/python -m benchmarks.udaf_retract --groups 10 --group 1000 10000 100000 --steps 7 [--out FILE]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import sqlengine
from sqlengine import Pipeline

from benchmarks.report import date_and_machine


class _Sum:
    def create(self):
        return 0

    def accumulate(self, acc, x):
        return acc + (x or 0)

    def finish(self, acc):
        return acc


class _RetractingSum(_Sum):
    def retract(self, acc, x):
        return acc - (x or 0)


recomputed = sqlengine.udaf("BIGINT", ["BIGINT"], name="recomputed")(_Sum)
retracting = sqlengine.udaf("BIGINT", ["BIGINT"], name="retracting")(_RetractingSum)
VARIANTS = {"Python aggregate, no retract (recomputed)": "recomputed(x)",
            "Python aggregate with retract": "retracting(x)", "SUM (built in)": "SUM(x)"}


def _row(i: int, g: int, x: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "g": pa.array([g], pa.int32()), "x": pa.array([x], pa.int64())})


def run(call: str, groups: int, size: int, steps: int) -> list:
    sql = ("CREATE TABLE t (id BIGINT, g INT, x BIGINT);"
           f"CREATE MATERIALIZED VIEW v AS SELECT g, {call} AS s, COUNT(*) AS n FROM t GROUP BY g;")
    n = groups * size
    ids = np.arange(n, dtype=np.int64)
    xs = (ids * 7919) % 1000
    sums = {g: int(xs[ids % groups == g].sum()) for g in range(groups)}
    times = []
    with tempfile.TemporaryDirectory() as d:
        p = Pipeline.from_sql(sql, storage_dir=d, udfs=[recomputed, retracting],
                              spark_conf={"sqlengine.spark.start": "lazy"})
        p.start()
        p.input_arrow("t", pa.table({"id": ids, "g": (ids % groups).astype(np.int32), "x": xs}))
        p.wait_for_idle()
        for s in range(steps + 1):   # the first step is a warm-up
            g, gone = s % groups, s * groups + (s % groups)   # a row of group g
            t0 = time.perf_counter()
            with p.transaction():
                p.input_arrow("t", _row(n + s, g, s + 1))
                p.input_arrow("t", _row(gone, g, int(xs[gone])), delete=True)
            p.wait_for_idle()
            if s:
                times.append(time.perf_counter() - t0)
            sums[g] += s + 1 - int(xs[gone])
            got = {r["g"]: r["s"] for r in p.query("SELECT g, s FROM v")}
            assert got == sums, f"{call}: the view differs from the sums after step {s}"
        assert ("mode=retract" in p.explain("v")) == call.startswith("retracting"), p.explain("v")
        p.stop()
    return times


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--group", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for size in a.group:
        base = None
        for name, call in VARIANTS.items():
            t = statistics.median(run(call, a.groups, size, a.steps)) * 1000
            base = t if base is None else base
            rows.append(f"| {size:,} | {name} | {t:.1f} | {t / base:.3f} |")
            print(rows[-1], flush=True)
    text = "\n".join([
        date_and_machine(),
        f"- Command: `python -m benchmarks.udaf_retract --groups {a.groups} --group "
        f"{' '.join(map(str, a.group))} --steps {a.steps}` (a warm-up step first; medians).", "",
        "| rows per group | aggregate | step, ms (median) | ÷ recomputed |", "|---:|---|---:|---:|", *rows])
    print(text)
    if a.out:
        from benchmarks.report import write_section
        write_section(a.out, "udaf_retract", text)


if __name__ == "__main__":
    main()
