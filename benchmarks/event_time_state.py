"""Event time: state with LATENESS stays flat, without it grows.

    python -m benchmarks.event_time_state [--events 20000000] [--batch 100000] [--rate 1000] [--jitter 2]
        [--late-fraction 0.0005] [--baseline-events N] [--samples 10] [--check auto|yes|no]
        [--runs lateness,plain] [--out benchmarks/RESULTS.md]

Nexmark-shaped bids ``(auction, bidder, price, date_time)`` generated with numpy, ``--batch`` events per
``input_pandas`` call (one step each: every call is followed by ``wait_for_idle``).  Event ``i`` happens at
``2024-01-01 + i / --rate`` seconds, minus a uniform jitter of up to ``--jitter`` seconds (out of order, but
never by more than the lateness), and a ``--late-fraction`` of the events is ``--late-by`` seconds older
(late when the watermark already passed it).  Auctions as in Nexmark: 3 new auctions per 50 events, half of
the bids on the current hot auction, the others on one of the last 100 auctions.

Two runs, each in its own process (so that the RSS of one does not leak into the other), with Spark lazy
(``sqlengine.spark.start = lazy``: the steps run on the driver, no JVM starts):

* **lateness**: ``date_time TIMESTAMP LATENESS INTERVAL 4 SECONDS``, the views below and ``tumble_final``, an
  emit-final view over ``tumble`` (``WITH ('emit_final' = 'window_end')``);
* **plain**: the same table without LATENESS and the same views (``tumble_final`` cannot exist without a
  watermark): every operator keeps every window for ever.

Views (plain views with a ``foreach_chunk`` callback, which integrates their changes; a plain view without
listener is not computed):

* ``q5``: Nexmark q5 as in ``tests/fixtures/watermarks/windows.sql``: a HOP (2 s slide, 10 s size) COUNT
  per auction and window, the MAX of those counts per window, joined back on the window;
* ``tumble``: COUNT, SUM and MAX of the price per 10-second TUMBLE window.

Every ``events / --samples`` events it records the state size over all operators (``status()["state_size"]``:
bytes and rows of the committed LSM runs) and the RSS of the process (and of a JVM, should one start).
Reported: the table of both runs against events processed, events/s (input + step time only; generation
excluded), the ratio of the state at the end to the state at the middle (target for the LATENESS run: at
most 1.2x), and per operator the state in the middle and at the end.

Correctness (``--check auto``: when ``--events`` <= 2M): the events are generated again into DuckDB, without
the rows the engine dead-lettered as late (``<storage>/dead_letter/bid.late.jsonl``, whose count must equal
``status()["late_rows"]``); the integrated change streams of ``tumble`` and ``q5`` must equal DuckDB's
results, and ``tumble_final``'s output (all inserts) must be exactly DuckDB's windows with ``window_end``
below the final watermark.

With ``--out`` the report replaces the ``event_time_state`` section of that file
(``benchmarks.report.write_section``).
"""
from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "event_time_state"
BASE = pd.Timestamp("2024-01-01 00:00:00")
TARGET = 1.2
CHECK_AUTO_MAX = 2_000_000

Q5 = ("SELECT a.auction, a.num FROM (SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime "
      "FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY auction, window_start, window_end) a "
      "JOIN (SELECT MAX(c.num) AS maxn, c.starttime, c.endtime FROM (SELECT COUNT(*) AS num, window_start AS starttime, "
      "window_end AS endtime FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) "
      "GROUP BY auction, window_start, window_end) c GROUP BY c.starttime, c.endtime) m "
      "ON a.starttime = m.starttime AND a.endtime = m.endtime AND a.num >= m.maxn")
# Nexmark q7 as Flink writes it: the highest bids of each 10 s window, an interval join of the bids with the
# windows' maxima (the BETWEEN lets both sides drop their old rows)
Q7 = ("SELECT b.auction, b.price, b.bidder, b.date_time FROM bid b JOIN (SELECT MAX(price) AS maxprice, "
      "window_end AS date_time FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end) b1 "
      "ON b.price = b1.maxprice WHERE b.date_time BETWEEN b1.date_time - INTERVAL '10' SECOND AND b1.date_time")
TUMBLE = ("SELECT window_start, window_end, COUNT(*) AS n, SUM(price) AS total, MAX(price) AS top "
          "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end")

# DuckDB's recomputation (windows aligned at the epoch, as the binder writes TUMBLE / HOP)
DUCK_TUMBLE = ("SELECT time_bucket(INTERVAL 10 SECOND, date_time) AS window_start, "
               "time_bucket(INTERVAL 10 SECOND, date_time) + INTERVAL 10 SECOND AS window_end, COUNT(*) AS n, "
               "SUM(price) AS total, MAX(price) AS top FROM bid WHERE date_time IS NOT NULL GROUP BY ALL")
