"""Stress: SIGKILL the PostgreSQL change-data-capture crash child (tests/support/postgres_crash_child.py) many times
while a writer commits random transactions to its source tables, then run it to completion and verify.

    python -m benchmarks.postgres_crash_stress --kills 100

Prints the number of kills, where they landed and the problems ``verify`` found; exits 1 if it found any
(or a run to be killed ended by itself), 2 if PostgreSQL is unavailable.
"""
import argparse
import random
import tempfile
import time
from collections import Counter

from tests.support import postgres_crash_child as child
from tests.support.postgres_server import PostgresServer, PostgresUnavailable


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    try:
        pg = PostgresServer().start()
    except PostgresUnavailable as e:
        print(f"PostgreSQL unavailable: {e}")
        raise SystemExit(2)
    problems = []
    try:
        with tempfile.TemporaryDirectory() as d:
            storage = f"{d}/store"
            uri, w = child.create_tables(pg, "crash", seed=a.seed)
            writer = child.WriterThread(w).start()
            t0, killed, phases, errors = time.time(), 0, Counter(), set()
            try:
                for i in range(a.kills):
                    code, out = child.run_child(uri, storage, kill_after=child.kill_time(rng, i, a.kills))
                    killed += code == -9
                    phases[child.phase(out)] += 1
                    errors |= child.errors_seen(out)
                    if code != -9:
                        problems.append(f"run {i} ended by itself with {code}: {out[-600:]}")
                    if (i + 1) % 10 == 0:
                        print(f"  {i + 1} runs, {time.time() - t0:.0f} s, writer: {w.transactions} transactions",
                              flush=True)
            finally:
                writer.stop()
            until = child.final_transaction(w)
            code, out = child.run_child(uri, storage, until=until)
            if code != 0 or "done" not in out:
                problems.append(f"the final run failed ({code}): {out[-3000:]}")
            else:
                problems += child.verify(uri, storage, until)
            rows = {t: w.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("orders", "customers")}
            w.conn.close()
            print(f"kills: {a.kills} ({killed} killed during the run; where: {dict(phases)}), writer: "
                  f"{w.transactions} transactions, {w.changes} changes, source rows {rows}, "
                  f"{time.time() - t0:.0f} s")
            print(f"connector errors seen (retried): {sorted(errors) or 'none'}")
            print(f"problems: {problems or 'none'}")
    finally:
        pg.stop()
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
