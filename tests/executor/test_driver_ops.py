"""The differential tests again, with Spark steps whose ops run on the driver where their changes are.

With a local master, a Spark step runs an op on the driver when its input changes are Arrow tables there and
the state rows they meet can be read by their keys (``Placement.driver_ops``): from the row groups of the runs
that can hold them, or by a DuckDB scan of the runs (``LocalExecutor.scan_runs``); an op whose read finds more
than ``scan_rows`` rows runs on Spark.  Here (``RuntimeConfig.placement``) most steps are Spark steps
(``local_step_rows`` 4), the driver holds no state (its cache is emptied, the disk tier off), reads by key are
narrowed by row groups only for a single key (``max_keys`` 1, so most reads are scans), and a scan of more than 6 rows sends the op to
Spark, so driver ops, scans and Spark jobs interleave within steps.  Each view is held to DuckDB after every
step, as in the other differential tests.
"""
import pandas as pd
import pytest

from .test_differential_joins import test_joins_with_aggregates, test_outer_joins  # noqa: F401
from .test_differential_more import test_intersect_and_except  # noqa: F401
from .test_differential_single import test_aggregates, test_distinct_and_union  # noqa: F401
from .test_differential_subqueries import test_scalar_subqueries  # noqa: F401
from .test_differential_windows import test_window_functions  # noqa: F401


@pytest.fixture
def make_pipeline(make_pipeline, monkeypatch, placement):
    # the driver caches no state: reads by key, or scans
    placement.update(local_step_rows=4, scratch_rows=8, max_keys=1, scan_rows=6, cache_state=False)
    made = []

    def make(*a, **kw):
        made.append(make_pipeline(*a, **kw))
        return made[-1]

    yield make
    engines = [p.engine for p in made if p.engine is not None]
    for e in engines:   # a Spark step that fails is re-run on the driver: none of these may need that
        assert e.stats.spark_fallbacks == 0, e.stats.last_spark_error
    if engines and sum(e.stats.steps_spark for e in engines):
        assert sum(e.stats.ops_on_driver for e in engines), "no op of a Spark step ran on the driver"


