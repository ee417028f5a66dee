"""Durability: restart from storage_dir, and crash recovery with the process killed at random
moments and at fixed points inside a step (mid-step, between state runs and commit, after commit)."""
import os
import random

import pandas as pd
import pytest

from sqlengine import Pipeline, PipelineError, faults

from . import crash_child

SQL = ("CREATE TABLE t (g INT, x INT);"
       "CREATE MATERIALIZED VIEW v AS SELECT g, SUM(x) AS s, MAX(x) AS m FROM t GROUP BY g;")


def test_restart_resumes_state_and_step_numbers(spark, tmp_path):
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    seen = []
    p.foreach_chunk("v", lambda c, seq: seen.append(seq))
    p.start()
    p.input_pandas("t", pd.DataFrame({"g": [1, 1, 2], "x": [5, 7, 1]}))
    p.wait_for_idle()
    cp = p.checkpoint()
    p.stop()
    assert cp == p.store.current.step and seen and max(seen) <= cp

    q = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    later = []
    q.foreach_chunk("v", lambda c, seq: later.append((seq, c.to_dict("records"))))
    q.start()
    assert sorted(map(tuple, (r.values() for r in q.query("SELECT * FROM v")))) == [(1, 12, 7), (2, 1, 1)]
    q.input_pandas("t", pd.DataFrame({"g": [1], "x": [7]}), delete=True)
    q.wait_for_idle()
    assert later and min(s for s, _ in later) > cp
    assert sorted(later[-1][1], key=lambda r: r["__weight"]) == [
        {"g": 1, "s": 12, "m": 7, "__weight": -1}, {"g": 1, "s": 5, "m": 5, "__weight": 1}]
    q.stop()


def test_unprocessed_input_is_replayed_after_forced_stop(spark, tmp_path):
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    p.start()
    p.wait_for_idle()
    p.pause()
    p.input_pandas("t", pd.DataFrame({"g": [3], "x": [9]}))      # acknowledged, not yet processed
    p.stop(force=True)
    q = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    q.start()
    q.wait_for_idle()
    assert list(q.query("SELECT * FROM v")) == [{"g": 3, "s": 9, "m": 9}]
    q.stop()


def test_changed_program_is_rejected_with_the_changed_objects(spark, tmp_path):
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    p.start()
    p.input_pandas("t", pd.DataFrame({"g": [1], "x": [1]}))
    p.stop()
    changed = SQL.replace("MAX(x)", "MIN(x)") + "CREATE VIEW w AS SELECT g FROM t;"
    q = Pipeline.from_sql(changed, storage_dir=store, spark=spark)
    with pytest.raises(PipelineError, match="changed objects: view v, view w"):
        q.start()


# 16 crash points hit inside the step thread (each followed by a restart on the same storage) and
# 4 child processes killed with SIGKILL at random moments: 20 kills.  benchmarks/crash_stress.py runs more.
CRASH_POINTS = [(point, k) for k in (1, 2, 3, 4) for point in faults.POINTS]
N_SIGKILLS = 4


def test_crash_recovery_exactly_once(spark, tmp_path):
    store, sink, acks = str(tmp_path / "store"), str(tmp_path / "sink"), str(tmp_path / "acks")
    batches = 100
    rng = random.Random(7)
    crashed = 0
    for point, k in CRASH_POINTS:
        faults.arm(point, k)           # armed before start: replay steps can crash too
        p = crash_child.open_pipeline(store, sink, spark=spark)
        try:
            crash_child.feed(p, acks, batches, limit=84)   # leave batches for the SIGKILL runs
        except PipelineError as e:
            assert "simulated crash" in str(e), e
            crashed += 1
        finally:
            faults.arm(None)
        # the crashed pipeline is abandoned as a killed process would be: no stop(), no cleanup
    assert crashed >= 14, f"only {crashed} of {len(CRASH_POINTS)} crash points were reached"
    killed = 0
    for _ in range(N_SIGKILLS):
        code, line = crash_child.run_child(store, sink, acks, batches, kill_after=rng.uniform(0.2, 2.0))
        killed += code in (137, -9)
    code, line = crash_child.run_child(store, sink, acks, batches)
    assert code == 0, f"final run failed: {line}"
    assert killed >= 1, "no SIGKILL landed while the child was feeding"

    problems = crash_child.verify(store, sink, acks, batches, spark=spark)
    assert not problems, problems
    print(f"crash points reached: {crashed}/{len(CRASH_POINTS)}, SIGKILLs landed: {killed}/{N_SIGKILLS}")
