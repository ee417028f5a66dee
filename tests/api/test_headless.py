"""Running without a terminal (nohup, systemd, docker logs) and over a server, as real processes:
``sqlengine run`` status lines and stop summary (dead letters, row errors, connector errors), text and JSON
logs, ``sqlengine serve`` logs, ``query --token``, and server errors with the embedded errors' caret."""
import io
import json
import logging
import os
import pty
import re
import subprocess
import sys
import tempfile
import time

import pytest

from tests.support.net import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "headless-token-7"


def cli(*args, stdin="", timeout=120, env=None):
    return subprocess.run([sys.executable, "-m", "sqlengine", *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=timeout, env=env)


def program(tmp_path) -> str:
    """A table with two file sources: ``csv`` has two malformed rows (dead letters) and a value that fails
    ``CAST`` in the view (a row error); ``strict`` (on_error=reject) fails on its only row."""
    (tmp_path / "in").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "in" / "1.csv").write_text("id,s\n1,10\n2,abc\n3\nx,5\n4,20\n")
    (tmp_path / "bad" / "1.csv").write_text("id,s\nnotanint,1\n")
    conns = [{"name": "csv", "transport": {"name": "file_input", "config": {"path": str(tmp_path / "in")}},
              "format": {"name": "csv"}},
             {"name": "strict", "on_error": "reject",
              "transport": {"name": "file_input", "config": {"path": str(tmp_path / "bad")}},
              "format": {"name": "csv"}}]
    decl = json.dumps(conns).replace("'", "''")
    prog = tmp_path / "p.sql"
    prog.write_text(f"CREATE TABLE t (id BIGINT NOT NULL, s VARCHAR) WITH ('connectors' = '{decl}');\n"
                    "CREATE MATERIALIZED VIEW v AS SELECT id, CAST(s AS INT) + 1 AS n FROM t;\n")
    return str(prog)


def test_headless_status_lines_and_stop_summary(tmp_path):
    prog, store = program(tmp_path), tmp_path / "store"
    r = cli("run", prog, "--storage", str(store), "--exit-when-done", "--interval", "0.2")
    assert r.returncode == 1, r.stderr[-3000:]   # a source failed: not all input was read
    assert "\x1b[" not in r.stdout + r.stderr, "terminal codes without a terminal"
    status = [x for x in r.stderr.splitlines() if " sqlengine.status: " in x]
    assert status, r.stderr
    last = status[-1]
    assert "state=stopped" in last and "rows_in=3" in last and "dead_letters=2" in last and "row_errors=1" in last
    assert "t.csv=finished:3,dead=2" in last and "t.strict=failed:0,errors=1" in last
    # the connector's last error: on the first status line after it happened, not again
    with_error = [x for x in status if "last_error[t.strict]=" in x]
    assert len(with_error) == 1 and "cannot convert 'notanint' to BIGINT" in with_error[0], status
    assert "connector t.strict (file_input)" not in with_error[0]
    assert all(len(x) < 400 for x in status), status
    # the summary when stopping: dead letters per source with their file, row errors per view
    dl = store / "dead_letter" / "t.csv.jsonl"
    assert dl.exists() and len(dl.read_text().splitlines()) == 2
    summary = r.stderr[r.stderr.rindex("sqlengine.status"):]
    assert f"dead letters: 2 rows from source t.csv (table t) in {dl}" in summary, summary
    assert "row errors: 1 row failed in view v" in summary and "sqlengine_errors WHERE view = 'v'" in summary
    assert "connector t.strict failed: " in summary and "stopped at step" in summary
    # the query the summary gives works
    q = cli("query", str(store), "SELECT view, row FROM sqlengine_errors WHERE view = 'v'", "--format", "json")
    assert q.returncode == 0 and json.loads(q.stdout) == {"view": "v", "row": '{"id": 2, "s": "abc"}'}