DUCK_Q5 = """
WITH h AS (
  SELECT auction, make_timestamp(epoch_us(date_time) - (epoch_us(date_time) % 2000000) - k * 2000000) AS ws
  FROM bid CROSS JOIN range(5) AS t(k) WHERE date_time IS NOT NULL),
c AS (SELECT auction, COUNT(*) AS num, ws AS starttime, ws + INTERVAL 10 SECOND AS endtime FROM h GROUP BY ALL)
SELECT a.auction, a.num FROM c a
JOIN (SELECT MAX(num) AS maxn, starttime, endtime FROM c GROUP BY starttime, endtime) m
  ON a.starttime = m.starttime AND a.endtime = m.endtime AND a.num >= m.maxn"""


def program(lateness: bool) -> str:
    time_col = "date_time TIMESTAMP LATENESS INTERVAL 4 SECONDS" if lateness else "date_time TIMESTAMP"
    sql = (f"CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, {time_col});\n"
           f"CREATE VIEW q5 AS {Q5};\n"
           f"CREATE VIEW q7 AS {Q7};\n"
           f"CREATE VIEW tumble AS {TUMBLE};\n")
    if lateness:
        sql += "CREATE VIEW tumble_final WITH ('emit_final' = 'window_end') AS SELECT * FROM tumble;\n"
    return sql


