"""Differential tests for TIMESTAMP/INTERVAL arithmetic and date_trunc, in projections and GROUP BY."""
from hypothesis import given

from .differential import run_program, steps_strategy
from .test_differential_single import COLUMNS, ROW, SCHEMA

DATES = [
    ("d_interval", """SELECT id, ts + INTERVAL 1 DAY AS t1, ts - INTERVAL 90 MINUTE AS t2,
        date_trunc('month', ts) AS tm, date_trunc('day', ts) AS td FROM t""", False),
    ("d_group", "SELECT date_trunc('hour', ts) AS hr, COUNT(*) AS n, MAX(x) AS mx FROM t "
                "GROUP BY date_trunc('hour', ts)", True),
]


@given(steps_strategy({"t": ROW}))
def test_dates(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, DATES, steps)
