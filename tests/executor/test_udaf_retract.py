"""Python aggregates with ``retract``: each group's accumulator is kept (pickled, beside the group's output) and
updated by a step's rows alone, on both executors, each view compared with DuckDB after every step.  The work
per change follows the change (one ``accumulate`` for one inserted row, whatever the group holds), and the
accumulators survive a restart.
"""
from collections import Counter

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

import sqlengine

from ..support.differential import maybe, run_program, runs_on, steps_strategy


class _Multiset:
    """The non-NULL values as a multiset (a Counter)."""

    def create(self):
        return Counter()

    def accumulate(self, acc, x):
        if x is not None:
            acc[x] += 1

    def retract(self, acc, x):
        if x is not None:
            acc[x] -= 1
            if not acc[x]:
                del acc[x]


@sqlengine.udaf("VARCHAR", ["VARCHAR"])
class Sorted(_Multiset):
    """The non-NULL texts, sorted, joined by '+'."""

    def finish(self, acc):
        return "+".join(sorted(acc.elements())) if acc else None


@sqlengine.udaf("BIGINT", ["BIGINT"])
class Total:
    """SUM(k): NULL over no non-NULL value (an immutable accumulator: a new tuple each time)."""

    def create(self):
        return (0, 0)

    def accumulate(self, acc, k):
        return acc if k is None else (acc[0] + k, acc[1] + 1)

    def retract(self, acc, k):
        return acc if k is None else (acc[0] - k, acc[1] - 1)

    def finish(self, acc):
        return acc[0] if acc[1] else None


@sqlengine.udaf("DOUBLE", ["BIGINT"])
class Spread(_Multiset):
    """MAX(k) - MIN(k) as a DOUBLE."""

    def finish(self, acc):
        return float(max(acc) - min(acc)) if acc else None


SCHEMA = "CREATE TABLE t (g INT, x DOUBLE, s VARCHAR, k BIGINT);"
COLUMNS = {"t": ["g", "x", "s", "k"]}
ROW = st.tuples(maybe(range(3)), maybe([0.5, -1.25, 0.0, -0.0, 8.0]), maybe(["a", "b", "ab", ""]),
                maybe(range(-3, 4)))
VIEWS = [
    ("r_group", "SELECT g, sorted(s) AS ss, total(k) AS tk, COUNT(*) AS n, COUNT(s) AS ns, "
     "total(k) FILTER (WHERE x > 0) AS tf FROM t GROUP BY g", True,
     "SELECT g, STRING_AGG(s, '+' ORDER BY s) AS ss, SUM(k) AS tk, COUNT(*) AS n, COUNT(s) AS ns, "
     "SUM(k) FILTER (WHERE x > 0) AS tf FROM t GROUP BY g"),
    ("r_global", "SELECT sorted(s) AS ss, total(k) AS tk, spread(k) AS sp, COUNT(*) AS n FROM t", True,
     "SELECT STRING_AGG(s, '+' ORDER BY s) AS ss, SUM(k) AS tk, CAST(MAX(k) - MIN(k) AS DOUBLE) AS sp, "
     "COUNT(*) AS n FROM t"),
    ("r_float_key", "SELECT x, spread(k) AS sp FROM t GROUP BY x HAVING total(k) >= 0", False,
     "SELECT x, CAST(MAX(k) - MIN(k) AS DOUBLE) AS sp FROM t GROUP BY x HAVING SUM(k) >= 0"),
    ("r_correlated", "SELECT g, (SELECT total(i.k) FROM t AS i WHERE i.g = o.g + 1) AS n FROM t AS o", True,
     "SELECT g, (SELECT SUM(i.k) FROM t AS i WHERE i.g = o.g + 1) AS n FROM t AS o"),
]
UDAFS = [Sorted, Total, Spread]


def test_each_view_keeps_its_accumulators(make_pipeline):
    p = make_pipeline(SCHEMA + "".join(f"CREATE VIEW {n} AS {q};" for n, q, *_ in VIEWS), udfs=UDAFS)
    for name, *_ in VIEWS:
        assert "mode=retract" in p.explain(name), name


@given(steps_strategy({"t": ROW}, max_steps=4))
def test_retracting_aggregates_against_duckdb(make_pipeline, executor, steps):
    if runs_on(executor, "udaf_retract"):
        run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps, udfs=UDAFS)


CALLS = Counter()


@sqlengine.udaf("BIGINT", ["BIGINT"])
class Counted:
    """SUM(k) over non-NULL k, counting its calls (on the driver, where the step runs in this process)."""

    def create(self):
        return 0

    def accumulate(self, acc, k):
        CALLS["accumulate"] += 1
        return acc + (k or 0)

    def retract(self, acc, k):
        CALLS["retract"] += 1
        return acc - (k or 0)

    def finish(self, acc):
        return acc


COUNTED = ("CREATE TABLE t (g INT, k BIGINT);"
           "CREATE MATERIALIZED VIEW v AS SELECT g, counted(k) AS c, COUNT(*) AS n FROM t GROUP BY g;")


