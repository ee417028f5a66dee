"""NOW() in views: a temporal filter driven by the pipeline's clock (set_clock / advance_clock here; wall time
by default).  Rows enter the view when inserted and leave it when the clock passes them; deletes see the same
clock as inserts; the committed clock survives a restart; checked against DuckDB with the same clock value."""
import random

import duckdb
import pandas as pd
import pytest

from planner.errors import InputError, UnsupportedError
from sqlengine import Pipeline
from tests.support.oracle import bag, diff

PROGRAM = ("CREATE TABLE ev (id INT, ts TIMESTAMP, v INT);\n"
           "CREATE MATERIALIZED VIEW recent AS SELECT id, v FROM ev WHERE ts > NOW() - INTERVAL 1 HOUR;\n"
           "CREATE MATERIALIZED VIEW per_day AS SELECT CURRENT_DATE AS today, COUNT(*) AS n FROM ev "
           "WHERE CAST(ts AS DATE) = CURRENT_DATE;")
T0 = pd.Timestamp("2024-03-01 10:00:00")


def expected(rows, now):
    con = duckdb.connect()
    con.execute("CREATE TABLE ev (id INT, ts TIMESTAMP, v INT)")
    if rows:
        con.executemany("INSERT INTO ev VALUES (?, ?, ?)", rows)
    recent = con.execute("SELECT id, v FROM ev WHERE ts > ?::TIMESTAMP - INTERVAL 1 HOUR", [now]).fetchall()
    per_day = con.execute("SELECT CAST(?::TIMESTAMP AS DATE), COUNT(*) FROM ev WHERE CAST(ts AS DATE) = "
                          "CAST(?::TIMESTAMP AS DATE)", [now, now]).fetchall()
    return bag(recent), bag(per_day)


def check(p, rows, now):
    recent, per_day = expected(rows, now)
    got = bag(tuple(r.values()) for r in p.query("SELECT * FROM recent"))
    assert not diff(got, recent), (now, diff(got, recent))
    got = bag(tuple(r.values()) for r in p.query("SELECT * FROM per_day"))
    assert not diff(got, per_day), (now, diff(got, per_day))


def test_temporal_filter_follows_the_clock(make_pipeline, tmp_path):
    storage = str(tmp_path / "s")
    p = make_pipeline(PROGRAM, storage_dir=storage, start=False)
    p.set_clock(T0)
    p.start()
    rng = random.Random(2)
    rows, now = [], T0
    for i in range(25):
        batch = [(rng.randrange(100), now - pd.Timedelta(minutes=rng.uniform(-30, 120)), rng.randrange(9))
                 for _ in range(rng.randint(0, 8))]
        if batch:
            p.input_pandas("ev", pd.DataFrame(batch, columns=["id", "ts", "v"]).astype({"ts": "datetime64[us]"}))
            rows += [(a, b.to_pydatetime(), c) for a, b, c in batch]
        if rows and rng.random() < 0.3:   # a delete sees the same clock as the insert did
            gone = rows.pop(rng.randrange(len(rows)))
            p.input_pandas("ev", pd.DataFrame([gone], columns=["id", "ts", "v"]).astype({"ts": "datetime64[us]"}),
                           delete=True)
        step = rng.choice([0, 60, 600, 1800, 7200, 50_000])
        p.advance_clock(step)
        now = now + pd.Timedelta(seconds=step)
        p.wait_for_idle()
        check(p, rows, now)
    # a restart resumes at the committed clock (a manual clock is not kept: set it again)
    p.stop()
    p = make_pipeline(PROGRAM, storage_dir=storage, start=False)
    p.set_clock(now)
    p.start()
    p.wait_for_idle()
    check(p, rows, now)
    p.advance_clock(3 * 3600)
    p.wait_for_idle()
    check(p, rows, now + pd.Timedelta(hours=3))


def test_wall_clock_steps_without_input(make_pipeline):
    """By default the clock is wall time: a pipeline with NOW() steps by itself as the clock advances."""
    from sqlengine import RuntimeConfig
    p = make_pipeline("CREATE TABLE t (ts TIMESTAMP);\nCREATE MATERIALIZED VIEW v AS SELECT ts FROM t "
                      "WHERE ts > NOW() - INTERVAL 1 SECOND",
                      runtime_config=RuntimeConfig(clock_resolution_usecs=100_000))
    p.input_pandas("t", pd.DataFrame({"ts": [pd.Timestamp.utcnow().tz_localize(None)]}).astype({"ts": "datetime64[us]"}))
    p.wait_for_idle()
    assert len(list(p.query("SELECT * FROM v"))) == 1
    import time
    end = time.monotonic() + 10
    while list(p.query("SELECT * FROM v")):   # the row ages out with no further input
        assert time.monotonic() < end
        time.sleep(0.1)


def test_clock_errors():
    with pytest.raises(UnsupportedError, match="random"):
        Pipeline.from_sql("CREATE TABLE t (a INT); CREATE VIEW v AS SELECT a, random() AS r FROM t")
    p = Pipeline.from_sql("CREATE TABLE t (ts TIMESTAMP); CREATE VIEW v AS SELECT ts FROM t WHERE ts < NOW()")
    with pytest.raises(InputError, match="unknown table '__clock'"):
        p.input_pandas("__clock", pd.DataFrame({"now": [T0]}))
