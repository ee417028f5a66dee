"""Stress: SIGKILL the connector crash child (tests/support/connector_crash_child.py) many times, then verify.

    python -m benchmarks.connector_crash_stress --kills 100 --batches 400 [--files]

``--files``: the input arrives as files in a followed ``file_input`` directory while the child is killed.
"""
import argparse
import os
import random
import tempfile
import threading
import time

from tests.support import connector_crash_child as child


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--files", action="store_true", help="feed a followed file_input directory")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as d:
        storage, out, inbox = f"{d}/store", f"{d}/out", (f"{d}/inbox" if a.files else None)
        if inbox:
            os.makedirs(inbox)
            gap = a.kills * 1.9 / a.batches   # files keep arriving during most of the kills

            def producer():
                for i, recs in enumerate(child.batches(a.batches)):
                    child.publish(inbox, i, recs)
                    time.sleep(gap)
            threading.Thread(target=producer, daemon=True).start()
        t0, killed = time.time(), 0
        for i in range(a.kills):
            killed += child.run_child(storage, out, a.batches, kill_after=rng.uniform(0.8, 3.0), inbox=inbox) == -9
        while inbox and len(os.listdir(inbox)) < a.batches:
            time.sleep(0.1)
        child.run_child(storage, out, a.batches, inbox=inbox)
        problems = child.verify(storage, out, a.batches, inbox=inbox)
        print(f"kills: {a.kills} ({killed} during the run), batches: {a.batches}, "
              f"{time.time() - t0:.0f} s, problems: {problems or 'none'}")
        if problems:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