def test_a_change_costs_calls_for_its_own_rows_only(make_pipeline):
    p = make_pipeline(COUNTED, udfs=[Counted])
    p.input_pandas("t", pd.DataFrame({"g": [1] * 2000 + [2] * 10, "k": list(range(2000)) + list(range(10))}))
    p.wait_for_idle()
    CALLS.clear()
    p.execute("INSERT INTO t VALUES (1, 5000)")
    p.wait_for_idle()
    assert CALLS == {"accumulate": 1}
    p.execute("DELETE FROM t WHERE g = 1 AND k < 3")
    p.wait_for_idle()
    assert CALLS == {"accumulate": 1, "retract": 3}
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == \
        [(1, sum(range(3, 2000)) + 5000, 1998), (2, 45, 10)]


def test_accumulators_survive_a_restart(tmp_path):
    store = str(tmp_path / "s")
    conf = {"sqlengine.spark.start": "lazy"}
    p = sqlengine.Pipeline.from_sql(COUNTED, storage_dir=store, udfs=[Counted], spark_conf=conf)
    p.start()
    p.execute("INSERT INTO t VALUES (1, 10), (1, 20), (2, 5)")
    p.wait_for_idle()
    p.stop()
    CALLS.clear()
    q = sqlengine.Pipeline.from_sql(COUNTED, storage_dir=store, udfs=[Counted], spark_conf=conf)
    q.start()
    q.execute("DELETE FROM t WHERE k = 20")
    q.wait_for_idle()
    assert sorted(tuple(r.values()) for r in q.query("SELECT * FROM v")) == [(1, 10, 1), (2, 5, 1)]
    assert CALLS == {"retract": 1}   # the stored accumulator, not one recomputed from the table
    q.stop()


def test_steps_run_where_placed(make_pipeline, executor):
    """With every step on Spark, the step functions run as Spark's Arrow UDFs: no step falls back."""
    p = make_pipeline(SCHEMA + "CREATE MATERIALIZED VIEW v AS SELECT g, sorted(s) AS ss, spread(k) AS sp, "
                      "COUNT(*) AS n FROM t GROUP BY g;", udfs=UDAFS)
    p.execute("INSERT INTO t VALUES (1, 0.5, 'b', 3), (1, 1.0, 'a', -2), (2, NULL, NULL, NULL), (1, 2.0, 'b', 7)")
    p.wait_for_idle()
    p.execute("DELETE FROM t WHERE k = 7 OR g = 2")
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v")) == [(1, "a+b", 5.0, 2)]
    stats = p.engine.stats
    assert stats.spark_fallbacks == 0, stats.last_spark_error
    assert (stats.steps_spark > 0) == (executor == "spark")


def test_closed_windows_leave_the_accumulators(make_pipeline):
    """Over event time, the groups of closed windows leave the state that keeps their accumulators."""
    p = make_pipeline("CREATE TABLE bid (auction BIGINT, price BIGINT, "
                      "date_time TIMESTAMP LATENESS INTERVAL 4 SECONDS);"
                      "CREATE VIEW w AS SELECT window_start, total(price) AS s, COUNT(*) AS n "
                      "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start;",
                      udfs=UDAFS, start=False)
    changes = p.listen("w")
    p.start()
    op = next(o for o in p.program.circuit.ops if o.mode == "retract")
    assert op.reads[0] in p.program.gc
    t0, want = pd.Timestamp("2026-01-01"), Counter()
    for step in range(40):   # 5 seconds of bids a step, in order: 20 windows close
        rows = [(step % 3, step * 10 + i, t0 + pd.Timedelta(seconds=step * 5 + i / 2)) for i in range(10)]
        p.input_pandas("bid", pd.DataFrame(rows, columns=["auction", "price", "date_time"]))
        p.wait_for_idle()
        for _, price, ts in rows:
            want[ts.floor("10s")] += price
    got = Counter()
    df = changes.to_pandas()
    for start, total, weight in zip(df["window_start"], df["s"], df["__weight"]):
        got[start] += total * weight
    assert +got == +want
    assert p.status()["closed_state_rows_dropped"] > 0
    rows = p.status()["state_size"].get(p.engine.keys[op.reads[0]], {"rows": 0})["rows"]
    # the open windows' groups and the retractions and inserts of the last steps not merged yet; kept, the 20
    # closed windows' groups alone would be 20 rows
    assert rows < 20, rows


def test_groups_keyed_by_a_map(make_pipeline, executor):
    """Groups keyed by a MAP keep their accumulators too (on Spark the keys are grouped and matched by their
    entries: Spark groups and compares no MAP read from a file as it was written)."""
    p = make_pipeline("CREATE TABLE t (m MAP(VARCHAR, INT), s VARCHAR);"
                      "CREATE MATERIALIZED VIEW v AS SELECT m, sorted(s) AS ss FROM t GROUP BY m;", udfs=UDAFS)
    p.execute("INSERT INTO t VALUES (MAP {'a': 1, 'b': NULL}, 'x'), (MAP {'b': NULL, 'a': 1}, 'y'), (NULL, 'z'), "
              "(MAP {}, 'w')")
    p.wait_for_idle()
    p.execute("DELETE FROM t WHERE s = 'x' OR s = 'w'")
    p.wait_for_idle()
    rows = sorted((str(r["m"]), r["ss"]) for r in p.query("SELECT * FROM v"))
    assert rows == [("None", "z"), (str([("a", 1), ("b", None)]), "y")], rows
    assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error
