"""Row errors: a row whose expression fails at run time stays out of its view, is recorded in
``sqlengine_errors`` and counted in ``status()["errors"]``; the pipeline and the other views go on.

The oracle is DuckDB recomputing each view from scratch over the rows for which the view's expressions
do not fail (``TRY``), after every step of random inserts and deletes.
"""
import json
import os
import subprocess
import sys

import duckdb
import pandas as pd
import pytest
from hypothesis import given, strategies as st

from sqlengine import Pipeline
from sqlengine.state import faults

SCHEMA = "CREATE TABLE t (id BIGINT NOT NULL, k BIGINT, s VARCHAR, x BIGINT);"
# view -> (query, the expressions whose failure keeps a row out)
VIEWS = {
    "v_cast": ("SELECT id, CAST(s AS INT) + 1 AS n FROM t", ["CAST(s AS INT) + 1"]),
    "v_json": ("SELECT id, json_extract(s, '$.a') AS a FROM t", ["json_extract(s, '$.a')"]),
    "v_mul": ("SELECT id, x * 4 AS x4 FROM t", ["x * 4"]),
    "v_div": ("SELECT id, 10 // k AS q FROM t", ["10 // k"]),
    "v_where": ("SELECT id FROM t WHERE x // k > 0", ["x // k > 0"]),
    "v_sum": ("SELECT k, SUM(x) AS total, COUNT(*) AS n FROM t GROUP BY k", []),
    "v_good": ("SELECT k, COUNT(*) AS n FROM t GROUP BY k", []),
}
BIG = 2 ** 62


def program():
    return SCHEMA + "\n" + "\n".join(f"CREATE MATERIALIZED VIEW {v} AS {q};" for v, (q, _) in VIEWS.items())


def oracle(con, view):
    q, exprs = VIEWS[view]
    if view == "v_sum":   # a group whose SUM leaves BIGINT is a row error, not a row
        return con.sql("SELECT * FROM (SELECT k, SUM(x) AS total, COUNT(*) AS n FROM t GROUP BY k) "
                       "WHERE total IS NULL OR total BETWEEN -9223372036854775808 AND 9223372036854775807").fetchall()
    ok = " AND ".join(f"TRY(hash({e})) IS NOT NULL" for e in exprs) or "TRUE"
    con.execute(f"CREATE OR REPLACE TEMP TABLE good AS SELECT * FROM t WHERE {ok}")
    return con.sql(q.replace(" FROM t", " FROM good")).fetchall()


def norm(rows):
    return sorted((tuple(r) for r in rows), key=repr)


ROW = st.fixed_dictionaries({
    "k": st.sampled_from([0, 1, 2, None]),
    "s": st.sampled_from(["5", "abc", '{"a": 1}', "not json", None]),
    "x": st.sampled_from([1, -3, BIG, -BIG, 3 * BIG // 2, None]),
})


@given(st.lists(st.tuples(st.lists(ROW, min_size=1, max_size=6), st.integers(0, 3)), min_size=2, max_size=5))
def test_views_equal_recomputation_over_rows_that_do_not_fail(make_pipeline, batches):
    p = make_pipeline(program())
    con = duckdb.connect()
    con.execute("CREATE TABLE t (id BIGINT, k BIGINT, s VARCHAR, x BIGINT)")
    live, next_id = [], 0
    for rows, n_del in batches:
        ins = []
        for r in rows:
            ins.append({"id": next_id, **r})
            next_id += 1
        dels, live = live[:n_del], live[n_del:]
        live += ins
        p.input_pandas("t", pd.DataFrame(ins, columns=["id", "k", "s", "x"]).astype({"k": "Int64", "x": "Int64"}))
        if dels:
            p.input_pandas("t", pd.DataFrame(dels, columns=["id", "k", "s", "x"]).astype({"k": "Int64", "x": "Int64"}),
                           delete=True)
        p.wait_for_idle()
        con.execute("DELETE FROM t")
        if live:
            con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(r["id"], r["k"], r["s"], r["x"]) for r in live])
        for v in VIEWS:
            got = [tuple(r.values()) for r in p.query(f"SELECT * FROM {v}")]
            assert norm(got) == norm(oracle(con, v)), v
    assert p.status()["state"] == "running"
    # every failure is on record, for the view it failed in, with the row's values
    errors = list(p.query("SELECT view, COUNT(*) AS n FROM sqlengine_errors GROUP BY view"))
    assert {e["view"]: e["n"] for e in errors} == p.status()["errors"]


