"""Transient and permanent connector errors, against the real systems (Tansu Kafka broker, PostgreSQL 15,
the local file system): a permanent error (a missing topic or table, a type mismatch, bad credentials,
another pipeline's output, a rejected record) stops the connector in state ``failed`` without retrying, and
``wait_for_completion()`` raises it at once naming the connector; a transient one (a server that is down)
keeps it ``retrying`` until the server comes back."""
from __future__ import annotations

import json
import logging
import time
import uuid

import pytest

from planner.errors import PermanentConnectorError
from tests.support.net import free_port
from tests.support.tcp_proxy import TcpProxy

LAZY = {"sqlengine.spark.start": "lazy"}


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


@pytest.fixture
def pipeline(tmp_path):
    """Factory: pipeline(sql) -> a started Pipeline without Spark (lazy), stopped at teardown."""
    from sqlengine import Pipeline
    made = []

    def make(sql, start=True):
        p = Pipeline.from_sql(sql, name=f"e{len(made)}", storage_dir=str(tmp_path / f"s{len(made)}"), spark_conf=LAZY)
        made.append(p)
        if start:
            p.start()
        return p
    yield make
    for p in made:
        try:
            p.stop(force=True)
        except Exception:   # noqa: BLE001
            pass


def wait_state(p, key, state, timeout=30):
    end = time.monotonic() + timeout
    while p.status()["connectors"][key]["state"] != state:
        assert time.monotonic() < end, p.status()["connectors"][key]
        time.sleep(0.05)
    return p.status()["connectors"][key]


def assert_fails_for_good(p, key, *texts, timeout=20):
    """wait_for_completion raises PermanentConnectorError naming the connector, well before ``timeout``; the
    connector is ``failed`` and was tried once."""
    relation, name = key.split(".")
    t0 = time.monotonic()
    with pytest.raises(PermanentConnectorError) as e:
        p.wait_for_completion(timeout_s=timeout)
    assert time.monotonic() - t0 < timeout - 1
    msg = str(e.value)
    assert f" {name} of " in msg and f" {relation} " in msg, msg
    for t in texts:
        assert t in msg, msg
    st = p.status()
    c = st["connectors"][key]
    assert c["state"] == "failed" and c["errors"] == 1, c
    for t in texts:
        assert t in c["last_error"], c
    assert st["state"] == "running"   # the pipeline itself goes on
    time.sleep(0.5)
    assert p.status()["connectors"][key]["errors"] == 1   # not retried
    return msg


# ---------------------------------------------------------------------- Kafka
def kin(bootstrap, topics, **config):
    return {"name": "kin", "transport": {"name": "kafka_input", "config": {
        "bootstrap.servers": bootstrap, "topics": topics, "timeout_ms": 3000, **config}}}


def kout(bootstrap, topic, **config):
    return {"name": "kout", "transport": {"name": "kafka_output", "config": {
        "bootstrap.servers": bootstrap, "topic": topic, "timeout_ms": 3000, **config}}}


def test_kafka_missing_topic_is_permanent(broker, pipeline):
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{decl(kin(broker.bootstrap, [missing]))}');")
    msg = assert_fails_for_good(p, "t.kin", "kafka_input", missing, "Unknown topic")
    assert "source kin of table t (kafka_input) failed" in msg


def test_kafka_output_missing_topic_is_permanent(broker, pipeline):
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    p = pipeline(f"CREATE TABLE t (id BIGINT);\nCREATE VIEW v WITH ('connectors' = "
                 f"'{decl(kout(broker.bootstrap, missing))}') AS SELECT id FROM t;")
    p.input_json("t", [{"id": 1}])
    msg = assert_fails_for_good(p, "v.kout", "kafka_output", missing, "Unknown topic")
    assert "sink kout of view v (kafka_output) failed" in msg
    p.wait_for_idle(timeout_s=20)   # a failed sink is not waited for by wait_for_idle


def test_kafka_topic_of_another_pipeline_is_permanent(broker, pipeline):
    topic = f"owned-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    pr = broker.producer()
    pr.produce(topic, value=b'{"insert": {"id": 1}}', partition=0,
               headers=[("sqlengine.step", b"1"), ("sqlengine.seq", b"0"), ("sqlengine.count", b"1"),
                        ("sqlengine.pipeline", b"someone-else"), ("sqlengine.epoch", b"1")])
    pr.flush(10)
    p = pipeline(f"CREATE TABLE t (id BIGINT);\nCREATE VIEW v WITH ('connectors' = "
                 f"'{decl(kout(broker.bootstrap, topic))}') AS SELECT id FROM t;")
    p.input_json("t", [{"id": 2}])
    assert_fails_for_good(p, "v.kout", "holds the output of another pipeline (someone-else)")
    assert len(broker.consume_all(topic)) == 1   # nothing written


