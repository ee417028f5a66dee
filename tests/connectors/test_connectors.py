"""The connector framework: declarations checked at from_sql, positions committed with the step, sinks fed
exactly once from the outbox, failures that stay inside one connector, pause/resume and backpressure.

The sources here are small Python sources registered by the test (the README's custom-source pattern);
the connectors of real systems have their own test files."""
import glob
import json
import os
import random
import threading
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from connectors import Source, SourceBatch, opt, register_source
from planner.errors import ConnectorError
from sqlengine import Pipeline
from sqlengine.ingest.inputs import json_chunks
from tests.support.oracle import Model, bag, bag_from_changes, diff

FEEDS = {}        # feed name -> list of batches of insert_delete records, appended by the tests
FAIL = {}         # feed name -> number of polls that raise before the source works


@register_source
class ListSource(Source):
    """Batches from ``FEEDS[feed]``; the position is the number of batches read."""
    transport = "test_list"
    OPTIONS = {"feed": opt(str, required=True, doc="the name of the feed")}

    def open(self, position):
        self.next = position or 0

    def poll(self, max_rows):
        feed = self.config["feed"]
        if FAIL.get(feed, 0) > 0:
            FAIL[feed] -= 1
            raise ConnectionError(f"feed {feed} is unreachable")
        batches = FEEDS[feed]
        if self.next >= len(batches):
            time.sleep(0.01)
            return None
        recs = batches[self.next]
        self.next += 1
        return SourceBatch(lambda errs, n, recs=recs: json_chunks(self.ctx.table, recs, "insert_delete", errs, n),
                           self.next, bytes=len(json.dumps(recs)))

    def finished(self):
        return self.config["feed"].startswith("bounded") and self.next >= len(FEEDS[self.config["feed"]])


@register_source
class EndlessSource(Source):
    """As many rows as it is asked for, for ever (for backpressure)."""
    transport = "test_endless"

    def open(self, position):
        self.next = position or 0

    def poll(self, max_rows):
        n = min(max_rows, 20_000)
        recs = [{"insert": {"k": (self.next + i) % 7, "v": 1}} for i in range(n)]
        self.next += n
        return SourceBatch(lambda errs, m, recs=recs: json_chunks(self.ctx.table, recs, "insert_delete", errs, m),
                           self.next)


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def source(feed: str, **top) -> dict:
    return {"name": "in", "transport": {"name": "test_list", "config": {"feed": feed}}, **top}


VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k"


def program(feed: str, out: str, extra_sinks=()) -> str:
    return (f"CREATE TABLE t (k INT, v BIGINT) WITH ('connectors' = '{decl(source(feed))}');\n"
            f"CREATE MATERIALIZED VIEW agg WITH ('connectors' = '"
            + decl({"name": "log", "transport": {"name": "file_output", "config": {"path": f"{out}/log"}}},
                   {"name": "snap", "transport": {"name": "file_output", "config": {"path": f"{out}/snap",
                                                                                     "mode": "snapshot"}},
                    "format": {"name": "csv"}}, *extra_sinks)
            + f"') AS {VIEW};")


def random_batch(rng, live):
    recs = []
    for _ in range(rng.randint(1, 12)):
        if live and rng.random() < 0.35:
            row = live.pop(rng.randrange(len(live)))
            recs.append({"delete": row})
        else:
            row = {"k": rng.choice([1, 2, 3, None]), "v": rng.choice([1, 5, None, -2])}
            live.append(row)
            recs.append({"insert": row})
            if rng.random() < 0.2:   # a duplicate
                live.append(dict(row))
                recs.append({"insert": dict(row)})
    return recs


def wait_for(pred, timeout=30.0, what="condition"):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def expected(live):
    model = Model("CREATE TABLE t (k INT, v BIGINT);", {"t": ["k", "v"]})
    model.insert("t", [(r["k"], r["v"]) for r in live])
    return model.view(model.duck(), VIEW)


