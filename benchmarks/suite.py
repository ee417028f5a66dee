"""The whole benchmark suite at a chosen scale: ``python -m benchmarks.suite --scale full`` (``./run.sh bench``).

Runs, one after the other in this process, and each writing its own section of the report:

- step latency (``benchmarks.run``): a 100-row change against N rows, for the GROUP BY, MIN/MAX, join and
  TPC-H q3-shaped views, next to DuckDB and Spark batch recomputing the view, plus ad-hoc query latency,
  memory peaks and state size per operator;
- Nexmark throughput (``benchmarks.nexmark_throughput``): events fed in steps, next to Spark Structured
  Streaming and Flink SQL on the same events.

Scales: ``smoke`` (seconds; what CI runs, no figures worth reading), ``small`` (minutes), ``full`` (the
issue's scale: 1M and 10M rows, 10M Nexmark events; about an hour on 2 cores).
"""
from __future__ import annotations

import argparse
import sys

SCALES = {
    "smoke": (["--sizes", "2000", "--steps", "2", "--change", "10", "--no-warmup"],
              ["--quick", "--peers", "none"]),
    "small": (["--sizes", "100000,1000000", "--steps", "7"],
              ["--events", "1000000", "--step", "100000"]),
    "full": (["--sizes", "1000000,10000000", "--steps", "7"],
             ["--events", "10000000", "--step", "100000"]),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--out", default="benchmarks/RESULTS.md")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: latency, nexmark")
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    latency_args, nexmark_args = SCALES[args.scale]
    rc = 0
    if "latency" not in skip:
        from . import run
        rc |= run.main(latency_args + ["--out", args.out])
    if "nexmark" not in skip:
        from . import nexmark_throughput
        rc |= nexmark_throughput.main(nexmark_args + ["--out", args.out])
    return rc


if __name__ == "__main__":
    sys.exit(main())