def test_kafka_authentication_failure_is_permanent(broker, pipeline):
    """SASL against a broker whose handshake fails: librdkafka's _AUTHENTICATION error, not 'unreachable'."""
    topic = f"auth-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    src = kin(broker.bootstrap, [topic], **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                             "sasl.username": "app", "sasl.password": "wrong"})
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{decl(src)}');")
    assert_fails_for_good(p, "t.kin", "refused the connection", "SASL")
    sink = kout(broker.bootstrap, topic, **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                            "sasl.username": "app", "sasl.password": "wrong"})
    p = pipeline(f"CREATE TABLE t (id BIGINT);\nCREATE VIEW v WITH ('connectors' = '{decl(sink)}') "
                 "AS SELECT id FROM t;")
    assert_fails_for_good(p, "v.kout", "refused the connection", "SASL")


def test_kafka_rejected_option_is_permanent(broker, pipeline):
    src = kin(broker.bootstrap, ["x"], **{"sasl.mechanisms": "PLAIN", "security.protocol": "SASL_PLAINTEXT"})
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{decl(src)}');")
    assert_fails_for_good(p, "t.kin", "cannot create the Kafka consumer", "sasl.username")


def test_kafka_broker_down_is_transient_and_logged_rate_limited(pipeline, caplog):
    pytest.importorskip("confluent_kafka")
    caplog.set_level(logging.INFO, logger="sqlengine.connectors")
    port = free_port()
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = "
                 f"'{decl(kin(f'127.0.0.1:{port}', ['t'], timeout_ms=300))}');")
    end = time.monotonic() + 30
    while p.status()["connectors"]["t.kin"]["errors"] < 3:
        assert time.monotonic() < end, p.status()["connectors"]["t.kin"]
        time.sleep(0.05)
    c = p.status()["connectors"]["t.kin"]
    assert c["state"] == "retrying" and "cannot reach the Kafka broker" in c["last_error"], c
    with pytest.raises(TimeoutError, match=r"source t\.kin is retrying after \d+ error\(s\), the last: .*cannot reach"):
        p.wait_for_completion(timeout_s=1)
    mine = [r for r in caplog.records if r.name == "sqlengine.connectors" and "t.kin" in r.getMessage()]
    assert [r.levelno for r in mine] == [logging.WARNING], [r.getMessage() for r in mine]   # once per 30 s
    assert not [r for r in caplog.records if r.name == "sqlengine.connectors" and r.levelno >= logging.ERROR]


def test_kafka_broker_coming_up_later_is_read(broker, pipeline, caplog):
    """The bootstrap address refuses connections at first (retrying, never failed), then the broker is there:
    the source reads the topic and logs that it works again."""
    caplog.set_level(logging.INFO, logger="sqlengine.connectors")
    topic = f"later-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    broker.produce(topic, [json.dumps({"id": i}).encode() for i in range(3)], partition=0)
    port = free_port()
    src = kin(f"127.0.0.1:{port}", [topic], timeout_ms=500)
    src["format"] = {"name": "json", "config": {"update_format": "raw"}}
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{decl(src)}');\n"
                 "CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS n FROM t;")
    assert wait_state(p, "t.kin", "retrying")["errors"] >= 1
    proxy = TcpProxy(("127.0.0.1", broker.port), port=port).start()   # the bootstrap address comes up
    try:
        end = time.monotonic() + 30
        while list(p.query("SELECT n FROM n")) != [{"n": 3}]:
            assert time.monotonic() < end, p.status()["connectors"]["t.kin"]
            time.sleep(0.1)
        c = p.status()["connectors"]["t.kin"]
        assert c["state"] == "running" and c["errors"] >= 1, c
        assert any("works again" in r.getMessage() for r in caplog.records if r.name == "sqlengine.connectors")
    finally:
        proxy.cut()


# ---------------------------------------------------------------------- PostgreSQL
def pg_source(uri, table, name="pg", **config):
    return {"name": name, "transport": {"name": "postgres_input", "config": {
        "uri": uri, "table": table, "poll_interval_ms": 20, **config}}}


def pg_sink(uri, table, **config):
    return {"name": "out", "transport": {"name": "postgres_output", "config": {"uri": uri, "table": table, **config}}}


