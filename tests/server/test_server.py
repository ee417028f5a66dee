"""The pipeline server (sqlengine.server) and its Python client (sqlengine.api.client), over real HTTP.

uvicorn serves the app on a free 127.0.0.1 port in a background thread; pipelines run with lazy Spark (no
JVM), so every step runs on the driver.
"""
from __future__ import annotations

import io
import json
import random
import threading
import time
from collections import Counter

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

from sqlengine import BindError, InputError, ParseError, Pipeline, PipelineError, UnsupportedError  # noqa: E402
from sqlengine.api.client import connect  # noqa: E402
from sqlengine.server import create_app, serve  # noqa: E402
from tests.support.net import free_port  # noqa: E402
from tests.support.oracle import Model, bag, bag_from_changes, diff  # noqa: E402

TOKEN = "test-token-123"
LAZY = {"spark_conf": {"sqlengine.spark.start": "lazy"}}
AUTH = {"authorization": f"Bearer {TOKEN}"}

SHOP = """CREATE TABLE t (k INT NOT NULL, v INT, name VARCHAR, ts TIMESTAMP, d DECIMAL(10,2));
CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s, MAX(ts) AS last_ts, SUM(d) AS total
  FROM t GROUP BY k;
CREATE MATERIALIZED VIEW big AS SELECT k, v, name FROM t WHERE v > 50;
"""


class Served:
    """An app served by uvicorn on a background thread."""

    def __init__(self, app):
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        end = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < end, "server did not start"
            assert self.thread.is_alive(), "server thread died"
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = Served(create_app(str(tmp_path_factory.mktemp("root")), token=TOKEN, max_body_bytes=1 << 20))
    yield s
    s.stop()


@pytest.fixture
def http(served):
    with httpx.Client(base_url=served.url, headers=AUTH, timeout=60) as c:
        yield c


@pytest.fixture
def client(served):
    c = connect(served.url, token=TOKEN)
    yield c
    c.close()


def put(http, name, sql=SHOP):
    r = http.put(f"/v0/pipelines/{name}", json={"program_code": sql, "runtime_config": LAZY})
    assert r.status_code in (200, 201), r.text
    return r.json()


def err(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"message", "error_code", "details"}, body
    return body


