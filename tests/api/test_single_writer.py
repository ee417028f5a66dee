"""One writer per storage directory (sqlengine.state.lock): the lock, waiting for it, and epoch fencing.

The races run real processes (``python -m sqlengine run``): a second run on the storage of a running one
fails naming it; one started with ``--wait-for-lock`` takes over when the first is SIGKILLed, with the next
epoch, and the sink's output integrates to DuckDB's recomputation over every input (nothing lost, nothing
doubled).  In process: a pipeline whose epoch went stale (the epoch bumped from outside, as another
process's lock would) neither commits nor delivers, and the file and Kafka sinks refuse older epochs.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import duckdb
import pandas as pd
import pytest

from sqlengine import Pipeline, RuntimeConfig
from sqlengine.errors import StorageFencedError, StorageLockedError
from sqlengine.state.lock import EPOCH_FILE, read_epoch, read_holder
from sqlengine.state.store import atomic_write_bytes

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAZY = {"sqlengine.spark.start": "lazy"}
VIEW_SQL = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"
ROWS_PER_BATCH = 20


def rows_of(batches: range) -> list:
    return [{"id": i, "g": i % 4} for k in batches for i in range(k * ROWS_PER_BATCH, (k + 1) * ROWS_PER_BATCH)]


def expected(batches: range) -> Counter:
    """The view recomputed by DuckDB over every input row, as a bag."""
    df = pd.DataFrame(rows_of(batches), columns=["id", "g"])
    con = duckdb.connect()
    con.register("t", df)
    return Counter(tuple(r) for r in con.execute(VIEW_SQL).fetchall())


def wait_until(check, timeout: float = 90, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def run(program: str, storage: str, log: str, *extra: str) -> subprocess.Popen:
    """``sqlengine run`` in a child process (output to ``log``.out / .err)."""
    return subprocess.Popen([sys.executable, "-m", "sqlengine", "run", program, "--storage", storage,
                             "--interval", "0.5", *extra], cwd=ROOT,
                            stdout=open(log + ".out", "wb"), stderr=open(log + ".err", "wb"))


def race(tmp_path, sql: str, feed, integrate) -> None:
    """Two runs on one storage: the second fails naming the first; a third waits for the lock, takes over
    when the first is SIGKILLed (epoch + 1), and the output integrates to the recomputation of all input."""
    program = str(tmp_path / "p.sql")
    with open(program, "w") as f:
        f.write(sql)
    storage = str(tmp_path / "storage")
    procs = []
    try:
        first = run(program, storage, str(tmp_path / "first"))
        procs.append(first)
        wait_until(lambda: read_holder(storage).get("pid") == first.pid, what="the first run to lock the storage")
        second = run(program, storage, str(tmp_path / "second"))
        procs.append(second)
        assert second.wait(90) != 0
        err = open(str(tmp_path / "second.err")).read()
        assert f"PID {first.pid} on host {socket.gethostname()}" in err, err
        assert "--wait-for-lock" in err and "SIGKILL" in err, err
        feed(range(0, 5))
        wait_until(lambda: integrate() == expected(range(0, 5)), what="the first run's output")
        epoch = read_epoch(storage)
        third = run(program, storage, str(tmp_path / "third"), "--wait-for-lock", "120")
        procs.append(third)
        time.sleep(1.5)
        assert third.poll() is None and read_holder(storage)["pid"] == first.pid   # waiting
        feed(range(5, 10))
        time.sleep(0.3)
        first.send_signal(signal.SIGKILL)
        first.wait()
        wait_until(lambda: read_holder(storage).get("pid") == third.pid, what="the third run to take over")
        assert read_epoch(storage) == epoch + 1
        feed(range(10, 15))
        wait_until(lambda: integrate() == expected(range(0, 15)), what="the third run's output")
        third.send_signal(signal.SIGINT)
        assert third.wait(90) == 0, open(str(tmp_path / "third.err")).read()
        assert integrate() == expected(range(0, 15))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def changelog_bag(out_dir: str) -> Counter:
    """The file_output changelog (JSON lines with __weight) integrated."""
    c: Counter = Counter()
    if not os.path.isdir(out_dir):
        return c
    for n in sorted(os.listdir(out_dir)):
        if n.startswith("step-"):
            with open(os.path.join(out_dir, n)) as f:
                for line in f:
                    r = json.loads(line)
                    c[(r["g"], r["n"])] += r["__weight"]
    return Counter({k: v for k, v in c.items() if v})


def files_program(tmp_path) -> str:
    src = {"transport": {"name": "file_input", "config": {"path": str(tmp_path / "in"), "follow": True,
                                                          "poll_interval_ms": 50}},
           "format": {"name": "json", "config": {"update_format": "raw"}}}
    snk = {"transport": {"name": "file_output", "config": {"path": str(tmp_path / "out")}}, "format": {"name": "json"}}
    return (f"CREATE TABLE t (id BIGINT NOT NULL, g INT) WITH ('connectors' = '{json.dumps([src])}');\n"
            f"CREATE MATERIALIZED VIEW agg WITH ('connectors' = '{json.dumps([snk])}') AS {VIEW_SQL};\n")


def test_two_runs_race_on_one_storage_with_files(tmp_path):
    os.makedirs(tmp_path / "in")

    def feed(batches: range) -> None:
        for k in batches:
            tmp = tmp_path / "in" / f".b{k:04d}.json.tmp"
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows_of(range(k, k + 1))))
            os.replace(tmp, tmp_path / "in" / f"b{k:04d}.json")
    race(tmp_path, files_program(tmp_path), feed, lambda: changelog_bag(str(tmp_path / "out")))


def test_two_runs_race_on_one_storage_with_kafka(tmp_path, broker):
    tin, tout = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    broker.create_topic(tin, 1)
    broker.create_topic(tout, 2)
    src = {"transport": {"name": "kafka_input", "config": {"bootstrap.servers": broker.bootstrap, "topics": [tin]}},
           "format": {"name": "json", "config": {"update_format": "insert_delete"}}}
    snk = {"transport": {"name": "kafka_output", "config": {"bootstrap.servers": broker.bootstrap, "topic": tout,
                                                            "key": ["g"]}}}
    sql = (f"CREATE TABLE t (id BIGINT NOT NULL, g INT) WITH ('connectors' = '{json.dumps([src])}');\n"
           f"CREATE MATERIALIZED VIEW agg WITH ('connectors' = '{json.dumps([snk])}') AS {VIEW_SQL};\n")

    def feed(batches: range) -> None:
        broker.produce(tin, [json.dumps({"insert": r}).encode() for r in rows_of(batches)], partition=0)

    def integrate() -> Counter:
        c: Counter = Counter()
        seen = Counter()
        for _p, _o, _k, value, headers in broker.consume_all(tout):
            seen[(headers["sqlengine.step"], headers["sqlengine.seq"])] += 1
            (kind, row), = json.loads(value).items()
            c[(row["g"], row["n"])] += 1 if kind == "insert" else -1
        assert max(seen.values(), default=1) == 1, "a (step, seq) was written twice"
        return Counter({k: v for k, v in c.items() if v})
    race(tmp_path, sql, feed, integrate)


# ---------------------------------------------------------------------- in one process
SQL = f"CREATE TABLE t (id BIGINT NOT NULL, g INT);\nCREATE MATERIALIZED VIEW agg AS {VIEW_SQL};"


def test_a_second_pipeline_on_the_storage_is_refused_then_waits_then_opens(tmp_path):
    store = str(tmp_path / "s")
    p = Pipeline.from_sql(SQL, storage_dir=store, spark_conf=LAZY)
    first_epoch = read_epoch(store)
    with pytest.raises(StorageLockedError, match=f"PID {os.getpid()} on host {socket.gethostname()}") as ei:
        Pipeline.from_sql(SQL, storage_dir=store, spark_conf=LAZY)
    assert "wait_for_lock_secs" in str(ei.value) and "cannot be forced" in str(ei.value)
    assert read_epoch(store) == first_epoch   # a refused opener starts no epoch
    p.start()
    p.input_json("t", rows_of(range(0, 2)))
    p.wait_for_idle()
    threading.Timer(0.5, p.stop).start()
    t0 = time.monotonic()
    q = Pipeline.from_sql(SQL, storage_dir=store, spark_conf=LAZY,
                          runtime_config=RuntimeConfig(wait_for_lock_secs=60))
    assert time.monotonic() - t0 >= 0.4
    assert read_epoch(store) == first_epoch + 1 and read_holder(store)["pid"] == os.getpid()
    q.start()
    q.input_json("t", rows_of(range(2, 3)))
    q.wait_for_idle()
    assert Counter(tuple(r.values()) for r in q.query("SELECT g, n FROM agg")) == expected(range(0, 3))
    q.stop()
    with pytest.raises(StorageLockedError, match="after waiting 0.3 s"):
        r = Pipeline.from_sql(SQL, storage_dir=store, spark_conf=LAZY)
        try:
            Pipeline.from_sql(SQL, storage_dir=store, spark_conf=LAZY,
                              runtime_config=RuntimeConfig(wait_for_lock_secs=0.3))
        finally:
            r.stop()


def bump_epoch(store: str) -> int:
    """What another process's lock acquisition does to the epoch (this one keeps its lock: a network file
    system that expired it would not tell)."""
    epoch = read_epoch(store) + 1
    atomic_write_bytes(os.path.join(store, EPOCH_FILE), f"{epoch}\n".encode())
    return epoch


def manifest_steps(store: str) -> list:
    return sorted(int(n[len("manifest-"):-len(".json")]) for n in os.listdir(os.path.join(store, "state"))
                  if n.startswith("manifest-"))


def test_a_stale_epoch_neither_commits_nor_delivers_and_a_new_owner_loses_nothing(tmp_path):
    store, out = str(tmp_path / "s"), str(tmp_path / "out")
    snk = {"name": "files", "transport": {"name": "file_output", "config": {"path": out}}, "format": {"name": "json"}}
    sql = (f"CREATE TABLE t (id BIGINT NOT NULL, g INT);\n"
           f"CREATE MATERIALIZED VIEW agg WITH ('connectors' = '{json.dumps([snk])}') AS {VIEW_SQL};")
    p = Pipeline.from_sql(sql, storage_dir=store, spark_conf=LAZY)
    p.start()
    p.input_json("t", rows_of(range(0, 2)))
    p.wait_for_idle()
    assert changelog_bag(out) == expected(range(0, 2))
    p.pause_connector("agg", "files")
    p.input_json("t", rows_of(range(2, 3)))   # committed, not delivered: the sink is paused
    p.wait_for_idle()
    committed = p.status()["step"]
    bump_epoch(store)
    p.resume_connector("agg", "files")   # the sink refuses: another process owns the storage now
    wait_until(lambda: p.status()["connectors"]["agg.files"]["state"] == "failed", 30, "the sink to be fenced")
    assert "epoch" in p.status()["connectors"]["agg.files"]["last_error"]
    assert changelog_bag(out) == expected(range(0, 2))
    p.input_json("t", rows_of(range(3, 4)))   # logged, but its step cannot commit
    with pytest.raises(StorageFencedError, match="no longer owns it"):
        p.wait_for_idle(timeout_s=30)
    assert manifest_steps(store)[-1] == committed
    p.stop()
    q = Pipeline.from_sql(sql, storage_dir=store, spark_conf=LAZY)   # the new owner: replays, delivers
    q.start()
    q.wait_for_idle()
    assert changelog_bag(out) == expected(range(0, 4))
    q.stop()


def declared_sink(transport: dict, fmt, store: str, epoch: int):
    from connectors.declare import declare
    decl = json.dumps([{"name": "s", "transport": transport, **({"format": fmt} if fmt else {})}])
    d = declare("agg", "sink", (decl, None), None, "p", store, [("g", None), ("n", None)])[0]
    d.connector.ctx.pipeline_id, d.connector.ctx.epoch = "pid-1", epoch
    return d.connector


def changes(step: int):
    import pyarrow as pa
    return pa.table({"g": [step], "n": [1], "__weight": pa.array([1], pa.int64())})


def test_file_sink_refuses_to_write_for_an_older_epoch(tmp_path):
    out = str(tmp_path / "out")
    transport = {"name": "file_output", "config": {"path": out}}
    old = declared_sink(transport, {"name": "json"}, str(tmp_path), 3)
    assert old.open() == 0
    old.write(1, changes(1))
    new = declared_sink(transport, {"name": "json"}, str(tmp_path), 4)
    assert new.open() == 1
    with pytest.raises(StorageFencedError, match="epoch 4 .* this process's epoch 3"):
        old.write(2, changes(2))
    with pytest.raises(StorageFencedError):
        declared_sink(transport, {"name": "json"}, str(tmp_path), 3).open()
    new.write(2, changes(2))
    assert sorted(n for n in os.listdir(out) if n.startswith("step-")) == \
        ["step-0000000001.jsonl", "step-0000000002.jsonl"]


def test_kafka_sink_refuses_a_topic_a_newer_epoch_wrote(tmp_path, broker):
    tout = f"out-{uuid.uuid4().hex[:8]}"
    broker.create_topic(tout, 1)
    transport = {"name": "kafka_output", "config": {"bootstrap.servers": broker.bootstrap, "topic": tout}}
    new = declared_sink(transport, None, str(tmp_path), 5)
    assert new.open() == 0
    new.write(1, changes(1))
    new.close()
    assert [h["sqlengine.epoch"] for *_, h in broker.consume_all(tout)] == [b"5"]
    old = declared_sink(transport, None, str(tmp_path), 4)
    with pytest.raises(StorageFencedError, match="epoch 5 .* this process's epoch 4"):
        old.open()
    again = declared_sink(transport, None, str(tmp_path), 6)
    assert again.open() == 1
    again.close()
