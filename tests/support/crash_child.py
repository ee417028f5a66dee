"""A pipeline fed continuously, to be killed at random moments by tests/api/test_durability.py.

Usage: python -m tests.support.crash_child STORAGE SINK ACKS BATCHES

Batch k is one ``input_json`` call (one atomic log entry): it inserts ids
k*100+0..9 and deletes three rows inserted by batch k-2.  After a call
returns, ``k`` is appended (and fsynced) to ACKS.  On restart the child
replays the log, finds out whether the batch after the last acknowledged
one landed before the kill (its row k*100+1 is never deleted), and goes on.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SQL = """CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT);
CREATE MATERIALIZED VIEW agg AS SELECT g, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS mx FROM t GROUP BY g;"""
AGG_SQL = "SELECT g, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS mx FROM t GROUP BY g"


def row(i: int) -> dict:
    return {"id": i, "g": (i * 7) % 5, "v": (i * 13) % 101}


def batch(k: int) -> list:
    out = [{"insert": row(k * 100 + j)} for j in range(10)]
    if k >= 2:
        out += [{"delete": row((k - 2) * 100 + j)} for j in (0, 3, 6)]
    return out


def final_rows(n: int) -> list:
    """Table contents after batches 0..n-1, each applied once."""
    alive = {}
    for k in range(n):
        for rec in batch(k):
            kind, r = next(iter(rec.items()))
            if kind == "insert":
                alive[r["id"]] = r
            else:
                alive.pop(r["id"], None)
    return sorted(alive.values(), key=lambda r: r["id"])


def read_acks(path: str) -> list:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def feed(p, acks_path: str, batches: int, announce=None, limit: int = None) -> None:
    """Push the batches after the last acknowledged one (up to ``limit``), acknowledging each;
    wait for the steps every 2 batches."""
    p.wait_for_idle()
    acks = read_acks(acks_path)
    k = (max(acks) + 1) if acks else 0
    with open(acks_path, "a") as ack:
        def acknowledge(i):
            ack.write(f"{i}\n")
            ack.flush()
            os.fsync(ack.fileno())

        if k < batches and list(p.query(f"SELECT id FROM t WHERE id = {k * 100 + 1}")):
            acknowledge(k)   # landed before the kill, acknowledgement lost
            k += 1
        if announce:
            announce(k)
        while k < min(batches, limit if limit is not None else batches):
            p.input_json("t", batch(k), update_format="insert_delete")
            acknowledge(k)
            k += 1
            if k % 2 == 0:
                p.wait_for_idle()   # feed at the pace of the steps, so kills land mid-stream


def open_pipeline(storage: str, sink: str, spark=None):
    from sqlengine import Pipeline
    p = Pipeline.from_sql(SQL, name="crash", storage_dir=storage, spark=spark,
                          spark_conf={"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "1g"})
    p.output_parquet("agg", sink)
    p.start()
    return p


def run_child(store, sink, acks, batches, crash_at=None, kill_after=None, timeout=240, slow_merges=None):
    """Run this module in a child process; SIGKILL it ``kill_after`` seconds after it is ready.  With
    ``slow_merges`` (seconds): state runs are merged whenever there are more than 2, and each background
    merge takes that much longer, so that kills land in them."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    if slow_merges is not None:
        env["CRASH_CHILD_SLOW_MERGES"] = str(slow_merges)
    env.pop("SQLENGINE_CRASH_AT", None)
    if crash_at:
        env["SQLENGINE_CRASH_AT"] = crash_at
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.crash_child", store, sink, acks, str(batches)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    start = time.monotonic()
    line = proc.stdout.readline()   # "ready k", or EOF if a crash point fired during replay
    if kill_after is not None and line.startswith("ready"):
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    try:
        proc.wait(timeout=max(1, timeout - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, line


def verify(store: str, sink: str, acks: str, batches: int, spark=None) -> list:
    """Problems (empty if none) after all batches: (a) the view equals DuckDB's recomputation over the
    expected table, (b) every batch is applied exactly once, (c) the parquet sink integrates to the view."""
    import pandas as pd
    import pyarrow.parquet as pq
    from tests.support.oracle import Model, bag, bag_from_changes, diff
    problems = []
    if sorted(read_acks(acks)) != list(range(batches)):
        problems.append("acknowledgements: not every batch exactly once")
    expected_rows = final_rows(batches)
    p = open_pipeline(store, sink, spark=spark)
    p.wait_for_idle()
    got_t = bag([tuple(r.values()) for r in p.query("SELECT id, g, v FROM t")])
    want_t = bag([(r["id"], r["g"], r["v"]) for r in expected_rows])
    if diff(got_t, want_t):
        problems.append("table t: " + diff(got_t, want_t))
    model = Model("CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT);", {"t": ["id", "g", "v"]})
    model.insert("t", [(r["id"], r["g"], r["v"]) for r in expected_rows])
    want_v = model.view(model.duck(), AGG_SQL)
    got_v = bag([tuple(r.values()) for r in p.query("SELECT * FROM agg")])
    if diff(got_v, want_v):
        problems.append("view agg: " + diff(got_v, want_v))
    import glob
    files = sorted(glob.glob(os.path.join(sink, "step-*.parquet")))
    chunks = pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True).drop(columns=["__step"])
    if diff(bag_from_changes(chunks), want_v):
        problems.append("parquet sink: " + diff(bag_from_changes(chunks), want_v))
    p.stop()
    return problems


def merging_marker(storage: str) -> str:
    """A file that exists while a background merge of the child runs (see ``slow_down_merges``)."""
    return os.path.join(storage, "merging.marker")


def slow_down_merges(seconds: float, storage: str) -> None:
    """Merge state runs whenever there are more than 2, each merge ``seconds`` slower (in this process): half
    before it writes its run and half after, while ``merging_marker`` exists."""
    from sqlengine.executor.merges import Merger
    from sqlengine.state.store import StateStore
    StateStore.MAX_RUNS = 2
    merge_runs = Merger.merge_runs

    def slow(self, *a, **kw):
        marker = merging_marker(storage)
        open(marker, "w").close()
        try:
            time.sleep(seconds / 2)
            out = merge_runs(self, *a, **kw)
            time.sleep(seconds / 2)   # written, not yet in a manifest
            return out
        finally:
            os.remove(marker)
    Merger.merge_runs = slow


def main(storage: str, sink: str, acks_path: str, batches: int) -> None:
    if os.environ.get("CRASH_CHILD_SLOW_MERGES"):
        slow_down_merges(float(os.environ["CRASH_CHILD_SLOW_MERGES"]), storage)
    p = open_pipeline(storage, sink)
    feed(p, acks_path, batches, announce=lambda k: print("ready", k, flush=True))
    p.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
