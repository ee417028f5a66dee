"""Differential tests for DATE/TIMESTAMP/INTERVAL arithmetic, EXTRACT (including day-of-week numbering and
EPOCH), date_trunc, and casts of fractions to integers (DuckDB rounds), in projections and GROUP BY."""
from hypothesis import given

from ..support.differential import run_program, steps_strategy
from .test_differential_single import COLUMNS, ROW, SCHEMA

DATES = [
    ("d_interval", """SELECT id, ts + INTERVAL 1 DAY AS t1, ts - INTERVAL 90 MINUTE AS t2,
        date_trunc('month', ts) AS tm, date_trunc('day', ts) AS td FROM t""", False),
    ("d_semantics", """SELECT id, dt - DATE '2024-01-01' AS days, dt + INTERVAL 1 DAY AS next_day,
        dt - INTERVAL 2 HOUR AS before, dt + 3 AS d3, EXTRACT(DOW FROM dt) AS dow, EXTRACT(ISODOW FROM ts) AS idow,
        dayofweek(ts) AS dow2, EXTRACT(EPOCH FROM ts) AS ep, EXTRACT(WEEK FROM dt) AS wk, CAST(x AS INT) AS xi,
        CAST(d AS BIGINT) AS di, CAST(r AS SMALLINT) AS ri FROM t""", True),
    ("d_group", "SELECT date_trunc('hour', ts) AS hr, COUNT(*) AS n, MAX(x) AS mx FROM t "
                "GROUP BY date_trunc('hour', ts)", True),
    # found by the fuzzer: a difference of dates is a number, also with a literal before it, and so are its sums
    ("d_days", "SELECT id, dt - dt - ('2024-02-29' - dt) AS dd, (dt - DATE '2024-01-01') * 2 + ('2024-03-01' - dt) "
               "AS s FROM t", False),
]


@given(steps_strategy({"t": ROW}))
def test_dates(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, DATES, steps)