# ------------------------------------------------------------------------------------------- 1. endpoints
def test_every_endpoint(http, tmp_path):
    doc = http.get("/openapi.json").json()
    routes = {(m.upper(), p): op for p, ops in doc["paths"].items() for m, op in ops.items()}
    for key in [("GET", "/v0/pipelines"), ("PUT", "/v0/pipelines/{name}"), ("GET", "/v0/pipelines/{name}"),
                ("DELETE", "/v0/pipelines/{name}"), ("POST", "/v0/pipelines/{name}/start"),
                ("POST", "/v0/pipelines/{name}/ingress/{table}"), ("POST", "/v0/pipelines/{name}/egress/{view}"),
                ("GET", "/v0/pipelines/{name}/query"), ("GET", "/v0/metrics"), ("GET", "/v0/pipelines/{name}/stats"),
                ("POST", "/v0/pipelines/{name}/wait_for_idle"), ("POST", "/v0/pipelines/{name}/execute"),
                ("GET", "/v0/pipelines/{name}/explain/{view}")]:
        assert key in routes, key
    assert all(op.get("summary") for op in routes.values())

    created = put(http, "ep")
    assert created["status"] == "created" and set(created["views"]) == {"agg", "big"}
    assert created["tables"]["t"]["columns"][0] == {"name": "k", "type": "INT"}
    assert http.put("/v0/pipelines/ep", json={"program_code": SHOP, "runtime_config": LAZY}).status_code == 200
    assert [p["name"] for p in http.get("/v0/pipelines").json()] == ["ep"]
    assert http.post("/v0/pipelines/ep/start").json()["status"] == "running"
    # ingress: JSON array, NDJSON, insert_delete, CSV, Arrow
    r = http.post("/v0/pipelines/ep/ingress/t", params={"format": "json", "array": "true"},
                  content=json.dumps([{"k": 1, "v": 10, "name": "a", "ts": "2024-01-01 10:00:00", "d": "1.25"},
                                      {"k": 2, "v": 60, "name": "b", "ts": "2024-01-02T00:00:00Z", "d": 2}]))
    assert r.status_code == 200, r.text
    r = http.post("/v0/pipelines/ep/ingress/t", params={"format": "json"},
                  content='{"k": 3, "v": 70, "name": "c"}\n{"k": 3, "v": 1, "name": "x"}\n')
    assert r.status_code == 200, r.text
    r = http.post("/v0/pipelines/ep/ingress/t", params={"format": "json", "update_format": "insert_delete"},
                  content=json.dumps([{"delete": {"k": 3, "v": 1, "name": "x"}}]))
    assert r.status_code == 200, r.text
    r = http.post("/v0/pipelines/ep/ingress/t", params={"format": "csv"}, content="k,v,name,d\n4,80,d,0.5\n")
    assert r.status_code == 200, r.text
    buf = io.BytesIO()
    t = pa.table({"k": pa.array([5], pa.int32()), "v": pa.array([5], pa.int32())})
    with pa.ipc.new_stream(buf, t.schema) as w:
        w.write_table(t)
    assert http.post("/v0/pipelines/ep/ingress/t", params={"format": "arrow"}, content=buf.getvalue()).status_code == 200
    assert http.post("/v0/pipelines/ep/execute", content="INSERT INTO t (k, v) VALUES (6, 99)").json() == {"rows": 1}
    assert http.post("/v0/pipelines/ep/wait_for_idle", params={"timeout_s": 30}).status_code == 200
    assert http.post("/v0/pipelines/ep/execute", content="DELETE FROM t WHERE k = 6").json() == {"rows": 1}
    assert http.post("/v0/pipelines/ep/wait_for_completion", params={"timeout_s": 30}).status_code == 200
    step = http.post("/v0/pipelines/ep/checkpoint").json()["step"]
    assert step >= 1
    # query in every format
    q = "SELECT * FROM agg ORDER BY k"
    rows = http.get("/v0/pipelines/ep/query", params={"sql": q}).json()
    assert rows[0] == {"k": 1, "n": 1, "s": 10, "last_ts": "2024-01-01T10:00:00", "total": "1.25"}
    assert [r["k"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[1]["last_ts"] == "2024-01-02T00:00:00"
    csv = http.get("/v0/pipelines/ep/query", params={"sql": q, "format": "csv"}).text
    assert csv.splitlines()[0].replace('"', "") == "k,n,s,last_ts,total" and len(csv.splitlines()) == 6
    assert "| k " in http.get("/v0/pipelines/ep/query", params={"sql": q, "format": "text"}).text
    arrow = pa.ipc.open_stream(http.get("/v0/pipelines/ep/query", params={"sql": q, "format": "arrow"}).content).read_all()
    assert arrow.num_rows == 5 and arrow.column_names == ["k", "n", "s", "last_ts", "total"]
    par = pq.read_table(io.BytesIO(http.get("/v0/pipelines/ep/query", params={"sql": q, "format": "parquet"}).content))
    assert par.num_rows == 5
    # stats, metrics, explain, info, pause/resume, connectors
    st = http.get("/v0/pipelines/ep/stats").json()
    assert st["state"] == "running" and st["step"] >= step and st["rows_in"]["t"] >= 7
    m = http.get("/v0/metrics").text
    for needle in ['sqlengine_pipeline_step{pipeline="ep"}', 'sqlengine_table_rows_in_total{pipeline="ep",table="t"}',
                   'sqlengine_view_rows_out_total{pipeline="ep",view="agg"}', 'sqlengine_step_latency_ms{pipeline="ep",quantile="0.5"}',
                   'sqlengine_ingress_requests_total{pipeline="ep",table="t"}', "# TYPE sqlengine_pipeline_step gauge"]:
        assert needle in m, needle
    assert "agg" in http.get("/v0/pipelines/ep/explain/agg").text.lower()
    assert http.get("/v0/pipelines/ep").json()["program_code"] == SHOP
    assert http.post("/v0/pipelines/ep/pause").json()["status"] == "paused"
    assert http.post("/v0/pipelines/ep/resume").json()["status"] == "running"
    body = err(http.post("/v0/pipelines/ep/tables/t/connectors/nope/pause"), 400)
    assert "nope" in body["message"]
    # egress: a short stream read with raw HTTP
    lines = []
    with httpx.Client(base_url=http.base_url, headers=AUTH, timeout=30) as c2:
        with c2.stream("POST", "/v0/pipelines/ep/egress/big") as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
            http.post("/v0/pipelines/ep/ingress/t", content=json.dumps([{"k": 9, "v": 90, "name": "z"}] * 2))
            http.post("/v0/pipelines/ep/wait_for_idle", params={"marker": "m1"})
            for line in r.iter_lines():
                lines.append(json.loads(line))
                if "marker" in lines[-1]:
                    break
    assert lines[0]["json_data"] == [{"insert": {"k": 9, "v": 90, "name": "z"}}] * 2
    assert lines[0]["sequence_number"] > step
    # the replace of a running pipeline is refused; stop, replace (a new view is backfilled), delete
    assert err(http.put("/v0/pipelines/ep", json={"program_code": SHOP}), 409)["error_code"] == "PipelineError"
    assert http.post("/v0/pipelines/ep/stop", params={"force": "false"}).json()["status"] == "stopped"
    put(http, "ep", SHOP + "CREATE MATERIALIZED VIEW cnt AS SELECT COUNT(*) AS c FROM t;")
    http.post("/v0/pipelines/ep/start")
    http.post("/v0/pipelines/ep/wait_for_idle")
    assert http.get("/v0/pipelines/ep/query", params={"sql": "SELECT * FROM cnt"}).json() == [{"c": 7}]
    http.post("/v0/pipelines/ep/stop", params={"force": "true"})
    assert http.delete("/v0/pipelines/ep", params={"clear_storage": "true"}).json()["deleted"]
    assert http.get("/v0/pipelines").json() == []


# ------------------------------------------------------------------------------------------- 2. security
def test_security_and_errors(served, http, monkeypatch):
    url = served.url
    assert httpx.get(url + "/healthz").status_code == 200
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}, {"authorization": "Basic x"}):
        body = err(httpx.get(url + "/v0/pipelines", headers=headers), 401)
        assert body["error_code"] == "Unauthorized"
    err(httpx.get(url + "/openapi.json"), 401)
    assert http.get("/v0/pipelines").status_code == 200

    put(http, "sec")
    http.post("/v0/pipelines/sec/start")
    # body too large: by Content-Length, and streamed without it (chunked)
    big = b"[" + b",".join([b'{"k": 1, "v": 2}'] * 80_000) + b"]"
    assert len(big) > 1 << 20
    body = err(http.post("/v0/pipelines/sec/ingress/t", content=big), 413)
    assert body["error_code"] == "PayloadTooLarge"

    def chunks():
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]

    err(http.post("/v0/pipelines/sec/ingress/t", content=chunks()), 413)
    err(http.put("/v0/pipelines/x", content=b'{"program_code": "' + b"x" * (2 << 20) + b'"}',
                 headers={"content-type": "application/json"}), 413)
    # malformed input names the row
    body = err(http.post("/v0/pipelines/sec/ingress/t", content='{"k": 1}\n{"k": 2, "v": }\n'), 400)
    assert body["error_code"] == "InputError" and "row 1" in body["message"] and "line 2" in body["message"]
    body = err(http.post("/v0/pipelines/sec/ingress/t", params={"format": "csv"}, content="k,v\n1,2\n2,abc\n"), 400)
    assert "row 1" in body["message"] and "abc" in body["message"]
    body = err(http.post("/v0/pipelines/sec/ingress/t", params={"format": "csv"}, content="k,v\n1,2\n3,4,5\n"), 400)
    assert "malformed CSV" in body["message"] and "row 1" in body["message"]
    err(http.post("/v0/pipelines/sec/ingress/t", params={"array": "true"}, content='{"k": 1}'), 400)
    err(http.post("/v0/pipelines/sec/ingress/t", params={"format": "xml"}, content="<a/>"), 400)
    # unknown names: 404 listing the valid ones
    body = err(http.get("/v0/pipelines/nope"), 404)
    assert body["error_code"] == "UnknownPipeline" and "sec" in body["message"] and "sec" in body["details"]["pipelines"]
    body = err(http.post("/v0/pipelines/sec/ingress/nope", content="[]"), 404)
    assert body["error_code"] == "UnknownTable" and body["details"]["tables"] == ["t"]
    body = err(http.post("/v0/pipelines/sec/egress/nope"), 404)
    assert body["details"]["views"] == ["agg", "big"] and "agg, big" in body["message"]
    err(http.get("/v0/pipelines/sec/explain/nope"), 404)
    # the query sandbox
    for sql in ["COPY agg TO '/tmp/x.csv'", "CREATE TABLE z (x INT)", "SELECT * FROM read_csv('/etc/passwd')",
                "INSERT INTO t VALUES (1, 2, 'a', NULL, NULL)", "DROP TABLE t", "SELECT * FROM '/etc/passwd'",
                "ATTACH '/tmp/x.db'", "SELECT 1; SELECT 2", "SELECT * FROM nope"]:
        body = err(http.get("/v0/pipelines/sec/query", params={"sql": sql}), 400)
        assert body["error_code"] in ("UnsupportedError", "BindError", "ParseError"), (sql, body)
    body = err(http.get("/v0/pipelines/sec/query", params={"sql": "SELECT k\nFROM nope"}), 400)
    assert body["details"]["line"] == 2
    # compile errors: message, line, column
    body = err(http.put("/v0/pipelines/bad", json={"program_code": "CREATE TABLE t (x INT);\nCREATE VIEW v AS "
                                                                  "SELECT nope FROM t;"}), 400)
    assert body["error_code"] == "BindError" and body["details"]["line"] == 2 and body["details"]["column"] > 1
    assert "bad" not in [p["name"] for p in http.get("/v0/pipelines").json()]
    body = err(http.put("/v0/pipelines/bad", json={"program_code": SHOP, "runtime_config": {"wrokers": 3}}), 400)
    assert "did you mean 'workers'" in body["message"]
    err(http.put("/v0/pipelines/bad", json={}), 400)
    err(http.put("/v0/pipelines/..", json={"program_code": SHOP}), 404)   # not a pipeline route
    err(http.put("/v0/pipelines/a.b", json={"program_code": SHOP}), 400)
    err(http.post("/v0/pipelines/sec/wait_for_idle", params={"timeout_s": "abc"}), 400)
    # the client raises the engine's exception classes
    c = connect(served.url, token=TOKEN)
    with pytest.raises(BindError) as ei:
        c.create_pipeline("bad", "CREATE TABLE t (x INT);\nCREATE VIEW v AS SELECT nope FROM t;")
    assert ei.value.line == 2
    with pytest.raises(ParseError):
        c.create_pipeline("bad", "CREATE TABLE (;")
    with pytest.raises(InputError, match="row 1"):
        c.pipeline("sec").input_json("t", '{"k": 1}\n{"k": }')
    with pytest.raises(UnsupportedError):
        list(c.pipeline("sec").query("COPY agg TO '/tmp/x'"))
    with pytest.raises(PipelineError, match="unknown pipeline"):
        c.pipeline("nope")
    c.close()
    with pytest.raises(Exception, match="401|token"):
        connect(served.url, token="wrong").pipelines()
    # serve() refuses a public address without a token
    monkeypatch.delenv("SQLENGINE_TOKEN", raising=False)
    with pytest.raises(ValueError, match="token"):
        serve(host="0.0.0.0", token=None)
    with pytest.raises(ValueError, match="token"):
        serve(host="192.168.1.10", port=1)
    http.post("/v0/pipelines/sec/stop", params={"force": "true"})
    http.delete("/v0/pipelines/sec", params={"clear_storage": "true"})


