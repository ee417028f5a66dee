"""Each bad row is in the dead letter exactly once, even when the process dies after writing its record
and before its batch committed (the batch is then read again, and its bad rows found again)."""
import json
import os
import subprocess
import sys

from sqlengine import Pipeline
from tests.support.killable import ROOT

SQL = "CREATE TABLE t (id INT NOT NULL, name VARCHAR); CREATE MATERIALIZED VIEW v AS SELECT * FROM t;"

CHILD = """
import sys
from sqlengine import Pipeline
p = Pipeline.from_sql(sys.argv[2], storage_dir=sys.argv[1], spark_conf={"sqlengine.spark.start": "lazy"})
p.start()
p.input_json("t", [{"id": 1, "name": "a"}, {"id": "bad", "name": "b"}], on_error="dead_letter")
p.input_json("t", [{"id": 2, "name": "c"}, {"id": "worse", "name": "d"}], on_error="dead_letter")
p.stop()
"""


def records(storage):
    path = os.path.join(storage, "dead_letter", "t.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["raw"] for line in f]


def run_child(storage, crash_at=None):
    env = dict(os.environ, **({"SQLENGINE_CRASH_AT": crash_at} if crash_at else {}))
    return subprocess.run([sys.executable, "-c", CHILD, storage, SQL], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_batch_that_died_after_its_dead_letters_leaves_none(tmp_path):
    storage = str(tmp_path / "s")
    r = run_child(storage, crash_at="dead_letter_write")
    assert r.returncode == 137, r.stderr[-2000:]
    assert records(storage) == [{"id": "bad", "name": "b"}]   # written, not fsynced, the batch not committed
    p = Pipeline.from_sql(SQL, storage_dir=storage, spark_conf={"sqlengine.spark.start": "lazy"})
    p.start()
    try:
        assert records(storage) == [], "the records of a batch that never committed stay in the dead letter"
        p.wait_for_idle()
        assert list(p.query("SELECT * FROM v")) == []
    finally:
        p.stop()
    r = run_child(storage)   # the input again (as a connector would read it again): each record once
    assert r.returncode == 0, r.stderr[-2000:]
    assert records(storage) == [{"id": "bad", "name": "b"}, {"id": "worse", "name": "d"}]


def test_committed_batches_keep_their_dead_letters(tmp_path):
    storage = str(tmp_path / "s")
    assert run_child(storage).returncode == 0
    p = Pipeline.from_sql(SQL, storage_dir=storage, spark_conf={"sqlengine.spark.start": "lazy"})
    p.start()
    try:
        p.wait_for_idle()
        assert records(storage) == [{"id": "bad", "name": "b"}, {"id": "worse", "name": "d"}]
        assert sorted(r["id"] for r in p.query("SELECT id FROM v")) == [1, 2]
    finally:
        p.stop()
