"""Backfills of new views on Spark, against DuckDB.

A pipeline takes random inserts and deletes (duplicates, NULLs) with every step on Spark and nothing cached
on the driver; it then restarts with more views, which the restart backfills in one step on Spark from the
tables' stored runs, and takes more random changes.  Every view is held to DuckDB's recomputation after the
backfill and after each later step.  The stored runs are consolidated before the backfill reads them only
when one holds a negative weight (a delete not merged away yet, ``Engine.weights_positive``): both cases run.
"""
import random

import pandas as pd
import pytest

from ..support.oracle import Model, check_views

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

TABLES = "CREATE TABLE t (g INT, x INT); CREATE TABLE u (g INT, name VARCHAR);"
FIRST = {"v": "SELECT g, SUM(x) AS s, COUNT(*) AS n FROM t GROUP BY g"}
ADDED = {
    "w": "SELECT u.name, COUNT(*) AS n, MIN(t.x) AS lo, MAX(t.x) AS hi FROM t JOIN u ON t.g = u.g GROUP BY u.name",
    "dist": "SELECT DISTINCT g, x FROM t",
    "tot": "SELECT COUNT(*) AS n, SUM(x) AS s FROM t WHERE x > 3",
    "lj": "SELECT t.g, t.x, u.name FROM t LEFT JOIN u ON t.g = u.g",
    "rk": "SELECT g, x, ROW_NUMBER() OVER (PARTITION BY g ORDER BY x NULLS FIRST) AS r FROM t WHERE x IS NOT NULL",
}


def program(views):
    return TABLES + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in views.items())


def t_row(rnd):
    return (rnd.choice([1, 2, 3, None]), rnd.choice([1, 2, 3, 4, 5, None]))


def u_row(rnd):
    return (rnd.choice([1, 2, 3, 4, None]), rnd.choice(["a", "b", None]))


def churn(p, model, rnd, steps, views, label):
    for i in range(steps):
        for table, row in (("t", t_row), ("u", u_row)):
            rows = [row(rnd) for _ in range(rnd.randint(3, 8))]
            live = list(model.rows[table].elements())
            rows += rnd.sample(live, min(2, len(live)))          # duplicates of stored rows
            gone = rnd.sample(live, min(len(live) // 4, 4))
            p.pause()
            p.input_pandas(table, pd.DataFrame(rows, columns=model.columns[table], dtype=object))
            if gone:
                p.input_pandas(table, pd.DataFrame(gone, columns=model.columns[table], dtype=object), delete=True)
            p.resume()
            model.insert(table, rows)
            model.delete(table, gone)
        p.wait_for_idle()
        check_views(p, model, views, f"{label}, step {i}")


@pytest.mark.parametrize("deletes_before", [False, True], ids=["positive-runs", "unmerged-deletes"])
def test_backfill_on_spark(make_pipeline, placement, tmp_path, deletes_before):
    placement["local_step_rows"] = 0   # every step on Spark, every op too
    rnd = random.Random(16 + deletes_before)
    store = str(tmp_path / "s")
    model = Model(TABLES, {"t": ["g", "x"], "u": ["g", "name"]})
    p = make_pipeline(program(FIRST), storage_dir=store)
    p.engine.local.cache.hold_nothing()
    if deletes_before:
        churn(p, model, rnd, 3, FIRST, "before")
    else:   # inserts only (with duplicates): every stored weight is positive
        for table, row in (("t", t_row), ("u", u_row)):
            rows = [row(rnd) for _ in range(12)]
            rows += rows[:3]
            p.input_pandas(table, pd.DataFrame(rows, columns=model.columns[table], dtype=object))
            model.insert(table, rows)
        p.wait_for_idle()
    eng, m = p.engine, p.store.current
    positive = eng.weights_positive(eng.ctx.table_integral("t"), m)
    assert positive == (not deletes_before)
    p.stop()

    views = {**FIRST, **ADDED}
    q = make_pipeline(program(views), storage_dir=store, start=False)
    seen = []
    q.foreach_chunk("w", lambda c, seq: seen.append(c))
    q.start()
    q.wait_for_idle()
    on = q.status()["steps_run_on"]
    assert on["driver"] == 0 and on["spark"] == 1, on   # the backfill was one step, on Spark
    assert q.engine.stats.spark_fallbacks == 0, q.engine.stats.last_spark_error
    check_views(q, model, views, "after the backfill")
    assert seen, "the backfill delivered w's contents"
    q.engine.local.cache.hold_nothing()
    churn(q, model, rnd, 3, views, "after")
    assert q.status()["steps_run_on"]["driver"] == 0