def check_outputs(p, out, live):
    want = expected(live)
    got = bag([tuple(r.values()) for r in p.query("SELECT * FROM agg")])
    assert not diff(got, want), diff(got, want)
    files = sorted(glob.glob(f"{out}/log/step-*.parquet"))
    changes = pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True) if files else None
    if changes is not None:
        assert (changes.groupby("__step").size() > 0).all()
        got_log = bag_from_changes(changes.drop(columns=["__step"]))
        assert not diff(got_log, want), diff(got_log, want)
    snap = pd.read_csv(f"{out}/snap/snapshot.csv", keep_default_na=True) if os.path.exists(
        f"{out}/snap/snapshot.csv") else pd.DataFrame(columns=["k", "n", "s"])
    got_snap = bag([tuple(None if pd.isna(x) else int(x) for x in r) for r in snap.itertuples(index=False)])
    assert not diff(got_snap, want), diff(got_snap, want)


def test_source_to_file_sinks_differential_with_restart(tmp_path):
    """Random inserts/deletes (duplicates, NULLs) through a source; after every batch the view, the integrated
    changelog files and the snapshot file equal DuckDB's recomputation.  Halfway the pipeline stops and a new
    one resumes from the committed positions: nothing is read twice or missed."""
    feed, out, store = "diff", str(tmp_path / "out"), str(tmp_path / "store")
    FEEDS[feed] = []
    rng, live = random.Random(7), []
    p = Pipeline.from_sql(program(feed, out), storage_dir=store)
    p.start()
    for i in range(16):
        if i == 8:   # restart
            p.stop()
            p = Pipeline.from_sql(program(feed, out), storage_dir=store)
            p.start()
        FEEDS[feed].append(random_batch(rng, live))
        wait_for(lambda: p.status()["connectors"]["t.in"]["position"] == len(FEEDS[feed]), what="the source")
        p.wait_for_idle()
        check_outputs(p, out, live)
    st = p.status()["connectors"]
    assert st["agg.log"]["lag"] == 0 and st["agg.snap"]["state"] == "running"
    assert not os.listdir(os.path.join(store, "outbox", "agg")), "delivered steps leave the outbox"
    p.stop()


def test_bounded_source_completes_and_positions_survive_restart(tmp_path):
    feed = "bounded-1"
    FEEDS[feed] = [[{"insert": {"k": 1, "v": i}}] for i in range(5)]
    store = str(tmp_path / "store")
    p = Pipeline.from_sql(program(feed, str(tmp_path / "out")), storage_dir=store)
    p.start()
    p.wait_for_completion(timeout_s=30)
    assert p.status()["connectors"]["t.in"]["state"] == "finished"
    assert list(p.query("SELECT * FROM agg")) == [{"k": 1, "n": 5, "s": 10}]
    p.stop()
    FEEDS[feed].append([{"insert": {"k": 1, "v": 100}}])
    p = Pipeline.from_sql(program(feed, str(tmp_path / "out")), storage_dir=store)
    p.start()
    p.wait_for_completion(timeout_s=30)
    assert list(p.query("SELECT * FROM agg")) == [{"k": 1, "n": 6, "s": 110}]   # only the new batch was read
    p.stop()


def test_failing_source_retries_and_other_inputs_go_on(tmp_path):
    feed = "flaky"
    FEEDS[feed], FAIL[feed] = [[{"insert": {"k": 1, "v": 1}}]], 3
    sql = (f"CREATE TABLE t (k INT, v BIGINT) WITH ('connectors' = '{decl(source(feed))}');\n"
           "CREATE TABLE u (k INT);\nCREATE MATERIALIZED VIEW cu AS SELECT COUNT(*) AS n FROM u;\n"
           f"CREATE MATERIALIZED VIEW agg AS {VIEW};")
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "s"))
    p.start()
    wait_for(lambda: p.status()["connectors"]["t.in"]["errors"] >= 1, what="a source error")
    st = p.status()
    assert st["state"] == "running"
    assert "t.in" in st["connectors"]["t.in"]["last_error"] and "unreachable" in st["connectors"]["t.in"]["last_error"]
    p.input_json("u", [{"k": 1}])
    p.wait_for_idle()
    assert list(p.query("SELECT n FROM cu")) == [{"n": 1}]
    wait_for(lambda: p.status()["connectors"]["t.in"]["position"] == 1, what="the source to recover")
    p.wait_for_idle()
    assert list(p.query("SELECT k, n FROM agg")) == [{"k": 1, "n": 1}]
    assert p.status()["connectors"]["t.in"]["state"] == "running"
    p.stop()


