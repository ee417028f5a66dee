"""A pipeline fed by a source connector and writing file sinks, killed (SIGKILL) and restarted by
``tests/connectors/test_connector_crash.py`` and ``benchmarks/connector_crash_stress.py``.

The source replays a fixed, seeded sequence of insert/delete batches (``batches``), slowly enough that
kills land while it runs.  ``verify`` checks, after the last run: every batch applied exactly once (the
table equals the sequence's result), the view equals DuckDB's recomputation, the changelog files hold
each step once and integrate to the view, and the snapshot file equals the view.

    python -m tests.support.connector_crash_child STORAGE OUT BATCHES [INBOX [append]]

With ``INBOX`` the input comes from a followed ``file_input`` directory instead, one JSON-lines file per
batch, which the parent writes (atomically: a temporary name, then a rename) while the child runs; with
``append``, one file (``APPEND_NAME``) that the parent writes in place, in pieces cut anywhere, which the
connector tails (its position: the bytes read).
"""
from __future__ import annotations

import glob
import json
import os
import random
import sys
import time
from typing import List

from connectors import Source, SourceBatch, opt, register_source
from sqlengine.ingest.inputs import json_chunks

SEED = 11
VIEW = "SELECT g, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS mx FROM t GROUP BY g"


def batches(n: int) -> List[list]:
    """The fixed input: ``n`` batches of insert/delete records (duplicates, NULLs, deletes of live rows)."""
    rng, live, out = random.Random(SEED), [], []
    for _ in range(n):
        recs = []
        for _ in range(rng.randint(1, 40)):
            if live and rng.random() < 0.3:
                recs.append({"delete": live.pop(rng.randrange(len(live)))})
            else:
                row = {"id": rng.randrange(50), "g": rng.choice([1, 2, 3, None]), "v": rng.choice([1, 7, None, -3])}
                live.append(row)
                recs.append({"insert": row})
        out.append(recs)
    return out


def final_rows(n: int) -> list:
    live = []
    for recs in batches(n):
        for r in recs:
            if "insert" in r:
                live.append(r["insert"])
            else:
                live.remove(r["delete"])
    return live


@register_source
class Replay(Source):
    """``batches(count)`` one at a time, ``delay_ms`` apart; the position is the number of batches read."""
    transport = "test_replay"
    OPTIONS = {"count": opt(int, required=True), "delay_ms": opt(int, default=20)}

    def open(self, position):
        self.next = position or 0
        self.all = batches(self.config["count"])

    def poll(self, max_rows):
        if self.next >= len(self.all):
            return None
        time.sleep(self.config["delay_ms"] / 1000)
        recs = self.all[self.next]
        self.next += 1
        return SourceBatch(lambda errs, n, recs=recs: json_chunks(self.ctx.table, recs, "insert_delete", errs, n),
                           self.next)

    def finished(self):
        return self.next >= len(self.all)


APPEND_NAME = "all.jsonl"


def append_text(n: int) -> bytes:
    """The records of ``batches(n)`` as one file of JSON lines (append mode)."""
    return "".join(json.dumps(r) + "\n" for recs in batches(n) for r in recs).encode()