def test_json_logs_every_line_parses(tmp_path):
    prog, store = program(tmp_path), tmp_path / "store"
    r = cli("run", prog, "--storage", str(store), "--exit-when-done", "--interval", "0.2", "--log-format", "json",
            "--log-level", "DEBUG")
    assert r.returncode == 1, r.stderr[-3000:]
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    recs = [json.loads(x) for x in lines]       # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(x) for x in recs)
    status = [x for x in recs if x["logger"] == "sqlengine.status"]
    final = status[-1]
    assert final["state"] == "stopped" and final["pipeline"] == "p" and final["rows_in"] == 3
    assert final["dead_letter_rows"] == 2 and final["row_errors"] == 1
    assert final["connectors"]["t.csv"] == {"state": "finished", "rows": 3, "dead_letter_rows": 2, "errors": 0}
    assert sum(1 for x in status if "t.strict" in x.get("last_errors", {})) == 1
    dead = [x for x in recs if x.get("dead_letter_rows") and x.get("path")]
    assert len(dead) == 1 and dead[0]["connector"] == "t.csv" and dead[0]["level"] == "WARNING"
    assert os.path.exists(dead[0]["path"])
    assert [x["view"] for x in recs if x.get("row_errors") and x.get("view")] == ["v"]
    # a compile error is a JSON record too, with its position
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE TABLE t (k INT);\nCREATE VIEW a AS SELECT nope FROM t;\n")
    r = cli("run", str(bad), "--storage", str(tmp_path / "s2"), "--log-format", "json")
    assert r.returncode == 1
    recs = [json.loads(x) for x in r.stderr.splitlines() if x.strip()]
    assert [(x["level"], x["line"], x["column"]) for x in recs] == [("ERROR", 2, 25)]
    assert "unknown column 'nope'" in recs[0]["message"]


def test_run_on_a_terminal_logs_above_the_live_display(tmp_path):
    """On a (pseudo) terminal the live display runs and log records still come out, through its console."""
    prog, store = program(tmp_path), tmp_path / "store"
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sqlengine", "run", prog, "--storage", str(store),
                             "--exit-when-done"], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env={**os.environ, "COLUMNS": "160", "LINES": "50"})
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=120) == 1   # the strict source failed
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))
    assert "connector" in text and "dead letters" in text      # the table, then the summary records
    assert "row errors: 1 row failed in view v" in text and "stopped at step" in text
    assert "sqlengine.status" not in text                       # no status lines on a terminal


def test_json_formatter_exceptions_and_extras():
    from sqlengine.logs import reset_logging, setup_logging
    buf = io.StringIO()
    setup_logging("WARNING", "json", stream=buf)
    try:
        log = logging.getLogger("sqlengine.test")
        log.info("dropped")
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            log.exception("it failed", extra={"pipeline": "p", "connector": "t.c", "time": "not the time"})
    finally:
        reset_logging()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["level"] == "ERROR" and rec["message"] == "it failed" and rec["pipeline"] == "p"
    assert rec["connector"] == "t.c" and rec["time"].endswith("Z") and rec["time"] != "not the time"
    assert "ValueError: boom" in rec["exception"] and "Traceback" in rec["exception"]
    with pytest.raises(ValueError):
        setup_logging("LOUD")


def test_check_prints_errors_in_file_order(tmp_path):
    """The parse error of statement 3 and the connector error of statement 1 are found before the bind error
    of statement 2; they are printed in the order of the file."""
    conns = json.dumps([{"transport": {"name": "datagen", "config": {"cnt": 5}}}])
    prog = tmp_path / "p.sql"
    prog.write_text(f"CREATE TABLE u (x INT) WITH ('connectors' = '{conns}');\n"
                    "CREATE VIEW a AS SELECT nope FROM u;\n"
                    "CREATE VIEW b AS SELECT FROM WHERE (;\n")
    r = cli("check", str(prog))
    assert r.returncode == 1
    heads = [x for x in r.stderr.splitlines() if x.startswith(str(prog))]
    assert [h.split(": ")[0].split(":")[1] for h in heads] == ["1", "2", "3"], r.stderr
    assert "ConnectorError" in heads[0] and "BindError" in heads[1] and "ParseError" in heads[2]
    assert r.stderr.splitlines()[-1] == "3 errors"


