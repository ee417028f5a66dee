"""The public API: its surface, lifecycle, inputs and their errors, ad-hoc queries, callbacks."""
import json
import os
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

import sqlengine
from sqlengine import BindError, InputError, Pipeline, PipelineError, UnsupportedError

SQL = """CREATE TABLE bid (auction BIGINT NOT NULL, bidder BIGINT, price DECIMAL(10,2), date_time TIMESTAMP);
CREATE TABLE auction (id BIGINT NOT NULL, seller BIGINT, category INT);
CREATE VIEW hot AS SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction HAVING COUNT(*) > 1;
CREATE MATERIALIZED VIEW by_cat AS SELECT a.category, SUM(h.n) AS bids FROM hot h JOIN auction a ON h.auction = a.id
  GROUP BY a.category;
"""


def test_public_api_is_pinned():
    assert sorted(sqlengine.__all__) == sorted([
        "Pipeline", "OutputHandler", "WEIGHT", "EngineError", "ParseError", "BindError", "UnsupportedError",
        "InputError", "ConnectorError", "PermanentConnectorError", "PipelineError", "InternalError", "connect",
        "RuntimeConfig", "PipelineBuilder", "PipelineStatus", "udf", "udaf"])
    public = sorted(m for m in dir(Pipeline) if not m.startswith("_"))
    assert public == sorted([
        "from_sql", "start", "pause", "resume", "stop", "status", "metrics", "checkpoint", "input_pandas", "input_arrow",
        "input_csv", "input_json", "execute", "listen", "foreach_chunk", "wait_for_idle", "wait_for_completion", "query",
        "query_tabular", "query_parquet", "query_arrow", "query_pandas", "explain", "output_parquet",
        "pause_connector", "resume_connector", "restart", "delete", "clear_storage", "storage_status",
        "advance_clock", "set_clock", "transaction"])


def bids(rows):
    return pd.DataFrame(rows, columns=["auction", "bidder", "price", "date_time"])


@pytest.fixture
def p(make_pipeline):
    pipe = make_pipeline(SQL)
    pipe.input_pandas("bid", bids([(1, 1, 1.5, "2024-01-01"), (1, 2, 2.5, "2024-01-02"), (2, 3, 1.0, None)]))
    pipe.input_json("auction", [{"insert": {"id": 1, "seller": 7, "category": 3}},
                                {"insert": {"id": 2, "seller": 8, "category": 4}}], update_format="insert_delete")
    pipe.wait_for_idle()
    return pipe


def table_rows(p, t):
    return list(p.query(f"SELECT COUNT(*) AS n FROM {t}"))[0]["n"]


def test_queries_in_every_format(p, tmp_path):
    assert list(p.query("SELECT * FROM by_cat")) == [{"category": 3, "bids": 2}]
    text = "".join(p.query_tabular("SELECT category, bids FROM by_cat"))
    assert "| category | bids |" in text and "| 3        | 2    |" in text
    assert p.query_arrow("SELECT bids FROM by_cat").column("bids").to_pylist() == [2]
    assert p.query_pandas("SELECT COUNT(*) AS n FROM bid")["n"][0] == 3
    out = tmp_path / "x.parquet"
    p.query_parquet("SELECT * FROM by_cat", str(out))
    assert pq.read_table(out).to_pylist() == [{"category": 3, "bids": 2}]
    assert "incremental circuit" in p.explain("by_cat")


def test_execute_insert_and_delete(p):
    assert p.execute("INSERT INTO auction VALUES (3, 9, 5)") == 1
    assert p.execute("INSERT INTO bid (auction, price) SELECT id, 9.99 FROM auction WHERE id = 2") == 1
    p.wait_for_idle()
    assert sorted((r["category"], r["bids"]) for r in p.query("SELECT * FROM by_cat")) == [(3, 2), (4, 2)]
    assert p.execute("DELETE FROM bid WHERE auction = 1") == 2
    p.wait_for_idle()
    assert list(p.query("SELECT * FROM by_cat")) == [{"category": 4, "bids": 2}]
    with pytest.raises(UnsupportedError, match="INSERT and DELETE"):
        p.execute("UPDATE bid SET price = 1")


