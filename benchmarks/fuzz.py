"""Long differential fuzzing runs: ``python -m benchmarks.fuzz --seeds 0:20000 [--spark]``.

Each seed's program (``tests.fuzz.generator``) runs on the engine and is checked against DuckDB after every step
(``tests.fuzz.runner``).  A failure is shrunk (``tests.fuzz.shrink``) and saved under ``tests/fuzz/regressions/``
(``tests/executor/test_fuzz.py`` replays it); only the first few of each failure kind are shrunk and saved.  Prints the
rate (programs per minute), the failures with their kinds, and the engine's reasons for the views it did not
support.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:200", help="a range lo:hi of seeds (default 0:200)")
    ap.add_argument("--spark", action="store_true", help="run every step on Spark (tests.fuzz.runner.run with a session)")
    ap.add_argument("--shrink-budget", type=float, default=240.0, help="seconds to shrink one failure (default 240)")
    ap.add_argument("--save-per-kind", type=int, default=2,
                    help="failures of one kind to shrink and save (default 2; 0: none)")
    ap.add_argument("--out", default=None, help="directory for regressions (default tests/fuzz/regressions)")
    args = ap.parse_args(argv)
    lo, hi = args.seeds.split(":")
    args.seeds = range(int(lo), int(hi))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.fuzz import saved
    from tests.fuzz.generator import generate
    from tests.fuzz.runner import run
    from tests.fuzz.shrink import shrink
    spark = None
    if args.spark:
        from sqlengine.executor.session import get_spark
        spark = get_spark({"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "2g"})
    executor = "spark" if args.spark else "driver"
    kinds: collections.Counter = collections.Counter()
    unsupported: collections.Counter = collections.Counter()
    totals: collections.Counter = collections.Counter()
    saved_per_kind: collections.Counter = collections.Counter()
    t0, run_s = time.time(), 0.0
    for n, seed in enumerate(args.seeds, 1):
        program = generate(seed)
        t1 = time.time()
        o = run(program, spark=spark)
        run_s += time.time() - t1
        kinds[o.failure or "ok"] += 1
        totals["views"] += len(program.views)
        totals["views checked (view x step)"] += o.views_checked
        totals["steps"] += o.steps_run
        totals["expected rows compared"] += o.rows_compared
        totals["DuckDB run-time errors"] += o.duck_runtime_errors
        totals["view checks left out after row errors"] += o.skipped_after_row_errors
        totals["views both reject"] += o.invalid
        for u in o.unsupported:
            unsupported[u[:100]] += 1
        if o.failure:
            print(f"seed {seed}: {o.failure} (view {o.view}, step {o.step}): {o.detail[:300]}", flush=True)
            if saved_per_kind[o.failure] < args.save_per_kind:
                saved_per_kind[o.failure] += 1
                small = shrink(program, o.signature(), budget_s=args.shrink_budget, spark=spark)
                again = run(small, spark=spark)
                name = f"{o.failure}_{executor}_{seed}"
                base = saved.save(name, small, again.failure or o.failure, again.detail or o.detail, executor,
                                  **({"directory": args.out} if args.out else {}))
                print(f"  shrunk to {base}.sql:\n    " + small.sql().replace("\n", "\n    "), flush=True)
        if n % 20 == 0:
            print(f"[{n} programs, {n / (time.time() - t0) * 60:.1f}/min] {dict(kinds)}", flush=True)
    n = len(args.seeds)
    print(f"\n{n} programs (seeds {args.seeds.start}:{args.seeds.stop}, {executor}) in {time.time() - t0:.0f} s: "
          f"{n / max(run_s, 1e-9) * 60:.1f} programs/minute (running and checking, without shrinking)")
    print("outcomes:", dict(kinds))
    print("totals:", dict(totals))
    print("views the engine rejects and DuckDB accepts (unsupported), by reason:")
    for u, k in unsupported.most_common(25):
        print(f"  {k:5d}  {u}")
    return 1 if any(k != "ok" for k in kinds) else 0


if __name__ == "__main__":
    sys.exit(main())
