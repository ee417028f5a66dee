"""Step tests: exact output changes, with weights, for small hand-written steps."""
from collections import Counter, defaultdict

import pandas as pd
import pytest


class Chunks:
    """Records every chunk of a view: step number -> Counter of (row tuple) -> weight."""

    def __init__(self, p, view):
        self.by_step = defaultdict(Counter)
        p.foreach_chunk(view, self.on_chunk)
        self.steps = []

    def on_chunk(self, chunk, seq):
        self.steps.append(seq)
        cols = [c for c in chunk.columns if c != "__weight"]
        for row, w in zip(chunk[cols].itertuples(index=False, name=None), chunk["__weight"]):
            key = tuple(None if pd.isna(v) else v for v in row)
            self.by_step[seq][key] += int(w)

    def last(self):
        return dict(self.by_step[self.steps[-1]]) if self.steps else {}


def push(p, table, rows, cols, delete=False):
    p.input_pandas(table, pd.DataFrame(rows, columns=cols), delete=delete)
    p.wait_for_idle()


def test_max_survives_deleting_the_current_maximum(make_pipeline):
    p = make_pipeline("CREATE TABLE bid (auction INT NOT NULL, price INT);"
                      "CREATE VIEW top AS SELECT auction, MAX(price) AS top, MIN(price) AS low FROM bid GROUP BY auction",
                      start=False)
    c = Chunks(p, "top")
    p.start()
    push(p, "bid", [(1, 10), (1, 30), (1, 20), (2, 5)], ["auction", "price"])
    assert c.last() == {(1, 30, 10): 1, (2, 5, 5): 1}
    push(p, "bid", [(1, 30)], ["auction", "price"], delete=True)
    assert c.last() == {(1, 30, 10): -1, (1, 20, 10): 1}
    push(p, "bid", [(1, 10)], ["auction", "price"], delete=True)
    assert c.last() == {(1, 20, 10): -1, (1, 20, 20): 1}
    push(p, "bid", [(1, 20)], ["auction", "price"], delete=True)
    assert c.last() == {(1, 20, 20): -1}


def test_global_aggregate_of_empty_table(make_pipeline):
    p = make_pipeline("CREATE TABLE t (x INT); CREATE MATERIALIZED VIEW g AS SELECT COUNT(*) AS n, SUM(x) AS s FROM t",
                      start=False)
    c = Chunks(p, "g")
    p.start()
    p.wait_for_idle()
    assert c.last() == {(0, None): 1}
    assert list(p.query("SELECT * FROM g")) == [{"n": 0, "s": None}]
    push(p, "t", [(10,), (20,)], ["x"])
    assert c.last() == {(0, None): -1, (2, 30): 1}
    push(p, "t", [(10,), (20,)], ["x"], delete=True)
    assert c.last() == {(2, 30): -1, (0, None): 1}


def test_distinct_counts_copies(make_pipeline):
    p = make_pipeline("CREATE TABLE t (x INT); CREATE VIEW d AS SELECT DISTINCT x FROM t", start=False)
    c = Chunks(p, "d")
    p.start()
    push(p, "t", [(1,), (1,), (2,)], ["x"])
    assert c.last() == {(1,): 1, (2,): 1}
    n = len(c.steps)
    push(p, "t", [(1,)], ["x"], delete=True)       # one copy of 1 remains: no change
    assert len(c.steps) == n
    push(p, "t", [(1,)], ["x"], delete=True)
    assert c.last() == {(1,): -1}


def test_join_retracts_when_a_side_is_deleted(make_pipeline):
    p = make_pipeline("CREATE TABLE a (k INT, x INT); CREATE TABLE b (k INT, y INT);"
                      "CREATE VIEW j AS SELECT a.x, b.y FROM a JOIN b ON a.k = b.k", start=False)
    c = Chunks(p, "j")
    p.start()
    push(p, "a", [(1, 10), (1, 11), (None, 12)], ["k", "x"])
    push(p, "b", [(1, 100), (None, 200)], ["k", "y"])
    assert c.last() == {(10, 100): 1, (11, 100): 1}   # NULL keys never match
    push(p, "b", [(1, 100)], ["k", "y"], delete=True)
    assert c.last() == {(10, 100): -1, (11, 100): -1}


def test_delete_of_missing_row_is_a_no_op_and_removes_one_copy(make_pipeline):
    p = make_pipeline("CREATE TABLE t (x INT, s VARCHAR); CREATE VIEW v AS SELECT x, s FROM t", start=False)
    c = Chunks(p, "v")
    p.start()
    push(p, "t", [(1, "a"), (1, "a")], ["x", "s"])
    assert c.last() == {(1, "a"): 2}
    n = len(c.steps)
    push(p, "t", [(2, "b")], ["x", "s"], delete=True)
    assert len(c.steps) == n
    push(p, "t", [(1, "a"), (1, "a"), (1, "a")], ["x", "s"], delete=True)
    assert c.last() == {(1, "a"): -2}
    assert list(p.query("SELECT COUNT(*) AS n FROM t")) == [{"n": 0}]


def test_insert_then_delete_before_the_step_nets_out(make_pipeline):
    p = make_pipeline("CREATE TABLE t (x INT); CREATE MATERIALIZED VIEW v AS SELECT x FROM t")
    p.pause()
    p.input_pandas("t", pd.DataFrame({"x": [1, 2]}))
    p.input_pandas("t", pd.DataFrame({"x": [1]}), delete=True)
    p.input_pandas("t", pd.DataFrame({"x": [3]}), delete=True)
    p.resume()
    p.wait_for_idle()
    assert sorted(r["x"] for r in p.query("SELECT x FROM v")) == [2]


def test_having_moves_groups_in_and_out(make_pipeline):
    p = make_pipeline("CREATE TABLE t (g INT, x INT);"
                      "CREATE VIEW h AS SELECT g, COUNT(*) AS n FROM t GROUP BY g HAVING COUNT(*) > 1", start=False)
    c = Chunks(p, "h")
    p.start()
    push(p, "t", [(1, 1), (1, 2), (2, 1)], ["g", "x"])
    assert c.last() == {(1, 2): 1}
    push(p, "t", [(2, 5)], ["g", "x"])
    assert c.last() == {(2, 2): 1}
    push(p, "t", [(1, 1)], ["g", "x"], delete=True)
    assert c.last() == {(1, 2): -1}


def test_one_batch_and_row_at_a_time_agree(make_pipeline):
    sql = ("CREATE TABLE t (g INT, x INT);"
           "CREATE MATERIALIZED VIEW v AS SELECT g, SUM(x) AS s, MAX(x) AS m, COUNT(*) AS n FROM t GROUP BY g")
    rows = [(i % 3, i) for i in range(9)]
    a = make_pipeline(sql)
    push(a, "t", rows, ["g", "x"])
    push(a, "t", rows[:4], ["g", "x"], delete=True)
    b = make_pipeline(sql)
    for r in rows:
        b.input_pandas("t", pd.DataFrame([r], columns=["g", "x"]))
    for r in rows[:4]:
        b.input_pandas("t", pd.DataFrame([r], columns=["g", "x"]), delete=True)
    b.wait_for_idle()
    q = "SELECT * FROM v ORDER BY g"
    assert list(a.query(q)) == list(b.query(q))