def test_postgres_missing_table_is_permanent(postgres, pipeline, caplog):
    caplog.set_level(logging.WARNING, logger="sqlengine.connectors")
    uri = postgres.create_database("err_missing")
    p = pipeline(f"CREATE TABLE a (id INT NOT NULL PRIMARY KEY, v INT) "
                 f"WITH ('connectors' = '{decl(pg_source(uri, 'a'))}');")
    assert_fails_for_good(p, "a.pg", "postgres_input", "table public.a does not exist")
    errors = [r for r in caplog.records if r.name == "sqlengine.connectors" and "a.pg" in r.getMessage()]
    assert [r.levelno for r in errors] == [logging.ERROR], [r.getMessage() for r in errors]


def test_postgres_failed_source_is_tried_again_by_resume_connector(postgres, pipeline):
    uri = postgres.create_database("err_resume")
    p = pipeline(f"CREATE TABLE a (id INT NOT NULL PRIMARY KEY, v INT) "
                 f"WITH ('connectors' = '{decl(pg_source(uri, 'a', mode='snapshot'))}');")
    wait_state(p, "a.pg", "failed")
    postgres.execute("CREATE TABLE a (id int PRIMARY KEY, v int)", dbname="err_resume")
    postgres.execute("INSERT INTO a VALUES (1, 2)", dbname="err_resume")
    p.resume_connector("a", "pg")
    p.wait_for_completion(timeout_s=30)
    assert list(p.query("SELECT id, v FROM a")) == [{"id": 1, "v": 2}]
    assert p.status()["connectors"]["a.pg"]["state"] == "finished"


def test_postgres_type_mismatch_is_permanent(postgres, pipeline):
    uri = postgres.create_database("err_types")
    postgres.execute("CREATE TABLE c (id int PRIMARY KEY, v text)", dbname="err_types")
    postgres.execute("CREATE TABLE out_t (id int, v boolean)", dbname="err_types")
    p = pipeline(f"CREATE TABLE c (id INT NOT NULL PRIMARY KEY, v INT) "
                 f"WITH ('connectors' = '{decl(pg_source(uri, 'c'))}');")
    assert_fails_for_good(p, "c.pg", "column v is text in PostgreSQL table public.c but INT")
    p = pipeline(f"CREATE TABLE t (id INT NOT NULL, v INT);\nCREATE MATERIALIZED VIEW w WITH ('connectors' = "
                 f"'{decl(pg_sink(uri, 'out_t'))}') AS SELECT id, v FROM t;")
    p.input_json("t", [{"id": 1, "v": 2}])
    assert_fails_for_good(p, "w.out", "postgres_output", "column v is boolean in PostgreSQL table public.out_t")


def test_postgres_value_that_does_not_fit_is_permanent(postgres, pipeline):
    """A write the server refuses with a data exception (SQLSTATE class 22): retrying the step cannot help."""
    uri = postgres.create_database("err_data")
    postgres.execute("CREATE TABLE small (id int, v numeric(4,2))", dbname="err_data")
    p = pipeline(f"CREATE TABLE t (id INT NOT NULL, v DECIMAL(10,2));\nCREATE MATERIALIZED VIEW w WITH "
                 f"('connectors' = '{decl(pg_sink(uri, 'small'))}') AS SELECT id, v FROM t;")
    p.input_json("t", [{"id": 1, "v": "12345.67"}])
    assert_fails_for_good(p, "w.out", "numeric field overflow")


def test_postgres_unknown_role_is_permanent(postgres, pipeline):
    uri = postgres.create_database("err_role").replace("postgres@", "nobody@")
    p = pipeline(f"CREATE TABLE a (id INT NOT NULL PRIMARY KEY, v INT) "
                 f"WITH ('connectors' = '{decl(pg_source(uri, 'a'))}');")
    assert_fails_for_good(p, "a.pg", "cannot connect", 'role "nobody" does not exist')


def test_postgres_server_down_is_transient(pipeline):
    """A source whose server is down retries (``retrying``, never ``failed``); wait_for_completion times out
    naming it and its last error instead of returning."""
    uri = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    p = pipeline(f"CREATE TABLE a (id INT NOT NULL PRIMARY KEY, v INT) "
                 f"WITH ('connectors' = '{decl(pg_source(uri, 'a', mode='snapshot'))}');")
    c = wait_state(p, "a.pg", "retrying")
    assert "cannot connect" in c["last_error"] and "Connection refused" in c["last_error"], c
    with pytest.raises(TimeoutError, match=r"source a\.pg is retrying after \d+ error\(s\), the last: .*refused"):
        p.wait_for_completion(timeout_s=2)
    assert p.status()["connectors"]["a.pg"]["state"] == "retrying"


