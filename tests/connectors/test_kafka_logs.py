"""librdkafka's log lines go through ``logging`` (logger ``sqlengine.kafka.librdkafka``), rate-limited (issue 32):
a pipeline whose Kafka source and sink point at a closed port for a few seconds writes a handful of lines, not
hundreds, and the outage still shows (a WARNING or worse naming the broker)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import json, logging, sys, tempfile, time
    from tests.support.kafka_broker import free_port
    from sqlengine import Pipeline

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")   # stderr
    caught = []

    class Catch(logging.Handler):
        def emit(self, record):
            if record.name == "sqlengine.kafka.librdkafka":
                caught.append([record.levelname, record.getMessage()])
    logging.getLogger().addHandler(Catch())
    bs = f"127.0.0.1:{free_port()}"
    src = {"name": "kin", "transport": {"name": "kafka_input", "config": {
        "bootstrap.servers": bs, "topics": ["nowhere"], "timeout_ms": 500}}}
    snk = {"name": "kout", "transport": {"name": "kafka_output", "config": {
        "bootstrap.servers": bs, "topic": "out", "timeout_ms": 500}}}
    sql = (f"CREATE TABLE t (id BIGINT) WITH ('connectors' = '{json.dumps([src])}');\\n"
           f"CREATE MATERIALIZED VIEW v WITH ('connectors' = '{json.dumps([snk])}') AS SELECT COUNT(*) AS n FROM t;")
    with tempfile.TemporaryDirectory() as d:
        p = Pipeline.from_sql(sql, storage_dir=d, spark_conf={"sqlengine.spark.start": "lazy"})
        p.start()
        time.sleep(float(sys.argv[1]))
        errors = {k: c["errors"] for k, c in p.status()["connectors"].items()}
        p.stop()
    print(json.dumps({"broker": bs, "caught": caught, "errors": errors}))
""")


def test_librdkafka_logs_are_rate_limited_through_logging(tmp_path):
    pytest.importorskip("confluent_kafka")
    script = tmp_path / "down.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script), "5"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    lines = out.stderr.splitlines()
    assert min(res["errors"].values()) >= 2, res["errors"]     # both connectors retried (several clients each)
    assert len(lines) < 20, f"{len(lines)} lines on stderr:\n" + "\n".join(lines[:40])
    kafka = [m for lvl, m in res["caught"] if lvl in ("WARNING", "ERROR", "CRITICAL")]
    assert any(res["broker"] in m for m in kafka), res["caught"]
    assert any(res["broker"] in x and "sqlengine.kafka.librdkafka" in x for x in lines), lines


def test_rate_limit_counts_what_it_suppresses():
    from connectors.kafka_logs import RateLimit
    f = RateLimit(window=0.3)

    def rec(level, fac, text):
        return logging.LogRecord("sqlengine.kafka.librdkafka", level, __file__, 1, "%s [%s] %s",
                                 (fac, "rdkafka#consumer-1", text), None)
    passed = [r for r in (rec(logging.ERROR, "FAIL", f"connect {i} refused") for i in range(50)) if f.filter(r)]
    assert len(passed) == 1
    assert f.filter(rec(logging.ERROR, "REQTMOUT", "timed out"))        # another facility: its own budget
    assert f.filter(rec(logging.WARNING, "FAIL", "connect refused"))    # another level too
    import time
    time.sleep(0.35)
    r = rec(logging.ERROR, "FAIL", "connect 99 refused")
    assert f.filter(r) and r.suppressed == 49
    assert r.getMessage().endswith("(49 similar messages suppressed in the last 0 s)"), r.getMessage()
