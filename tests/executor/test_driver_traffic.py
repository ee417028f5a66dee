"""What passes through the driver (issue 34): ``status()["driver_traffic"]`` counts the Arrow rows and bytes a
pipeline brings from Spark to the driver and ships to Spark, and the bytes of state runs its process writes.
Today a step on Spark collects its change to the driver, so the counts follow the change."""
import pandas as pd

PROGRAM = """CREATE TABLE t (k INT, v BIGINT);
CREATE MATERIALIZED VIEW g AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k;"""


def _traffic(p):
    return dict(p.status()["driver_traffic"])


def test_a_step_on_spark_is_counted_and_one_on_the_driver_is_not(make_pipeline, executor):
    p = make_pipeline(PROGRAM)
    before = _traffic(p)
    rows = pd.DataFrame({"k": [i % 100 for i in range(2000)], "v": list(range(2000))})
    p.input_pandas("t", rows)
    p.wait_for_idle()
    after = _traffic(p)
    grew = {k: after[k] - before[k] for k in after}
    assert grew["state_bytes_written"] > 0, grew   # the driver writes every state run, on both paths
    if executor == "spark":
        assert grew["rows_to_spark"] >= 2000 and grew["bytes_to_spark"] > 0, grew   # the input, shipped
        assert grew["rows_from_spark"] >= 100 and grew["bytes_from_spark"] > 0, grew   # the view's change at least
    else:
        assert grew["rows_from_spark"] == grew["rows_to_spark"] == 0, grew
    assert sorted(tuple(r.values()) for r in p.query("SELECT k, n FROM g"))[:2] == [(0, 20), (1, 20)]