def test_execute_values_read_no_file_and_take_utc(p):
    """INSERT ... VALUES runs in a DuckDB that reads no file, in UTC (a cursor of a shared database: its own
    session settings)."""
    with pytest.raises(InputError, match="file system operations are disabled"):
        p.execute("INSERT INTO auction VALUES ((SELECT count(*) FROM read_csv('/etc/passwd')), 1, 1)")
    p.execute("INSERT INTO auction VALUES (epoch(CAST(TIMESTAMPTZ '1970-01-01 02:00:00+02' AS TIMESTAMP)), 77, 7)")
    p.wait_for_idle()
    assert [r["id"] for r in p.query("SELECT id FROM auction WHERE seller = 77")] == [0]


@pytest.mark.parametrize("sql, error, message", [
    ("SELECT * FROM hot", BindError, "view 'hot' is not materialized"),
    ("SELECT * FROM nope", BindError, "unknown table or view 'nope'"),
    ("DROP TABLE bid", UnsupportedError, "only SELECT queries"),
    ("DELETE FROM bid", UnsupportedError, "only SELECT queries"),
    ("CREATE TABLE x (a INT)", UnsupportedError, "only SELECT queries"),
    ("SELECT * FROM read_csv('/etc/passwd')", UnsupportedError, "not allowed"),
    ("SELECT * FROM '/etc/passwd'", BindError, "unknown table or view '/etc/passwd'"),
    ("COPY bid TO '/tmp/x.csv'", UnsupportedError, "only SELECT"),
    ("ATTACH '/tmp/x.db'", UnsupportedError, "only SELECT"),
    ("SELECT 1; SELECT 2", UnsupportedError, "exactly one"),
])
def test_ad_hoc_queries_are_read_only_and_confined(p, sql, error, message):
    with pytest.raises(error, match=message):
        list(p.query(sql))
    assert table_rows(p, "bid") == 3


def test_bad_input_names_table_column_row_and_changes_nothing(p):
    log_before = p.log.next_seq
    cases = [
        (lambda: p.input_pandas("nope", bids([])), "unknown table 'nope'"),
        (lambda: p.input_pandas("bid", pd.DataFrame({"auction": [1], "colour": ["x"]})), "unknown column 'colour'"),
        (lambda: p.input_pandas("bid", bids([(1, 1, 1.0, None), (2, "x", 1.0, None)])),
         "table bid, column bidder, row 1: cannot convert 'x'"),
        (lambda: p.input_pandas("bid", bids([(1, 1, 1.0, None), (None, 1, 1.0, None)])),
         "table bid, column auction, row 1: NULL in a NOT NULL column"),
        (lambda: p.input_pandas("bid", pd.DataFrame({"bidder": [1]})), "missing value for NOT NULL column 'auction'"),
        (lambda: p.input_pandas("bid", bids([(1, 1, "123456789.5", None)])), "column price, row 0"),
        (lambda: p.input_json("auction", '{"id": 1, "seller": '), "malformed JSON"),
        (lambda: p.input_json("auction", [{"id": 5}, {"id": "five"}]), "table auction, column id, row 1"),
        (lambda: p.input_json("auction", [{"upsert": {"id": 1}}], update_format="insert_delete"), "row 0"),
        (lambda: p.input_json("auction", [{"id": 1, "price": 3}]), "row 0: unknown column 'price'"),
        (lambda: p.input_json("bid", [{"auction": 1, "date_time": "yesterday"}]), "column date_time, row 0"),
    ]
    for call, message in cases:
        with pytest.raises(InputError) as e:
            call()
        assert message in str(e.value)
    assert p.log.next_seq == log_before
    p.wait_for_idle()
    assert table_rows(p, "bid") == 3 and table_rows(p, "auction") == 2


def test_json_inputs_in_several_shapes(p):
    p.input_json("auction", json.dumps([{"id": 10, "seller": 1, "category": 1}]))
    p.input_json("auction", '{"id": 11, "seller": 1, "category": 1}\n{"id": 12, "seller": 1, "category": 1}')
    p.input_json("auction", {"id": 13})
    p.input_json("auction", [{"delete": {"id": 13, "seller": None, "category": None}}], update_format="insert_delete")
    p.input_json("bid", [{"auction": 10, "price": "3.25", "date_time": "2024-05-01T10:00:00"}])
    p.wait_for_idle()
    assert table_rows(p, "auction") == 5
    assert list(p.query("SELECT price, date_time FROM bid WHERE auction = 10")) == [
        {"price": pd.Series(["3.25"]).astype(object).map(__import__("decimal").Decimal)[0],
         "date_time": pd.Timestamp("2024-05-01 10:00:00").to_pydatetime()}]


