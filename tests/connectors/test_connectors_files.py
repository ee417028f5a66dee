"""The ``file_input`` source (CSV with a weight column, JSON lines with insert/delete, Parquet) feeding views
and a ``file_output`` snapshot sink, checked against DuckDB recomputing the views from scratch; restarts
(no file read twice, none missed); bad input (dead letters, the good rows applied); declaration errors."""
import json
import os
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from planner.errors import ConnectorError
from sqlengine import Pipeline
from tests.support.oracle import Model, bag, diff

SCHEMA = "CREATE TABLE t (id BIGINT NOT NULL, g VARCHAR, v INT)"
VIEW = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY g"
VIEW2 = "SELECT id, g, v FROM t WHERE v IS NULL OR v > 2"


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def program(csv_dir, json_dir, snap_dir, follow=True):
    csv = {"name": "csv", "transport": {"name": "file_input", "config": {"path": csv_dir, "pattern": "*.csv",
                                                                        "follow": follow, "poll_interval_ms": 50}},
           "format": {"name": "csv", "config": {"weight_column": "w"}}}
    js = {"name": "json", "transport": {"name": "file_input", "config": {"path": json_dir, "follow": follow,
                                                                        "poll_interval_ms": 50}},
          "format": {"name": "json", "config": {"update_format": "insert_delete"}}}
    snap = {"name": "snap", "transport": {"name": "file_output", "config": {"path": snap_dir, "mode": "snapshot"}},
            "format": {"name": "csv"}}
    return (f"{SCHEMA} WITH ('connectors' = '{decl(csv, js)}');\n"
            f"CREATE MATERIALIZED VIEW v WITH ('connectors' = '{decl(snap)}') AS {VIEW};\n"
            f"CREATE MATERIALIZED VIEW v2 AS {VIEW2};")


def write_atomic(directory, name, text):
    """The documented convention: a hidden temporary name in the same directory, then a rename."""
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(directory, name))


def csv_text(rows):
    """rows: (id, g, v, w); None is an empty field."""
    out = ["id,g,v,w"]
    for r in rows:
        out.append(",".join("" if x is None else str(x) for x in r))
    return "\n".join(out) + "\n"


def json_text(ops):
    """ops: ("insert"|"delete", (id, g, v))."""
    return "".join(json.dumps({k: {"id": r[0], "g": r[1], "v": r[2]}}) + "\n" for k, r in ops)


def apply_csv(model, rows):
    for i, g, v, w in rows:
        (model.insert if w > 0 else model.delete)("t", [(i, g, v)] * abs(w))


def apply_json(model, ops):
    for k, r in ops:
        (model.insert if k == "insert" else model.delete)("t", [r])


def wait_read(p, key, name, timeout=30):
    end = time.monotonic() + timeout
    while name not in (p.status()["connectors"][key]["position"] or []):
        assert time.monotonic() < end, p.status()["connectors"][key]
        time.sleep(0.02)
    p.wait_for_idle(timeout_s=timeout)


def check(p, model, snap_dir):
    con = model.duck()
    for view, select in (("v", VIEW), ("v2", VIEW2)):
        expected = model.view(con, select)
        actual = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {view}")])
        assert not diff(actual, expected), (view, diff(actual, expected))
    path = os.path.join(snap_dir, "snapshot.csv")
    expected = model.view(con, VIEW)
    if not expected:
        return
    got = bag(duckdb.sql(f"SELECT g, n, s FROM read_csv('{path}', header=true, all_varchar=true)").fetchall())
    want = bag([tuple(None if x is None else str(x) for x in r) for r in expected.elements()])
    assert got == want, diff(got, want)


# (id, g, v, w): duplicates, NULLs, weights > 1, deletes (one of a row that is not there: a no-op)
CSV_FILES = [
    ("a-001.csv", [(1, "x", 5, 1), (2, "y", None, 1), (3, None, 7, 1), (1, "x", 5, 1)]),
    ("a-002.csv", [(4, "x", 1, 3), (1, "x", 5, -1), (99, "zz", 9, -1)]),
    ("a-003.csv", [(5, "y", 10, 1), (4, "x", 1, -2), (6, None, None, 1)]),
    ("a-004.csv", [(3, None, 7, -1), (7, "w", 3, 2)]),
]
JSON_FILES = [
    ("b-001.jsonl", [("insert", (10, "x", 4)), ("insert", (11, "q", None)), ("insert", (10, "x", 4))]),
    ("b-002.jsonl", [("delete", (10, "x", 4)), ("insert", (12, None, 8)), ("delete", (2, "y", None))]),
    ("b-003.jsonl", [("delete", (11, "q", None)), ("insert", (13, "y", 3))]),
]


