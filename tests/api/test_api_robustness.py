"""API robustness: timestamp input with zones (stored as UTC), numbers rejected for TIMESTAMP, a failed
pipeline raising on every call, no input after stop(), query_parquet creating its directory, the version."""
import datetime as dt
import re

import pandas as pd
import pyarrow.parquet as pq
import pytest

import sqlengine
from sqlengine import InputError, PipelineError

FORMATS = ("expected a timestamp string 'YYYY-MM-DD[ HH:MM:SS[.ffffff]]' or ISO 8601 with 'T' and an optional "
           "'Z' or ±HH:MM offset")
SQL = """CREATE TABLE e (id INT NOT NULL, ts TIMESTAMP);
CREATE MATERIALIZED VIEW v AS SELECT id, ts FROM e;
"""


def ts_rows(p, relation="e"):
    return [(r["id"], r["ts"]) for r in p.query(f"SELECT id, ts FROM {relation} ORDER BY id")]


def test_timestamps_with_zone_or_offset_are_stored_as_utc(make_pipeline):
    p = make_pipeline(SQL)
    p.input_json("e", [{"id": 1, "ts": "2024-01-02T10:00:00Z"},
                       {"id": 2, "ts": "2024-01-02T10:00:00+02:00"},
                       {"id": 3, "ts": "2024-01-02 10:00:00.123-05:30"},
                       {"id": 4, "ts": "2024-01-02 10:00:00"},          # naive: taken as it is
                       {"id": 5, "ts": "2024-01-02T10:00:00.5"},
                       {"id": 6, "ts": "2024-01-02"},
                       {"id": 7, "ts": None}])
    p.input_json("e", '{"id": 8, "ts": "2024-12-31T23:30:00-01:00"}\n{"id": 9, "ts": "2024-01-02T00:30:00+0100"}')
    p.input_csv("e", "id,ts\n10,2024-01-02T10:00:00Z\n11,2024-01-02 10:00:00+02:00\n12,2024-01-02 10:00:00\n13,\n")
    p.input_pandas("e", pd.DataFrame({"id": [14, 15], "ts": ["2024-01-02T10:00:00-03:00", "2024-01-02 10:00:00"]}))
    p.input_pandas("e", pd.DataFrame({"id": [16], "ts": pd.to_datetime(["2024-01-02T10:00:00+02:00"])}))  # tz-aware
    p.input_pandas("e", pd.DataFrame({"id": [17], "ts": pd.to_datetime(["2024-01-02T10:00:00"])}))        # naive
    p.wait_for_idle()
    D = dt.datetime
    expected = [(1, D(2024, 1, 2, 10)), (2, D(2024, 1, 2, 8)), (3, D(2024, 1, 2, 15, 30, 0, 123000)),
                (4, D(2024, 1, 2, 10)), (5, D(2024, 1, 2, 10, 0, 0, 500000)), (6, D(2024, 1, 2)), (7, None),
                (8, D(2025, 1, 1, 0, 30)), (9, D(2024, 1, 1, 23, 30)),
                (10, D(2024, 1, 2, 10)), (11, D(2024, 1, 2, 8)), (12, D(2024, 1, 2, 10)), (13, None),
                (14, D(2024, 1, 2, 13)), (15, D(2024, 1, 2, 10)), (16, D(2024, 1, 2, 8)), (17, D(2024, 1, 2, 10))]
    assert ts_rows(p) == expected
    assert ts_rows(p, "v") == expected
    assert all(ts is None or ts.tzinfo is None for _, ts in ts_rows(p))


@pytest.mark.parametrize("call, bad", [
    (lambda p: p.input_json("e", [{"id": 1, "ts": "2024-01-02"}, {"id": 2, "ts": 1704189600000000}]),
     "1704189600000000 (int)"),
    (lambda p: p.input_json("e", '[{"id": 1, "ts": "2024-01-02"}, {"id": 2, "ts": 1.5}]'), "1.5 (float)"),
    (lambda p: p.input_json("e", [{"insert": {"id": 1, "ts": "2024-01-02"}}, {"insert": {"id": 2, "ts": True}}],
                            update_format="insert_delete"), "True (bool)"),
    (lambda p: p.input_pandas("e", pd.DataFrame({"id": [1, 2], "ts": [1704189600000000, 1704189600000000]})),
     "(int)"),
    (lambda p: p.input_json("e", [{"id": 1, "ts": "2024-01-02"}, {"id": 2, "ts": "2024-01-02T10:00:00+25:00"}]),
     "'2024-01-02T10:00:00+25:00'"),
    (lambda p: p.input_csv("e", "id,ts\n1,2024-01-02\n2,yesterday\n"), "'yesterday'"),
])
def test_a_number_or_bad_text_for_a_timestamp_is_rejected_with_the_formats(make_pipeline, call, bad):
    p = make_pipeline(SQL)
    before = p.log.next_seq
    with pytest.raises(InputError) as e:
        call(p)
    msg = str(e.value)
    assert msg.startswith("table e, column ts, row ") and "to TIMESTAMP" in msg and bad in msg, msg
    assert msg.endswith(FORMATS)
    assert p.log.next_seq == before          # nothing of the call was logged
    p.wait_for_idle()
    assert ts_rows(p) == []


