"""A pipeline reading a Kafka topic and writing its view's changes to another, killed (SIGKILL) and
restarted by ``tests/connectors/test_kafka.py`` and ``benchmarks/kafka_crash_stress.py``.

The parent produces a fixed, seeded sequence of insert/delete messages (``messages``) up front; the child
reads them in small batches (many steps), and exits once it has read to the end of the input topic and
delivered everything.  ``verify`` checks after the last run: the output topic integrates exactly to
DuckDB's recomputation of the view over the input, every (step, seq) is in it once, and every step is
complete.

    python -m tests.support.kafka_crash_child BOOTSTRAP IN_TOPIC OUT_TOPIC STORAGE END_OFFSETS_JSON
"""
from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from typing import List, Tuple

SEED = 23
PARTITIONS = 3
VIEW = "SELECT g, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS mx FROM t GROUP BY g"
VIEW_COLUMNS = ["g", "n", "s", "mx"]


def messages(n: int) -> List[Tuple[int, dict]]:
    """``n`` (partition, record) insert/delete messages (duplicates, NULLs, deletes of live rows).  A row's
    messages all go to partition ``id % 3``, so its delete is read after its insert."""
    rng, live, out = random.Random(SEED), [], []
    for _ in range(n):
        if live and rng.random() < 0.3:
            row = live.pop(rng.randrange(len(live)))
            rec = {"delete": row}
        else:
            row = {"id": rng.randrange(60), "g": rng.choice([1, 2, 3, None]), "v": rng.choice([1, 7, None, -3])}
            live.append(row)
            rec = {"insert": row}
        out.append((row["id"] % PARTITIONS, rec))
    return out


def final_rows(n: int) -> list:
    live = []
    for _, r in messages(n):
        if "insert" in r:
            live.append(r["insert"])
        else:
            live.remove(r["delete"])
    return live


def produce_input(broker, topic: str, n: int) -> None:
    broker.create_topic(topic, PARTITIONS)
    p = broker.producer()
    for part in range(PARTITIONS):
        broker.produce(topic, [json.dumps(r).encode() for q, r in messages(n) if q == part], partition=part,
                       producer=p)


from connectors import register_source  # noqa: E402
from connectors.kafka_input import KafkaInput  # noqa: E402


@register_source
class SlowKafkaInput(KafkaInput):
    """kafka_input that waits a little before each poll, so that the input makes many small steps."""
    transport = "test_kafka_input_slow"

    def poll(self, max_rows):
        time.sleep(0.03)
        return super().poll(max_rows)


def program(bootstrap: str, in_topic: str, out_topic: str) -> str:
    src = [{"name": "kin", "transport": {"name": "test_kafka_input_slow", "config": {
        "bootstrap.servers": bootstrap, "topics": [in_topic], "max_batch_messages": 20, "poll_timeout_ms": 20}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}}]
    snk = [{"name": "kout", "transport": {"name": "kafka_output", "config": {
        "bootstrap.servers": bootstrap, "topic": out_topic, "key": ["g"]}}}]
    return (f"CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT) WITH ('connectors' = '{json.dumps(src)}');\n"
            f"CREATE MATERIALIZED VIEW agg WITH ('connectors' = '{json.dumps(snk)}') AS {VIEW};")


def run_child(bootstrap: str, in_topic: str, out_topic: str, storage: str, ends: dict, kill_after=None,
              timeout: float = 120):
    """Run the child (``ends``: the input topic's end offsets); with ``kill_after`` seconds, SIGKILL it then.
    Returns its exit code."""
    from tests.support.killable import run_module
    return run_module("tests.support.kafka_crash_child", [bootstrap, in_topic, out_topic, storage, json.dumps(ends)],
                      kill_after, timeout)


def integrate(output) -> Tuple[Counter, list]:
    """The bag the output messages integrate to, and problems with their (step, seq) headers."""
    from tests.support.oracle import canon
    bag: Counter = Counter()
    seen: Counter = Counter()
    counts = {}
    for _p, _o, _k, value, headers in output:
        step, seq, count = (int(headers[h]) for h in ("sqlengine.step", "sqlengine.seq", "sqlengine.count"))
        seen[(step, seq)] += 1
        counts.setdefault(step, set()).add(count)
        rec = json.loads(value)
        (kind, row), = rec.items()
        bag[tuple(canon(row[c]) for c in VIEW_COLUMNS)] += 1 if kind == "insert" else -1
    problems = []
    dup = [k for k, v in seen.items() if v > 1]
    if dup:
        problems.append(f"(step, seq) written more than once: {sorted(dup)[:5]}")
    for step, cs in counts.items():
        if len(cs) != 1:
            problems.append(f"step {step}: messages disagree on the count: {cs}")
            continue
        n = cs.pop()
        got = {s for (st, s) in seen if st == step}
        if got != set(range(n)):
            problems.append(f"step {step}: seqs {sorted(set(range(n)) - got)[:5]} missing")
    return Counter({k: v for k, v in bag.items() if v != 0}), problems


def verify(broker, out_topic: str, n: int) -> list:
    from tests.support.oracle import Model, diff
    model = Model("CREATE TABLE t (id BIGINT NOT NULL, g INT, v BIGINT);", {"t": ["id", "g", "v"]})
    model.insert("t", [(r["id"], r["g"], r["v"]) for r in final_rows(n)])
    want = model.view(model.duck(), VIEW)
    got, problems = integrate(broker.consume_all(out_topic))
    if diff(got, want):
        problems.append("output topic: " + diff(got, want))
    return problems


def main(bootstrap: str, in_topic: str, out_topic: str, storage: str, ends_json: str) -> None:
    from sqlengine import Pipeline
    ends = json.loads(ends_json)
    p = Pipeline.from_sql(program(bootstrap, in_topic, out_topic), storage_dir=storage,
                          spark_conf={"sqlengine.spark.start": "lazy"})
    p.start()
    deadline = time.monotonic() + 300
    while p.status()["connectors"]["t.kin"]["position"] != ends:
        if time.monotonic() > deadline:
            raise TimeoutError(f"input not read: {p.status()['connectors']}")
        time.sleep(0.02)
    p.wait_for_idle(timeout_s=120)
    st = p.status()["connectors"]["agg.kout"]
    if st["last_error"] or st["lag"]:
        raise AssertionError(f"sink not caught up: {st}")
    p.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