def test_files_arriving_while_running(make_pipeline, tmp_path):
    csv_dir, json_dir, snap = tmp_path / "csv", tmp_path / "json", str(tmp_path / "snap")
    csv_dir.mkdir()
    json_dir.mkdir()
    p = make_pipeline(program(str(csv_dir), str(json_dir), snap))
    model = Model(SCHEMA, {"t": ["id", "g", "v"]})
    # a half-written file (the convention's temporary name) is never read, even though it matches nothing else
    (csv_dir / ".a-000.csv.tmp").write_text(csv_text([(100, "tmp", 1, 1)]))
    (csv_dir / "_SUCCESS").write_text("")
    for (cname, crows), (jname, jops) in zip(CSV_FILES, JSON_FILES + [(None, None)]):
        write_atomic(str(csv_dir), cname, csv_text(crows))
        apply_csv(model, crows)
        wait_read(p, "t.csv", cname)
        check(p, model, snap)
        if jname:
            write_atomic(str(json_dir), jname, json_text(jops))
            apply_json(model, jops)
            wait_read(p, "t.json", jname)
            check(p, model, snap)
    st = p.status()["connectors"]
    assert sorted(st["t.csv"]["position"]) == [n for n, _ in CSV_FILES]
    assert sorted(st["t.json"]["position"]) == [n for n, _ in JSON_FILES]
    assert st["t.csv"]["dead_letter_rows"] == st["t.json"]["dead_letter_rows"] == 0
    assert st["t.csv"]["state"] == "running" and st["t.csv"]["lag"] == 0
    # renaming the temporary file publishes it
    os.replace(csv_dir / ".a-000.csv.tmp", csv_dir / "a-000.csv")
    model.insert("t", [(100, "tmp", 1)])
    wait_read(p, "t.csv", "a-000.csv")
    check(p, model, snap)


def test_restart_reads_every_file_once(make_pipeline, tmp_path):
    csv_dir, json_dir, snap = tmp_path / "csv", tmp_path / "json", str(tmp_path / "snap")
    csv_dir.mkdir()
    json_dir.mkdir()
    store = str(tmp_path / "store")
    model = Model(SCHEMA, {"t": ["id", "g", "v"]})
    for name, rows in CSV_FILES[:2]:
        write_atomic(str(csv_dir), name, csv_text(rows))
        apply_csv(model, rows)
    write_atomic(str(json_dir), JSON_FILES[0][0], json_text(JSON_FILES[0][1]))
    apply_json(model, JSON_FILES[0][1])
    p = make_pipeline(program(str(csv_dir), str(json_dir), snap), storage_dir=store)
    wait_read(p, "t.csv", CSV_FILES[1][0])
    wait_read(p, "t.json", JSON_FILES[0][0])
    check(p, model, snap)
    p.stop()
    # while it is down: more files, one of them with a name that sorts before the files already read
    for name, rows in CSV_FILES[2:] + [("a-0005.csv", [(8, "late", 2, 1)])]:
        write_atomic(str(csv_dir), name, csv_text(rows))
        apply_csv(model, rows)
    for name, ops in JSON_FILES[1:]:
        write_atomic(str(json_dir), name, json_text(ops))
        apply_json(model, ops)
    p = make_pipeline(program(str(csv_dir), str(json_dir), snap), storage_dir=store)
    wait_read(p, "t.csv", "a-004.csv")
    wait_read(p, "t.csv", "a-0005.csv")
    wait_read(p, "t.json", JSON_FILES[-1][0])
    check(p, model, snap)
    st = p.status()["connectors"]
    assert st["t.csv"]["rows"] == sum(len(r) for _, r in CSV_FILES[2:]) + 1 - 0   # only the new files' rows
    p.stop(force=True)
    # a third run without new files reads nothing again (a bounded read of the same directories finishes)
    p = make_pipeline(program(str(csv_dir), str(json_dir), snap, follow=False), storage_dir=store)
    p.wait_for_completion(timeout_s=30)
    assert p.status()["connectors"]["t.csv"]["rows"] == 0
    check(p, model, snap)


