"""Window functions over orders with ties stay consistent step after step.  A window's changes are its results
over the touched partitions after a step minus before it, each evaluated afresh; a tie ordered differently in
the two evaluations used to retract rows that were never emitted (the view then held neither answer).  The
executors now give order-sensitive calls a total order (``planner.bind_window.total_order``).  Checked with
invariants that hold whatever the tie order: per partition, LAG's values are the sorted times shifted by one
and ROW_NUMBER's are 1..n, and every input row appears once."""
import random
from collections import Counter

import pandas as pd

PROGRAM = ("CREATE TABLE t (k INT, ts INT, v INT);\n"
           "CREATE MATERIALIZED VIEW w AS SELECT k, ts, v, LAG(ts) OVER (PARTITION BY k ORDER BY ts) AS prev, "
           "ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM t;")


def test_lag_and_row_number_over_ties(make_pipeline):
    p = make_pipeline(PROGRAM)
    rng = random.Random(0)
    live = []
    for step in range(30):
        ins = [(rng.randrange(2), rng.randrange(6), rng.randrange(50)) for _ in range(rng.randint(1, 4))]
        p.input_pandas("t", pd.DataFrame(ins, columns=["k", "ts", "v"]))
        live += ins
        if live and rng.random() < 0.4:
            gone = live.pop(rng.randrange(len(live)))
            p.input_pandas("t", pd.DataFrame([gone], columns=["k", "ts", "v"]), delete=True)
        p.wait_for_idle()
        rows = list(p.query("SELECT * FROM w"))
        assert Counter((r["k"], r["ts"], r["v"]) for r in rows) == Counter(live), f"step {step}"
        for k in (0, 1):
            times = sorted(ts for kk, ts, _ in live if kk == k)
            mine = [r for r in rows if r["k"] == k]
            assert Counter(r["prev"] for r in mine) == Counter(([None] + times[:-1]) if times else []), f"step {step}"
            assert sorted(r["rn"] for r in mine) == list(range(1, len(times) + 1)), f"step {step}"