def publish(inbox: str, i: int, recs: list) -> None:
    """Batch ``i`` as a JSON-lines file, written under a temporary name and renamed."""
    name = os.path.join(inbox, f"b-{i:05d}.jsonl")
    with open(os.path.join(inbox, f".b-{i:05d}.jsonl.tmp"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    os.replace(os.path.join(inbox, f".b-{i:05d}.jsonl.tmp"), name)


def program(out: str, count: int, inbox: str = None) -> str:
    src = [{"name": "replay", "transport": {"name": "test_replay", "config": {"count": count}}}]
    if inbox:
        src = [{"name": "replay", "transport": {"name": "file_input", "config": {
            "path": inbox, "follow": True, "poll_interval_ms": 20}},
            "format": {"name": "json", "config": {"update_format": "insert_delete"}}}]
    sinks = [{"name": "log", "transport": {"name": "file_output", "config": {"path": f"{out}/log"}}},
             {"name": "snap", "transport": {"name": "file_output", "config": {"path": f"{out}/snap", "mode": "snapshot"}}}]
    return (f"CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT) WITH ('connectors' = '{json.dumps(src)}');\n"
            f"CREATE MATERIALIZED VIEW agg WITH ('connectors' = '{json.dumps(sinks)}') AS {VIEW};")


def open_pipeline(storage: str, out: str, count: int, inbox: str = None):
    from sqlengine import Pipeline
    return Pipeline.from_sql(program(out, count, inbox), storage_dir=storage,
                             spark_conf={"sqlengine.spark.start": "lazy"})


def wait_for_all(p, count: int, inbox: str = None, append: bool = False) -> None:
    """Until every batch is read (a followed directory never finishes) and processed."""
    if append:
        size = len(append_text(count))
        while ((p.status()["connectors"]["t.replay"]["position"] or {}).get(APPEND_NAME) or [0])[0] < size:
            p._check()
            time.sleep(0.02)
        p.wait_for_idle()
    elif inbox:
        while len(p.status()["connectors"]["t.replay"]["position"] or []) < count:
            p._check()
            time.sleep(0.02)
        p.wait_for_idle()
    else:
        p.wait_for_completion(timeout_s=600)


def run_child(storage: str, out: str, count: int, kill_after=None, timeout: float = 120, inbox: str = None,
              append: bool = False):
    """Run the child; with ``kill_after`` seconds, SIGKILL it then.  Returns its exit code."""
    from tests.support.killable import run_module
    return run_module("tests.support.connector_crash_child", [storage, out, str(count)] + ([inbox] if inbox else []) +
                      (["append"] if append else []), kill_after, timeout)


def verify(storage: str, out: str, count: int, inbox: str = None, append: bool = False) -> list:
    import pandas as pd
    import pyarrow.parquet as pq
    from tests.support.oracle import Model, bag, bag_from_changes, diff
    problems = []
    p = open_pipeline(storage, out, count, inbox)
    p.start()
    wait_for_all(p, count, inbox, append)
    want_rows = final_rows(count)
    got_t = bag([tuple(r.values()) for r in p.query("SELECT id, g, v FROM t")])
    want_t = bag([(r["id"], r["g"], r["v"]) for r in want_rows])
    if diff(got_t, want_t):
        problems.append("table t (a batch lost or applied twice): " + diff(got_t, want_t))
    model = Model("CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT);", {"t": ["id", "g", "v"]})
    model.insert("t", [(r["id"], r["g"], r["v"]) for r in want_rows])
    want_v = model.view(model.duck(), VIEW)
    got_v = bag([tuple(r.values()) for r in p.query("SELECT * FROM agg")])
    if diff(got_v, want_v):
        problems.append("view agg: " + diff(got_v, want_v))
    files = sorted(glob.glob(os.path.join(out, "log", "step-*.parquet")))
    changes = pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
    steps = [int(os.path.basename(f)[5:15]) for f in files]
    if sorted(set(changes["__step"])) != steps:
        problems.append("changelog: files and their __step column disagree")
    if diff(bag_from_changes(changes.drop(columns=["__step"])), want_v):
        problems.append("changelog: " + diff(bag_from_changes(changes.drop(columns=["__step"])), want_v))
    snap = pq.read_table(os.path.join(out, "snap", "snapshot.parquet")).to_pandas()
    got_s = bag([tuple(None if pd.isna(x) else x for x in r) for r in snap.itertuples(index=False)])
    if diff(got_s, want_v):
        problems.append("snapshot: " + diff(got_s, want_v))
    p.stop()
    return problems


def main(storage: str, out: str, count: int, inbox: str = None, append: bool = False) -> None:
    p = open_pipeline(storage, out, count, inbox)
    p.start()
    wait_for_all(p, count, inbox, append)
    p.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None,
         len(sys.argv) > 5 and sys.argv[5] == "append")