def test_failing_sink_retries_without_stopping_the_pipeline(tmp_path):
    feed, out = "sinkfail", tmp_path / "out"
    FEEDS[feed] = [[{"insert": {"k": 1, "v": 1}}]]
    out.mkdir()
    (out / "log").write_text("a file where the sink wants a directory")
    p = Pipeline.from_sql(program(feed, str(out)), storage_dir=str(tmp_path / "s"))
    p.start()
    wait_for(lambda: p.status()["connectors"]["agg.log"]["errors"] >= 1, what="a sink error")
    wait_for(lambda: p.status()["connectors"]["t.in"]["position"] == 1, what="the source")
    p.wait_for_idle()   # does not wait for a failing sink
    st = p.status()
    assert st["state"] == "running" and st["connectors"]["agg.log"]["state"] == "retrying"
    assert "agg.log" in st["connectors"]["agg.log"]["last_error"]
    assert list(p.query("SELECT k, n FROM agg")) == [{"k": 1, "n": 1}]
    (out / "log").unlink()    # the sink recovers and writes what waited in the outbox
    wait_for(lambda: p.status()["connectors"]["agg.log"]["state"] == "running", timeout=60, what="the sink")
    p.wait_for_idle()
    check_outputs(p, str(out), [{"k": 1, "v": 1}])
    p.stop()


def test_pause_and_resume_a_source(tmp_path):
    feed = "pausable"
    FEEDS[feed] = [[{"insert": {"k": 1, "v": 1}}]]
    p = Pipeline.from_sql(program(feed, str(tmp_path / "out")), storage_dir=str(tmp_path / "s"))
    p.start()
    wait_for(lambda: p.status()["connectors"]["t.in"]["position"] == 1, what="the source")
    p.pause_connector("t", "in")
    wait_for(lambda: p.status()["connectors"]["t.in"]["state"] == "paused", what="paused")
    FEEDS[feed].append([{"insert": {"k": 2, "v": 1}}])
    time.sleep(0.3)
    assert p.status()["connectors"]["t.in"]["position"] == 1
    p.resume_connector("t", "in")
    wait_for(lambda: p.status()["connectors"]["t.in"]["position"] == 2, what="resumed")
    with pytest.raises(Exception, match="no connector 'nope' on t"):
        p.pause_connector("t", "nope")
    p.stop()


def test_backpressure_bounds_the_backlog(tmp_path, monkeypatch):
    from sqlengine.ingest import sources
    monkeypatch.setattr(sources, "MAX_BACKLOG_ROWS", 50_000)
    monkeypatch.setattr(sources, "BATCH_ROWS", 10_000)
    sql = ("CREATE TABLE t (k INT, v BIGINT) WITH ('connectors' = '[{\"name\": \"gen\", \"transport\": "
           "{\"name\": \"test_endless\"}}]');\nCREATE MATERIALIZED VIEW agg AS " + VIEW + ";")
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "s"))
    p.start()
    wait_for(lambda: p.status()["step"] >= 1, what="a first step")
    p.pause()      # no more steps: the source must stop at the bound
    wait_for(lambda: p.status()["connectors"]["t.gen"]["state"] == "backpressure", what="backpressure")
    time.sleep(0.3)
    backlog = p.log.backlog_rows(p.store.current.log_position[0])
    assert backlog < 50_000 + 20_000
    p.resume()
    p.stop(force=True)


