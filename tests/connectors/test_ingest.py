"""Robust ingestion: CSV input, error policies (reject / dead letter), and huge batches logged in chunks,
atomically."""
import json
import os

import pandas as pd
import pytest

from sqlengine import InputError
from sqlengine.ingest import batches
from sqlengine.state import inputlog
from sqlengine.state.faults import clear_io, inject_io
from sqlengine.state.inputlog import InputLog

SQL = """CREATE TABLE t (id INT NOT NULL, name VARCHAR, price DECIMAL(10,2), d DATE, ts TIMESTAMP, ok BOOLEAN);
CREATE TABLE p (k INT PRIMARY KEY, v VARCHAR);
CREATE MATERIALIZED VIEW s AS SELECT COUNT(*) AS n, SUM(price) AS total, COUNT(name) AS named FROM t;
"""


def rows(p, sql):
    return [tuple(r.values()) for r in p.query(sql)]


def log_files(p):
    return sorted(n for n in os.listdir(p.log.root))


def test_csv_input_with_types_nulls_deletes_and_whole_batch_rejection(make_pipeline, tmp_path):
    p = make_pipeline(SQL)
    p.input_csv("t", "id,name,price,d,ts,ok\n1,a,1.50,2024-01-02,2024-01-02 10:00:00,true\n2,,,,,\n"
                     "3,\"c, quoted\",2.25,2024-02-29,2024-03-01T00:00:05,false\n")
    path = tmp_path / "del.csv"
    path.write_text("ID,Name,Price,d,ts,ok\n2,,,,,\n")          # header names are case-insensitive
    p.input_csv("t", str(path), delete=True)
    p.wait_for_idle()
    assert rows(p, "SELECT id, name, CAST(price AS VARCHAR), CAST(d AS VARCHAR), CAST(ts AS VARCHAR), ok "
                   "FROM t ORDER BY id") == [
        (1, "a", "1.50", "2024-01-02", "2024-01-02 10:00:00", True),
        (3, "c, quoted", "2.25", "2024-02-29", "2024-03-01 00:00:05", False)]
    before, seq = rows(p, "SELECT * FROM s"), p.log.next_seq
    cases = [
        ("id,name\n1,a\nx,b\n", "table t, column id, row 1: cannot convert 'x' to INT"),
        ("id,name\n1,a\n2,b\n,c\n", "table t, column id, row 2: NULL in a NOT NULL column"),
        ("id,price\n1,1.5\n2,123456789.5\n", "table t, column price, row 1: cannot convert '123456789.5'"),
        ("id,d\n1,2024-01-01\n2,2024-13-01\n", "table t, column d, row 1"),
        ("id,ok\n1,true\n2,maybe\n", "table t, column ok, row 1"),
        ("id,name\n1,a\n2\n", "table t, row 1: malformed CSV row: expected 2 fields, got 1"),
        ("id,colour\n1,red\n", "table t: unknown column 'colour'"),
        ("name\nx\n", "missing value for NOT NULL column 'id'"),
        ("k,v\n1,a\n1,b\n", "table p, row 1: duplicate primary key (k=1) inserted twice in one batch, rows 0 and 1"),
        (str(tmp_path / "missing.csv"), "path of an existing file"),
    ]
    for data, message in cases:
        with pytest.raises(InputError) as e:
            p.input_csv("p" if data.startswith("k,") else "t", data)
        assert message in str(e.value)
    with pytest.raises(InputError, match="unknown on_error policy"):
        p.input_csv("t", "id\n1\n", on_error="skip")
    assert p.log.next_seq == seq
    p.wait_for_idle()
    assert rows(p, "SELECT * FROM s") == before


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_dead_letter_policy_for_csv_json_and_pandas(make_pipeline, tmp_path):
    p = make_pipeline(SQL)
    p.input_csv("t", "id,name,price\n1,a,1\nx,b,2\n3,c\n4,d,4\n,e,5\n", on_error="dead_letter")
    p.input_json("t", '{"id": 5, "price": 5}\n{"id": "six"}\n{oops\n{"id": 7, "nope": 1}\n{"id": 8}',
                 on_error="dead_letter")
    p.input_pandas("t", pd.DataFrame({"id": [9, None, 11], "price": [9, 10, "x"]}), on_error="dead_letter")
    mine = str(tmp_path / "mine" / "bad-p.jsonl")
    p.input_json("p", [{"insert": {"k": 1, "v": "a"}}, {"insert": {"k": 1, "v": "b"}}, {"upsert": {"k": 2}}],
                 update_format="insert_delete", on_error="dead_letter", dead_letter=mine)
    p.wait_for_idle()
    assert rows(p, "SELECT id FROM t ORDER BY id") == [(1,), (4,), (5,), (8,), (9,)]
    assert rows(p, "SELECT * FROM p") == [(1, "a")]
    assert rows(p, "SELECT n, total FROM s") == [(5, 19)]
    assert p.status()["dead_letter_rows"] == {"t": 8, "p": 2}
    bad = read_jsonl(os.path.join(p.storage_dir, "dead_letter", "t.jsonl"))
    got = [(r["row"], r["column"], r["raw"]) for r in bad]
    assert got == [(1, "id", {"id": "x", "name": "b", "price": "2"}), (2, None, "3,c"),
                   (4, "id", {"id": None, "name": "e", "price": "5"}),
                   (1, "id", {"id": "six"}), (2, None, "{oops"), (3, None, {"id": 7, "nope": 1}),
                   (1, "id", {"id": None, "price": 10}), (2, "price", {"id": 11.0, "price": "x"})]
    assert all(r["table"] == "t" and r["error"].startswith(f"table t") and f"row {r['row']}" in r["error"]
               and r["batch"] for r in bad)
    assert "cannot convert 'x' to INT" in bad[0]["error"] and "malformed CSV row" in bad[1]["error"]
    assert "malformed JSON" in bad[4]["error"] and "unknown column 'nope'" in bad[5]["error"]
    assert [(r["row"], "duplicate primary key" in r["error"]) for r in read_jsonl(mine)] == [(1, True), (2, False)]
    # a dead-letter file that cannot be written: nothing of the batch is applied
    inject_io("dead_letter_write")
    try:
        with pytest.raises(InputError, match="ENOSPC"):
            p.input_json("t", [{"id": 20}, {"id": "bad"}], on_error="dead_letter")
    finally:
        clear_io()
    assert len(read_jsonl(os.path.join(p.storage_dir, "dead_letter", "t.jsonl"))) == 8
    p.wait_for_idle()
    assert rows(p, "SELECT n FROM s") == [(5,)]