@pytest.mark.parametrize("scanner", ["duckdb", "spark"])
def test_join_aggregate_ops_on_the_driver_scan_or_fall_back(make_pipeline, placement, scanner):
    """The two views of the scale benchmark: a 30-row change's join and aggregates run on the driver, reading
    the state by scans (DuckDB's, as with a local master, or a Spark job's, as with a cluster master); with
    ``scan_rows`` below what a scan finds, the same ops run on Spark, in the same pipeline; the views and their
    change streams equal DuckDB's after every step."""
    import duckdb
    placement["state_scans"] = scanner   # "spark": the scans a cluster master runs, on the local session
    from ..support.oracle import bag, bag_from_changes, diff
    sql = ("CREATE TABLE t (id BIGINT NOT NULL, k BIGINT NOT NULL, v BIGINT); CREATE TABLE d (k BIGINT NOT NULL, "
           "name VARCHAR); CREATE MATERIALIZED VIEW g AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k; "
           "CREATE MATERIALIZED VIEW j AS SELECT d.name, COUNT(*) AS n, SUM(t.v) AS s FROM t JOIN d ON t.k = d.k "
           "GROUP BY d.name; CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t GROUP BY k;")
    p = make_pipeline(sql)
    streams = {v: p.listen(v) for v in ("g", "j", "c")}
    chunks = []   # every chunk delivered is consolidated: no two rows equal (c's projection drops its key)
    for v in ("g", "j", "c"):
        p.foreach_chunk(v, lambda chunk, seq, v=v: chunks.append((v, seq, chunk)))
    d = pd.DataFrame({"k": range(12), "name": [f"n{i % 3}" if i != 5 else None for i in range(12)]})
    p.input_pandas("d", d)
    live = pd.DataFrame({"id": [], "k": [], "v": []}, dtype="int64")
    import numpy as np
    rng = np.random.default_rng(7)
    next_id = 0
    for step in range(8):
        p.engine.placement = p.engine.placement.replace(scan_rows=1 << 30 if step % 2 == 0 else 6)
        ins = pd.DataFrame({"id": np.arange(next_id, next_id + 20), "k": rng.integers(0, 14, 20),
                            "v": pd.array([None if x % 7 == 0 else int(x) for x in rng.integers(0, 50, 20)],
                                          dtype="Int64")})
        next_id += 20
        gone = live.sample(min(len(live), 10), random_state=step)
        p.pause()
        p.input_pandas("t", ins)
        if len(gone):
            p.input_pandas("t", gone, delete=True)
        p.resume()
        p.wait_for_idle()
        live = pd.concat([live.drop(gone.index), ins], ignore_index=True)
        con = duckdb.connect()
        con.register("t", live)
        con.register("d", d)
        for v in ("g", "j", "c"):
            q = {"g": "SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k",
                 "j": "SELECT d.name, COUNT(*), SUM(t.v) FROM t JOIN d ON t.k = d.k GROUP BY d.name",
                 "c": "SELECT COUNT(*) FROM t GROUP BY k"}[v]
            want = bag(con.execute(q).fetchall())
            got = bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {v}"))
            assert not diff(got, want), f"step {step} {v}: {diff(got, want)}"
            assert not diff(bag_from_changes(streams[v].to_pandas()), want), f"step {step} {v} (changes)"
    p.wait_for_idle()
    for v, seq, chunk in chunks:
        data = chunk.drop(columns="__weight")
        assert not data.duplicated().any(), f"view {v}, step {seq}: a chunk repeats a row\n{chunk}"
    assert {v for v, _, _ in chunks} == {"g", "j", "c"}
    e = p.engine
    assert e.stats.steps_spark >= 8 and e.stats.ops_on_driver > 0
    assert e.stats.spark_scans > 0 if scanner == "spark" else (e.stats.rows_scanned > 0 and e.stats.spark_scans == 0)
    # the steps with scan_rows = 6 scanned more than that for some op's keys, which then ran on Spark
    assert e.stats.ops_declined > 0


def test_rows_that_fail_an_op_on_the_driver_are_recorded_and_the_step_goes_on(make_pipeline):
    """A Spark step's join runs on the driver; a row whose ON condition fails there is recorded as a row error
    (as in a driver step) and kept out of the view, and the step is neither failed nor re-run: the state is not
    cached, so a re-run on the driver could not read it."""
    import duckdb
    p = make_pipeline("CREATE TABLE t (id BIGINT NOT NULL, k BIGINT, s VARCHAR); CREATE TABLE u (k BIGINT, y BIGINT);"
                      "CREATE MATERIALIZED VIEW v AS SELECT t.id, u.y FROM t JOIN u ON t.k = u.k "
                      "AND CAST(t.s AS INT) > u.y;")
    u = pd.DataFrame({"k": [1, 2, 3], "y": [0, 5, 10]})
    p.input_pandas("u", u)
    p.wait_for_idle()
    t = pd.DataFrame({"id": range(6), "k": [1, 2, 3, 1, 2, 3], "s": ["1", "7", "abc", "-1", "x", "11"]})
    p.input_pandas("t", t)
    p.wait_for_idle()
    st = p.status()
    assert st["state"] == "running" and p.engine.stats.steps_spark >= 1 and p.engine.stats.ops_on_driver >= 1
    assert p.engine.stats.spark_fallbacks == 0
    assert st["errors"]["v"] == 2
    bad = sorted(r["row"] for r in p.query("SELECT * FROM sqlengine_errors"))
    assert len(bad) == 2 and all('"abc"' in b or '"x"' in b for b in bad), bad
    con = duckdb.connect()
    con.register("t", t[t.s.str.fullmatch(r"-?\d+")])
    con.register("u", u)
    want = sorted(con.execute("SELECT t.id, u.y FROM t JOIN u ON t.k = u.k AND CAST(t.s AS INT) > u.y").fetchall())
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == want
