"""A Delta mirror kept up to date incrementally, against a Spark batch job recomputing it, per step of changes.

    python -m benchmarks.delta_mirror --rows 10000000 --changes 10000 --steps 5 [--views agg,proj]
                                      [--no-spark] [--out benchmarks/RESULTS.md]

A source Delta table ``t (id BIGINT NOT NULL, k BIGINT, v BIGINT)`` of ``--rows`` rows, with the change data
feed on, is written with delta-rs.  Each step is one MERGE into it of ``--changes`` changes, a third each
inserts (new ids), updates (new ``k`` and ``v`` of random existing ids) and deletes (random existing ids),
so one new version.  Per view (``--views``):

* ``agg``: ``SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k`` (``k`` in ``rows / 2`` values: about
  ``0.43 * rows`` groups), mirrored by key ``k``;
* ``proj``: ``SELECT id, k, v * 2 + 1 AS w FROM t``, mirrored by key ``id`` (a mirror as big as the source).

Then:

* the engine: a pipeline whose table has a ``delta_table_input`` connector (snapshot, then the change data
  feed) and whose materialized view has a ``delta_table_output`` mirror.  A step is timed from the source
  version's commit until the pipeline holds it and the mirror committed it (the source's position
  reached the version, then ``wait_for_idle``).  The first load (snapshot in, whole view out) is timed
  apart;
* Spark, the way a batch pipeline (Spark Declarative Pipelines) refreshes a materialized view: read the
  source's current Parquet files (``DeltaTable(...).file_uris()``: this Spark has no Delta reader) with
  ``spark.read.parquet``, compute the view, collect it as Arrow and overwrite the target Delta table with
  ``write_deltalake(mode="overwrite")``.  Timed per step, after the engine's step (they do not overlap).

The mirror is checked against the Spark job's table at the end (row count and a hash of all rows).
Also reported: the rows the mirror's MERGE rewrote per step (Delta without deletion vectors rewrites every
file holding a changed row; random keys touch all files).  The report goes between
``<!-- BEGIN delta_mirror -->`` and ``<!-- END delta_mirror -->`` in ``--out`` (``--out ""``: print only).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

VIEWS = {
    "agg": ("SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k", ["k"]),
    "proj": ("SELECT id, k, v * 2 + 1 AS w FROM t", ["id"]),
}
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])


class Source:
    """The source Delta table and the ids it holds; ``step()`` commits one version of random changes."""

    def __init__(self, uri: str, rows: int, seed: int = 1):
        from deltalake import write_deltalake
        self.uri, self.rng = uri, np.random.default_rng(seed)
        self.keys = max(rows // 2, 1)
        self.live = np.arange(rows, dtype=np.int64)
        self.next_id = rows
        for start in range(0, rows, 2_000_000):   # (in parts: bounded memory)
            ids = self.live[start:start + 2_000_000]
            write_deltalake(uri, pa.table({"id": ids, "k": self.rng.integers(0, self.keys, len(ids)),
                                           "v": self.rng.integers(-1000, 1000, len(ids))}, schema=SCHEMA),
                            mode="append", configuration={"delta.enableChangeDataFeed": "true"})

    def step(self, changes: int) -> float:
        """One MERGE of ``changes`` changes; returns its seconds."""
        from deltalake import DeltaTable
        n_ins = changes // 3
        n_upd = changes // 3
        n_del = min(changes - n_ins - n_upd, len(self.live) - n_upd)
        pick = self.rng.choice(len(self.live), n_upd + n_del, replace=False)
        upd, dele = self.live[pick[:n_upd]], self.live[pick[n_upd:]]
        ins = np.arange(self.next_id, self.next_id + n_ins, dtype=np.int64)
        self.next_id += n_ins
        self.live = np.concatenate([np.delete(self.live, pick[n_upd:]), ins])
        ids = np.concatenate([ins, upd, dele])
        src = pa.table({"id": ids, "k": self.rng.integers(0, self.keys, len(ids)),
                        "v": self.rng.integers(-1000, 1000, len(ids)),
                        "op": ["i"] * n_ins + ["u"] * n_upd + ["d"] * n_del})
        t0 = time.perf_counter()
        (DeltaTable(self.uri).merge(src, "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update(updates={"k": "s.k", "v": "s.v"}, predicate="s.op = 'u'")
         .when_matched_delete(predicate="s.op = 'd'")
         .when_not_matched_insert(updates={"id": "s.id", "k": "s.k", "v": "s.v"}, predicate="s.op = 'i'")
         .execute())
        return time.perf_counter() - t0

    def version(self) -> int:
        from deltalake import DeltaTable
        return DeltaTable(self.uri).version()


def program(view: str, source_uri: str, mirror_uri: str) -> str:
    select, key = VIEWS[view]
    src = [{"name": "src", "transport": {"name": "delta_table_input",
                                         "config": {"uri": source_uri, "poll_interval_ms": 20}}}]
    out = [{"name": "mirror", "transport": {"name": "delta_table_output",
                                            "config": {"uri": mirror_uri, "mode": "mirror", "key": key}}}]
    return (f"CREATE TABLE t (id BIGINT NOT NULL, k BIGINT, v BIGINT) WITH ('connectors' = '{json.dumps(src)}');\n"
            f"CREATE MATERIALIZED VIEW m WITH ('connectors' = '{json.dumps(out)}') AS {select};")


def wait_for(p, version: int) -> None:
    """Until the pipeline read ``version`` of the source and the mirror holds the step."""
    while (p.status()["connectors"]["t.src"]["position"] or {}).get("version") != version:
        st = p.status()["connectors"]["t.src"]
        if st["state"] == "failed":
            raise SystemExit(st["last_error"])
        time.sleep(0.005)
    p.wait_for_idle()
    sink = p.status()["connectors"]["m.mirror"]
    if sink["errors"]:
        raise SystemExit(f"mirror sink failed: {sink['last_error']}")


def spark_refresh(spark, view: str, source_uri: str, target_uri: str) -> float:
    """The batch job: the view recomputed from the source's current files, overwriting the target table."""
    from deltalake import DeltaTable, write_deltalake
    from pyspark.sql import functions as F
    t0 = time.perf_counter()
    df = spark.read.parquet(*DeltaTable(source_uri).file_uris())
    if view == "agg":
        out = df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
    else:
        out = df.select("id", "k", (F.col("v") * 2 + 1).alias("w"))
    write_deltalake(target_uri, out.toArrow(), mode="overwrite")
    return time.perf_counter() - t0


