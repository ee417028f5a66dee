"""The differential tests again, with most steps on Spark.

Steps whose input is small run on the driver (``sqlengine.executor.local_step``); the
other differential tests therefore exercise that path.  Here the same tests
run with ``SQLENGINE_LOCAL_STEP_ROWS=4``: a step with more than 4 input rows
(most of them) runs the delta rules on Spark (``sqlengine.executor.lower``), smaller
ones run on the driver, so the two paths also interleave over the same state,
and both are held to DuckDB's answers after every step.  Driver-side changes of more
than 8 rows reach Spark as scratch parquet files (``sqlengine.state.scratch``), smaller
ones through ``createDataFrame``, so both hand-offs meet every type.
"""
import pytest

# A cross-section of the differential tests (the whole set takes ~14 min on Spark on 2 cores), re-collected
# here with the fixture below: every operator kind and both paths of joins, aggregates and windows.
from .test_differential_joins import test_joins, test_joins_with_aggregates, test_outer_joins  # noqa: F401
from .test_differential_more import test_intersect_and_except  # noqa: F401
from .test_differential_single import test_aggregates, test_distinct_and_union, test_expressions  # noqa: F401
from .test_differential_subqueries import test_scalar_subqueries  # noqa: F401
from .test_differential_windows import test_tumble_and_hop, test_window_functions  # noqa: F401


@pytest.fixture
def make_pipeline(make_pipeline, monkeypatch):
    monkeypatch.setenv("SQLENGINE_LOCAL_STEP_ROWS", "4")
    from sqlengine.executor import runtime
    monkeypatch.setattr(runtime, "SCRATCH_ROWS", 8)
    made = []

    def make(*a, **kw):
        made.append(make_pipeline(*a, **kw))
        return made[-1]

    yield make
    for p in made:   # a Spark step that fails is re-run on the driver: none of these may need that
        if p.engine is not None:
            assert p.engine.spark_fallbacks == 0, p.engine.last_spark_error


def test_steps_ran_on_spark(make_pipeline, monkeypatch):
    monkeypatch.setenv("SQLENGINE_LOCAL_STEP_ROWS", "0")
    p = make_pipeline("CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW s AS SELECT k, SUM(v) AS v FROM t GROUP BY k;")
    import pandas as pd
    p.input_pandas("t", pd.DataFrame({"k": [1, 1, 2], "v": [1, 2, 3]}))
    p.wait_for_idle()
    assert p.status()["steps_run_on"]["driver"] == 0 and p.status()["steps_run_on"]["spark"] >= 1
    assert sorted(p.query("SELECT k, v FROM s ORDER BY k"), key=str) == [{"k": 1, "v": 3}, {"k": 2, "v": 3}]