# ------------------------------------------------------------------ a server as a process
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("uvicorn")
    port = free_port()
    root = tmp_path_factory.mktemp("srv")
    err = open(root / "serve.log", "w+")
    env = {**os.environ, "SQLENGINE_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "sqlengine", "serve", "--port", str(port), "--storage",
                             str(root / "pipelines"), "--log-format", "json"], cwd=ROOT, env=env,
                            stdout=err, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    import httpx
    end = time.monotonic() + 60
    while True:
        assert proc.poll() is None, open(root / "serve.log").read()
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < end, "server did not start"
        time.sleep(0.1)
    yield url, root / "serve.log"
    proc.terminate()
    proc.wait(timeout=30)
    err.close()


def test_query_and_shell_take_a_token(server):
    from sqlengine.api.client import connect
    url, log = server
    c = connect(url, token=TOKEN)
    p = c.create_pipeline("tok", "CREATE TABLE t (k INT);\nCREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS n FROM t;",
                          runtime_config={"spark_conf": {"sqlengine.spark.start": "lazy"}})
    p.start()
    p.input_json("t", [{"k": 1}, {"k": 2}])
    p.wait_for_idle()
    target = f"{url}/pipelines/tok"
    env = {k: v for k, v in os.environ.items() if k != "SQLENGINE_TOKEN"}
    r = cli("query", target, "SELECT n FROM n", "--format", "json", "--token", TOKEN, env=env)
    assert r.returncode == 0 and json.loads(r.stdout) == {"n": 2}, r.stderr
    r = cli("query", target, "SELECT n FROM n", "--format", "json", env={**env, "SQLENGINE_TOKEN": TOKEN})
    assert r.returncode == 0 and json.loads(r.stdout) == {"n": 2}, r.stderr
    for args, says in ((), "it needs a token"), (("--token", "wrong"), "wrong token"):
        r = cli("query", target, "SELECT n FROM n", *args, env=env)
        assert r.returncode == 1 and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "HTTP 401" in lines[0] and says in lines[0] and "SQLENGINE_TOKEN" in lines[0]
        sh = cli("shell", target, *args, stdin="SELECT 1;\n", env=env)
        assert sh.returncode == 1 and "Traceback" not in sh.stderr and "HTTP 401" in sh.stderr
    sh = cli("shell", target, "--token", TOKEN, stdin="SELECT n FROM n;\nSELECT nope FROM n;\n", env=env)
    assert sh.returncode == 0 and "(1 row)" in sh.stdout and "error: " in sh.stdout and "nope" in sh.stdout, sh.stderr
    for cmd in ("query", "shell"):
        assert "SQLENGINE_TOKEN" in cli(cmd, "--help").stdout
    # an error of a query over the server: line, column and caret as on a storage directory
    r = cli("query", target, "SELECT k\nFROM nope", "--token", TOKEN, env=env)
    assert r.returncode == 1 and "(line 2, column 6)" in r.stderr and r.stderr.rstrip().endswith("^"), r.stderr
    p.stop()
    c.close()
    # the server's log: one JSON object per line, uvicorn's access log among them
    recs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    assert any(x["logger"] == "uvicorn.access" and "401" in x["message"] for x in recs)
    assert all({"time", "level", "logger", "message"} <= set(x) for x in recs)


@pytest.mark.parametrize("prog", [
    "CREATE TABLE t (x INT);\n\nCREATE VIEW v AS\n  SELECT x, nope FROM t;",
    "CREATE TABLE t (x INT);\nCREATE VIEW v AS SELECT FROM WHERE (;",
    "CREATE TABLE t (x INT);\nCREATE VIEW v AS SELECT x FROM t\n  QUALIFY x = 1 ;",
])
def test_remote_compile_errors_print_as_embedded(server, prog):
    from planner.errors import EngineError
    from sqlengine import Pipeline
    from sqlengine.api.client import connect
    url, _ = server
    with pytest.raises(EngineError) as embedded:
        Pipeline.from_sql(prog, name="e", storage_dir=tempfile.mkdtemp())
    with connect(url, token=TOKEN) as c, pytest.raises(EngineError) as remote:
        c.create_pipeline("remote_err", prog)
    e, r = embedded.value, remote.value
    assert type(r) is type(e)
    assert e.line is not None and (r.line, r.column) == (e.line, e.column)
    assert str(r) == str(e) and "^" in str(r)
    assert r.excerpt("    ") == e.excerpt("    ")
