"""``Pipeline.transaction()``: the input calls of a ``with`` block are applied together, in one step, or not at
all, also across a SIGKILL."""
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from sqlengine import InputError, Pipeline, RuntimeConfig

SQL = """CREATE TABLE orders (id INT, total INT);
CREATE TABLE items (order_id INT, amount INT);
CREATE MATERIALIZED VIEW mismatched AS
  SELECT o.id, o.total, i.s FROM orders o LEFT JOIN (SELECT order_id, SUM(amount) AS s FROM items GROUP BY order_id) i
  ON o.id = i.order_id WHERE i.s IS DISTINCT FROM o.total;
CREATE MATERIALIZED VIEW totals AS SELECT COUNT(*) AS n, SUM(total) AS t FROM orders;
"""


def orders(rows):
    return pd.DataFrame(rows, columns=["id", "total"])


def items(rows):
    return pd.DataFrame(rows, columns=["order_id", "amount"])


def test_no_view_sees_part_of_a_transaction(make_pipeline):
    p = make_pipeline(SQL, start=False)
    seen = []
    p.foreach_chunk("mismatched", lambda c, seq: seen.extend(c.to_dict("records")))
    p.start()
    # without a transaction, the view shows the order before its items come: the test can tell
    p.input_pandas("orders", orders([(1, 10)]))
    p.wait_for_idle()
    p.input_pandas("items", items([(1, 4), (1, 6)]))
    p.wait_for_idle()
    assert [r["id"] for r in seen] == [1, 1] and list(p.query("SELECT * FROM mismatched")) == []
    seen.clear()
    for k in range(2, 8):
        with p.transaction():
            p.input_pandas("orders", orders([(k, 3 * k)]))
            p.wait_for_idle()   # the transaction is not visible yet: nothing to wait for
            assert not any(r["id"] == k for r in p.query("SELECT id FROM orders"))
            p.input_pandas("items", items([(k, k), (k, 2 * k)]))
        if k % 2:   # an update of an earlier order and its items, in one transaction
            with p.transaction():
                p.input_pandas("orders", orders([(k - 1, 3 * k - 3)]), delete=True)
                p.input_pandas("orders", orders([(k - 1, 10)]))
                p.input_json("items", [{"delete": {"order_id": k - 1, "amount": k - 1}},
                                       {"insert": {"order_id": k - 1, "amount": 10 - 2 * (k - 1)}}],
                             update_format="insert_delete")
    p.wait_for_idle()
    assert seen == [], seen
    assert list(p.query("SELECT * FROM mismatched")) == []
    assert list(p.query("SELECT * FROM totals")) == [{"n": 7, "t": 10 + sum(3 * k if k % 2 else 10 for k in range(2, 8))}]


def test_a_transaction_is_one_step_however_big(make_pipeline):
    import pyarrow as pa
    ten_rows = pa.Table.from_pandas(orders([(i, 0) for i in range(10)]), preserve_index=False).nbytes
    p = make_pipeline(SQL, runtime_config=RuntimeConfig(max_step_bytes=ten_rows))
    p.wait_for_idle()
    before = p.status()["step"]
    p.input_pandas("orders", orders([(i, 0) for i in range(30)]))   # an input call: split in steps of 10 rows
    p.wait_for_idle()
    assert p.status()["step"] - before == 3
    before = p.status()["step"]
    with p.transaction():
        p.input_pandas("orders", orders([(i, 1) for i in range(100, 125)]))
        p.input_pandas("items", items([(i, 1) for i in range(100, 125)]))
        p.input_pandas("orders", orders([(i, 0) for i in range(10)]), delete=True)
    p.wait_for_idle()
    assert p.status()["step"] - before == 1
    assert list(p.query("SELECT * FROM totals")) == [{"n": 45, "t": 25}]


