"""Load test of the pipeline server: N clients pushing rows, M clients streaming changes, for a bounded time.

Usage: python -m benchmarks.server_load [--seconds 60] [--writers 4] [--readers 2] [--batch 100]

Starts ``sqlengine.server.serve`` in a child process on a free 127.0.0.1 port (lazy Spark: steps run on the
driver) with a fresh storage root, creates one pipeline (a table ``ev`` and a GROUP BY view ``per_k``), connects
``--readers`` egress streams of ``per_k``, then runs ``--writers`` threads that each POST batches of
``--batch`` changes (new rows, plus deletes of some of the rows it inserted before) to ``ingress/ev`` until
``--seconds`` are up.  Reports requests/s, rows/s and the p50/p99 ingress latency (the time until the input is
durable), then verifies nothing was lost: the view queried through ``/query`` and every reader's integrated
stream equal DuckDB recomputing ``per_k`` from every acknowledged change.  Exits 1 if not.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import List

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.support.net import free_port  # noqa: E402
from tests.support.oracle import Model, bag, diff  # noqa: E402

SQL = """CREATE TABLE ev (id BIGINT NOT NULL, k INT, v INT);
CREATE MATERIALIZED VIEW per_k AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k;
"""
VIEW = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k"
KEYS = 50


def pct(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100, help="changes per ingress request")
    args = ap.parse_args(argv)

    root = tempfile.mkdtemp(prefix="sqlengine-server-load-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    code = ("from sqlengine.server import serve; "
            f"serve(host='127.0.0.1', port={port}, storage_root={root!r}, "
            "spark_conf={'sqlengine.spark.start': 'lazy'}, log_level='warning')")
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("SQLENGINE_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    try:
        end = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit("the server did not start")
            time.sleep(0.1)
        return run(url, args)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def run(url: str, args) -> int:
    http = httpx.Client(base_url=url, timeout=120)
    r = http.put("/v0/pipelines/load", json={"program_code": SQL})
    r.raise_for_status()
    http.post("/v0/pipelines/load/start").raise_for_status()

    # readers: integrate the stream of per_k until the end marker
    integrated = [Counter() for _ in range(args.readers)]
    lines = [0] * args.readers
    opened = [threading.Event() for _ in range(args.readers)]
    reader_errors: List[str] = []

    def reader(i: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=None)) as c:
                with c.stream("POST", "/v0/pipelines/load/egress/per_k") as resp:
                    resp.raise_for_status()
                    opened[i].set()
                    for line in resp.iter_lines():
                        msg = json.loads(line)
                        if msg.get("marker") == "end":
                            return
                        if "error" in msg:
                            reader_errors.append(str(msg["error"]))
                            return
                        lines[i] += 1
                        for e in msg["json_data"]:
                            (kind, row), = e.items()
                            integrated[i][(row["k"], row["n"], row["s"])] += 1 if kind == "insert" else -1
        except Exception as e:  # noqa: BLE001
            reader_errors.append(f"{type(e).__name__}: {e}")
        finally:
            opened[i].set()

    readers = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(args.readers)]
    for t in readers:
        t.start()
    for ev in opened:
        ev.wait(30)

    # writers: each owns an id range; deletes only rows it inserted (and had acknowledged) before
    model = Model("CREATE TABLE ev (id BIGINT NOT NULL, k INT, v INT)", {"ev": ["id", "k", "v"]})
    model_lock = threading.Lock()
    acked_ins: List[tuple] = []    # acknowledged changes (ids are unique; a delete follows its row's insert)
    acked_dels: List[tuple] = []
    latencies: List[float] = []
    counts = {"requests": 0, "rows": 0, "errors": 0}
    deadline = time.monotonic() + args.seconds

    def writer(w: int) -> None:
        rng = random.Random(w)
        live: List[tuple] = []
        next_id = w * 10**12
        with httpx.Client(base_url=url, timeout=120) as c:
            while time.monotonic() < deadline:
                n_del = min(len(live), rng.randrange(0, args.batch // 3 + 1))
                dels = [live.pop(rng.randrange(len(live))) for _ in range(n_del)]
                ins = []
                for _ in range(args.batch - n_del):
                    ins.append((next_id, rng.randrange(KEYS), rng.randrange(1000)))
                    next_id += 1
                body = [{"insert": dict(zip(("id", "k", "v"), r))} for r in ins] + \
                       [{"delete": dict(zip(("id", "k", "v"), r))} for r in dels]
                t0 = time.perf_counter()
                resp = c.post("/v0/pipelines/load/ingress/ev", params={"format": "json", "update_format": "insert_delete"},
                              content=json.dumps(body))
                dt_ms = (time.perf_counter() - t0) * 1000
                if resp.status_code != 200:
                    counts["errors"] += 1
                    live.extend(dels)   # not acknowledged: the rows are still there
                    continue
                live.extend(ins)
                with model_lock:
                    latencies.append(dt_ms)
                    counts["requests"] += 1
                    counts["rows"] += len(body)
                    acked_ins.extend(ins)
                    acked_dels.extend(dels)

    t_start = time.monotonic()
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(args.writers)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    elapsed = time.monotonic() - t_start
    t0 = time.monotonic()
    http.post("/v0/pipelines/load/wait_for_idle", params={"marker": "end", "timeout_s": 600}).raise_for_status()
    drain_s = time.monotonic() - t0
    for t in readers:
        t.join(120)

    model.insert("ev", acked_ins)
    model.delete("ev", acked_dels)
    expected = model.view(model.duck(), VIEW)
    queried = bag((r["k"], r["n"], r["s"]) for r in
                  http.get("/v0/pipelines/load/query", params={"sql": "SELECT * FROM per_k"}).json())
    problems = []
    if diff(queried, expected):
        problems.append(f"query != recomputation: {diff(queried, expected)}")
    for i, c in enumerate(integrated):
        b = bag(Counter({k: v for k, v in c.items() if v}).elements()) if all(v >= 0 for v in c.values()) else c
        if diff(b, expected):
            problems.append(f"reader {i}: stream != recomputation: {diff(b, expected)}")
    problems += [f"reader error: {e}" for e in reader_errors]
    stats = http.get("/v0/pipelines/load/stats").json()
    http.post("/v0/pipelines/load/stop", params={"force": "true"})

    report = {
        "seconds": round(elapsed, 1), "writers": args.writers, "readers": args.readers, "batch": args.batch,
        "requests": counts["requests"], "failed_requests": counts["errors"],
        "requests_per_s": round(counts["requests"] / elapsed, 1),
        "changes_per_s": round(counts["rows"] / elapsed, 1),
        "ingress_latency_ms": {"p50": round(pct(latencies, 0.5), 1), "p99": round(pct(latencies, 0.99), 1),
                               "max": round(max(latencies), 1) if latencies else None},
        "drain_after_writers_s": round(drain_s, 2),
        "steps": stats.get("step"), "step_latency_ms": stats.get("step_latency_ms"),
        "egress_lines_per_reader": lines,
        "live_rows": sum(model.rows["ev"].values()), "view_rows": sum(expected.values()),
        "verified": not problems,
    }
    print(json.dumps(report, indent=1))
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