@pytest.mark.parametrize("conn, fragment, needle", [
    ('[{"transport": {"name": "kafak_input"}}]', 'unknown transport "kafak_input"; tables take sources:', '"kafak_input"'),
    ('[{"transport": {"name": "file_output", "config": {"path": "x"}}}]', "file_output is a sink; tables take sources",
     '"file_output"'),
    ('[{"transport": {"name": "test_list", "config": {"fed": "x"}}}]',
     'unknown option "fed" (did you mean "feed"?). Options: feed', '"fed"'),
    ('[{"transport": {"name": "test_list", "config": {}}}]', 'option "feed" is required', "'["),
    ('[{"transport": {"name": "test_list", "config": {"feed": 3}}}]', 'option "feed" must be string, not 3', '"feed"'),
    ('[{"transport": {"name": "test_list", "config": {"feed": "x"}}, "format": {"name": "csv"}}]',
     "transport test_list takes no format", '"format"'),
    ('[{"transport": {"name": "test_list", "config": {"feed": "x"}}, "on_eror": "reject"}]',
     'connector: unknown option "on_eror" (did you mean "on_error"?)', '"on_eror"'),
    ('[{"transport": {"name": "test_list", "config": {"feed": "x"}}}, '
     '{"transport": {"name": "test_list", "config": {"feed": "x"}}, "name": "test_list_0"}]',
     "two connectors of t are named 'test_list_0'", '"test_list_0"'),
    ('[{"transport": {"name": "test_list", "config": {"feed": "x"}}]', "'connectors' is not valid JSON", "]'"),
])
def test_declaration_errors_point_into_the_sql(conn, fragment, needle, tmp_path):
    sql = f"CREATE TABLE s (a INT);\nCREATE TABLE t (k INT) WITH ('connectors' = '{conn}');"
    with pytest.raises(ConnectorError) as info:
        Pipeline.from_sql(sql, storage_dir=str(tmp_path))
    err = info.value
    assert fragment in err.message, err.message
    assert err.line == 2
    line = sql.split("\n")[1]
    assert err.column - 1 == line.index(needle), (str(err), needle)


def test_sink_declaration_errors(tmp_path):
    base = "CREATE TABLE t (k INT);\nCREATE VIEW v WITH ('connectors' = '{}') AS SELECT k FROM t;"
    for conn, fragment in [
        ('[{"transport": {"name": "file_output", "config": {"path": "o"}}, "format": {"name": "avro9"}}]',
         "format 'avro9' is not supported; formats: parquet, csv, json"),
        ('[{"transport": {"name": "file_output", "config": {"path": "o", "mode": "append"}}}]',
         "option \"mode\" must be one of 'changelog', 'snapshot', not 'append'"),
        ('[{"transport": {"name": "test_list", "config": {"feed": "x"}}}]', "test_list is a source; views take sinks"),
    ]:
        with pytest.raises(ConnectorError, match="line 2") as info:
            Pipeline.from_sql(base.format(conn), storage_dir=str(tmp_path))
        assert fragment in info.value.message


def test_output_parquet_is_a_file_sink(tmp_path):
    feed = "bounded-op"
    FEEDS[feed] = [[{"insert": {"k": 1, "v": 2}}], [{"delete": {"k": 1, "v": 2}}, {"insert": {"k": 2, "v": 3}}]]
    sql = (f"CREATE TABLE t (k INT, v BIGINT) WITH ('connectors' = '{decl(source(feed))}');\n"
           f"CREATE VIEW agg AS {VIEW};")
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "s"))
    p.output_parquet("agg", str(tmp_path / "pq"))
    p.start()
    p.wait_for_completion(timeout_s=30)
    files = sorted(glob.glob(str(tmp_path / "pq" / "step-*.parquet")))
    changes = pd.concat([pq.read_table(f).to_pandas() for f in files])
    assert list(changes.columns) == ["k", "n", "s", "__weight", "__step"]
    assert bag_from_changes(changes.drop(columns=["__step"])) == bag([(2, 1, 3)])
    assert p.status()["connectors"]["agg.output_parquet_0"]["steps"] == len(files)
    p.stop()


def test_threads_end_with_the_pipeline(tmp_path):
    feed = "bounded-threads"
    FEEDS[feed] = [[{"insert": {"k": 1, "v": 1}}]]
    before = set(threading.enumerate())
    p = Pipeline.from_sql(program(feed, str(tmp_path / "out")), storage_dir=str(tmp_path / "s"))
    p.start()
    p.wait_for_completion(timeout_s=30)
    mine = [t for t in set(threading.enumerate()) - before if t.name.startswith(("sqlengine-source", "sqlengine-sink"))]
    assert len(mine) >= 2, mine   # the sinks (the bounded source may have ended already)
    p.stop()
    alive = [t.name for t in mine if t.is_alive()]
    assert not alive, alive