def read_dead_letters(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_bad_input_goes_to_the_dead_letter(make_pipeline, tmp_path):
    d = {k: tmp_path / k for k in ("csv", "json", "pq")}
    for x in d.values():
        x.mkdir()
    (d["csv"] / "1.csv").write_text('id,g,v,w\n1,a,1,1\n2,b\n3,c,notanint,1\nx,c,1,1\n4,d,4,0\n5,"e,1,1\n')
    (d["csv"] / "2.csv").write_text("id,g,v,w\n6,f,6,1\n")
    (d["csv"] / "3.csv").write_text("id,g,colour,w\n7,g,1,1\n")      # unknown column (rejected): every row
    (d["json"] / "1.jsonl").write_text('{"insert": {"id": 10, "g": "j", "v": 1}}\n{"insert": {"id": 11, "g": \n'
                                       '{"insert": {"id": null, "g": "k"}}\n{"upsert": {"id": 12}}\n'
                                       '{"insert": {"id": 13, "g": "m", "v": 3}}\n')
    pq.write_table(pa.table({"id": [20, 21], "g": ["p", None], "v": pa.array([1, 2], pa.int16())}),
                   d["pq"] / "1.parquet")
    pq.write_table(pa.table({"id": [22], "g": [[1, 2]]}), d["pq"] / "2.parquet")           # list for VARCHAR
    pq.write_table(pa.table({"g": ["no id"]}), d["pq"] / "3.parquet")                      # missing NOT NULL id
    (d["pq"] / "4.parquet").write_bytes(b"PAR1 this is not parquet")
    pq.write_table(pa.table({"id": [23, 24], "v": pa.array([1, 5_000_000_000], pa.int64())}), d["pq"] / "5.parquet")

    def src(name, fmt, cfg=None):
        return {"name": name, "transport": {"name": "file_input", "config": {"path": str(d[name])}},
                "format": {"name": fmt, "config": cfg or {}}}
    sql = (f"{SCHEMA} WITH ('connectors' = '{decl(src('csv', 'csv', {'weight_column': 'w', 'unknown_fields': 'reject'}), src('json', 'json'), src('pq', 'parquet'))}');"
           f"\nCREATE MATERIALIZED VIEW v AS {VIEW};")
    p = make_pipeline(sql)
    p.wait_for_completion(timeout_s=60)
    got = sorted((r["id"], r["g"]) for r in p.query("SELECT id, g FROM t"))
    assert got == [(1, "a"), (6, "f"), (10, "j"), (13, "m"), (20, "p"), (21, None), (23, None)]
    st = p.status()["connectors"]
    dl = {k: read_dead_letters(os.path.join(p.storage_dir, "dead_letter", f"t.{k}.jsonl")) for k in d}
    for k in d:
        assert st[f"t.{k}"]["dead_letter_rows"] == len(dl[k]), (k, dl[k])
        assert st[f"t.{k}"]["state"] == "finished"
    # CSV: a short row, a bad INT, a bad BIGINT, weight 0, an unterminated quote (rest of the file), one bad file
    csv_errors = [(r["file"], r["row"], r["error"]) for r in dl["csv"]]
    assert any(f == "1.csv" and row == 1 and "malformed CSV row" in e for f, row, e in csv_errors), csv_errors
    assert any(f == "1.csv" and row == 2 and "cannot convert 'notanint' to INT" in e for f, row, e in csv_errors)
    assert any(f == "1.csv" and row == 3 and "to BIGINT" in e for f, row, e in csv_errors)
    assert any(f == "1.csv" and row == 4 and "nonzero integer weight" in e for f, row, e in csv_errors)
    assert [(row, e) for f, row, e in csv_errors if f == "3.csv"] == \
        [(0, "table t, row 0: unknown column 'colour' (unknown_fields is 'reject'). Columns: id, g, v")]
    json_errors = [(r["row"], r["error"]) for r in dl["json"]]
    assert [row for row, _ in json_errors] == [1, 2, 3], json_errors
    assert "malformed JSON" in json_errors[0][1] and "NULL in a NOT NULL column" in json_errors[1][1]
    pq_errors = {r["file"]: r["error"] for r in dl["pq"]}
    assert set(pq_errors) == {"2.parquet", "3.parquet", "4.parquet", "5.parquet"}, pq_errors
    assert "column g is list<element: int64> in the file but VARCHAR in the table" in pq_errors["2.parquet"]
    assert "missing value for NOT NULL column 'id'" in pq_errors["3.parquet"]
    assert "4.parquet cannot be read" in pq_errors["4.parquet"]
    assert "cannot convert 5000000000 (int) to INT" in pq_errors["5.parquet"]   # one bad value: one bad row


@pytest.mark.parametrize("conn, needle, message", [
    ({"transport": {"name": "file_input", "config": {"path": "/x", "folow": True}}}, "folow",
     'unknown option "folow" (did you mean "follow"?)'),
    ({"transport": {"name": "file_input", "config": {"path": "/x"}}, "format": {"name": "avro"}}, "avro",
     "format 'avro' is not supported; formats: csv, json, parquet"),
    ({"transport": {"name": "file_input", "config": {"path": "/x"}},
      "format": {"name": "csv", "config": {"weight_column": "w", "op_column": "op"}}}, "op_column",
     'give "weight_column" or "op_column", not both'),
    ({"transport": {"name": "file_input", "config": {"path": "/x"}},
      "format": {"name": "parquet", "config": {"weight_column": "v"}}}, "weight_column", "is a column of table t"),
    ({"transport": {"name": "file_input", "config": {"path": "hdfs://nn/x", "reader": "arrow"}}}, "reader",
     'reader "arrow" reads local paths only'),
    ({"transport": {"name": "file_input", "config": {"path": "/x", "reader": "fast"}}}, "reader",
     "must be one of 'auto', 'arrow', 'spark'"),
    ({"transport": {"name": "file_input", "config": {}}}, None, 'option "path" is required'),
])
def test_declaration_errors(tmp_path, conn, needle, message):
    sql = f"{SCHEMA}\n  WITH ('connectors' = '{decl(conn)}');"
    with pytest.raises(ConnectorError) as info:
        Pipeline.from_sql(sql, storage_dir=str(tmp_path))
    err = info.value
    assert message in err.message, err.message
    assert err.line == 2
    line = sql.split("\n")[1]
    if needle is not None:
        assert err.column - 1 == line.index(f'"{needle}"'), (str(err), needle)


def test_spark_reader_matches_arrow_reader(make_pipeline, tmp_path):
    """The Spark reader (a file:// URI, listed through Hadoop) gives the same rows and dead letters."""
    d = tmp_path / "in"
    pdir = tmp_path / "pq"
    d.mkdir()
    pdir.mkdir()
    (d / "1.csv").write_text("id,g,v,op\n1,a,1,insert\n2,,2,insert\n2,,2,delete\n3,c\n4,d,x,insert\n")
    (d / "2.csv").write_text("id,g,v,op\n5,e,5,upsert\n6,f,6,INSERT\n")
    pq.write_table(pa.table({"id": [7, 8], "g": ["p", None], "v": pa.array([1, 2], pa.int8())}), pdir / "1.parquet")
    pq.write_table(pa.table({"g": ["no id"]}), pdir / "2.parquet")
    results = []
    for reader in ("arrow", "spark"):
        prefix = "file://" if reader == "spark" else ""
        conns = [{"name": "c", "transport": {"name": "file_input",
                                            "config": {"path": prefix + str(d), "reader": reader}},
                  "format": {"name": "csv", "config": {"op_column": "op"}}},
                 {"name": "p", "transport": {"name": "file_input",
                                            "config": {"path": prefix + str(pdir), "reader": reader}},
                  "format": {"name": "parquet"}}]
        p = make_pipeline(f"{SCHEMA} WITH ('connectors' = '{decl(*conns)}');")
        p.wait_for_completion(timeout_s=90)
        rows = sorted(tuple(r.values()) for r in p.query("SELECT * FROM t"))
        dead = []
        for k in ("c", "p"):
            for r in read_dead_letters(os.path.join(p.storage_dir, "dead_letter", f"t.{k}.jsonl")):
                dead.append((r["file"], r["row"], r["error"]))
        results.append((rows, sorted(dead, key=str)))
        p.stop()
    assert results[0] == results[1]
    rows, dead = results[0]
    assert rows == [(1, "a", 1), (6, "f", 6), (7, "p", 1), (8, None, 2)]
    assert [(f, r) for f, r, _ in dead] == [("1.csv", 3), ("1.csv", 4), ("2.csv", 0), ("2.parquet", None)]
