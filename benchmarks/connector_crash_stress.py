"""Stress: SIGKILL the connector crash child (tests/connector_crash_child.py) many times, then verify.

    python -m benchmarks.connector_crash_stress --kills 100 --batches 400
"""
import argparse
import random
import tempfile
import time

from tests import connector_crash_child as child


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as d:
        storage, out = f"{d}/store", f"{d}/out"
        t0, killed = time.time(), 0
        for i in range(a.kills):
            killed += child.run_child(storage, out, a.batches, kill_after=rng.uniform(0.8, 3.0)) == -9
        child.run_child(storage, out, a.batches)
        problems = child.verify(storage, out, a.batches)
        print(f"kills: {a.kills} ({killed} during the run), batches: {a.batches}, "
              f"{time.time() - t0:.0f} s, problems: {problems or 'none'}")
        if problems:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