def test_postgres_sink_recovers_when_the_server_comes_up(pipeline):
    """A sink whose server is not up yet retries; wait_for_completion waits for its delivery (a TimeoutError
    naming it meanwhile), and returns once the server is up and the sink delivered."""
    from tests.support.postgres_server import PostgresServer, PostgresUnavailable
    port = free_port()
    uri = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    p = pipeline(f"CREATE TABLE t (id INT NOT NULL, v INT);\nCREATE MATERIALIZED VIEW w WITH ('connectors' = "
                 f"'{decl(pg_sink(uri, 'w', key=['id']))}') AS SELECT id, v FROM t;")
    p.input_json("t", [{"id": 1, "v": 2}, {"id": 3, "v": 4}])
    c = wait_state(p, "w.out", "retrying")
    assert "cannot connect" in c["last_error"] and "Connection refused" in c["last_error"], c
    with pytest.raises(TimeoutError, match=r"sink w\.out is retrying after \d+ error\(s\), the last: .*refused"):
        p.wait_for_completion(timeout_s=1)
    server = PostgresServer(port=port)
    try:
        server.start()
    except PostgresUnavailable as e:
        pytest.skip(str(e))
    try:
        p.wait_for_completion(timeout_s=60)   # backoff is at most 10 s
        assert sorted(server.fetch("SELECT id, v FROM w")) == [(1, 2), (3, 4)]
        assert p.status()["connectors"]["w.out"]["state"] == "running"
    finally:
        server.stop()


# ---------------------------------------------------------------------- files
def file_source(path, **config):
    return {"name": "fin", "transport": {"name": "file_input", "config": {"path": str(path), **config}},
            "format": {"name": "json", "config": {"update_format": "raw"}}}


def test_file_input_path_that_is_a_file_is_permanent(tmp_path, pipeline):
    f = tmp_path / "in"
    f.write_text('{"id": 1}\n')
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{decl(file_source(f))}');")
    assert_fails_for_good(p, "t.fin", "is a file, not a directory")


def test_file_input_missing_directory_is_transient(tmp_path, pipeline):
    d = tmp_path / "later"
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{decl(file_source(d, settle_ms=0))}');")
    assert wait_state(p, "t.fin", "retrying")["errors"] >= 1
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "a.json").write_text('{"id": 1}\n{"id": 2}\n')
    staged.rename(d)   # the directory appears with its file
    p.wait_for_completion(timeout_s=30)
    assert sorted(r["id"] for r in p.query("SELECT id FROM t")) == [1, 2]


def test_file_output_of_another_pipeline_is_permanent(tmp_path, pipeline):
    out = tmp_path / "out"
    sink = {"name": "log", "transport": {"name": "file_output", "config": {"path": str(out)}},
            "format": {"name": "json"}}
    sql = (f"CREATE TABLE t (id BIGINT);\nCREATE MATERIALIZED VIEW v WITH ('connectors' = '{decl(sink)}') "
           f"AS SELECT id FROM t;")
    p = pipeline(sql)
    p.input_json("t", [{"id": 1}])
    p.wait_for_completion(timeout_s=30)
    p.stop()
    p = pipeline(sql)   # another storage: another pipeline
    p.input_json("t", [{"id": 2}])
    assert_fails_for_good(p, "v.log", "file_output", "holds the output of another pipeline")


def test_rejected_record_fails_the_source_and_wait_for_completion_says_so(tmp_path, pipeline):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text('{"id": 1}\n{"id": "not a number"}\n')
    src = {**file_source(d), "on_error": "reject"}
    p = pipeline(f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{decl(src)}');")
    assert_fails_for_good(p, "t.fin", "file_input", "not a number")
    assert list(p.query("SELECT id FROM t")) == []


def test_wait_for_completion_through_the_server_raises_the_permanent_error(tmp_path):
    """The pipeline server answers wait_for_completion with the error, and the client raises it as
    PermanentConnectorError (not a timeout, not a generic server error)."""
    pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    from sqlengine.api.client import connect
    from sqlengine.server import create_app
    from tests.server.test_server import Served
    f = tmp_path / "in"
    f.write_text('{"id": 1}\n')
    served = Served(create_app(str(tmp_path / "root"), token="tok"))
    c = connect(served.url, token="tok")
    try:
        p = c.create_pipeline("perm", f"CREATE TABLE t (id BIGINT) WITH ('connectors' = "
                                      f"'{decl(file_source(f))}');", {"spark_conf": LAZY})
        p.start()
        with pytest.raises(PermanentConnectorError, match=r"source fin of table t \(file_input\) failed: .*is a file"):
            p.wait_for_completion(timeout_s=20)
        p.stop(force=True)
    finally:
        c.close()
        served.stop()