def test_an_error_in_the_block_applies_nothing(make_pipeline):
    p = make_pipeline(SQL)
    with pytest.raises(RuntimeError):
        with p.transaction():
            p.input_pandas("orders", orders([(1, 5)]))
            p.input_pandas("items", items([(1, 5)]))
            raise RuntimeError("the application changed its mind")
    p.input_pandas("orders", orders([(2, 7)]))
    p.wait_for_idle()
    assert list(p.query("SELECT * FROM totals")) == [{"n": 1, "t": 7}]
    assert list(p.query("SELECT * FROM items")) == []


def test_a_bad_call_is_rejected_and_the_transaction_goes_on(make_pipeline):
    p = make_pipeline(SQL)
    with p.transaction():
        p.input_pandas("orders", orders([(1, 5)]))
        with pytest.raises(InputError, match="total"):
            p.input_pandas("orders", orders([(2, "five"), (3, 4)]))   # nothing of this call
        with pytest.raises(InputError, match="on_error=.reject"):
            p.input_pandas("items", items([(1, 5)]), on_error="dead_letter")
        with pytest.raises(InputError, match="inside a transaction"):
            p.execute("INSERT INTO items VALUES (1, 5)")
        with pytest.raises(InputError, match="do not nest"):
            with p.transaction():
                pass
        p.input_json("items", [{"order_id": 1, "amount": 5}])
    p.wait_for_idle()
    assert list(p.query("SELECT * FROM orders")) == [{"id": 1, "total": 5}]
    assert list(p.query("SELECT * FROM mismatched")) == []


CHILD = r"""
import sys, time
import pandas as pd
sys.path.insert(0, {root!r})
from sqlengine import Pipeline
from tests.api.test_transactions import SQL
p = Pipeline.from_sql(SQL, storage_dir={store!r})
p.start()
p.wait_for_idle()
with p.transaction():
    p.input_pandas("orders", pd.DataFrame([(1, 9)], columns=["id", "total"]))
    p.input_pandas("items", pd.DataFrame([(1, 4), (1, 5)], columns=["order_id", "amount"]))
    if {commit!r} == "no":
        print("inside", flush=True)
        time.sleep(600)
print("committed", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("commit", ["no", "yes"])
def test_sigkill_inside_or_after_a_transaction(spark, tmp_path, commit):
    store = str(tmp_path / "s")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=root, store=store, commit=commit)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=root)
    try:
        line = child.stdout.readline().strip()
        assert line == ("inside" if commit == "no" else "committed")
        time.sleep(0.2)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    p = Pipeline.from_sql(SQL, storage_dir=store, spark=spark)
    p.start()
    p.wait_for_idle()
    try:
        got = (list(p.query("SELECT * FROM orders")), sorted(r["amount"] for r in p.query("SELECT * FROM items")))
        assert got == (([{"id": 1, "total": 9}], [4, 5]) if commit == "yes" else ([], []))
        assert list(p.query("SELECT * FROM mismatched")) == []
    finally:
        p.stop()


def test_a_backlog_is_taken_in_steps_of_max_step_bytes(make_pipeline):
    """Input that waits (here: pushed while paused) is taken in as few steps as ``max_step_bytes`` allows,
    not one step per input call."""
    import pyarrow as pa
    call = orders([(i, 1) for i in range(1000)])

    def steps_for_eight_calls(p) -> int:
        p.wait_for_idle()
        p.pause()
        for _ in range(8):
            p.input_pandas("orders", call)
        before = p.status()["step"]
        p.resume()
        p.wait_for_idle()
        assert list(p.query("SELECT * FROM totals")) == [{"n": 8000, "t": 8000}]
        return p.status()["step"] - before

    assert steps_for_eight_calls(make_pipeline(SQL)) == 1
    three_calls = 3 * pa.Table.from_pandas(call, preserve_index=False).nbytes
    assert steps_for_eight_calls(make_pipeline(SQL, runtime_config=RuntimeConfig(max_step_bytes=three_calls))) == 3