def test_a_failed_pipeline_raises_on_every_call_until_stopped(make_pipeline, tmp_path):
    p = make_pipeline(SQL, start=False)
    p.foreach_chunk("v", lambda chunk, seq: 1 / 0)
    p.start()
    p.input_json("e", [{"id": 1, "ts": "2024-01-02"}])
    failure = "callback for view v raised ZeroDivisionError"
    with pytest.raises(PipelineError, match=failure):
        p.wait_for_idle(timeout_s=120)
    calls = {
        "input_json": lambda: p.input_json("e", [{"id": 2}]),
        "input_pandas": lambda: p.input_pandas("e", pd.DataFrame({"id": [2]})),
        "input_csv": lambda: p.input_csv("e", "id\n2\n"),
        "execute": lambda: p.execute("INSERT INTO e VALUES (2, NULL)"),
        "wait_for_idle": lambda: p.wait_for_idle(timeout_s=30),
        "wait_for_completion": lambda: p.wait_for_completion(timeout_s=30),
        "checkpoint": lambda: p.checkpoint(),
        "query": lambda: list(p.query("SELECT * FROM v")),
        "query_pandas": lambda: p.query_pandas("SELECT * FROM v"),
        "query_arrow": lambda: p.query_arrow("SELECT * FROM v"),
        "query_tabular": lambda: list(p.query_tabular("SELECT * FROM v")),
        "query_parquet": lambda: p.query_parquet("SELECT * FROM v", str(tmp_path / "out.parquet")),
        "listen": lambda: p.listen("v"),
        "foreach_chunk": lambda: p.foreach_chunk("v", lambda c, s: None),
        "pause": lambda: p.pause(),
        "resume": lambda: p.resume(),
    }
    log_before = p.log.next_seq
    for attempt in range(2):
        for name, call in calls.items():
            with pytest.raises(PipelineError, match=failure):
                call()
                pytest.fail(f"{name} did not raise (attempt {attempt})")
    assert p.log.next_seq == log_before      # no input was taken by the failed pipeline
    assert not (tmp_path / "out.parquet").exists()
    st = p.status()                          # status() never raises
    assert st["state"] == "failed" and "ZeroDivisionError" in st["error"]
    assert p.status()["state"] == "failed"
    p.stop()                                 # stop() stops a failed pipeline
    assert p._controller.thread is None or not p._controller.thread.is_alive()
    with pytest.raises(PipelineError, match=failure):
        p.checkpoint()


def test_a_failed_step_leaves_checkpoint_raising_not_returning_a_step(make_pipeline, monkeypatch):
    p = make_pipeline(SQL)
    p.input_json("e", [{"id": 1}])
    assert p.checkpoint() >= 1

    def broken(*a, **kw):
        raise RuntimeError("step broke")

    monkeypatch.setattr(p.engine, "run_step", broken)
    p.input_json("e", [{"id": 2}])             # acknowledged, never processed
    for _ in range(3):
        with pytest.raises(PipelineError, match="RuntimeError: step broke"):
            p.checkpoint()
    assert p.status()["backlog_batches"] >= 1 and p.status()["state"] == "failed"


def test_input_after_stop_raises_and_logs_nothing(make_pipeline):
    p = make_pipeline(SQL)
    p.input_json("e", [{"id": 1}])
    p.stop()
    seq = p.log.next_seq
    calls = [lambda: p.input_json("e", [{"id": 2}]),
             lambda: p.input_pandas("e", pd.DataFrame({"id": [2]})),
             lambda: p.input_csv("e", "id\n2\n"),
             lambda: p.execute("INSERT INTO e VALUES (2, NULL)"),
             lambda: p.execute("DELETE FROM e WHERE id = 1")]
    for call in calls:
        for _ in range(2):
            with pytest.raises(PipelineError, match=re.escape(f"pipeline {p.name} is stopped")):
                call()
    assert p.log.next_seq == seq
    assert p.status()["state"] == "stopped"


def test_input_before_start_is_still_accepted(make_pipeline):
    p = make_pipeline(SQL, start=False)
    p.input_json("e", [{"id": 1, "ts": "2024-01-02T10:00:00+01:00"}])
    p.start()
    p.wait_for_idle()
    assert ts_rows(p) == [(1, dt.datetime(2024, 1, 2, 9))]


def test_query_parquet_creates_missing_directories(make_pipeline, tmp_path):
    p = make_pipeline(SQL)
    p.input_json("e", [{"id": 1, "ts": "2024-01-02T10:00:00Z"}])
    p.wait_for_idle()
    out = tmp_path / "new" / "nested" / "dir" / "v.parquet"
    p.query_parquet("SELECT id, ts FROM v", str(out))
    assert pq.read_table(out).to_pylist() == [{"id": 1, "ts": dt.datetime(2024, 1, 2, 10)}]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "sub" / "v.parquet"
    with pytest.raises(InputError) as e:
        p.query_parquet("SELECT id FROM v", str(target))
    assert str(target) in str(e.value) and ("Not a directory" in str(e.value) or "exists" in str(e.value))


def test_version_is_a_version_string():
    assert isinstance(sqlengine.__version__, str)
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?([.+-]?\w+)*", sqlengine.__version__), sqlengine.__version__
    assert "__version__" not in sqlengine.__all__
