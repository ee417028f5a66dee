"""The ``sqlengine`` command line, run as a subprocess: check, explain, run (SIGINT and restart), query, shell."""
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.support.oracle import Model, bag, diff

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, stdin=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "sqlengine", *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=timeout)


GOOD = """CREATE TABLE t (k INT, v BIGINT);
CREATE MATERIALIZED VIEW s AS SELECT k, SUM(v) AS total FROM t GROUP BY k;
"""
BAD = """CREATE TABLE t (k INT, v BIGINT);
CREATE VIEW a AS SELECT k, SUM(vv) FROM t GROUP BY k;
CREATE VIEW b AS SELECT k FROM nope;
CREATE TABLE u (x INT) WITH ('connectors' = '[{"transport": {"name": "datagen", "config": {"cnt": 5}}}]');
CREATE VIEW c AS SELECT COUNT(*) AS n FROM t;
"""


def test_check_good_and_bad(tmp_path):
    good, bad = tmp_path / "good.sql", tmp_path / "bad.sql"
    good.write_text(GOOD)
    bad.write_text(BAD)
    r = cli("check", str(good))
    assert r.returncode == 0 and "ok: 1 tables, 1 views (1 materialized), 0 connectors" in r.stdout
    r = cli("check", str(bad))
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert f"{bad}:2:32: BindError: unknown column 'vv'" in lines[0]
    assert lines[2].strip() == "^" and lines[1].index("vv") == lines[2].index("^")
    assert any(line.startswith(f"{bad}:3:32: BindError: unknown table or view 'nope'") for line in lines)
    assert any(line.startswith(f"{bad}:4:") and 'unknown option "cnt" (did you mean "count"?)' in line for line in lines)
    assert lines[-1] == "3 errors"
    r = cli("check", str(tmp_path / "missing.sql"))
    assert r.returncode != 0 and "cannot read" in r.stderr


def test_explain(tmp_path):
    prog = tmp_path / "p.sql"
    prog.write_text(GOOD)
    r = cli("explain", str(prog), "s")
    assert r.returncode == 0 and "-- view s" in r.stdout and "aggregate" in r.stdout.lower()
    r = cli("explain", str(prog), "nope")
    assert r.returncode != 0 and "unknown view 'nope'" in r.stderr


def program(out: str, count: int, rate: int) -> str:
    gen = json.dumps([{"name": "gen", "transport": {"name": "datagen", "config": {
        "count": count, "rate": rate, "seed": 3, "batch_rows": 500,
        "columns": {"id": {"sequence": {}}, "k": {"zipf": {"n": 20}}, "v": {"uniform": {"min": -5, "max": 50}}}}}}])
    snap = json.dumps([{"name": "snap", "transport": {"name": "file_output", "config": {"path": out, "mode": "snapshot"}},
                        "format": {"name": "parquet"}}])
    return (f"CREATE TABLE t (id BIGINT NOT NULL, k INT, v BIGINT) WITH ('connectors' = '{gen}');\n"
            f"CREATE MATERIALIZED VIEW s WITH ('connectors' = '{snap}') AS "
            "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY k;\n")


