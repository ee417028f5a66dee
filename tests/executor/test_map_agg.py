"""MAP_AGG and ARRAY_AGG(DISTINCT ...) under random inserts and deletes, every view compared after every step with
DuckDB's recomputation (planner.aggregate_functions).

DuckDB has no MAP_AGG: the oracle groups by (group, key) first and takes each key's greatest value (``MAX``), or
the value of its last row in the ORDER BY (the last of a sorted LIST), then lists the keys' ``(key, value)`` ROWs
in key order (a LIST of ROWs is what a MAP reads as in Python: the comparison also holds the entries to the
canonical order, by key).  The keys repeat within a group, with NULL keys, NULL values and rows the FILTER drops.
"""
import random
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, steps_strategy

SCHEMA = "CREATE TABLE t (g INT, k VARCHAR, i INT, v INT, o INT, p BOOLEAN, d DECIMAL(6,2), x DOUBLE);"
COLUMNS = {"t": ["g", "k", "i", "v", "o", "p", "d", "x"]}
VALUES = [range(3), ["a", "b", "ab", ""], range(-2, 3), [0, 1, 2, 10], range(2), [True, False],
          [Decimal("1.50"), Decimal("-2.25"), Decimal("0.00")], [0.5, -1.25, 2.0]]
ROW = st.tuples(*[maybe(v) for v in VALUES])


def entries(where: str = "mk IS NOT NULL") -> str:
    """The oracle's MAP: the ``(mk, mv)`` ROWs of the rows (one per key) meeting ``where``, by key; NULL for none."""
    return f"LIST(ROW(mk, mv) ORDER BY mk) FILTER (WHERE {where})"


PER_KEY = "SELECT g, k AS mk, MAX(v) AS mv, COUNT(*) AS n FROM t GROUP BY g, k"
VIEWS = [
    ("v_map", "SELECT g, MAP_AGG(k, v) AS m, COUNT(*) AS n FROM t GROUP BY g", True,
     f"SELECT g, {entries()} AS m, SUM(n) AS n FROM ({PER_KEY}) GROUP BY g"),
    # a key's value: its last row's in the ORDER BY (NULLs last), on a tie the greatest (NULL first)
    ("v_map_order", "SELECT g, MAP_AGG(i, k ORDER BY o DESC) FILTER (WHERE p) AS m FROM t GROUP BY g", True,
     f"SELECT g, {entries('mk IS NOT NULL AND f > 0')} AS m FROM (SELECT g, i AS mk, "
     "(LIST(k ORDER BY o DESC NULLS LAST, k ASC NULLS FIRST) FILTER (WHERE p))[-1] AS mv, COUNT(*) FILTER "
     "(WHERE p) AS f FROM t GROUP BY g, i) GROUP BY g"),
    ("v_map_global", "SELECT MAP_AGG(d, x) AS m, MAP_AGG(p, i) AS mb FROM t", True,
     f"SELECT * FROM (SELECT {entries()} AS m FROM (SELECT d AS mk, MAX(x) AS mv FROM t GROUP BY d)) CROSS JOIN "
     f"(SELECT {entries()} AS mb FROM (SELECT p AS mk, MAX(i) AS mv FROM t GROUP BY p))"),
    ("v_distinct", "SELECT g, ARRAY_AGG(DISTINCT v) AS a, LIST(DISTINCT k ORDER BY k DESC) FILTER (WHERE p) AS b, "
                   "ARRAY_AGG(DISTINCT x) AS c FROM t GROUP BY g", True,
     "SELECT g, ARRAY_AGG(DISTINCT v ORDER BY v) AS a, LIST(DISTINCT k ORDER BY k DESC) FILTER (WHERE p) AS b, "
     "ARRAY_AGG(DISTINCT x ORDER BY x) AS c FROM t GROUP BY g"),
    # the MAP read downstream: a value by key, and its size (NULL for no map)
    ("v_on_map", "SELECT m['a'] AS a, cardinality(m) AS c, COUNT(*) AS n FROM v_map GROUP BY m['a'], cardinality(m)",
     False,
     "SELECT a, c, COUNT(*) AS n FROM (SELECT g, MAX(mv) FILTER (WHERE mk = 'a') AS a, "
     f"CASE WHEN COUNT(mk) > 0 THEN COUNT(mk) END AS c FROM ({PER_KEY}) GROUP BY g) GROUP BY a, c"),
]


@given(steps_strategy({"t": ROW}, max_steps=4))
def test_map_agg_and_distinct_lists(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)


def test_map_agg_and_distinct_lists_on_spark(make_pipeline, placement):
    """The same views with every step and operator on Spark: two steps of seeded random rows (CI's time)."""
    placement.update(local_step_rows=0, driver_rows=0)
    rnd = random.Random(11)

    def rows(n):
        return [tuple(rnd.choice([None] + list(v)) for v in VALUES) for _ in range(n)]
    steps = [[("t", "insert", rows(10), 0, "pandas")],
             [("t", "insert", rows(4), 0, "json"), ("t", "delete_existing", [None] * 4, 5, "pandas")]]
    made = []

    def tracked(*a, **kw):
        made.append(make_pipeline(*a, **kw))
        return made[-1]
    run_program(tracked, SCHEMA, COLUMNS, VIEWS, steps)
    stats = made[0].engine.stats
    assert stats.spark_fallbacks == 0 and stats.steps_spark and not stats.steps_local, stats.last_spark_error
