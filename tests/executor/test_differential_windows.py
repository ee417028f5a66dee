"""Differential tests for window functions (ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD, running SUM/COUNT/AVG
with ROWS and RANGE frames, one and several PARTITION BYs, no PARTITION BY), top-k per group via
ROW_NUMBER() <= k, and ORDER BY ... LIMIT/OFFSET views.  Orders are total over the output columns, so
results do not depend on how ties are broken."""
from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, steps_strategy

SCHEMA = "CREATE TABLE a (k INT, x INT, v VARCHAR);"
COLUMNS = {"a": ["k", "x", "v"]}
TABLES = {"a": st.tuples(maybe(range(3)), maybe(range(-2, 4)), maybe(["p", "q", "r"]))}

WINDOWS = [
    ("w_rownum", "SELECT k, x, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x DESC, v) AS rn FROM a", True),
    ("w_topk", "SELECT k, x, v FROM (SELECT k, x, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x, v) AS rn "
               "FROM a) t WHERE rn <= 2", True),
    ("w_rank", "SELECT k, x, RANK() OVER (PARTITION BY k ORDER BY x) AS r, "
               "DENSE_RANK() OVER (PARTITION BY k ORDER BY x DESC) AS dr FROM a", False),
    ("w_lag", "SELECT k, x, v, LAG(x) OVER (PARTITION BY k ORDER BY x, v) AS px, "
              "LEAD(v, 1) OVER (PARTITION BY k ORDER BY x, v) AS nv FROM a", False),
    ("w_running", "SELECT k, x, SUM(x) OVER (PARTITION BY k ORDER BY x) AS rs, "
                  "COUNT(*) OVER (PARTITION BY k ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS c2, "
                  "AVG(x) OVER (PARTITION BY k) AS ax FROM a", True),
    ("w_two_partitions", "SELECT k, v, x, ROW_NUMBER() OVER (ORDER BY k, v, x) AS g, "
                         "COUNT(x) OVER (PARTITION BY v) AS nv FROM a WHERE x IS NOT NULL", False),
]


@given(steps_strategy(TABLES))
def test_window_functions(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, WINDOWS, steps)


LIMITS = [
    ("l_topk", "SELECT k, x FROM a ORDER BY x DESC, k LIMIT 3", True),
    ("l_offset", "SELECT v, x FROM a ORDER BY x NULLS FIRST, v LIMIT 2 OFFSET 1", True),
    ("l_grouped", "SELECT k, COUNT(*) AS n FROM a GROUP BY k ORDER BY n DESC, k LIMIT 2", False),
    ("l_hidden", "SELECT v FROM a ORDER BY k + x, v LIMIT 2", False),
    ("l_distinct", "SELECT DISTINCT v FROM a ORDER BY v DESC LIMIT 2", False),
]


@given(steps_strategy(TABLES))
def test_order_by_limit_views(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, LIMITS, steps)


TIME_SCHEMA = "CREATE TABLE bid (auction INT, price INT, date_time TIMESTAMP);"
TIME_COLUMNS = {"bid": ["auction", "price", "date_time"]}
T0 = __import__("datetime").datetime(2026, 11, 22, 10, 0, 0)
TIME_TABLES = {"bid": st.tuples(maybe(range(3)), maybe(range(0, 50, 7)),
                                maybe([T0 + __import__("datetime").timedelta(seconds=s) for s in (0, 1, 4.5, 9, 10, 23)]))}


def bucket(ts: str, slide_us: int, back: int = 0) -> str:
    """DuckDB's spelling of a window start: the row's timestamp floored to ``slide_us``, ``back`` slides back."""
    return f"make_timestamp(epoch_us({ts}) - (epoch_us({ts}) % {slide_us}) - {back * slide_us})"


HOPPED = " UNION ALL ".join(f"SELECT auction, price, {bucket('date_time', 2_000_000, i)} AS window_start FROM bid"
                            for i in range(3))
TIME_WINDOWS = [
    ("t_tumble", "SELECT window_start, window_end, COUNT(*) AS n, SUM(price) AS s "
                 "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end",
     True,
     f"SELECT {bucket('date_time', 10_000_000)} AS ws, {bucket('date_time', 10_000_000)} + INTERVAL 10 SECOND, "
     "COUNT(*), SUM(price) FROM bid WHERE date_time IS NOT NULL GROUP BY ws"),
    ("t_hop", "SELECT auction, window_start, MAX(price) AS m "
              "FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '6' SECOND) h GROUP BY auction, window_start",
     True,
     f"SELECT auction, window_start, MAX(price) FROM ({HOPPED}) h WHERE window_start IS NOT NULL "
     "GROUP BY auction, window_start"),
    # the Flink / Feldera spelling (planner.program.window_table_functions)
    ("t_tumble_flink", "SELECT window_start, window_end, COUNT(*) AS n, SUM(price) AS s FROM TABLE(TUMBLE(TABLE bid, "
                       "DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
     True,
     f"SELECT {bucket('date_time', 10_000_000)} AS ws, {bucket('date_time', 10_000_000)} + INTERVAL 10 SECOND, "
     "COUNT(*), SUM(price) FROM bid WHERE date_time IS NOT NULL GROUP BY ws"),
    ("t_hop_flink", "SELECT auction, window_start, MAX(price) AS m FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), "
                    "INTERVAL '2' SECOND, INTERVAL '6' SECOND)) h GROUP BY auction, window_start",
     True,
     f"SELECT auction, window_start, MAX(price) FROM ({HOPPED}) h WHERE window_start IS NOT NULL "
     "GROUP BY auction, window_start"),
]


@given(steps_strategy(TIME_TABLES))
def test_tumble_and_hop(make_pipeline, steps):
    run_program(make_pipeline, TIME_SCHEMA, TIME_COLUMNS, TIME_WINDOWS, steps)
