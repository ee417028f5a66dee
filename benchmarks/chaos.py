"""The chaos run of ``tests/support/chaos.py`` for as long as asked (``tests/stress/test_chaos.py`` runs it for a minute in
CI): ``sqlengine run`` killed and restarted under a supervisor loop, sometimes before the old process has
exited, while the Kafka broker and PostgreSQL go down and come back, the producer adds a field mid-stream
and malformed messages are mixed in.

    .venv/bin/python -m benchmarks.chaos --minutes 10 [--seed 1] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from tests.support import chaos


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.chaos")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="directory to keep the storage and the runs' logs in")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="chaos-")
    os.makedirs(root, exist_ok=True)
    t0 = time.time()
    r = chaos.run(root, a.minutes * 60, seed=a.seed)
    out = {"seconds": round(time.time() - t0, 1), "chaos_minutes": a.minutes, "seed": a.seed, "lives": r.lives,
           "kills": r.kills, "outages": r.outages, "messages": r.messages, "malformed": r.malformed,
           "pg_transactions": r.transactions, "steps": r.steps, "problems": len(r.problems), **r.figures}
    print(json.dumps(out))
    for p in r.problems:
        print("PROBLEM:", p)
    if not a.keep and not r.problems:
        shutil.rmtree(root, ignore_errors=True)
    raise SystemExit(1 if r.problems else 0)


if __name__ == "__main__":
    main()