def test_run_interrupted_and_restarted_then_query(tmp_path):
    """``run`` stops cleanly on SIGINT (checkpoint), a second run resumes the generator where it stopped, and
    ``query`` on the storage shows every generated row once and the view equal to DuckDB's recomputation."""
    count = 6000
    prog, store, out = tmp_path / "gen.sql", tmp_path / "store", tmp_path / "snap"
    prog.write_text(program(str(out), count, rate=2000))
    proc = subprocess.Popen([sys.executable, "-m", "sqlengine", "run", str(prog), "--storage", str(store),
                             "--interval", "0.2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-2000:]
    assert "stopping: processing the input read so far" in stderr
    assert "state=running" in stderr and "stopped at step" in stderr   # status lines are logged (stderr)
    first = cli("query", str(store), "SELECT COUNT(*) AS n FROM t", "--format", "json")
    got_first = json.loads(first.stdout)["n"]
    assert 0 < got_first < count, got_first
    r = cli("run", str(prog), "--storage", str(store), "--exit-when-done", "--interval", "0.5", timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads("[" + ",".join(cli("query", str(store), "SELECT id, k, v FROM t", "--format", "json")
                                     .stdout.splitlines()) + "]")
    assert sorted(r["id"] for r in rows) == list(range(count)), "a generated row lost or read twice"
    model = Model("CREATE TABLE t (id BIGINT NOT NULL, k INT, v BIGINT);", {"t": ["id", "k", "v"]})
    model.insert("t", [(r["id"], r["k"], r["v"]) for r in rows])
    want = model.view(model.duck(), "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY k")
    csv_out = tmp_path / "s.csv"
    assert cli("query", str(store), "SELECT * FROM s", "--format", "csv", "-o", str(csv_out)).returncode == 0
    got = bag([tuple(x) for x in pd.read_csv(csv_out).itertuples(index=False)])
    assert not diff(got, want), diff(got, want)
    snap = pq.read_table(out / "snapshot.parquet").to_pandas()
    assert not diff(bag([tuple(x) for x in snap.itertuples(index=False)]), want)
    pq_out = tmp_path / "s.parquet"
    assert cli("query", str(store), "SELECT * FROM s", "--format", "parquet", "-o", str(pq_out)).returncode == 0
    assert pq.read_table(pq_out).num_rows == len(want)
    table = cli("query", str(store), "SELECT k, n FROM s ORDER BY k LIMIT 3")
    assert table.returncode == 0 and "(3 rows)" in table.stdout
    bad = cli("query", str(store), "SELECT * FROM nope")
    assert bad.returncode == 1 and "nope" in bad.stderr
    sh = cli("shell", str(store), stdin="SELECT COUNT(*) AS n\nFROM t;\n\\d\n\\d t\nSELECT x FROM t;\n\\q\n")
    assert sh.returncode == 0
    assert f"{count}" in sh.stdout and "(1 row)" in sh.stdout
    assert "materialized view" in sh.stdout and "NOT NULL" in sh.stdout
    assert "error:" in sh.stdout and "x" in sh.stdout


def test_run_reports_program_errors(tmp_path):
    prog = tmp_path / "bad.sql"
    prog.write_text(BAD)
    r = cli("run", str(prog), "--storage", str(tmp_path / "s"))
    assert r.returncode == 1 and f"{prog}:2:32" in r.stderr
    assert not (tmp_path / "s").exists() or not os.listdir(tmp_path / "s")


def test_query_needs_a_storage_written_by_run(tmp_path):
    r = cli("query", str(tmp_path), "SELECT 1")
    assert r.returncode != 0 and "program.sql" in r.stderr


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["--version"]])
def test_help(args):
    r = cli(*args)
    assert r.returncode == 0 and r.stdout


UDFS_PY = '''
import pyarrow as pa
import pyarrow.compute as pc
import sqlengine


@sqlengine.udf("BIGINT", ["BIGINT"])
def squared(x: pa.Array) -> pa.Array:
    return pc.multiply_checked(x, x)


def bucket(k):   # a plain function: named by CREATE FUNCTION, called a row at a time
    return None if k is None else f"b{k % 3}"   # Python's %: never negative
'''


def test_run_check_and_query_with_python_functions(tmp_path):
    """``--udfs FILE.py``: its @udf functions are callable by name, and ``CREATE FUNCTION ... LANGUAGE PYTHON
    AS 'file:function'`` finds a plain function in it; ``query`` on the storage loads the file again."""
    (tmp_path / "myfuncs.py").write_text(UDFS_PY)
    prog, store = tmp_path / "p.sql", tmp_path / "store"
    gen = json.dumps([{"name": "gen", "transport": {"name": "datagen", "config": {
        "count": 300, "seed": 5, "columns": {"id": {"sequence": {}}, "k": {"uniform": {"min": -9, "max": 9}}}}}}])
    prog.write_text("CREATE FUNCTION bucket(k INT) RETURNS VARCHAR LANGUAGE PYTHON AS 'myfuncs:bucket';\n"
                    f"CREATE TABLE t (id BIGINT NOT NULL, k INT) WITH ('connectors' = '{gen}');\n"
                    "CREATE MATERIALIZED VIEW s AS SELECT bucket(k) AS b, SUM(squared(k)) AS sq, COUNT(*) AS n "
                    "FROM t GROUP BY bucket(k);\n")
    udfs = str(tmp_path / "myfuncs.py")
    r = cli("check", str(prog))
    assert r.returncode == 1 and "function squared is not supported" in r.stderr
    assert cli("check", str(prog), "--udfs", udfs).returncode == 0
    r = cli("run", str(prog), "--storage", str(store), "--udfs", udfs, "--exit-when-done", timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads("[" + ",".join(cli("query", str(store), "SELECT id, k FROM t", "--format", "json")
                                     .stdout.splitlines()) + "]")
    assert len(rows) == 300
    model = Model("CREATE TABLE t (id BIGINT NOT NULL, k INT);", {"t": ["id", "k"]})
    model.insert("t", [(x["id"], x["k"]) for x in rows])
    want = model.view(model.duck(), "SELECT 'b' || CAST(((k % 3) + 3) % 3 AS VARCHAR) AS b, SUM(k * k) AS sq, COUNT(*) AS n "
                                    "FROM t GROUP BY 1")
    got = bag([tuple(x.values()) for x in (json.loads(line) for line in
                                           cli("query", str(store), "SELECT * FROM s", "--format", "json")
                                           .stdout.splitlines())])
    assert not diff(got, want), diff(got, want)