# --------------------------------------------------------------------------- events
def bids(b: int, batch: int, args) -> pd.DataFrame:
    """The events ``b * batch .. (b + 1) * batch - 1`` (deterministic per batch and seed)."""
    rng = np.random.default_rng([args.seed, b])
    i = np.arange(b * batch, (b + 1) * batch, dtype=np.int64)
    last_auction = i * 3 // 50                                     # 3 new auctions per 50 events
    hot = (last_auction // 100) * 100
    recent = np.maximum(last_auction - 100, 0) + rng.integers(0, 111, batch)
    auction = np.where(rng.random(batch) < 0.5, hot, recent) + 1000
    bidder = np.maximum(i // 50 - 1000, 0) + rng.integers(0, 1010, batch) + 1000   # one of the last 1000 people
    price = np.round(10 ** (6 * rng.random(batch)) * 100).astype(np.int64)
    us = (i * 1_000_000) // args.rate - (rng.random(batch) * args.jitter * 1_000_000).astype(np.int64)
    late = rng.random(batch) < args.late_fraction
    us = np.where(late, us - int(args.late_by * 1_000_000), us)
    us = us // 1000 * 1000                                          # milliseconds, as Nexmark
    ts = BASE.to_datetime64().astype("datetime64[us]") + us.astype("timedelta64[us]")
    return pd.DataFrame({"auction": auction, "bidder": bidder, "price": price, "date_time": ts})


# --------------------------------------------------------------------------- one run (a child process)
def op_labels(p) -> Dict[str, str]:
    """state key -> '#id kind (of ...)' for the report."""
    out = {}
    ops = {op.id: op for op in p.program.circuit.ops}
    tables = {integral: name for name, (_, integral) in p.program.circuit.tables.items()}
    for op_id, key in p.engine.keys.items():
        op = ops[op_id]
        what = op.kind
        if op_id in tables:
            what += f" of table {tables[op_id]}"
        elif op.kind == "integrate" and op.inputs:
            what += f" of #{op.inputs[0]} {ops[op.inputs[0]].kind}"
        for name, o in p.program.circuit.outputs.items():
            if o.integral == op_id:
                what += f", view {name}"
        readers = [f"#{r.id} {r.kind}" for r in ops.values() if op_id in r.reads]
        if readers:
            what += " read by " + ", ".join(readers)
        out[key] = f"#{op_id} {what}"
    return out


def run_child(args) -> dict:
    from benchmarks.memory import Sampler, rss
    from sqlengine import Pipeline

    lateness = args.child == "lateness"
    events = args.events if lateness else (args.baseline_events or args.events)
    n_batches = max(1, events // args.batch)
    events = n_batches * args.batch
    marks = sorted({max(1, round(k * n_batches / args.samples)) for k in range(1, args.samples + 1)})
    middle = max(1, round(n_batches / 2))
    if middle not in marks:
        marks = sorted(set(marks) | {middle})
    storage = tempfile.mkdtemp(prefix=f"event_time_{args.child}_")
    p = Pipeline.from_sql(program(lateness), name=f"event_time_{args.child}", storage_dir=storage,
                          spark_conf={"sqlengine.spark.start": "lazy"})
    integrated: Dict[str, collections.Counter] = {v: collections.Counter() for v in p.program.views}
    weights_seen: Dict[str, set] = {v: set() for v in p.program.views}

    def folder(view):
        def fold(chunk: pd.DataFrame, _step: int) -> None:
            cols = [c for c in chunk.columns if c != "__weight"]
            acc = integrated[view]
            for row, w in zip(chunk[cols].itertuples(index=False, name=None), chunk["__weight"].tolist()):
                acc[tuple(_norm(x) for x in row)] += int(w)
                weights_seen[view].add(int(w) > 0)
        return fold

    for v in p.program.views:
        p.foreach_chunk(v, folder(v))
    sampler = Sampler(period=0.5)
    sampler.start()
    p.start()
    labels = op_labels(p)
    samples = []
    busy = 0.0
    gen = 0.0
    t_start = time.perf_counter()
    for b in range(n_batches):
        t0 = time.perf_counter()
        df = bids(b, args.batch, args)
        t1 = time.perf_counter()
        p.input_pandas("bid", df)
        p.wait_for_idle()
        t2 = time.perf_counter()
        gen += t1 - t0
        busy += t2 - t1
        if b + 1 in marks:
            st = p.status()
            sizes = st["state_size"]
            r = rss()
            samples.append({
                "batch": b + 1, "events": (b + 1) * args.batch, "busy_s": busy,
                "state_bytes": sum(s["bytes"] for s in sizes.values()),
                "state_rows": sum(s["rows"] for s in sizes.values()),
                "state_runs": sum(s["runs"] for s in sizes.values()),
                "driver_rss": r["driver_rss"], "jvm_rss": r["jvm_rss"],
                "per_op": {k: s for k, s in sizes.items()},
                "late_rows": st["late_rows"].get("bid", 0),
                "watermark": st["watermarks"].get("bid"),
                "closed_dropped": st["closed_state_rows_dropped"],
            })
            print(f"[{args.child}] {(b + 1) * args.batch:,} events: state {samples[-1]['state_bytes'] / 2**20:,.1f} "
                  f"MiB, {samples[-1]['state_rows']:,} rows, RSS {r['driver_rss'] / 2**20:,.0f} MiB, "
                  f"{(b + 1) * args.batch / busy:,.0f} events/s", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t_start
    st = p.status()
    peaks = sampler.finish()
    result = {
        "run": args.child, "events": events, "batches": n_batches, "busy_s": busy, "gen_s": gen, "wall_s": wall,
        "events_per_s": events / busy, "samples": samples, "middle_batch": middle, "labels": labels,
        # the kernel's high-water mark of this process (the sampler can miss a short peak)
        "peak_driver_rss": max(peaks["driver_rss"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
        "peak_jvm_rss": peaks["jvm_rss"],
        "spark_started": st["spark_started"], "steps": st["step"], "steps_run_on": st["steps_run_on"],
        "late_rows": st["late_rows"].get("bid", 0), "watermark": st["watermarks"].get("bid"),
        "closed_dropped": st["closed_state_rows_dropped"],
    }
    p.stop()
    if args.check == "yes" or (args.check == "auto" and events <= CHECK_AUTO_MAX):
        result["check"] = check(args, n_batches, storage, integrated, weights_seen, result)
    shutil.rmtree(storage, ignore_errors=True)
    return result


def _norm(x):
    """A comparable Python value: timestamps as microseconds, numpy/pandas scalars as int."""
    if isinstance(x, (pd.Timestamp, dt.datetime, np.datetime64)):
        return int(pd.Timestamp(x).value // 1000)
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return None
    return int(x)


def check(args, n_batches: int, storage: str, integrated, weights_seen, result) -> dict:
    """Compare the integrated change streams with DuckDB over the same events minus the late ones."""
    import duckdb
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP)")
    for b in range(n_batches):
        df = bids(b, args.batch, args)   # noqa: F841 - read by DuckDB's replacement scan
        con.execute("INSERT INTO bid SELECT * FROM df")
    late_path = os.path.join(storage, "dead_letter", "bid.late.jsonl")
    late = []
    if os.path.exists(late_path):
        for line in open(late_path):
            r = json.loads(line)["row"]
            late.append((r["auction"], r["bidder"], r["price"], pd.Timestamp(r["date_time"]).to_datetime64()))
    problems: List[str] = []
    if len(late) != result["late_rows"]:
        problems.append(f"{len(late)} rows in {late_path}, status() says {result['late_rows']}")
    if late:
        late_df = pd.DataFrame(late, columns=["auction", "bidder", "price", "date_time"]).astype(
            {"date_time": "datetime64[us]"})
        con.execute("CREATE TABLE late AS SELECT * FROM late_df")
        con.execute("DELETE FROM bid WHERE (auction, bidder, price, date_time) IN "
                    "(SELECT (auction, bidder, price, date_time) FROM late)")
    kept = con.execute("SELECT COUNT(*) FROM bid").fetchone()[0]
    if kept != n_batches * args.batch - len(late):
        problems.append(f"DuckDB kept {kept} rows, expected {n_batches * args.batch - len(late)}")

    def bag(sql):
        return collections.Counter(tuple(_norm(x) for x in r) for r in con.execute(sql).fetchall())

    def live(c):
        return collections.Counter({k: v for k, v in c.items() if v})

    out = {"late_rows": len(late), "kept_rows": kept}
    for view, sql in (("tumble", DUCK_TUMBLE), ("q5", DUCK_Q5)):
        got, want = live(integrated[view]), bag(sql)
        out[f"{view}_rows"] = sum(want.values())
        if got != want:
            problems.append(f"{view}: {sum((got - want).values())} rows extra, {sum((want - got).values())} missing "
                            f"(e.g. {list((got - want).items())[:2]} / {list((want - got).items())[:2]})")
    if "tumble_final" in integrated:
        wm = int(pd.Timestamp(result["watermark"]).value // 1000)
        want = bag(f"SELECT * FROM ({DUCK_TUMBLE}) WHERE window_end < make_timestamp({wm})")
        got = live(integrated["tumble_final"])
        out["tumble_final_rows"] = sum(want.values())
        if False in weights_seen["tumble_final"]:
            problems.append("tumble_final emitted a retraction")
        if got != want:
            problems.append(f"tumble_final: {sum((got - want).values())} rows extra, "
                            f"{sum((want - got).values())} missing")
    out["problems"] = problems
    out["ok"] = not problems
    return out


# --------------------------------------------------------------------------- the parent: both runs, the report
def mib(x: float) -> str:
    return f"{x / 2 ** 20:,.2f}"


def at_middle(run: dict) -> dict:
    return next(s for s in run["samples"] if s["batch"] == run["middle_batch"])


def ratio(run: dict, key: str) -> float:
    mid = at_middle(run)[key]
    return run["samples"][-1][key] / mid if mid else float("inf")


def report(runs: Dict[str, dict], args, command: str, machine_line: str) -> str:
    L = runs.get("lateness")
    P = runs.get("plain")
    lines = ["## Event time: state with LATENESS against events processed", ""]
    lines.append(f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    lines.append(f"- Command: `{command}`")
    lines.append(f"- Machine: {machine_line}")
    lines.append(f"- Workload: Nexmark-shaped bids `(auction, bidder, price, date_time)` from numpy, {args.rate:,} "
                 f"events per second of event time, out of order by up to {args.jitter} s (less than the 4 s "
                 f"lateness), {args.late_fraction:.2%} of them {args.late_by} s older; {args.batch:,} events per "
                 "`input_pandas` call and step. Views (plain, each with a `foreach_chunk` callback): `q7` (Flink's form: "
                 "an interval join of the bids with each 10 s window's maximum), `q5` (HOP 2 s / "
                 "10 s COUNT per auction and window, MAX per window, joined back on the window) and `tumble` "
                 "(COUNT, SUM, MAX per 10 s TUMBLE window); the LATENESS run also has `tumble_final`, an emit-final "
                 "view over `tumble`. Spark lazy: every step ran on the driver.")
    lines.append("- State: bytes and rows of all operators' committed LSM runs (`status()[\"state_size\"]`); RSS: "
                 "this run's own process (each run in a fresh process); events/s: events over the time of "
                 "`input_pandas` + `wait_for_idle` (generation excluded).")
    lines.append("")
    head = ["events"]
    for name, r in (("LATENESS", L), ("no LATENESS", P)):
        if r:
            head += [f"{name}: state MiB", "state rows", "RSS MiB"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    evs = sorted({s["events"] for r in (L, P) if r for s in r["samples"]})
    for e in evs:
        row = [f"{e:,}"]
        for r in (L, P):
            if not r:
                continue
            s = next((s for s in r["samples"] if s["events"] == e), None)
            row += [mib(s["state_bytes"]), f"{s['state_rows']:,}", mib(s["driver_rss"])] if s else ["", "", ""]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("| run | events | events/s | state end ÷ middle (bytes) | rows end ÷ middle | RSS end ÷ middle | "
                 "peak RSS MiB | late rows | closed state rows dropped | steps on driver / Spark | check |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in (("LATENESS", L), ("no LATENESS", P)):
        if not r:
            continue
        c = r.get("check")
        check_text = "not run" if c is None else ("ok" if c["ok"] else "FAILED: " + "; ".join(c["problems"]))
        lines.append(f"| {name} | {r['events']:,} | {r['events_per_s']:,.0f} | {ratio(r, 'state_bytes'):.2f}× | "
                     f"{ratio(r, 'state_rows'):.2f}× | {ratio(r, 'driver_rss'):.2f}× | {mib(r['peak_driver_rss'])} | "
                     f"{r['late_rows']:,} | {r['closed_dropped']:,} | {r['steps_run_on']['driver']} / "
                     f"{r['steps_run_on']['spark']} | {check_text} |")
    if L:
        verdict = "met" if ratio(L, "state_bytes") <= TARGET else "NOT met"
        lines.append("")
        lines.append(f"Target (LATENESS: state at the end within {TARGET}× of the middle): **{verdict}** "
                     f"({ratio(L, 'state_bytes'):.2f}×).")
        if L.get("check"):
            c = L["check"]
            lines.append(f"Correctness (LATENESS): `tumble` {c.get('tumble_rows', 0):,} windows and `q5` "
                         f"{c.get('q5_rows', 0):,} rows equal DuckDB over the {c['kept_rows']:,} events that were "
                         f"not late; `tumble_final` emitted {c.get('tumble_final_rows', 0):,} windows, once each."
                         if c["ok"] else "Correctness (LATENESS): FAILED, see the table.")
    for name, r in (("LATENESS", L), ("no LATENESS", P)):
        if not r:
            continue
        mid, end = at_middle(r), r["samples"][-1]
        lines += ["", f"State per operator, {name} run (middle: {mid['events']:,} events; end: {end['events']:,}):", "",
                  "| operator | middle rows | middle MiB | end rows | end MiB | end ÷ middle (bytes) |",
                  "|---|---|---|---|---|---|"]
        for key in sorted(end["per_op"], key=lambda k: -end["per_op"][k]["bytes"]):
            m, e = mid["per_op"].get(key, {"rows": 0, "bytes": 0}), end["per_op"][key]
            rt = f"{e['bytes'] / m['bytes']:.2f}×" if m["bytes"] else "—"
            lines.append(f"| {r['labels'].get(key, key)} | {m['rows']:,} | {mib(m['bytes'])} | {e['rows']:,} | "
                         f"{mib(e['bytes'])} | {rt} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000_000)
    ap.add_argument("--baseline-events", type=int, default=None,
                    help="events of the run without LATENESS (default: --events)")
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=1000, help="events per second of event time")
    ap.add_argument("--jitter", type=float, default=2.0, help="out of order by up to this many seconds")
    ap.add_argument("--late-fraction", type=float, default=0.0005)
    ap.add_argument("--late-by", type=float, default=30.0, help="seconds by which the late fraction is older")
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", choices=("auto", "yes", "no"), default="auto")
    ap.add_argument("--runs", default="lateness,plain")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", choices=("lateness", "plain"), help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.samples % 2:
        args.samples += 1          # a sample in the middle
    if args.child:
        result = run_child(args)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return 0

    from benchmarks.soak import machine
    command = "python -m benchmarks.event_time_state " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    runs: Dict[str, dict] = {}
    base = [a for a in (argv if argv is not None else sys.argv[1:])]
    strip = {"--out", "--runs"}
    child_args: List[str] = []
    skip = False
    for a in base:
        if skip:
            skip = False
            continue
        if a in strip:
            skip = True
            continue
        if any(a.startswith(s + "=") for s in strip):
            continue
        child_args.append(a)
    rc = 0
    for run in [r.strip() for r in args.runs.split(",") if r.strip()]:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        print(f"run {run} ...", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, "-m", "benchmarks.event_time_state", *child_args, "--child", run,
                               "--json", path], cwd=ROOT)
        if proc.returncode != 0:
            print(f"run {run} failed with exit code {proc.returncode}", file=sys.stderr)
            rc = 1
            continue
        runs[run] = json.load(open(path))
        os.remove(path)
    if not runs:
        return 1
    text = report(runs, args, command, machine("at the end"))
    print(text)
    if args.out:
        from benchmarks.report import write_section
        write_section(args.out, SECTION, text)
    for r in runs.values():
        if r.get("check") and not r["check"]["ok"]:
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