def fingerprint(uri: str):
    """(rows, a hash of all rows) of a Delta table (read with delta-rs, hashed by DuckDB)."""
    import duckdb
    from deltalake import DeltaTable
    con = duckdb.connect()
    reader = pa.RecordBatchReader.from_stream(DeltaTable(uri).scan())
    cols = ", ".join(f'"{n}"' for n in sorted(reader.schema.names))
    con.register("x", reader)
    n, h = con.execute(f"SELECT count(*), sum(hash({cols})::HUGEINT) FROM x").fetchone()
    con.close()
    return int(n), int(h or 0)


def merge_rewrites(uri: str) -> int:
    """Rows the last MERGE of the mirror copied (rewrote unchanged), from its commit metrics."""
    from deltalake import DeltaTable
    h = DeltaTable(uri).history(1)[0]
    m = h.get("operationMetrics") or {}
    return int(m.get("num_target_rows_copied", 0)) if h.get("operation") == "MERGE" else 0


def run_view(view: str, a, root: str, spark) -> dict:
    from sqlengine import Pipeline
    src_uri, mirror_uri, spark_uri = (os.path.join(root, view, x) for x in ("source", "mirror", "spark"))
    t0 = time.perf_counter()
    source = Source(src_uri, a.rows)
    print(f"[{view}] source table written in {time.perf_counter() - t0:.1f} s", flush=True)
    p = Pipeline.from_sql(program(view, src_uri, mirror_uri), storage_dir=os.path.join(root, view, "store"),
                          spark_conf={"sqlengine.spark.start": "lazy"})
    t0 = time.perf_counter()
    p.start()
    wait_for(p, source.version())
    first = time.perf_counter() - t0
    print(f"[{view}] engine first load {first:.1f} s", flush=True)
    if spark is not None:   # once untimed: Spark's first job pays for its warm-up, and the target is created
        spark_refresh(spark, view, src_uri, spark_uri)
    engine, sparks, source_s, copied = [], [], [], []
    for i in range(a.steps):
        source_s.append(source.step(a.changes))
        t0 = time.perf_counter()
        wait_for(p, source.version())
        engine.append(time.perf_counter() - t0)
        copied.append(merge_rewrites(mirror_uri))
        if spark is not None:
            sparks.append(spark_refresh(spark, view, src_uri, spark_uri))
        print(f"[{view}] step {i + 1}: engine {engine[-1]:.2f} s"
              + (f", spark {sparks[-1]:.2f} s" if sparks else "") + f" (source MERGE {source_s[-1]:.2f} s)",
              flush=True)
    rows = next(iter(p.query("SELECT COUNT(*) AS c FROM m")))["c"]
    p.stop()
    result = {"first_s": first, "engine_s": engine, "spark_s": sparks, "source_s": source_s, "copied": copied}
    mirror = fingerprint(mirror_uri)
    result["mirror_rows"] = mirror[0]
    if rows != mirror[0]:
        result["error"] = f"mirror has {mirror[0]} rows, the view {rows}"
    if spark is not None:
        result["correct"] = mirror == fingerprint(spark_uri)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--changes", type=int, default=10_000, help="changes per step (inserts, updates, deletes)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--views", default="agg,proj", help="comma-separated: " + ", ".join(VIEWS))
    ap.add_argument("--no-spark", action="store_true", help="only the engine")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"))
    a = ap.parse_args(argv)
    views = [v.strip() for v in a.views.split(",") if v.strip()]
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        ap.error(f"unknown view {unknown[0]!r}; views: {', '.join(VIEWS)}")
    spark = None
    if not a.no_spark:
        from sqlengine.executor.session import get_spark
        spark = get_spark({"spark.sql.shuffle.partitions": "2"})
    before = None
    if a.out:
        from benchmarks.soak import machine
        before = machine("at start")
    results = {}
    with tempfile.TemporaryDirectory() as root:
        for view in views:
            results[view] = run_view(view, a, root, spark)
    med = statistics.median
    lines = [f"## Delta mirror: {a.rows:,} source rows, steps of {a.changes:,} changes", "",
             f"`python -m benchmarks.delta_mirror --rows {a.rows} --changes {a.changes} --steps {a.steps} "
             f"--views {','.join(views)}{' --no-spark' if a.no_spark else ''}`" + (f" — {before}" if before else ""),
             "",
             "| view | mirror rows | engine first load s | engine s/step (median) | Spark recompute s/step (median) "
             "| Spark / engine | mirror MERGE rows rewritten/step | source MERGE s/step | check |",
             "|---|---|---|---|---|---|---|---|---|"]
    ok = True
    for view, r in results.items():
        e = med(r["engine_s"]) if r["engine_s"] else float("nan")
        s = med(r["spark_s"]) if r["spark_s"] else None
        check = "-"
        if "correct" in r:
            check = "mirror = Spark's table" if r["correct"] else "**mirror differs from Spark's table**"
            ok &= r["correct"]
        if "error" in r:
            check, ok = f"**{r['error']}**", False
        lines.append(f"| {view}: `{VIEWS[view][0]}` | {r['mirror_rows']:,} | {r['first_s']:.1f} | {e:.2f} | "
                     f"{'-' if s is None else f'{s:.2f}'} | {'-' if s is None else f'{s / e:.1f}x'} | "
                     f"{med(r['copied']) if r['copied'] else 0:,.0f} | "
                     f"{med(r['source_s']) if r['source_s'] else 0:.2f} | {check} |")
    lines += ["", "Per step (s): " + "; ".join(
        f"{v}: engine {', '.join(f'{x:.2f}' for x in r['engine_s'])}"
        + (f" / Spark {', '.join(f'{x:.2f}' for x in r['spark_s'])}" if r["spark_s"] else "")
        for v, r in results.items())]
    if a.out:
        from benchmarks.report import write_section
        from benchmarks.soak import machine
        lines += ["", f"Load after the run: {machine('at end')}"]
        text = "\n".join(lines)
        write_section(a.out, "delta_mirror", text)
    text = "\n".join(lines)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
