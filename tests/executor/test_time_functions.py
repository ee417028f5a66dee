"""Date and time functions where Spark's meaning differs from DuckDB's, checked on both executors against DuckDB.

``date_diff(unit, a, b)`` counts the unit boundaries crossed (DuckDB; Spark's DATEDIFF counts whole units: from
2024-02-29 to 2024-03-01 is a month in DuckDB and none in Spark), and EXTRACT of SECOND / MILLISECOND /
MICROSECOND gives whole seconds and the ms / us within the minute (Spark: seconds with a fraction; no ms).  With
every step on Spark no step may fail and be re-run on the driver.
"""
import datetime as dt
import random

from ..support.differential import statements_against_duckdb

SCHEMA = "CREATE TABLE t (k INT, a TIMESTAMP, b TIMESTAMP, d DATE, e DATE);"
UNITS = ["year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond", "microsecond"]
VIEWS = {
    "v_ts": "SELECT k, " + ", ".join(f"date_diff('{u}', a, b) AS {u}_ab" for u in UNITS) + " FROM t",
    "v_dates": "SELECT k, " + ", ".join(f"date_diff('{u}', d, e) AS {u}_de" for u in UNITS[:5]) + " FROM t",
    "v_parts": "SELECT k, EXTRACT(SECOND FROM a) AS s, EXTRACT(MILLISECOND FROM a) AS ms, "
               "EXTRACT(MICROSECOND FROM a) AS us, SECOND(b) AS s2 FROM t",
}


def rows(seed: int, n: int):
    rnd = random.Random(seed)
    base = dt.datetime(2024, 2, 29, 23, 59, 59, 999_999)
    out = []
    for k in range(n):
        a = base + dt.timedelta(microseconds=rnd.randint(-10 ** 14, 10 ** 14))
        b = a + rnd.choice([dt.timedelta(microseconds=1), dt.timedelta(seconds=1), dt.timedelta(hours=1),
                            dt.timedelta(days=1), dt.timedelta(days=-40), dt.timedelta(days=400)]) * rnd.randint(1, 3)
        if k % 5 == 0:
            a = dt.datetime(1969, 12, 31, 23, 59, 59, 500_000)   # before the epoch
        out.append((k, a, b, a.date(), b.date()))
    return out



def test_date_diff_and_extract_as_duckdb(make_pipeline, executor):
    steps = []
    for step in range(2):
        batch = [(k + 100 * step, *r) for k, *r in rows(step, 30)]
        steps.append("INSERT INTO t VALUES " + ", ".join(
            f"({k}, TIMESTAMP '{a}', TIMESTAMP '{b}', DATE '{d}', DATE '{e}')" for k, a, b, d, e in batch))
    statements_against_duckdb(make_pipeline, SCHEMA, VIEWS, steps, executor)