# ------------------------------------------------------------------------------------------- 3. change stream
STREAM_SQL = """CREATE TABLE r (a INT, b INT);
CREATE MATERIALIZED VIEW g AS SELECT a, COUNT(*) AS n, SUM(b) AS s FROM r GROUP BY a;
"""
G = "SELECT a, COUNT(*) AS n, SUM(b) AS s FROM r GROUP BY a"


def test_long_change_stream(served, http):
    put(http, "stream", STREAM_SQL)
    http.post("/v0/pipelines/stream/start")
    integrated: Counter = Counter()
    seqs = []
    opened, done = threading.Event(), threading.Event()
    failure = []

    def reader():
        try:
            with httpx.Client(base_url=served.url, headers=AUTH, timeout=60) as c:
                with c.stream("POST", "/v0/pipelines/stream/egress/g") as r:
                    assert r.status_code == 200
                    opened.set()
                    for line in r.iter_lines():
                        msg = json.loads(line)
                        if msg.get("marker") == "end":
                            break
                        assert "error" not in msg, msg
                        seqs.append(msg["sequence_number"])
                        for e in msg["json_data"]:
                            (kind, row), = e.items()
                            integrated[(row["a"], row["n"], row["s"])] += 1 if kind == "insert" else -1
        except BaseException as e:  # noqa: BLE001
            failure.append(e)
            opened.set()
        finally:
            done.set()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    assert opened.wait(30) and not failure

    model = Model("CREATE TABLE r (a INT, b INT)", {"r": ["a", "b"]})
    rng = random.Random(7)

    def pusher(batches):
        with httpx.Client(base_url=served.url, headers=AUTH, timeout=60) as c:
            for _ in range(batches):
                ins = [(rng.randrange(8), rng.randrange(100)) for _ in range(rng.randrange(1, 30))]
                live = list(model.rows["r"].elements())
                dels = rng.sample(live, min(len(live), rng.randrange(0, 15)))
                body = [{"insert": {"a": a, "b": b}} for a, b in ins] + [{"delete": {"a": a, "b": b}} for a, b in dels]
                r = c.post("/v0/pipelines/stream/ingress/r",
                           params={"format": "json", "update_format": "insert_delete"}, content=json.dumps(body))
                assert r.status_code == 200, r.text
                model.insert("r", ins)
                model.delete("r", dels)
                if rng.random() < 0.3:
                    time.sleep(0.02)

    t = threading.Thread(target=pusher, args=(40,))
    t.start()
    t.join(120)
    assert http.post("/v0/pipelines/stream/wait_for_idle", params={"marker": "end", "timeout_s": 60}).status_code == 200
    assert done.wait(60) and not failure, failure
    assert len(seqs) >= 5 and seqs == sorted(seqs)
    integrated = +integrated
    queried = bag((r["a"], r["n"], r["s"]) for r in
                  http.get("/v0/pipelines/stream/query", params={"sql": "SELECT * FROM g"}).json())
    expected = model.view(model.duck(), G)
    assert not diff(bag(integrated.elements()), expected), diff(bag(integrated.elements()), expected)
    assert not diff(queried, expected), diff(queried, expected)
    st = http.get("/v0/pipelines/stream/stats").json()
    assert st["egress_subscribers"]["g"] == 0   # the reader's disconnect removed its subscriber
    http.post("/v0/pipelines/stream/stop", params={"force": "true"})
    http.delete("/v0/pipelines/stream", params={"clear_storage": "true"})


