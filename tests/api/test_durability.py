"""Durability: restart from storage_dir, and crash recovery with the process killed at random
moments and at fixed points inside a step (mid-step, between state runs and commit, after commit)."""
import os
import random

import pandas as pd
import pytest

from sqlengine import InputError, Pipeline, PipelineError
from sqlengine.state import faults

from ..support import crash_child

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


def test_changed_table_is_rejected_naming_it(spark, tmp_path):
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    p.start()
    p.input_pandas("t", pd.DataFrame({"g": [1], "x": [1]}))
    p.stop()
    changed = SQL.replace("x INT", "x BIGINT") + "CREATE VIEW w AS SELECT g FROM t;"
    q = Pipeline.from_sql(changed, storage_dir=store, spark=spark)
    with pytest.raises(PipelineError, match="changed or removed tables: t .*changed objects: table t, view v, view w"):
        q.start()


TABLES = "CREATE TABLE t (g INT, x INT); CREATE TABLE u (g INT, name VARCHAR);"
KEPT = "CREATE MATERIALIZED VIEW v AS SELECT g, SUM(x) AS s, MAX(x) AS m FROM t GROUP BY g;"
GONE = "CREATE MATERIALIZED VIEW gone AS SELECT t.x, u.name FROM t JOIN u ON t.g = u.g;"
ADDED = ("CREATE MATERIALIZED VIEW w AS SELECT u.name, COUNT(*) AS n, MIN(t.x) AS lo FROM t JOIN u ON t.g = u.g "
         "GROUP BY u.name;"
         "CREATE MATERIALIZED VIEW tot AS SELECT COUNT(*) AS n, SUM(x) AS s FROM t WHERE x > 100;")
W_SQL = "SELECT u.name, COUNT(*) AS n, MIN(t.x) AS lo FROM t JOIN u ON t.g = u.g GROUP BY u.name"
TOT_SQL = "SELECT COUNT(*) AS n, SUM(x) AS s FROM t WHERE x > 100"


def bag_of(p, sql):
    return sorted(tuple(r.values()) for r in p.query(sql))


def test_program_change_backfills_new_views_drops_removed_and_keeps_unchanged(spark, tmp_path):
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(TABLES + KEPT + GONE, storage_dir=store, spark=spark)
    p.start()
    p.input_pandas("t", pd.DataFrame({"g": [1, 1, 2, 3], "x": [5, 7, 1, 9]}))
    p.input_pandas("u", pd.DataFrame({"g": [1, 2, 2], "name": ["a", "b", "bb"]}))
    p.input_pandas("t", pd.DataFrame({"g": [3], "x": [9]}), delete=True)
    p.wait_for_idle()
    v_before = bag_of(p, "SELECT * FROM v")
    eng, runs = p.engine, p.store.current.runs
    v_keys = {eng.keys[o.id] for o in p.program.circuit.upstream(p.program.circuit.outputs["v"].integral)
              if o.owns_state}
    gone_key = eng.keys[p.program.circuit.outputs["gone"].integral]
    v_runs = {k: runs[k] for k in v_keys}
    assert gone_key in runs
    step = p.checkpoint()
    p.stop()

    q = Pipeline.from_sql(TABLES + ADDED + KEPT, storage_dir=store, spark=spark)
    seen = {"v": [], "w": [], "tot": []}
    for view in seen:
        q.foreach_chunk(view, lambda c, seq, view=view: seen[view].append((seq, c.to_dict("records"))))
    q.start()
    q.wait_for_idle()
    m = q.store.current
    assert m.step == step + 1                                     # the backfill is one committed step
    assert {k: m.runs[k] for k in v_keys} == v_runs                # v kept its state files untouched
    assert gone_key not in m.runs
    assert bag_of(q, "SELECT * FROM v") == v_before and seen["v"] == []
    assert bag_of(q, "SELECT * FROM w") == bag_of(q, W_SQL) == [("a", 2, 5), ("b", 1, 1), ("bb", 1, 1)]
    assert bag_of(q, "SELECT * FROM tot") == [(0, None)]
    assert [s for s, _ in seen["w"]] == [step + 1] and len(seen["w"][0][1]) == 3
    with pytest.raises(Exception, match="gone"):
        list(q.query("SELECT * FROM gone"))
    q.input_pandas("t", pd.DataFrame({"g": [2, 1], "x": [0, 500]}))
    q.input_pandas("u", pd.DataFrame({"g": [1], "name": ["a"]}), delete=True)
    q.wait_for_idle()
    assert bag_of(q, "SELECT * FROM w") == bag_of(q, W_SQL) == [("b", 2, 0), ("bb", 2, 0)]
    assert bag_of(q, "SELECT * FROM tot") == bag_of(q, TOT_SQL) == [(1, 500)]
    assert bag_of(q, "SELECT * FROM v") == bag_of(q, "SELECT g, SUM(x), MAX(x) FROM t GROUP BY g")
    assert seen["v"] and min(s for s, _ in seen["v"]) > step + 1
    assert not os.path.exists(os.path.join(q.store.root, gone_key))   # no manifest kept lists it any more
    q.stop()
    again = Pipeline.from_sql(TABLES + ADDED + KEPT, storage_dir=store, spark=spark)   # unchanged now
    again.start()
    assert again.store.current.step == q.store.current.step
    again.stop()


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