class Spy:
    """Records the rows of every chunk appended to a log batch."""

    def __init__(self, monkeypatch):
        self.sizes = []
        real = inputlog.Batch.append

        def append(batch, data):
            self.sizes.append(data.num_rows)
            real(batch, data)
        monkeypatch.setattr(inputlog.Batch, "append", append)


def test_huge_batches_are_converted_and_logged_in_chunks_atomically(make_pipeline, monkeypatch):
    monkeypatch.setattr(batches, "CHUNK_ROWS", 10)     # 10M-row batches in miniature
    spy = Spy(monkeypatch)
    p = make_pipeline(SQL)
    p.wait_for_idle()
    df = pd.DataFrame({"id": range(95), "price": [1] * 95})
    p.input_pandas("t", df)
    assert spy.sizes == [10] * 9 + [5]                 # never more than a chunk converted at once
    assert sum(n.endswith(".arrow") for n in log_files(p)) in (0, 10)    # 10 entries, or already consumed
    spy.sizes.clear()
    p.input_csv("t", "id,price\n" + "".join(f"{100 + i},2\n" for i in range(25)))
    assert spy.sizes == [10, 10, 5]
    p.wait_for_idle()
    assert rows(p, "SELECT n, total FROM s") == [(120, 145)]
    files, seq = log_files(p), p.log.next_seq
    # a bad row in the last chunk discards the earlier chunks (already written to the log)
    bad = pd.DataFrame({"id": list(range(200, 286)) + [None] + [300], "price": [1] * 88})
    with pytest.raises(InputError, match="table t, column id, row 86: NULL in a NOT NULL column"):
        p.input_pandas("t", bad)
    # a full disk at the batch's commit record (after its 10 chunk files), or at its 4th chunk file (written in
    # place, made visible by the commit record): no chunk survives either
    for after, failed in ((10, r"batch-.*\.commit\.tmp"), (3, r"-b[0-9a-f]+\.arrow")):
        inject_io("log_write", after=after)
        try:
            with pytest.raises(InputError, match=rf"cannot write the input log: .*{failed}: ENOSPC"):
                p.input_pandas("t", df)
        finally:
            clear_io()
        assert log_files(p) == files and p.log.next_seq == seq
    # dead-letter mode across chunks: row numbers count from the start of the batch
    p.input_pandas("t", bad, on_error="dead_letter")
    p.wait_for_idle()
    assert rows(p, "SELECT n FROM s") == [(207,)]
    assert [r["row"] for r in read_jsonl(os.path.join(p.storage_dir, "dead_letter", "t.jsonl"))] == [86]