def test_failing_callback_surfaces_in_status_and_every_later_call(make_pipeline):
    p = make_pipeline(SQL, start=False)

    def bad(chunk, seq):
        raise ValueError("boom")

    p.foreach_chunk("hot", bad)
    p.start()
    p.input_pandas("bid", bids([(1, 1, 1.0, None), (1, 2, 1.0, None)]))
    for _ in range(2):   # raised by every call (but status() and stop()) while the pipeline is failed
        with pytest.raises(PipelineError, match="callback for view hot raised ValueError: boom"):
            p.wait_for_idle()
    assert p.status()["state"] == "failed" and "boom" in p.status()["error"]


def test_lifecycle_pause_resume_stop(make_pipeline):
    p = make_pipeline(SQL, start=False)
    with pytest.raises(PipelineError, match="not started"):
        p.wait_for_idle()
    h = p.listen("by_cat")
    p.input_json("auction", [{"id": 1, "seller": 1, "category": 1}])   # accepted before start
    p.start()
    p.wait_for_idle()
    p.pause()
    p.input_pandas("bid", bids([(1, 1, 1.0, None), (1, 2, 1.0, None)]))
    with pytest.raises(PipelineError, match="paused"):
        p.wait_for_idle()
    assert h.to_pandas().empty and p.status()["state"] == "paused"
    p.resume()
    p.wait_for_idle(timeout_s=120)
    assert h.to_dict() == [{"category": 1, "bids": 2, "__weight": 1}]
    st = p.status()
    assert st["rows_in"] == {"bid": 2, "auction": 1} and st["step"] >= 2 and st["step_latency_ms"]["p50"] > 0
    p.stop()
    assert p.status()["state"] == "stopped"
    with pytest.raises(PipelineError, match="stopped"):
        list(p.query("SELECT * FROM by_cat"))


def test_storage_dir_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PipelineError, match="cannot create storage directory"):
        Pipeline.from_sql(SQL, storage_dir=str(blocker / "sub"))


def test_expression_spark_cannot_run_runs_on_the_driver(make_pipeline, placement):
    """Spark does not analyze the program at start (the driver types it); a step Spark cannot run is run
    on the driver instead, with the same result."""
    placement["local_step_rows"] = 0   # every step is tried on Spark first
    placement["driver_rows"] = 0       # with its projections too (not on the driver)
    p = make_pipeline("CREATE TABLE t (ts TIMESTAMP); "
                      "CREATE MATERIALIZED VIEW e AS SELECT EXTRACT(MILLENNIUM FROM ts) AS s FROM t")
    p.input_json("t", [{"ts": "2024-05-01 10:00:00"}])
    p.wait_for_idle()
    assert list(p.query("SELECT * FROM e")) == [{"s": 3}]
    assert p.engine.stats.spark_fallbacks >= 1


def test_feldera_lifecycle_methods(tmp_path):
    """restart() keeps state, callbacks and sinks; clear_storage() starts afresh; delete(clear_storage=True);
    storage_status(); wait_for_idle(idle_interval_s=...); input while paused (force is accepted)."""
    import glob
    from sqlengine import Pipeline
    sql = ("CREATE TABLE t (k INT);\n"
           "CREATE MATERIALIZED VIEW c AS SELECT k, COUNT(*) AS n FROM t GROUP BY k;")
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "s"), spark_conf={"sqlengine.spark.start": "lazy"})
    assert p.storage_status() == "cleared"
    seen = []
    p.foreach_chunk("c", lambda chunk, step: seen.append(step))
    p.output_parquet("c", str(tmp_path / "out"))
    p.start()
    p.input_json("t", [{"k": 1}, {"k": 1}])
    p.wait_for_idle(idle_interval_s=0.2)
    assert p.storage_status() == "in_use" and seen
    p.restart()
    assert p.status()["state"] == "running"
    p.pause()
    p.input_json("t", [{"k": 2}], force=True)     # input is accepted while paused
    p.resume()
    p.wait_for_idle()
    assert list(p.query("SELECT * FROM c ORDER BY k")) == [{"k": 1, "n": 2}, {"k": 2, "n": 1}]
    assert len(seen) >= 2, "the callback survived the restart"
    assert len(glob.glob(str(tmp_path / "out" / "step-*.parquet"))) >= 2, "the sink survived the restart"
    with pytest.raises(PipelineError, match="stop\\(\\) it before clear_storage"):
        p.clear_storage()
    p.stop()
    p.clear_storage()
    assert p.storage_status() == "cleared"
    p.start()
    p.input_json("t", [{"k": 3}])
    p.wait_for_idle()
    assert list(p.query("SELECT * FROM c")) == [{"k": 3, "n": 1}]
    p.delete(clear_storage=True)
    assert p.status()["state"] == "stopped" and p.storage_status() == "cleared"