def test_bad_rows_are_recorded_with_view_expression_step_and_values(make_pipeline):
    p = make_pipeline(program())
    p.input_pandas("t", pd.DataFrame({"id": [1, 2, 3], "k": [0, 2, 2], "s": ["abc", "7", "{}"],
                                      "x": [BIG, BIG, BIG]}))
    p.wait_for_idle()
    step = p.status()["step"]
    errs = list(p.query("SELECT * FROM sqlengine_errors ORDER BY view, row"))
    by_view = {}
    for e in errs:
        by_view.setdefault(e["view"], []).append(e)
    cast = by_view["v_cast"]
    assert [json.loads(e["row"])["id"] for e in cast] == [1, 3]
    assert all(e["step"] == step and e["weight"] == 1 and e["expression"] == "CAST(s AS INT) + 1" for e in cast)
    assert "Could not convert string 'abc'" in cast[0]["error"]
    assert json.loads(by_view["v_div"][0]["row"]) == {"id": 1, "k": 0, "s": "abc", "x": BIG}
    assert "Division by zero" in by_view["v_div"][0]["error"]
    assert "Overflow in multiplication" in by_view["v_mul"][0]["error"] and len(by_view["v_mul"]) == 3
    assert "Malformed JSON" in by_view["v_json"][0]["error"]
    (s,) = by_view["v_sum"]
    assert "SUM(x) = 9223372036854775808 does not fit in BIGINT" in s["error"]
    assert json.loads(s["row"])["k"] == 2
    # the other rows and views go on
    assert sorted(r["id"] for r in p.query("SELECT id FROM v_cast")) == [2]
    assert list(p.query("SELECT * FROM v_good ORDER BY k")) == [{"k": 0, "n": 1}, {"k": 2, "n": 2}]
    assert list(p.query("SELECT * FROM v_sum")) == [{"k": 0, "total": BIG, "n": 1}]
    assert p.status()["state"] == "running"
    # deleting one of the two rows brings the group's SUM back into range
    p.input_pandas("t", pd.DataFrame({"id": [3], "k": [2], "s": ["{}"], "x": [BIG]}), delete=True)
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v_sum")) == [(0, BIG, 1), (2, BIG, 1)]


def test_a_replayed_step_records_its_errors_once(spark, tmp_path):
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(program(), storage_dir=store, spark=spark)
    p.start()
    p.wait_for_idle()
    faults.set_base(p.store.current.step)
    faults.arm("runs_written", 1)          # the next step dies after writing its runs, before it commits
    try:
        p.input_pandas("t", pd.DataFrame({"id": [1], "k": [0], "s": ["abc"], "x": [1]}))
        with pytest.raises(Exception):
            p.wait_for_idle(timeout_s=60)
    finally:
        faults.arm(None)
    q = Pipeline.from_sql(program(), storage_dir=store, spark=spark)
    q.start()
    q.wait_for_idle()
    assert q.status()["errors"] == {"v_cast": 1, "v_div": 1, "v_json": 1, "v_where": 1}
    assert list(q.query("SELECT COUNT(*) AS n FROM sqlengine_errors")) == [{"n": 4}]
    q.stop()