# ------------------------------------------------------------------------------------------- 4. isolation
def test_several_pipelines_one_failing(served, http):
    for n in ("p1", "p2", "p3"):
        put(http, n, STREAM_SQL)
        http.post(f"/v0/pipelines/{n}/start")
    http.post("/v0/pipelines/p3/ingress/r", content='[{"a": 1, "b": 1}]')
    http.post("/v0/pipelines/p3/stop")
    # p3's new program changes a stored table: it compiles, but it cannot start on its storage
    put(http, "p3", "CREATE TABLE r (a VARCHAR);\nCREATE MATERIALIZED VIEW g AS SELECT COUNT(*) AS n FROM r;")
    results = {}

    def work(name):
        with httpx.Client(base_url=served.url, headers=AUTH, timeout=60) as c:
            for i in range(10):
                r = c.post(f"/v0/pipelines/{name}/ingress/r", content=json.dumps([{"a": i, "b": i}]))
                assert r.status_code == 200, r.text
            c.post(f"/v0/pipelines/{name}/wait_for_idle")
            results[name] = c.get(f"/v0/pipelines/{name}/query", params={"sql": "SELECT SUM(n) AS n FROM g"}).json()

    threads = [threading.Thread(target=work, args=(n,)) for n in ("p1", "p2")]
    for t in threads:
        t.start()
    body = err(http.post("/v0/pipelines/p3/start"), 409)
    assert "changed or removed tables: r" in body["message"]
    for t in threads:
        t.join(60)
    assert results == {"p1": [{"n": 10}], "p2": [{"n": 10}]}
    listed = {p["name"]: p for p in http.get("/v0/pipelines").json()}
    assert listed["p3"]["status"] == "failed" and "changed" in listed["p3"]["deployment_error"]["message"]
    assert listed["p1"]["status"] == listed["p2"]["status"] == "running"
    # a stream on p1 ends when p1 stops; p2 keeps running
    with httpx.Client(base_url=served.url, headers=AUTH, timeout=30) as c:
        with c.stream("POST", "/v0/pipelines/p1/egress/g") as r:
            http.post("/v0/pipelines/p1/stop")
            assert list(r.iter_lines()) == []
    assert http.get("/v0/pipelines/p2/stats").json()["state"] == "running"
    for n in ("p1", "p2", "p3"):
        http.delete(f"/v0/pipelines/{n}", params={"clear_storage": "true"})


