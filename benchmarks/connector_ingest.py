"""Ingest through connectors into a GROUP BY view, with the peers side by side on the same files.

    python -m benchmarks.connector_ingest --rows 2000000 --files 20 [--kafka] [--out benchmarks/RESULTS.md]

Rows (id BIGINT, k INT with 100,000 keys, v BIGINT, ts TIMESTAMP) are written once as CSV files (with a
header for the engine, without for Flink, whose CSV format has no header option), Parquet files, and,
with ``--kafka``, JSON messages in a 3-partition topic of a Tansu broker started for the run.  Then:

* the engine: a pipeline whose table has a ``file_input`` (csv, parquet) or ``kafka_input`` (json)
  connector and a materialized ``SELECT k, COUNT(*), SUM(v) FROM ev GROUP BY k``; timed from
  ``start()`` until all input is processed (``wait_for_completion``; for Kafka, until the source's
  position reaches the topic's end and the pipeline is idle).  Spark is not started (the steps run on
  the driver), so no JVM start is in the figure;
* Spark Structured Streaming: ``readStream`` of the same CSV / Parquet directory, the same aggregation
  in update mode into a ``noop`` sink, ``trigger(availableNow=True)``; timed from ``start()`` until the
  query ends (the SparkSession is started before, untimed);
* Flink SQL (``.peer-flink``): the filesystem CSV source into a blackhole sink; the wall time of the
  job, and the same minus the job's fixed cost over an empty directory.

The engine's results are checked against DuckDB over the same rows.  The report goes between
``<!-- BEGIN connector_ingest -->`` and ``<!-- END connector_ingest -->`` in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.report import write_section
from benchmarks.soak import ROOT, machine

FLINK_PYTHON = os.path.join(ROOT, ".peer-flink", "bin", "python")
VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k"
COLUMNS = "id BIGINT NOT NULL, k INT, v BIGINT, ts TIMESTAMP"


def make_rows(n: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"id": np.arange(n, dtype=np.int64), "k": rng.integers(0, 100_000, n, dtype=np.int32),
                         "v": rng.integers(-1000, 1000, n, dtype=np.int64),
                         "ts": pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(n), unit="ms")})


def write_files(df: pd.DataFrame, root: str, files: int) -> dict:
    dirs = {f: os.path.join(root, f) for f in ("csv", "csv_noheader", "parquet", "empty")}
    for d in dirs.values():
        os.makedirs(d)
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        chunk = df.iloc[part]
        chunk.to_csv(os.path.join(dirs["csv"], f"part-{i:05d}.csv"), index=False,
                     date_format="%Y-%m-%d %H:%M:%S.%f")
        chunk.to_csv(os.path.join(dirs["csv_noheader"], f"part-{i:05d}.csv"), index=False, header=False,
                     date_format="%Y-%m-%d %H:%M:%S.%f")
        pq.write_table(pa.Table.from_pandas(chunk, preserve_index=False), os.path.join(dirs["parquet"],
                                                                                      f"part-{i:05d}.parquet"))
    return dirs


def expected(df: pd.DataFrame) -> dict:
    g = df.groupby("k").agg(n=("id", "size"), s=("v", "sum"))
    return {int(k): (int(r.n), int(r.s)) for k, r in g.iterrows()}


def program(conn: list) -> str:
    return (f"CREATE TABLE ev ({COLUMNS}) WITH ('connectors' = '{json.dumps(conn)}');\n"
            f"CREATE MATERIALIZED VIEW by_k AS {VIEW};")


def check(p, want: dict) -> bool:
    got = {r["k"]: (r["n"], r["s"]) for r in p.query("SELECT * FROM by_k")}
    return got == want


def engine_files(fmt: str, path: str, rows: int, want: dict) -> dict:
    from sqlengine import Pipeline
    conn = [{"name": "files", "transport": {"name": "file_input", "config": {"path": path}},
             "format": {"name": fmt}}]
    sql = program(conn)
    with tempfile.TemporaryDirectory() as store:
        p = Pipeline.from_sql(sql, storage_dir=store, spark_conf={"sqlengine.spark.start": "lazy"})
        t0 = time.perf_counter()
        p.start()
        p.wait_for_completion()
        wall = time.perf_counter() - t0
        ok = check(p, want)
        steps = p.status()["step"]
        p.stop()
    return {"wall_s": wall, "rows_per_s": rows / wall, "correct": ok, "steps": steps}


def produce_json(broker, topic: str, df: pd.DataFrame, malformed: float = 0.0, seed: int = 7) -> np.ndarray:
    """The rows of ``df`` as JSON messages in ``topic`` (3 partitions, row i in partition i % 3); a fraction
    ``malformed`` of them (chosen at random) truncated mid-object instead.  Returns the mask of good rows."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result()
    prod = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.num.messages": 10000})
    good = np.random.default_rng(seed).random(len(df)) >= malformed
    ts = df["ts"].dt.strftime("%Y-%m-%d %H:%M:%S.%f")
    for i, (a, b, c, d, g) in enumerate(zip(df["id"].tolist(), df["k"].tolist(), df["v"].tolist(), ts.tolist(),
                                            good.tolist())):
        value = json.dumps({"id": a, "k": b, "v": c, "ts": d}).encode()
        prod.produce(topic, value if g else value[:len(value) // 2], partition=i % 3)
        if i % 100_000 == 0:
            prod.flush()
    prod.flush()
    return good


def engine_kafka(df: pd.DataFrame, want: dict, broker=None, topic: str = "ev", good=None) -> dict:
    """The engine reading ``topic`` (``produce_json``; ``good``: the mask of its good messages) into the view."""
    if broker is None:
        from tests.support.kafka_broker import Broker   # the test helper that starts Tansu
        with Broker() as broker:
            good = produce_json(broker, topic, df)
            r = engine_kafka(df, want, broker, topic, good)
            r["client_rows_per_s"] = bare_consume(broker.bootstrap, len(df))
            return r
    from sqlengine import Pipeline
    ends = {f"{topic}/{p}": len(range(p, len(df), 3)) for p in range(3)}
    conn = [{"name": "kafka", "transport": {"name": "kafka_input", "config": {
        "bootstrap.servers": broker.bootstrap, "topics": [topic], "start_from": "earliest"}},
        "format": {"name": "json", "config": {"update_format": "raw"}}}]
    sql = program(conn)
    with tempfile.TemporaryDirectory() as store:
        p = Pipeline.from_sql(sql, storage_dir=store, spark_conf={"sqlengine.spark.start": "lazy"})
        t0 = time.perf_counter()
        p.start()
        last, moved = None, time.monotonic()
        while True:
            st = p.status()["connectors"]["ev.kafka"]
            if st["position"] == ends:
                break
            if st["state"] == "failed":
                raise SystemExit(st["last_error"])
            if st["position"] != last:
                last, moved = st["position"], time.monotonic()
            elif time.monotonic() - moved > 120:
                raise SystemExit(f"{topic}: no progress for 120 s (want {ends}): {st}")
            time.sleep(0.01)
        p.wait_for_idle()
        wall = time.perf_counter() - t0
        ok = check(p, want)
        dead = p.status()["connectors"]["ev.kafka"]["dead_letter_rows"]
        dec = p._sources["ev.kafka"].source.decode
        ok = ok and dead == int((~good).sum())
        stats = {"slow_rows": dec.slow_rows, "split_batches": dec.split_batches, "fast_batches": dec.fast_batches}
        p.stop()
    return {"wall_s": wall, "rows_per_s": len(df) / wall, "correct": ok, "dead_letter_rows": dead, **stats}


def kafka_malformed(df: pd.DataFrame, fraction: float, repeat: int = 1) -> dict:
    """Kafka JSON ingest of clean messages and of messages with ``fraction`` malformed, on one broker: the
    engine as it is, and with the split path off (every batch holding a bad message converted row by row, the
    behaviour before issue 32).  The three runs are repeated ``repeat`` times in turn; each keeps its fastest."""
    from tests.support.kafka_broker import Broker
    import connectors.messages as messages
    name = f"{fraction:.1%} malformed"
    out: dict = {}
    with Broker() as broker:
        clean = produce_json(broker, "ev", df)
        good = produce_json(broker, "evm", df, fraction)
        wants = {"ev": expected(df), "evm": expected(df[good])}
        split = messages._split_fast
        for _ in range(repeat):
            rate = bare_consume(broker.bootstrap, len(df))   # the client's ceiling, in turn with the runs
            bare = out.setdefault("bare confluent-kafka consumer", {
                "wall_s": len(df) / rate, "rows_per_s": rate, "dead_letter_rows": 0, "slow_rows": 0,
                "correct": True, "split_batches": 0, "runs": []})
            bare["runs"].append(rate)
            if rate > bare["rows_per_s"]:
                bare.update(wall_s=len(df) / rate, rows_per_s=rate)
            print("bare client", rate, flush=True)
            for run, topic, mask, off in (("kafka json, clean", "ev", clean, False),
                                          (f"kafka json, {name}", "evm", good, False),
                                          (f"kafka json, {name}, split off", "evm", good, True)):
                if off:
                    messages._split_fast = lambda *a: None
                try:
                    r = engine_kafka(df, wants[topic], broker, topic, mask)
                finally:
                    messages._split_fast = split
                print(run, r, flush=True)
                r["runs"] = out.get(run, {}).get("runs", []) + [r["rows_per_s"]]
                if run not in out or r["rows_per_s"] > out[run]["rows_per_s"]:
                    out[run] = {**r, "correct": r["correct"] and out.get(run, {}).get("correct", True)}
                else:
                    out[run]["runs"], out[run]["correct"] = r["runs"], out[run]["correct"] and r["correct"]
    return out


def bare_consume(bootstrap: str, n: int, topic: str = "ev") -> float:
    """Messages/s of a bare confluent-kafka consumer reading ``topic`` (values only): the ceiling here."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bare", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "max.partition.fetch.bytes": 8 << 20})
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got, t0 = 0, time.perf_counter()
    while got < n:
        got += len([m.value() for m in c.consume(num_messages=10_000, timeout=0.5)])
    rate = n / (time.perf_counter() - t0)
    c.close()
    return rate


def sss(fmt: str, path: str, rows: int) -> dict:
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType, TimestampType
    from sqlengine.executor.session import get_spark
    spark = get_spark({"spark.sql.shuffle.partitions": "2"})
    schema = StructType([StructField("id", LongType()), StructField("k", IntegerType()), StructField("v", LongType()),
                         StructField("ts", TimestampType())])
    reader = spark.readStream.schema(schema)
    stream = reader.option("header", True).csv(path) if fmt == "csv" else reader.parquet(path)
    agg = stream.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
    with tempfile.TemporaryDirectory() as ck:
        t0 = time.perf_counter()
        q = (agg.writeStream.outputMode("update").format("noop").option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination()
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "rows_per_s": rows / wall}


def flink(dirs: dict, rows: int) -> dict:
    if not os.path.exists(FLINK_PYTHON):
        return {"error": "not run: .peer-flink missing (python3 -m venv .peer-flink && "
                         ".peer-flink/bin/pip install apache-flink==2.3.0)"}
    env = dict(os.environ, JVM_ARGS="-Xms2g -Xmx2g")
    out = subprocess.run([FLINK_PYTHON, os.path.join(ROOT, "benchmarks", "peers", "flink_ingest.py"),
                          "--csv", dirs["csv_noheader"], "--empty", dirs["empty"]], capture_output=True, text=True,
                         env=env, timeout=1800)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": (out.stderr or out.stdout)[-500:]}
    r = json.loads(line[len("RESULT "):])
    net = max(r["wall_s"] - r["startup_s"], 1e-9)
    return {"wall_s": r["wall_s"], "rows_per_s": rows / r["wall_s"], "startup_s": r["startup_s"],
            "net_rows_per_s": rows / net}


def fmt_rate(x) -> str:
    return f"{x / 1e3:,.0f}k" if x is not None else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--kafka", action="store_true", help="also Kafka JSON (starts a Tansu broker)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="with --malformed: runs of each case (the fastest kept)")
    ap.add_argument("--malformed", type=float, default=None, metavar="FRACTION",
                    help="only Kafka JSON: clean vs FRACTION malformed messages (e.g. 0.001), with and without "
                         "the split path; reported in its own section (kafka_malformed)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    a = ap.parse_args(argv)
    before = machine("at start")
    df = make_rows(a.rows)
    if a.malformed is not None:
        return malformed_report(a, before, df)
    want = expected(df)
    results = {}
    with tempfile.TemporaryDirectory() as root:
        dirs = write_files(df, root, a.files)
        results["engine csv"] = engine_files("csv", dirs["csv"], a.rows, want)
        print("engine csv", results["engine csv"], flush=True)
        results["engine parquet"] = engine_files("parquet", dirs["parquet"], a.rows, want)
        print("engine parquet", results["engine parquet"], flush=True)
        if a.kafka:
            results["engine kafka json"] = engine_kafka(df, want)
            print("engine kafka json", results["engine kafka json"], flush=True)
        if not a.no_peers:
            results["flink csv"] = flink(dirs, a.rows)
            print("flink csv", results["flink csv"], flush=True)
            results["sss csv"] = sss("csv", dirs["csv"], a.rows)
            print("sss csv", results["sss csv"], flush=True)
            results["sss parquet"] = sss("parquet", dirs["parquet"], a.rows)
            print("sss parquet", results["sss parquet"], flush=True)
    flink_rate = results.get("flink csv", {}).get("rows_per_s")
    sss_csv = results.get("sss csv", {}).get("rows_per_s")
    lines = [f"## Connector ingest: {a.rows:,} rows into a GROUP BY view (100,000 keys)", "",
             f"`python -m benchmarks.connector_ingest --rows {a.rows} --files {a.files}"
             f"{' --kafka' if a.kafka else ''}` — {before}", "",
             "| run | wall s | rows/s | vs Flink CSV (wall) | vs SSS CSV | notes |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | - | - | - | - | {r['error']} |")
            continue
        notes = []
        if "correct" in r:
            notes.append("view = DuckDB" if r["correct"] else "**view differs from DuckDB**")
        if "client_rows_per_s" in r:
            notes.append(f"a bare confluent-kafka consumer reads {fmt_rate(r['client_rows_per_s'])} msg/s from this "
                         f"broker (Tansu, same machine): the connector runs at "
                         f"{r['rows_per_s'] / r['client_rows_per_s']:.2f} of its client")
        if "startup_s" in r:
            notes.append(f"job fixed cost {r['startup_s']:.1f} s; without it {fmt_rate(r['net_rows_per_s'])} rows/s")
        ratio_f = f"{r['rows_per_s'] / flink_rate:.2f}" if flink_rate else "-"
        ratio_s = f"{r['rows_per_s'] / sss_csv:.2f}" if sss_csv else "-"
        lines.append(f"| {name} | {r['wall_s']:.2f} | {fmt_rate(r['rows_per_s'])} | {ratio_f} | {ratio_s} | "
                     f"{'; '.join(notes)} |")
    lines += ["", f"Load after the run: {machine('at end')}"]
    text = "\n".join(lines)
    print(text)
    write_section(a.out, "connector_ingest", text)
    return 0 if all(r.get("correct", True) for r in results.values()) else 1


def malformed_report(a, before: str, df: pd.DataFrame) -> int:
    results = kafka_malformed(df, a.malformed, a.repeat)
    clean = results["kafka json, clean"]["rows_per_s"]
    client = results["bare confluent-kafka consumer"]["rows_per_s"]
    lines = [f"## Kafka JSON ingest with malformed messages: {a.rows:,} messages into a GROUP BY view", "",
             f"`python -m benchmarks.connector_ingest --rows {a.rows} --malformed {a.malformed} "
             f"--repeat {a.repeat}` — {before}", "",
             "| run | wall s | rows/s | vs clean | vs the bare client | dead-lettered | converted row by row | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['wall_s']:.2f} | {fmt_rate(r['rows_per_s'])} | {r['rows_per_s'] / clean:.2f} | "
                     f"{r['rows_per_s'] / client:.2f} | "
                     f"{r['dead_letter_rows']:,} | {r['slow_rows']:,} | "
                     f"{'view = DuckDB over the good messages' if r['correct'] else '**view differs**'}; "
                     f"{r['split_batches']} split batches; runs: {', '.join(fmt_rate(x) for x in r['runs'])} |")
    lines += ["", f"Load after the run: {machine('at end')}"]
    text = "\n".join(lines)
    print(text)
    write_section(a.out, "kafka_malformed", text)
    return 0 if all(r["correct"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
