"""Entry point of the benchmarks: ``python -m benchmarks.run`` (also ``./run.sh bench``).

    python -m benchmarks.run [--sizes 100000,1000000] [--change 100] [--steps 7]
                             [--out benchmarks/RESULTS.md] [--quick]

``--quick`` is a smoke run: sizes=10000 and steps=3.  Before measuring, every workload runs
once untimed at N=10,000 (JVM/JIT and Spark code-generation warm-up) unless ``--no-warmup``.
"""
from __future__ import annotations

import argparse
import sys

from . import step_latency


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                 description="Step latency of incremental views vs. full recomputation "
                                             "(DuckDB and Spark batch).")
    ap.add_argument("--sizes", default="100000,1000000",
                    help="comma-separated table sizes N (rows of the fact table); default 100000,1000000")
    ap.add_argument("--change", type=int, default=100,
                    help="rows changed per step: half inserts, half deletes of existing rows (default 100)")
    ap.add_argument("--steps", type=int, default=7,
                    help="timed steps per workload and size; the first is a warm-up (default 7)")
    ap.add_argument("--out", default="benchmarks/RESULTS.md", help="Markdown report (default benchmarks/RESULTS.md)")
    ap.add_argument("--quick", action="store_true", help="smoke run: sizes=10000, steps=3")
    ap.add_argument("--workloads", default="groupby,minmax,join,q3",
                    help="comma-separated subset of groupby,minmax,join,q3 (default all)")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the untimed process warm-up (every workload once at N=10,000) before measuring")
    ap.add_argument("--seed", type=int, default=42, help="seed of the generated data (default 42)")
    ap.add_argument("--push", choices=("calls", "transaction"), default="calls",
                    help="how a change is pushed: its inserts and its deletes as two input calls (default), or "
                         "the two calls in one Pipeline.transaction() (one step)")
    ap.add_argument("--load", choices=("calls", "transaction"), default="calls",
                    help="how the tables are loaded: input calls of 500,000 rows, stepped as they come (default), "
                         "or all of them in one Pipeline.transaction() (one step)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes = "10000"
        args.steps = 3
    try:
        args.sizes = [int(s.replace("_", "")) for s in str(args.sizes).split(",") if s.strip()]
    except ValueError:
        ap.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if not args.sizes or any(n < 10 for n in args.sizes):
        ap.error("--sizes needs at least one size >= 10")
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first timed step is discarded as warm-up)")
    if args.change < 2:
        ap.error("--change must be >= 2 (half inserts, half deletes)")
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in args.workloads if w not in step_latency.WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(step_latency.WORKLOADS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return step_latency.main(args, argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