# ------------------------------------------------------------------------------------------- restart
def test_pipelines_survive_a_server_restart(tmp_path):
    root = str(tmp_path / "root")
    s = Served(create_app(root))
    c = connect(s.url)
    p = c.create_pipeline("keep", STREAM_SQL, LAZY)
    p.start()
    p.input_json("r", [{"a": 1, "b": 5}, {"a": 1, "b": 6}])
    p.wait_for_idle()
    c.create_pipeline("idle", STREAM_SQL, LAZY)
    c.close()
    s.stop()
    s = Served(create_app(root))
    c = connect(s.url)
    states = {x["name"]: x["status"] for x in c.pipelines()}
    assert states == {"keep": "running", "idle": "created"}
    assert list(c.pipeline("keep").query("SELECT * FROM g")) == [{"a": 1, "n": 2, "s": 11}]
    c.pipeline("keep").stop()
    c.close()
    s.stop()


# ------------------------------------------------------------------------------------------- 5. parity
PARITY_SQL = """CREATE TABLE t (k INT NOT NULL, v INT, name VARCHAR, ts TIMESTAMP, d DECIMAL(10,2));
CREATE MATERIALIZED VIEW agg AS SELECT k, COUNT(*) AS n, SUM(v) AS s, MAX(ts) AS last_ts, SUM(d) AS total
  FROM t GROUP BY k;
CREATE VIEW big AS SELECT k, v, name FROM t WHERE v > 50;
"""


