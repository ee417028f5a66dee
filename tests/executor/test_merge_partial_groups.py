"""Merging some of an accumulating aggregate's state runs keeps a group whose partial count is zero when its
other accumulators are not: over a LEFT JOIN, a right row arriving turns a padded row into a matched one
(COUNT(*) changes by 0, SUM(b.y) and COUNT(b.y) by the row), so a merge of the runs of such steps holds
``__cnt = 0`` with nonzero sums.  Dropping it (as merges did) lost those sums for good.

Both executors merge with the same rule (``delta_rules.merge_sql``): the second variant runs steps and merges on
Spark, with nothing cached on the driver; the third runs the steps on Spark and merges the (small) runs on the
driver, read from their files."""
import random

import pytest

import duckdb
import pandas as pd

from tests.support.oracle import bag, diff

SCHEMA = "CREATE TABLE a (k INT, t INT); CREATE TABLE b (k INT, t INT, y INT);"
VIEW = ("SELECT a.k, COUNT(*) AS n, SUM(b.y) AS s, COUNT(b.y) AS m FROM a LEFT JOIN b ON a.k = b.k AND a.t = b.t "
        "GROUP BY a.k")


@pytest.mark.parametrize("where", ["driver", "spark", "files"])
def test_partial_merges_keep_zero_count_groups(make_pipeline, monkeypatch, placement, where):
    on_spark = where != "driver"
    if where == "spark":
        placement["driver_merge_rows"] = 0
    p = make_pipeline(SCHEMA + f"CREATE MATERIALIZED VIEW v AS {VIEW};")
    rng = random.Random(1)
    a = [(k, t) for k in range(300) for t in range(2)]   # a big first run, which merges leave alone
    p.input_pandas("a", pd.DataFrame(a, columns=["k", "t"]))
    p.wait_for_idle()
    if on_spark:   # state read from its parquet runs on Spark, as when it outgrows the driver's cache
        p.engine.local.cache.hold_nothing()
        # (else small steps read it by key from the runs' files, on the driver); ops may still run there
        p.engine.placement = p.engine.placement.replace(local_step_rows=0, driver_ops=True)
    b = []
    for step in range(24 if on_spark else 80):   # one b row in or out per step: many small runs, merged in varying subsets
        if b and rng.random() < 0.45:
            row = b.pop(rng.randrange(len(b)))
            p.input_pandas("b", pd.DataFrame([row], columns=["k", "t", "y"]), delete=True)
        else:
            row = (rng.randrange(3), rng.randrange(2), rng.randrange(1, 100))
            b.append(row)
            p.input_pandas("b", pd.DataFrame([row], columns=["k", "t", "y"]))
        p.wait_for_idle()
        con = duckdb.connect()
        con.execute(SCHEMA)
        con.executemany("INSERT INTO a VALUES (?, ?)", a)
        if b:
            con.executemany("INSERT INTO b VALUES (?, ?, ?)", b)
        expected = bag(con.execute(VIEW).fetchall())
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM v"))
        assert not diff(got, expected), f"step {step}: {diff(got, expected)}"
    if on_spark:
        assert p.engine.stats.steps_spark >= 24, p.engine.stats.steps_spark
    spark_merges = p.engine.stats.spark_merges
    assert bool(spark_merges) == (where == "spark"), spark_merges