def test_snapshot_sink_added_later_starts_from_the_contents(tmp_path):
    """A snapshot sink declared when the pipeline already has state starts from the view's contents."""
    feed, store, out = "bounded-late", str(tmp_path / "s"), str(tmp_path / "out")
    FEEDS[feed] = [[{"insert": {"k": 1, "v": 2}}, {"insert": {"k": 2, "v": 3}}]]
    plain = (f"CREATE TABLE t (k INT, v BIGINT) WITH ('connectors' = '{decl(source(feed))}');\n"
             f"CREATE MATERIALIZED VIEW agg AS {VIEW};")
    p = Pipeline.from_sql(plain, storage_dir=store)
    p.start()
    p.wait_for_completion(timeout_s=30)
    p.stop()
    FEEDS[feed].append([{"delete": {"k": 1, "v": 2}}, {"insert": {"k": 3, "v": 4}}])
    p = Pipeline.from_sql(program(feed, out), storage_dir=store)
    p.start()
    p.wait_for_completion(timeout_s=30)
    want = bag([(2, 1, 3), (3, 1, 4)])
    snap = pd.read_csv(f"{out}/snap/snapshot.csv")
    assert bag([tuple(int(x) for x in r) for r in snap.itertuples(index=False)]) == want
    p.stop()


def test_snapshot_mode_needs_a_materialized_view(tmp_path):
    sql = ("CREATE TABLE t (k INT);\nCREATE VIEW v WITH ('connectors' = '[{\"transport\": {\"name\": \"file_output\", "
           "\"config\": {\"path\": \"o\", \"mode\": \"snapshot\"}}}]') AS SELECT k FROM t;")
    with pytest.raises(ConnectorError, match="snapshot mode needs a MATERIALIZED VIEW"):
        Pipeline.from_sql(sql, storage_dir=str(tmp_path))


def test_file_sink_refuses_another_pipelines_output(tmp_path):
    """A new pipeline (new storage) pointed at a directory that holds another pipeline's output would take
    that output's steps for its own: the sink fails with a clear error instead."""
    feed, out = "bounded-owner", str(tmp_path / "out")
    FEEDS[feed] = [[{"insert": {"k": 1, "v": 2}}]]
    p = Pipeline.from_sql(program(feed, out), storage_dir=str(tmp_path / "s1"))
    p.start()
    p.wait_for_completion(timeout_s=30)
    p.stop()
    p = Pipeline.from_sql(program(feed, out), storage_dir=str(tmp_path / "s2"))
    p.start()
    wait_for(lambda: p.status()["connectors"]["agg.log"]["errors"] >= 1, what="the sink's error")
    assert "holds the output of another pipeline" in p.status()["connectors"]["agg.log"]["last_error"]
    p.stop(force=True)
    p = Pipeline.from_sql(program(feed, out), storage_dir=str(tmp_path / "s1"))   # the owner goes on
    p.start()
    p.wait_for_completion(timeout_s=30)
    assert p.status()["connectors"]["agg.log"]["errors"] == 0
    p.stop()


def test_changelog_sink_added_later_gets_the_changes_from_then_on(tmp_path):
    feed, store = "bounded-late-log", str(tmp_path / "s")
    FEEDS[feed] = [[{"insert": {"k": 1, "v": 2}}]]
    base = f"CREATE TABLE t (k INT, v BIGINT) WITH ('connectors' = '{decl(source(feed))}');\n"
    p = Pipeline.from_sql(base + f"CREATE VIEW agg AS {VIEW};", storage_dir=store)
    p.start()
    p.wait_for_completion(timeout_s=30)
    p.stop()
    FEEDS[feed].append([{"insert": {"k": 2, "v": 3}}])
    sink = decl({"name": "log", "transport": {"name": "file_output", "config": {"path": str(tmp_path / "log")}}})
    p = Pipeline.from_sql(base + f"CREATE VIEW agg WITH ('connectors' = '{sink}') AS {VIEW};", storage_dir=store)
    p.start()
    p.wait_for_completion(timeout_s=30)
    assert p.status()["connectors"]["agg.log"]["errors"] == 0, p.status()["connectors"]["agg.log"]["last_error"]
    changes = pd.concat([pq.read_table(f).to_pandas() for f in sorted(glob.glob(str(tmp_path / "log" / "*.parquet")))])
    assert bag_from_changes(changes.drop(columns=["__step"])) == bag([(2, 1, 3)])
    p.stop()