def test_errors_survive_a_killed_process_and_are_not_doubled(tmp_path):
    """A real process exit (os._exit, as SIGKILL) right after the step's runs are written: the restarted
    pipeline replays the step and records its errors once."""
    store = str(tmp_path / "s")
    code = f"""
import pandas as pd, sys
from sqlengine import Pipeline
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))!r})
from tests.executor.test_row_errors import program
p = Pipeline.from_sql(program(), storage_dir={store!r})
p.start()
p.input_pandas("t", pd.DataFrame({{"id": [1, 2], "k": [0, 1], "s": ["abc", "1"], "x": [1, 1]}}))
p.wait_for_idle()
print("survived")
"""
    env = {**os.environ, "SQLENGINE_CRASH_AT": "runs_written:+2", "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "survived" not in out.stdout
    env.pop("SQLENGINE_CRASH_AT")
    code2 = f"""
from sqlengine import Pipeline
import sys
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))!r})
from tests.executor.test_row_errors import program
p = Pipeline.from_sql(program(), storage_dir={store!r})
p.start()
p.wait_for_idle()
print(sorted(p.status()["errors"].items()), list(p.query("SELECT id FROM v_cast")))
"""
    out = subprocess.run([sys.executable, "-c", code2], env=env, capture_output=True, text=True, timeout=300)
    assert "[('v_cast', 1), ('v_div', 1), ('v_json', 1), ('v_where', 1)] [{'id': 2}]" in out.stdout, \
        out.stderr[-2000:]


def test_spark_steps_fall_back_to_the_driver_for_failing_rows(make_pipeline, placement):
    """On Spark (ANSI semantics) a failing row fails the Spark job; the step is then run on the driver,
    with the same results and error records as a driver step."""
    placement["local_step_rows"] = 0   # every step on Spark
    p = make_pipeline(program())
    p.input_pandas("t", pd.DataFrame({"id": [1, 2], "k": [2, 2], "s": ["abc", "4"], "x": [BIG, BIG]}))
    p.wait_for_idle()
    st_ = p.status()
    assert st_["steps_run_on"]["spark"] >= 1 and p.engine.stats.spark_fallbacks >= 1
    assert st_["errors"]["v_sum"] == 1 and st_["errors"]["v_cast"] == 1
    assert list(p.query("SELECT * FROM v_cast")) == [{"id": 2, "n": 5}]
    assert list(p.query("SELECT * FROM v_sum")) == []
    # a clean step stays on Spark
    before = p.engine.stats.spark_fallbacks
    p.input_pandas("t", pd.DataFrame({"id": [3], "k": [5], "s": ["1"], "x": [1]}))
    p.wait_for_idle()
    assert p.engine.stats.spark_fallbacks == before
    assert list(p.query("SELECT * FROM v_sum")) == [{"k": 5, "total": 1, "n": 1}]


def test_a_session_passed_in_gets_ansi_semantics(spark, tmp_path):
    """A SparkSession the user passes in, with ANSI off, is switched to ANSI when a step runs on Spark:
    otherwise a failing row would give NULL or a wrapped value on Spark and an error on the driver."""
    spark.conf.set("spark.sql.ansi.enabled", "false")
    p = Pipeline.from_sql(program(), storage_dir=str(tmp_path / "s"), spark=spark)
    p.start()
    try:
        p.engine.spark   # what a step on Spark asks for
        assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    finally:
        p.stop()


def test_the_error_relation_is_compacted_like_state(make_pipeline):
    """One run per step that had errors, merged when there are too many, with every record kept in order."""
    p = make_pipeline(program())
    for i in range(12):
        p.input_pandas("t", pd.DataFrame({"id": [i], "k": [1], "s": ["abc"], "x": [1]}))
        p.wait_for_idle()
    assert len(p.store.runs("errors")) <= p.store.MAX_RUNS
    got = [json.loads(r["row"])["id"] for r in p.query("SELECT row FROM sqlengine_errors WHERE view = 'v_cast' "
                                                       "ORDER BY step")]
    assert got == list(range(12)) and p.status()["errors"]["v_cast"] == 12