def test_pipeline_builder_and_batching(tmp_path):
    """PipelineBuilder + RuntimeConfig (Feldera's names): min_batch_size_records / max_buffering_delay_usecs
    group quick small inputs into fewer steps; the results are the same."""
    from sqlengine import PipelineBuilder, RuntimeConfig
    sql = "CREATE TABLE t (k INT);\nCREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;"
    steps = {}
    for batching in (False, True):
        rc = RuntimeConfig(workers=1, storage=str(tmp_path / f"s{batching}"),
                           spark_conf={"sqlengine.spark.start": "lazy"},
                           **({"min_batch_size_records": 1000, "max_buffering_delay_usecs": 500_000} if batching else {}))
        p = PipelineBuilder(None, name=f"b{batching}", sql=sql, runtime_config=rc).create_or_replace()
        assert p.storage_dir == str(tmp_path / f"s{batching}")
        p.start()
        p.wait_for_idle()
        first = p.status()["step"]
        for i in range(20):
            p.input_json("t", [{"k": i}] * 10)
            time.sleep(0.01)
        p.wait_for_idle()
        assert list(p.query("SELECT n FROM c")) == [{"n": 200}]
        steps[batching] = p.status()["step"] - first
        p.stop()
    assert steps[True] < steps[False], steps
    assert steps[True] <= 3, steps
    with pytest.raises(PipelineError, match="workers must be at least 1"):
        RuntimeConfig(workers=0)


def test_status_state_is_a_pipeline_status(tmp_path):
    import json as _json
    from sqlengine import Pipeline, PipelineStatus
    p = Pipeline.from_sql("CREATE TABLE t (k INT);", storage_dir=str(tmp_path), spark_conf={"sqlengine.spark.start": "lazy"})
    assert p.status()["state"] is PipelineStatus.CREATED
    p.start()
    st = p.status()
    assert st["state"] == PipelineStatus.RUNNING == "running" and f"{st['state']}" == "running"
    assert _json.loads(_json.dumps(st, default=str))["state"] == "running"
    p.stop()
    assert p.status()["state"] is PipelineStatus.STOPPED


def test_spark_master_choice_and_a_conflicting_session(spark, monkeypatch, tmp_path):
    from sqlengine.executor.session import resolve_conf
    monkeypatch.setenv("SQLENGINE_SPARK_MASTER", "local[1]")
    assert resolve_conf({}, None)["spark.master"] == "local[1]"                       # the environment
    assert resolve_conf({"spark.master": "local[3]"}, None)["spark.master"] == "local[3]"   # spark_conf wins
    assert resolve_conf({"spark.master": "local[3]"}, "local[2]")["spark.master"] == "local[2]"   # the argument
    monkeypatch.delenv("SQLENGINE_SPARK_MASTER")
    assert "spark.master" not in resolve_conf({}, None)
    # this process runs a local session: a cluster master asked for now would be silently ignored by Spark
    with pytest.raises(PipelineError, match=r"Spark master 'spark://10\.0\.0\.1:7077' was asked for, but this "
                                            r"process already runs a SparkSession on 'local\[2\]'"):
        Pipeline.from_sql("CREATE TABLE t (k INT);", storage_dir=str(tmp_path), spark_master="spark://10.0.0.1:7077")
    with pytest.raises(PipelineError, match="either spark= .* or spark_master="):
        Pipeline.from_sql("CREATE TABLE t (k INT);", storage_dir=str(tmp_path), spark=spark, spark_master="local[2]")


def test_chunks_and_pandas_results_keep_integers_exact(make_pipeline):
    """An integer column with a NULL arrives as Python ints and None, not float64 (the fuzzer found
    9007199254740993 delivered as 9007199254740992.0 beside a NULL)."""
    p = make_pipeline("CREATE TABLE t (a BIGINT, b INT); CREATE MATERIALIZED VIEW v AS SELECT * FROM t;", start=False)
    h = p.listen("v")
    p.start()
    p.execute("INSERT INTO t VALUES (9007199254740993, 1), (NULL, 2)")
    p.wait_for_idle()
    want = [{"a": 9007199254740993, "b": 1}, {"a": None, "b": 2}]
    assert sorted(h.to_pandas().drop(columns="__weight").to_dict("records"), key=lambda r: r["b"]) == want
    assert p.query_pandas("SELECT * FROM v ORDER BY b").to_dict("records") == want


