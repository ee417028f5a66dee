"""Crash stress: a child pipeline fed continuously and SIGKILLed many times, then checked.

    python -m benchmarks.crash_stress [--kills 40] [--batches 200] [--seed 1]

Each round starts ``tests/support/crash_child.py`` on the same storage, waits until it is
feeding, then kills it with SIGKILL after a random delay (0.2-4 s); every fifth
round instead crashes it at a fixed point inside a step (SQLENGINE_CRASH_AT).  A
final round finishes the input; then the view, the table and the exactly-once
parquet sink are checked against a DuckDB recomputation (tests/support/crash_child.verify).
"""
from __future__ import annotations

import argparse
import random
import tempfile
import time

from sqlengine.state import faults
from tests.support import crash_child


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="crash-stress-")
    store, sink, acks = f"{root}/store", f"{root}/sink", f"{root}/acks"
    t0 = time.time()
    landed = 0
    for i in range(args.kills):
        if i % 5 == 4:
            point = faults.POINTS[rng.randrange(len(faults.POINTS))]
            code, _ = crash_child.run_child(store, sink, acks, args.batches, crash_at=f"{point}:+{rng.randint(1, 3)}")
            how = f"crash point {point}"
        else:
            delay = rng.uniform(0.2, 4.0)
            code, _ = crash_child.run_child(store, sink, acks, args.batches, kill_after=delay)
            how = f"SIGKILL after {delay:.1f}s"
        landed += code in (137, -9)
        print(f"round {i + 1}/{args.kills}: {how}: exit {code}; acknowledged batches "
              f"{len(crash_child.read_acks(acks))}/{args.batches}", flush=True)
    code, line = crash_child.run_child(store, sink, acks, args.batches, timeout=1800)
    problems = crash_child.verify(store, sink, acks, args.batches) if code == 0 else [f"final run: exit {code}"]
    print(f"kills attempted {args.kills}, landed mid-flight {landed}, final check: "
          f"{'OK' if not problems else problems}; {time.time() - t0:.0f} s")
    raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()
