"""SIGKILL a pipeline reading PostgreSQL by change data capture and writing PostgreSQL tables, at random
moments (at start-up and during the snapshot, during change capture, during sink writes: see
``postgres_crash_child.kill_time``) while a writer keeps committing random transactions; restart it each
time.  After a final clean run every source change is applied once, the views equal DuckDB's
recomputation, the output tables equal the views and no replication slot leaked.
(``benchmarks/postgres_crash_stress.py`` runs the same with 100 kills.)"""
import os
import random
from collections import Counter

import pytest

from tests.support import postgres_crash_child as child

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

KILLS = int(os.environ.get("POSTGRES_CRASH_KILLS", "10"))


def test_kills_during_postgres_cdc_and_sink_writes(postgres, tmp_path):
    storage = str(tmp_path / "store")
    uri, w = child.create_tables(postgres, "crash", seed=7)
    writer = child.WriterThread(w).start()
    rng = random.Random(8)
    killed, exited, phases, errors = 0, [], Counter(), set()
    try:
        for i in range(KILLS):
            code, out = child.run_child(uri, storage, kill_after=child.kill_time(rng, i, KILLS))
            killed += code == -9
            phases[child.phase(out)] += 1
            errors |= child.errors_seen(out)
            if code != -9:   # a run to be killed never ends by itself: it failed
                exited.append(f"run {i} exited with {code}:\n{out[-2000:]}")
    finally:
        writer.stop()
    print(f"kills: {killed} of {KILLS}, where: {dict(phases)}, writer: {w.transactions} transactions, "
          f"connector errors (retried): {sorted(errors)}")
    assert not exited, exited
    until = child.final_transaction(w)
    code, out = child.run_child(uri, storage, until=until)
    assert code == 0 and "done" in out, f"the final run failed ({code}):\n{out[-3000:]}"
    problems = child.verify(uri, storage, until)
    w.conn.close()
    assert not problems, problems
    assert killed >= KILLS // 2, f"only {killed} of {KILLS} runs were killed before they finished"
    assert w.transactions > KILLS, "the writer committed too little"
