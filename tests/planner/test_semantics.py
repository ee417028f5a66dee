"""One convention for every TIMESTAMP: naive, holding UTC wall time, on both executors and in queries."""
import datetime as dt

import duckdb
import pytest

SQL = """CREATE TABLE b (id INT, ts TIMESTAMP, d DATE);
CREATE MATERIALIZED VIEW tr AS SELECT id, date_trunc('hour', ts) AS h, ts AT TIME ZONE 'UTC' AS z,
  ts + INTERVAL 1 HOUR AS later FROM b;
CREATE MATERIALIZED VIEW tum AS SELECT window_start, window_end, COUNT(*) AS n
  FROM TUMBLE(b, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end;
CREATE MATERIALIZED VIEW hop AS SELECT window_start, window_end, COUNT(*) AS n
  FROM HOP(b, ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) GROUP BY window_start, window_end;
"""
ROWS = [{"id": 1, "ts": "2024-01-02T10:00:03Z", "d": "2024-01-02"},
        {"id": 2, "ts": "2024-01-02 12:30:07+02:00", "d": None},
        {"id": 3, "ts": "2024-01-02 10:00:08", "d": None}]
UTC = [(1, dt.datetime(2024, 1, 2, 10, 0, 3)), (2, dt.datetime(2024, 1, 2, 10, 30, 7)),
       (3, dt.datetime(2024, 1, 2, 10, 0, 8))]


def oracle():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE b (id INT, ts TIMESTAMP)")
    con.executemany("INSERT INTO b VALUES (?, ?)", UTC)
    epoch = "epoch_us(ts)"
    return {
        "tr": con.sql("SELECT id, date_trunc('hour', ts), ts, ts + INTERVAL 1 HOUR FROM b").fetchall(),
        "tum": con.sql(f"SELECT make_timestamp(w), make_timestamp(w + 10000000), COUNT(*) FROM "
                       f"(SELECT {epoch} - {epoch} % 10000000 AS w FROM b) GROUP BY w").fetchall(),
        "hop": con.sql(f"SELECT make_timestamp(w), make_timestamp(w + 10000000), COUNT(*) FROM "
                       f"(SELECT {epoch} - {epoch} % 5000000 - k * 5000000 AS w FROM b, range(2) r(k)) "
                       f"GROUP BY w").fetchall(),
    }


@pytest.mark.parametrize("on_spark", [False, True])
def test_timestamps_are_naive_utc_everywhere(make_pipeline, placement, on_spark):
    if on_spark:
        placement["local_step_rows"] = 0
    p = make_pipeline(SQL)
    p.input_json("b", ROWS)
    p.wait_for_idle()
    assert p.status()["steps_run_on"]["spark" if on_spark else "driver"] >= 1
    expected = oracle()
    for view in ("tr", "tum", "hop"):
        t = p.query_arrow(f"SELECT * FROM {view}")
        for f in t.schema:
            if f.type.id == 18 or str(f.type).startswith("timestamp"):
                assert f.type.tz is None, (view, f)
        got = sorted(tuple(r.values()) for r in t.to_pylist())
        assert got == sorted(expected[view]), view