def test_uncommitted_chunks_are_discarded_when_the_log_is_reopened(tmp_path):
    import pyarrow as pa
    root = str(tmp_path / "log")
    log = InputLog(root)
    data = pa.table({"c0": [1, 2], "__w": pa.array([1, 1], pa.int64())})
    log.append("t", data)                                # entry 0
    with log.batch("t") as b:                            # entries 1..3, committed
        for _ in range(3):
            b.append(data)
        b.commit()
    crashed = log.batch("t")                             # a process killed after writing three chunks
    crashed.append(data)
    crashed.append(data)
    crashed.append(data)
    assert len(os.listdir(root)) == 4 + 1 + 3
    again = InputLog(root)
    assert again.next_seq == 4 and sorted(again.files) == [0, 1, 2, 3]
    assert len(os.listdir(root)) == 4 + 1
    assert [again.read(s).data.num_rows for s in range(4)] == [2, 2, 2, 2]
    again.truncate_before(4)
    assert os.listdir(root) == []


def test_memory_of_an_input_call_is_bounded_by_the_chunk(tmp_path, monkeypatch):
    """Arrow memory allocated while converting and logging 200,000 rows: a few chunks' worth with 10,000-row
    chunks, the whole batch's worth in one chunk (the measurement is sensitive)."""
    import numpy as np
    import pyarrow as pa
    from sqlengine import Pipeline
    peaks = []
    real = inputlog.Batch.append

    def append(batch, data):
        peaks.append(pa.total_allocated_bytes())
        real(batch, data)
    monkeypatch.setattr(inputlog.Batch, "append", append)
    n = 200_000
    df = pd.DataFrame({"id": np.arange(n), "k": np.arange(n) % 7, "x": np.ones(n)})
    whole = n * (8 + 4 + 8 + 8)      # the converted batch: id, k (INT), x, weight
    used = {}
    for chunk in (10_000, n):
        p = Pipeline.from_sql("CREATE TABLE big (id BIGINT NOT NULL, k INT, x DOUBLE)",
                              storage_dir=str(tmp_path / str(chunk)))     # not started: input is only logged
        monkeypatch.setattr(batches, "CHUNK_ROWS", chunk)
        peaks.clear()
        base = pa.total_allocated_bytes()
        p.input_pandas("big", df)
        used[chunk] = max(peaks) - base
        assert p.log.next_seq == (n // chunk if chunk < n else 1)
    # one chunk converts k to INT and adds the weight (12 bytes a row); chunked, at most two chunks are alive
    assert used[n] >= n * 12 and used[10_000] <= 2 * 10_000 * 12 and used[10_000] < whole / 8, used
