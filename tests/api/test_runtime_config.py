"""RuntimeConfig: one serialization (to_dict / from_dict) shared by the embedded API, the client, the server
and the CLI, and Feldera's habits (``storage=True``, ``checkpoint_interval_secs``) answered clearly."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from sqlengine import Pipeline, PipelineBuilder, PipelineError, RuntimeConfig

SQL = "CREATE TABLE t (k INT);\nCREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;"
LAZY = {"sqlengine.spark.start": "lazy"}


def every_field_set(storage: str) -> RuntimeConfig:
    """A config in which every field differs from its default (so that a dropped field shows)."""
    rc = RuntimeConfig(workers=2, storage=storage, min_batch_size_records=7, max_buffering_delay_usecs=123_456,
                       max_step_bytes=1 << 20,
                       clock_resolution_usecs=250_000, spark_conf={**LAZY, "spark.sql.shuffle.partitions": "3"},
                       checkpoint_interval_secs=60, wait_for_lock_secs=2.5, placement={"scan_rows": 1_000_000})
    default = RuntimeConfig()
    unset = [f.name for f in dataclasses.fields(rc) if getattr(rc, f.name) == getattr(default, f.name)]
    assert not unset, f"fields left at their default: {unset}"
    return rc


def test_to_dict_from_dict_round_trip_every_field(tmp_path):
    rc = every_field_set(str(tmp_path / "s"))
    d = rc.to_dict()
    assert set(d) == {f.name for f in dataclasses.fields(RuntimeConfig)}
    assert RuntimeConfig.from_dict(json.loads(json.dumps(d))) == rc
    assert RuntimeConfig.from_dict({}) == RuntimeConfig()
    with pytest.raises(PipelineError, match="unknown field 'wrokers' \\(did you mean 'workers'\\?\\)"):
        RuntimeConfig.from_dict({"wrokers": 2})
    with pytest.raises(PipelineError, match="min_batch_size_records must be an integer"):
        RuntimeConfig.from_dict({"min_batch_size_records": "many"})
    assert RuntimeConfig(spark_conf={"spark.sql.shuffle.partitions": 4}).spark_conf == \
        {"spark.sql.shuffle.partitions": "4"}
    with pytest.raises(PipelineError, match="unknown placement setting 'scan_row' \\(did you mean 'scan_rows'\\?\\)"):
        RuntimeConfig(placement={"scan_row": 1})
    with pytest.raises(PipelineError, match="placement setting driver_rows must be an integer >= 0"):
        RuntimeConfig.from_dict({"placement": {"driver_rows": "many"}})


def test_embedded_and_remote_pipelines_run_with_the_same_config(tmp_path):
    """Parity over every field: the remote PipelineBuilder sends the whole config, and the server's pipeline
    runs with what the embedded one runs with."""
    pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    from sqlengine.api.client import connect
    from sqlengine.server import create_app
    from tests.server.test_server import Served
    rc = every_field_set(str(tmp_path / "storage"))
    embedded = PipelineBuilder(None, name="parity", sql=SQL, runtime_config=rc).create_or_replace()
    local = embedded.runtime_config
    batching, resolution = embedded._controller.batching, embedded._controller.clock_resolution
    embedded.stop()   # the storage is single-writer: the server's pipeline opens it next
    assert local == dataclasses.replace(rc, storage=os.path.abspath(rc.storage))
    served = Served(create_app(str(tmp_path / "root")))
    try:
        with connect(served.url) as client:
            remote = PipelineBuilder(client, name="parity", sql=SQL, runtime_config=rc).create_or_replace()
            assert remote.runtime_config == local
            assert client.pipeline("parity").runtime_config.to_dict() == local.to_dict()
            remote.start()
            remote.input_json("t", [{"k": 1}, {"k": 2}])
            remote.wait_for_idle()
            assert list(remote.query("SELECT n FROM c")) == [{"n": 2}]
            remote.stop()
            # the REST API takes any field (Feldera's {"workers": 2} was a 400) and rejects unknown ones
            import httpx
            r = httpx.put(f"{served.url}/v0/pipelines/w2", json={"program_code": SQL,
                                                                   "runtime_config": {"workers": 2, **{"spark_conf": LAZY}}})
            assert r.status_code == 201, r.text
            assert r.json()["runtime_config"]["workers"] == 2
            r = httpx.put(f"{served.url}/v0/pipelines/w3", json={"program_code": SQL, "runtime_config": {"storage": True}})
            assert r.status_code == 400 and 'storage="path/to/dir"' in r.json()["message"], r.text
    finally:
        served.stop()
    assert (batching, resolution) == (rc.batching(), rc.clock_resolution_usecs)


@pytest.mark.parametrize("value", [True, False, {"backend": {"name": "default"}}])
def test_feldera_storage_switch_says_what_to_write(value, tmp_path):
    with pytest.raises(PipelineError, match='write RuntimeConfig\\(storage="path/to/dir"\\)'):
        RuntimeConfig(storage=value)
    with pytest.raises(PipelineError, match="storage"):
        RuntimeConfig.from_dict({"storage": value})
    with pytest.raises(PipelineError, match="must be a directory path"):
        Pipeline.from_sql(SQL, storage_dir=value if isinstance(value, bool) else True, spark_conf=LAZY)


def test_checkpoint_interval_secs_is_accepted_every_step_being_a_checkpoint(tmp_path):
    rc = RuntimeConfig(storage=str(tmp_path / "s"), checkpoint_interval_secs=60, spark_conf=LAZY)
    p = Pipeline.from_sql(SQL, runtime_config=rc)
    p.start()
    p.input_json("t", [{"k": 1}])
    p.wait_for_idle()
    assert p.checkpoint() == p.status()["step"]   # committed at once, not after 60 s
    p.stop()
    assert RuntimeConfig.from_dict({"checkpoint_interval_secs": 60}).checkpoint_interval_secs == 60
    with pytest.raises(PipelineError, match="checkpoint_interval_secs must be a number of seconds >= 0"):
        RuntimeConfig(checkpoint_interval_secs=-1)


def test_storage_dir_and_runtime_config_storage_must_agree(tmp_path):
    with pytest.raises(PipelineError, match="name different directories"):
        Pipeline.from_sql(SQL, storage_dir=str(tmp_path / "a"), spark_conf=LAZY,
                          runtime_config=RuntimeConfig(storage=str(tmp_path / "b")))


def test_cli_runtime_config_option(tmp_path):
    from click.testing import CliRunner
    from sqlengine.cli import main
    prog = tmp_path / "p.sql"
    prog.write_text(SQL)
    r = CliRunner().invoke(main, ["run", str(prog), "--runtime-config", '{"storage": true}'])
    assert r.exit_code != 0 and 'storage="path/to/dir"' in r.output, r.output
    r = CliRunner().invoke(main, ["run", str(prog), "--runtime-config", '{"wrokers": 2}'])
    assert r.exit_code != 0 and "did you mean 'workers'" in r.output, r.output
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"k": 1}\n{"k": 2}\n')
    src = {"transport": {"name": "file_input", "config": {"path": str(tmp_path / "in")}},
           "format": {"name": "json", "config": {"update_format": "raw"}}}
    prog.write_text(SQL.replace("(k INT)", f"(k INT) WITH ('connectors' = '{json.dumps([src])}')"))
    cfg = tmp_path / "rc.json"
    cfg.write_text(json.dumps({"min_batch_size_records": 5, "storage": str(tmp_path / "s")}))
    r = CliRunner().invoke(main, ["run", str(prog), "--runtime-config", f"@{cfg}", "--exit-when-done"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["query", str(tmp_path / "s"), "SELECT n FROM c", "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.output) == {"n": 2}, r.output