def test_input_arrow_casts_safely_and_keeps_values_exact(make_pipeline, tmp_path):
    """Arrow in without pandas: columns by name (case-insensitive, a missing one NULL), cast to the column types
    (int32 into BIGINT, strings into TIMESTAMP), 2^63-1 and NaN exact; a value that does not fit is a bad row
    (rejected naming the column, or dead-lettered); deletes; record batches and readers."""
    import math
    import pyarrow as pa
    from sqlengine import InputError
    p = make_pipeline("CREATE TABLE t (id BIGINT NOT NULL, x DOUBLE, ts TIMESTAMP, s VARCHAR); "
                      "CREATE MATERIALIZED VIEW v AS SELECT id, x, ts, s FROM t;")
    rows = pa.table({"ID": pa.array([1, 2, 3], pa.int32()), "x": [1.5, float("nan"), None],
                     "ts": ["2024-02-29 12:00:00", None, "2023-12-31 00:00:00"]})
    p.input_arrow("t", rows)
    p.input_arrow("t", pa.table({"id": pa.array([(1 << 63) - 1], pa.int64()), "s": ["big"]}).to_batches()[0])
    reader = pa.RecordBatchReader.from_batches(pa.schema([("id", pa.int64())]),
                                               [pa.record_batch([pa.array([4, 5])], names=["id"])])
    p.input_arrow("t", reader)
    with pytest.raises(InputError, match="ts"):
        p.input_arrow("t", pa.table({"id": [6], "ts": ["2023-02-29 00:00:00"]}))   # no such day: nothing kept
    with pytest.raises(InputError, match="id"):
        p.input_arrow("t", pa.table({"id": [7, None]}))   # NOT NULL
    p.input_arrow("t", pa.table({"id": [8, 9], "x": ["1.5", "oops"]}), on_error="dead_letter",
                  dead_letter=str(tmp_path / "bad.jsonl"))
    p.input_arrow("t", pa.table({"id": [4], "x": pa.array([None], pa.float64())}), delete=True)
    p.wait_for_idle()
    got = {r["id"]: r for r in p.query("SELECT * FROM v")}
    assert sorted(got) == [1, 2, 3, 5, 8, (1 << 63) - 1]
    assert got[1]["x"] == 1.5 and math.isnan(got[2]["x"]) and got[3]["x"] is None
    assert str(got[1]["ts"]) == "2024-02-29 12:00:00" and got[(1 << 63) - 1]["s"] == "big"
    assert (tmp_path / "bad.jsonl").read_text().count("\n") == 1 and got[8]["x"] == 1.5


def test_foreach_chunk_in_arrow_keeps_null_and_nan_apart(make_pipeline):
    """``format="arrow"``: each changed step as a ``pyarrow.Table`` (the view's columns and ``__weight``), the same
    rows as the pandas form; a float column's NULL and NaN stay apart (pandas makes both NaN)."""
    import math
    import pyarrow as pa
    p = make_pipeline("CREATE TABLE t (k BIGINT, x DOUBLE); CREATE VIEW v AS SELECT k, x FROM t;", start=False)
    arrow, frames = [], []
    p.foreach_chunk("v", lambda chunk, seq: arrow.append((seq, chunk)), format="arrow")
    p.foreach_chunk("v", lambda chunk, seq: frames.append((seq, chunk)))
    with pytest.raises(ValueError, match="'pandas' or 'arrow'"):
        p.foreach_chunk("v", print, format="polars")
    p.start()
    p.input_arrow("t", pa.table({"k": [1, 2, (1 << 63) - 1], "x": [float("nan"), None, 0.5]}))
    p.wait_for_idle()
    p.input_arrow("t", pa.table({"k": [2], "x": pa.array([None], pa.float64())}), delete=True)
    p.wait_for_idle()
    assert [s for s, _ in arrow] == [s for s, _ in frames] and len(arrow) == 2
    first = arrow[0][1]
    assert isinstance(first, pa.Table) and first.column_names == ["k", "x", "__weight"]
    rows = {r["k"]: r for r in first.to_pylist()}
    assert math.isnan(rows[1]["x"]) and rows[2]["x"] is None and rows[(1 << 63) - 1]["__weight"] == 1
    assert arrow[1][1].to_pylist() == [{"k": 2, "x": None, "__weight": -1}]
    pdf = frames[0][1]
    assert sorted(pdf["k"].tolist()) == sorted(rows)
