"""Where steps and operators run is configured in one place: ``RuntimeConfig(placement={...})``, the
settings of :class:`sqlengine.executor.placement.Placement`, which the pipeline hands to its engine."""
from __future__ import annotations

import pandas as pd
import pytest

from sqlengine import Pipeline, PipelineError, RuntimeConfig
from sqlengine.executor.placement import LOCAL_STEP_ROWS_ENV, Placement

SQL = "CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW s AS SELECT k, SUM(v) AS v FROM t GROUP BY k;"


def test_defaults_and_overrides(monkeypatch):
    monkeypatch.delenv(LOCAL_STEP_ROWS_ENV, raising=False)
    p = Placement.from_dict({})
    assert p == Placement() and p.step_rows("local[2]") == 1 << 62 and p.ops_on_driver()
    assert p.step_rows("spark://host:7077") == p.cluster_local_step_rows
    off = Placement.from_dict({"local_step_rows": 0})
    assert off.step_rows("local[2]") == 0 and not off.ops_on_driver()
    assert Placement.from_dict({"local_step_rows": 0, "driver_ops": True}).ops_on_driver()
    monkeypatch.setenv(LOCAL_STEP_ROWS_ENV, "7")   # the environment's default, where the config says nothing
    assert Placement.from_dict({}).local_step_rows == 7
    assert Placement.from_dict({"local_step_rows": 3}).local_step_rows == 3
    assert Placement.from_dict({}, env=False).local_step_rows is None
    with pytest.raises(ValueError, match="driver_scans must be true or false"):
        Placement.from_dict({"driver_scans": 1})
    with pytest.raises(PipelineError, match="unknown placement setting 'max_key'"):
        RuntimeConfig(placement={"max_key": 3})


def test_the_pipeline_runs_where_its_config_says(spark, tmp_path, monkeypatch):
    """Every step on Spark with ``local_step_rows`` 0, on the driver by default; same answers."""
    monkeypatch.delenv(LOCAL_STEP_ROWS_ENV, raising=False)
    views = []
    for i, placement in enumerate([{}, {"local_step_rows": 0}]):
        p = Pipeline.from_sql(SQL, storage_dir=str(tmp_path / f"p{i}"), spark=spark,
                              runtime_config=RuntimeConfig(placement=placement))
        p.start()
        try:
            assert p.engine.placement == Placement.from_dict(placement)
            p.input_pandas("t", pd.DataFrame({"k": [1, 1, 2], "v": [1, 2, 3]}))
            p.wait_for_idle()
            ran = p.status()["steps_run_on"]
            assert (ran["spark"] > 0, ran["driver"] > 0) == ((True, False) if placement else (False, True))
            views.append(sorted(p.query("SELECT k, v FROM s"), key=str))
        finally:
            p.stop(force=True)
    assert views[0] == views[1] == [{"k": 1, "v": 3}, {"k": 2, "v": 3}]