def scenario(p, tmp_path):
    """The same calls on an embedded Pipeline and a RemotePipeline; returns what they observed."""
    out = {}
    chunks = []
    p.foreach_chunk("big", lambda chunk, step: chunks.append(chunk))
    h = p.listen("agg")
    p.start()
    p.input_json("t", [{"k": 1, "v": 10, "name": "a", "ts": "2024-01-01 10:00:00", "d": "1.25"},
                       {"k": 2, "v": 60, "name": "b", "ts": "2024-01-02T03:00:00+02:00", "d": 2}])
    p.input_json("t", [{"delete": {"k": 1, "v": 10, "name": "a", "ts": "2024-01-01 10:00:00", "d": "1.25"}},
                       {"insert": {"k": 1, "v": 99, "name": "aa", "ts": None, "d": None}}], update_format="insert_delete")
    p.input_csv("t", "k,v,name,ts,d\n3,70,c,2024-03-01 00:00:00,3.5\n3,80,\"c,2\",,\n")
    p.input_pandas("t", pd.DataFrame({"k": [4, 4], "v": [51, 52], "name": ["d", "e"],
                                      "ts": pd.to_datetime(["2024-04-01", "2024-04-02"]), "d": [None, None]}))
    out["insert"] = p.execute("INSERT INTO t VALUES (5, 500, 'f', '2024-05-01 00:00:00', 9.99), (5, 1, 'g', NULL, NULL)")
    p.wait_for_idle()
    out["delete"] = p.execute("DELETE FROM t WHERE v < 60")
    p.wait_for_idle(timeout_s=60)
    out["query"] = list(p.query("SELECT * FROM agg ORDER BY k"))
    out["query_pandas"] = p.query_pandas("SELECT k, n FROM agg ORDER BY k").to_dict("records")
    out["arrow"] = p.query_arrow("SELECT * FROM t ORDER BY k, v").to_pylist()
    out["tabular"] = "".join(p.query_tabular("SELECT k, n, total FROM agg ORDER BY k"))
    path = tmp_path / "out" / "agg.parquet"
    p.query_parquet("SELECT * FROM agg ORDER BY k", str(path))
    out["parquet"] = pq.read_table(path).to_pylist()
    out["explain"] = p.explain("agg")
    st = p.status()
    out["status"] = (st["state"], st["step"] > 0, st["rows_in"], st["rows_out"])
    out["listen"] = bag_from_changes(h.to_pandas())
    out["listen_columns"] = list(h.to_pandas().columns)
    allc = pd.concat(chunks, ignore_index=True)
    out["chunks"] = bag_from_changes(allc)
    out["chunk_columns"] = list(allc.columns)
    with pytest.raises(InputError, match="unknown table"):
        p.input_json("nope", [])
    with pytest.raises(BindError, match="unknown view"):
        p.listen("nope")
    with pytest.raises(UnsupportedError):
        p.execute("UPDATE t SET v = 1")
    p.stop()
    out["integrated"] = bag_from_changes(allc) == bag((r["k"], r["v"], r["name"]) for r in out["arrow"] if r["v"] > 50)
    return out


def test_embedded_remote_parity(served, client, tmp_path):
    embedded = scenario(Pipeline.from_sql(PARITY_SQL, name="par", storage_dir=str(tmp_path / "emb"),
                                          spark_conf=LAZY["spark_conf"]), tmp_path / "e")
    remote = scenario(client.create_pipeline("par", PARITY_SQL, LAZY), tmp_path / "r")
    assert embedded["integrated"] and embedded["insert"] == 2 and embedded["delete"] == 3
    assert embedded["query"][0]["last_ts"] is None and str(embedded["query"][1]["total"]) == "2.00"
    for key in embedded:
        assert remote[key] == embedded[key], (key, remote[key], embedded[key])
    client.pipeline("par").delete(clear_storage=True)