def test_full_or_read_only_storage_rejects_input_cleanly(make_pipeline, tmp_path):
    import errno
    p = make_pipeline(SQL)
    p.input_pandas("t", pd.DataFrame({"g": [1], "x": [1]}))
    p.wait_for_idle()
    before, seq = list(p.query("SELECT * FROM v")), p.log.next_seq
    for err, name in ((errno.ENOSPC, "ENOSPC"), (errno.EROFS, "EROFS")):
        faults.inject_io("log_write", err)
        try:
            with pytest.raises(InputError) as e:
                p.input_pandas("t", pd.DataFrame({"g": [2], "x": [2]}))
        finally:
            faults.clear_io()
        assert name in str(e.value) and p.log.root in str(e.value)
        assert not [n for n in os.listdir(p.log.root) if n.endswith(".tmp")] and p.log.next_seq == seq
    p.wait_for_idle()
    assert list(p.query("SELECT * FROM v")) == before
    if os.geteuid() != 0:                   # a real read-only directory (root ignores the permission bits)
        os.chmod(p.log.root, 0o555)
        try:
            with pytest.raises(InputError, match="EACCES"):
                p.input_pandas("t", pd.DataFrame({"g": [2], "x": [2]}))
        finally:
            os.chmod(p.log.root, 0o755)
    p.input_pandas("t", pd.DataFrame({"g": [2], "x": [2]}))     # the fault cleared: input goes on
    p.wait_for_idle()
    assert sorted(map(tuple, (r.values() for r in p.query("SELECT * FROM v")))) == [(1, 1, 1), (2, 2, 2)]


@pytest.mark.parametrize("point, times", [("state_commit", None), ("state_write", 2)])
def test_step_whose_commit_fails_is_retried_and_delivers_once(make_pipeline, monkeypatch, point, times):
    import time
    from sqlengine import controller
    monkeypatch.setattr(controller, "STORAGE_RETRY_S", 0.2)
    p = make_pipeline(SQL)
    chunks = []
    p.foreach_chunk("v", lambda c, seq: chunks.append((seq, c.to_dict("records"))))
    p.input_pandas("t", pd.DataFrame({"g": [1], "x": [1]}))
    p.wait_for_idle()
    step = p.status()["step"]
    faults.inject_io(point, times=times)
    try:
        p.input_pandas("t", pd.DataFrame({"g": [1, 2], "x": [5, 3]}))     # acknowledged: in the log
        deadline = time.monotonic() + 120
        while "ENOSPC" not in (p.status()["storage_error"] or "") and time.monotonic() < deadline:
            time.sleep(0.05)
        st = p.status()
        assert "did not commit" in st["storage_error"] and p.store.root in st["storage_error"]
        assert st["step"] == step and st["state"] == "running" and len(chunks) == 1
        assert list(p.query("SELECT * FROM v")) == [{"g": 1, "s": 1, "m": 1}]
    finally:
        faults.clear_io()
    p.wait_for_idle(timeout_s=120)
    assert len(chunks) == 2 and chunks[1][0] == step + 1
    assert sorted(map(tuple, (r.values() for r in p.query("SELECT * FROM v")))) == [(1, 6, 5), (2, 3, 3)]
    st = p.status()
    assert st["storage_error"] is None and st["rows_in"] == {"t": 3} and st["step"] == step + 1


def test_a_replayed_step_does_not_read_the_failed_attempts_cache_sidecars(spark, tmp_path, monkeypatch):
    """Big runs leave memory-mapped sidecars beside their parquet file.  A step that dies after writing its
    runs is replayed with more input under the same run names: the first attempt's sidecars must go, or a
    restart would read the old rows."""
    from sqlengine.state import cache
    monkeypatch.setattr(cache, "SIDECAR_ROWS", 1)
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    p.start()
    p.wait_for_idle()
    faults.set_base(p.store.current.step)
    faults.arm("runs_written", 1)
    try:
        p.input_pandas("t", pd.DataFrame({"g": [1], "x": [5]}))
        with pytest.raises(BaseException):
            p.wait_for_idle(timeout_s=60)
    finally:
        faults.arm(None)
    q = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    q.input_pandas("t", pd.DataFrame({"g": [2], "x": [7]}))   # the replayed step takes both batches
    q.start()
    q.wait_for_idle()
    q.stop()
    r = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)   # a new cache: reads the sidecars
    r.start()
    r.wait_for_idle()
    assert sorted(tuple(x.values()) for x in r.query("SELECT * FROM t")) == [(1, 5), (2, 7)]
    assert sorted(tuple(x.values()) for x in r.query("SELECT * FROM v")) == [(1, 5, 5), (2, 7, 7)]
    r.stop()