# ------------------------------------------------------------------------------------------- slow clients
def test_slow_egress_client_is_disconnected(tmp_path):
    s = Served(create_app(str(tmp_path / "root"), egress_queue_bytes=1 << 20))
    try:
        c = connect(s.url)
        p = c.create_pipeline("slow", "CREATE TABLE r (a INT, b VARCHAR);\nCREATE VIEW w AS SELECT a, b FROM r;", LAZY)
        p.start()
        with httpx.Client(base_url=s.url, timeout=60) as h:
            with h.stream("POST", "/v0/pipelines/slow/egress/w") as r:   # connected, but reads nothing for now
                pad = "x" * 10_000
                for i in range(40):   # ~40 MB of changes: more than the socket buffers and the 1 MiB queue
                    p.input_json("r", [{"a": i * 100 + j, "b": pad} for j in range(100)])
                p.wait_for_idle()
                last = None
                for line in r.iter_lines():
                    last = json.loads(line)
        assert last["error"]["error_code"] == "EgressQueueOverflow", str(last)[:200]
        assert "sqlengine_egress_overflows_total 1" in c.metrics()
        assert p.status()["egress_subscribers"]["w"] == 0 and p.status()["state"] == "running"
        p.stop()
        c.close()
    finally:
        s.stop()


def test_cli_query_and_shell_on_a_server(served, client):
    """``sqlengine query URL`` and ``sqlengine shell URL`` reach a pipeline on the server (token from the env)."""
    import os
    import subprocess
    import sys
    p = client.create_pipeline("cli", "CREATE TABLE t (k INT);\n"
                               "CREATE MATERIALIZED VIEW v AS SELECT k, COUNT(*) AS n FROM t GROUP BY k;",
                               runtime_config=LAZY)
    p.start()
    p.input_json("t", [{"k": 1}, {"k": 1}, {"k": 2}])
    p.wait_for_idle()
    env = dict(os.environ, SQLENGINE_TOKEN=TOKEN)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    target = f"{served.url}/pipelines/cli"
    r = subprocess.run([sys.executable, "-m", "sqlengine", "query", target, "SELECT * FROM v ORDER BY k",
                        "--format", "csv"], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ['"k","n"', "1,2", "2,1"]
    r = subprocess.run([sys.executable, "-m", "sqlengine", "shell", target], cwd=root, env=env, capture_output=True,
                       text=True, timeout=60, input="SELECT SUM(n) AS total FROM v;\n")
    assert r.returncode == 0 and "3" in r.stdout and "(1 row)" in r.stdout, r.stdout + r.stderr
    bad = subprocess.run([sys.executable, "-m", "sqlengine", "query", target, "SELECT 1"], cwd=root,
                         env=dict(os.environ, SQLENGINE_TOKEN="wrong"), capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0
    p.stop()


def test_readme_example(served, capsys):
    """The README's client example runs as written (against this test's server and token)."""
    from tests.api.test_readme import python_blocks
    (block,) = python_blocks('c = sqlengine.connect("http://127.0.0.1:8080"')
    block = (block.replace("http://127.0.0.1:8080", served.url).replace('"s3cret"', repr(TOKEN))
             .replace('create_pipeline("shop"', 'create_pipeline("readme"'))
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "[{'customer': 'ann', 'amount': Decimal('10.00')}]" in out, out


def test_remote_lifecycle_methods(client):
    """restart, clear_storage, storage_status and wait_for_idle(idle_interval_s) through the server."""
    p = client.create_pipeline("life", "CREATE TABLE t (k INT);\n"
                               "CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM t;", runtime_config=LAZY)
    assert p.storage_status() == "cleared"
    p.start()
    p.input_json("t", [{"k": 1}, {"k": 2}], force=True)
    p.wait_for_idle(idle_interval_s=0.2)
    assert p.storage_status() == "in_use"
    p.restart()
    p.input_json("t", [{"k": 3}])
    p.wait_for_idle()
    assert list(p.query("SELECT n FROM c")) == [{"n": 3}]
    with pytest.raises(PipelineError):
        p.clear_storage()                      # running: 409
    p.stop()
    p.clear_storage()
    assert p.storage_status() == "cleared"
    p.start()
    p.input_json("t", [{"k": 4}])
    p.wait_for_idle()
    assert list(p.query("SELECT n FROM c")) == [{"n": 1}]
    p.delete(clear_storage=True)


def test_pipeline_builder_on_a_server(client):
    from sqlengine import PipelineBuilder, RuntimeConfig
    p = PipelineBuilder(client, name="built", sql="CREATE TABLE t (k INT);\nCREATE MATERIALIZED VIEW c AS "
                        "SELECT COUNT(*) AS n FROM t;",
                        runtime_config=RuntimeConfig(workers=1, spark_conf=LAZY["spark_conf"])).create_or_replace()
    p.start()
    p.input_json("t", [{"k": 1}])
    p.wait_for_idle()
    assert list(p.query("SELECT n FROM c")) == [{"n": 1}]
    p.delete(clear_storage=True)


def test_python_functions_on_a_server(tmp_path):
    """A server started with ``udfs=`` (``serve --udfs``): its pipelines call those functions by name, and a
    program may declare one with its code inline; ``PipelineBuilder(client, udfs=...)`` is refused."""
    import pyarrow.compute as pc
    from sqlengine import PipelineBuilder, udf

    @udf("BIGINT", ["BIGINT"])
    def doubled(x):
        return pc.multiply_checked(x, 2)

    s = Served(create_app(str(tmp_path / "root"), udfs=[doubled]))
    try:
        c = connect(s.url)
        sql = ("CREATE FUNCTION shout(s VARCHAR) RETURNS VARCHAR LANGUAGE PYTHON AS $$\n"
               "def shout(s):\n    return None if s is None else s.upper() + '!'\n$$;\n"
               "CREATE TABLE t (k BIGINT, s VARCHAR);\n"
               "CREATE MATERIALIZED VIEW v AS SELECT doubled(k) AS d, shout(s) AS sh FROM t;")
        p = c.create_pipeline("udfs", sql, runtime_config=LAZY)
        p.start()
        p.input_json("t", [{"k": 21, "s": "hi"}, {"k": None, "s": None}])
        p.wait_for_idle()
        assert sorted(map(repr, p.query("SELECT * FROM v"))) == sorted(map(repr, [{"d": 42, "sh": "HI!"},
                                                                                  {"d": None, "sh": None}]))
        with pytest.raises(PipelineError, match="udfs= are for an embedded pipeline"):
            PipelineBuilder(c, name="x", sql=sql, udfs=[doubled]).create_or_replace()
        p.delete(clear_storage=True)
        c.close()
    finally:
        s.stop()


# ------------------------------------------------------------------------------------------- nested values
NESTED = """CREATE TABLE o (id INT, tags VARCHAR ARRAY, attrs MAP<VARCHAR, INT>, cust ROW(name VARCHAR, tier INT),
  doc VARIANT, b VARBINARY);
CREATE MATERIALIZED VIEW v AS SELECT id, tags, attrs, cust, doc, b FROM o WHERE id > 0;
"""


def test_nested_values_in_and_out(served, http):
    """Ingress takes nested JSON; egress gives an ARRAY as a list, a MAP and a ROW as objects, a VARIANT as its
    JSON value and a BINARY as base64, as they came in; an ad-hoc query gives a VARIANT as its JSON text (a
    query's result types are DuckDB's, in which it is text)."""
    put(http, "nested", NESTED)
    http.post("/v0/pipelines/nested/start")
    row = {"id": 1, "tags": ["a", None], "attrs": {"z": 1, "b": 2}, "cust": {"name": "x", "tier": None},
           "doc": {"k": [1, {"n": None}]}, "b": "AP8="}
    lines = []
    with httpx.Client(base_url=http.base_url, headers=AUTH, timeout=30) as c2:
        with c2.stream("POST", "/v0/pipelines/nested/egress/v") as r:
            assert r.status_code == 200
            assert http.post("/v0/pipelines/nested/ingress/o", content=json.dumps([row])).status_code == 200
            http.post("/v0/pipelines/nested/wait_for_idle", params={"marker": "m"})
            for line in r.iter_lines():
                lines.append(json.loads(line))
                if "marker" in lines[-1]:
                    break
    assert lines[0]["json_data"] == [{"insert": row}]
    text = {**row, "doc": '{"k":[1,{"n":null}]}'}
    r = http.get("/v0/pipelines/nested/query", params={"sql": "SELECT * FROM v"})
    assert r.json() == [text]
    # the x-columns header: the columns and their SQL types (a MAP and a ROW are both objects), even with no rows
    r = http.get("/v0/pipelines/nested/query", params={"sql": "SELECT * FROM v WHERE id < 0"})
    assert r.json() == [] and json.loads(r.headers["x-columns"]) == [
        {"name": "id", "type": "INT"}, {"name": "tags", "type": "VARCHAR[]"},
        {"name": "attrs", "type": "MAP(VARCHAR, INT)"}, {"name": "cust", "type": "STRUCT(name VARCHAR, tier INT)"},
        {"name": "doc", "type": "VARCHAR"}, {"name": "b", "type": "BLOB"}]
    http.post("/v0/pipelines/nested/stop", params={"force": "true"})
    http.delete("/v0/pipelines/nested", params={"clear_storage": "true"})
