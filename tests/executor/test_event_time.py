"""Event time at run time: watermarks, late rows, closed state dropped, emit-final views.

Random batches of bids whose event times move forward with jitter, some late (older than the watermark)
and some deletes of earlier bids, one step each.  After every step: the materialized views equal DuckDB
over the rows that were not late; the emit-final view's outputs integrate to the closed windows; the
watermark equals the model's.  Then state stays bounded: closed windows leave the state of the
non-materialized views, and a restart keeps the watermark."""
import random
import time

import pandas as pd
import pytest

from tests.support.oracle import bag, bag_from_changes, diff

SCHEMA = "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP LATENESS INTERVAL 4 SECONDS)"
DUCK_SCHEMA = "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP)"
TUMBLE = ("SELECT window_start, window_end, COUNT(*) AS n, SUM(price) AS s "
          "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end")
HOPMAX = ("SELECT auction, window_start, window_end, MAX(price) AS mx "
          "FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '6' SECOND) GROUP BY auction, window_start, window_end")
# DuckDB's recomputation of the same windows
DUCK_TUMBLE = ("SELECT time_bucket(INTERVAL 10 SECOND, date_time) AS window_start, "
               "time_bucket(INTERVAL 10 SECOND, date_time) + INTERVAL 10 SECOND AS window_end, COUNT(*) AS n, "
               "SUM(price) AS s FROM bid WHERE date_time IS NOT NULL GROUP BY ALL")
PROGRAM = (f"{SCHEMA};\n"
           f"CREATE MATERIALIZED VIEW tumble_m AS {TUMBLE};\n"
           f"CREATE VIEW tumble_s AS {TUMBLE};\n"
           f"CREATE VIEW hopmax_s AS {HOPMAX};\n"
           f"CREATE VIEW tumble_final WITH ('emit_final' = 'window_end') AS {TUMBLE};")
T0 = pd.Timestamp("2024-01-01 00:00:00")
LATENESS_US = 4_000_000


class Model:
    def __init__(self):
        self.rows = []            # on-time rows (auction, price, ts)
        self.watermark = None     # microseconds

    def step(self, inserts, deletes):
        """Apply one step's batch like the engine: rows older than the watermark at its start are dropped."""
        wm = self.watermark
        late = 0
        newest = wm
        for sign, rows in ((1, inserts), (-1, deletes)):
            for r in rows:
                us = None if r[2] is None else int((r[2] - pd.Timestamp(0)).total_seconds() * 1_000_000)
                if wm is not None and us is not None and us < wm:
                    late += 1
                    continue
                if us is not None:
                    newest = us - LATENESS_US if newest is None else max(newest, us - LATENESS_US)
                if sign > 0:
                    self.rows.append(r)
                elif r in self.rows:
                    self.rows.remove(r)
        self.watermark = newest
        return late

    def duck(self):
        import duckdb
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(DUCK_SCHEMA)
        if self.rows:
            con.executemany("INSERT INTO bid VALUES (?, ?, ?)", [list(r) for r in self.rows])
        return con


def batches(seed, n):
    rng = random.Random(seed)
    clock = 0.0
    out = []
    sent = []
    for _ in range(n):
        ins, dels = [], []
        for _ in range(rng.randint(5, 25)):
            clock += rng.uniform(0, 0.6)
            if rng.random() < 0.12:
                at = clock - rng.uniform(4, 20)      # probably late
            else:
                at = clock - rng.uniform(0, 3)       # on time, a little out of order
            ts = None if rng.random() < 0.03 else T0 + pd.Timedelta(seconds=round(at, 3))
            r = (rng.randrange(5), rng.choice([1, 5, 10, 50]), ts)
            ins.append(r)
        for _ in range(rng.randint(0, 3)):
            if sent:
                dels.append(sent.pop(rng.randrange(len(sent))))
        sent += ins
        out.append((ins, dels))
    return out


def frame(rows):
    return pd.DataFrame(rows, columns=["auction", "price", "date_time"]).astype(
        {"auction": "Int64", "price": "Int64", "date_time": "datetime64[us]"})


def test_watermarks_late_rows_and_emit_final(make_pipeline, tmp_path):
    storage = str(tmp_path / "store")
    p = make_pipeline(PROGRAM, storage_dir=storage, start=False)
    finals = p.listen("tumble_final")
    p.start()
    model = Model()
    late_total = 0
    for i, (ins, dels) in enumerate(batches(7, 30)):
        p.input_pandas("bid", frame(ins))
        p.wait_for_idle()
        # deletes go in a batch of their own (one step), after the inserts' step
        late_total += model.step(ins, [])
        if dels:
            p.input_pandas("bid", frame(dels), delete=True)
            p.wait_for_idle()
            late_total += model.step([], dels)
        con = model.duck()
        expected = bag(con.execute(DUCK_TUMBLE).fetchall())
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM tumble_m"))
        assert not diff(got, expected), f"step {i}: {diff(got, expected)}"
        emitted = finals.to_pandas()
        assert (emitted["__weight"] > 0).all(), "an emit-final view never retracts"
        closed = bag(con.execute(f"SELECT * FROM ({DUCK_TUMBLE}) WHERE window_end < "
                                 f"make_timestamp({model.watermark})").fetchall()) if model.watermark else bag([])
        assert not diff(bag_from_changes(emitted), closed), f"step {i}: {diff(bag_from_changes(emitted), closed)}"
        st = p.status()
        assert st["late_rows"].get("bid", 0) == late_total
        assert st["watermarks"]["bid"] == str(pd.Timestamp(model.watermark, unit="us"))
    assert late_total > 5
    assert p.status()["closed_state_rows_dropped"] > 0
    # closed state left: every state operator the planner may trim holds only open windows' rows
    sizes = p.status()["state_size"]
    trimmed = [p.engine.keys[op] for op in p.program.gc]
    assert trimmed, "the planner found state to drop"
    inserted = sum(len(ins) for ins, _ in batches(7, 30))
    for key in trimmed:
        assert sizes.get(key, {"rows": 0})["rows"] < inserted / 5, (key, sizes.get(key))
    # the materialized view keeps its closed windows
    assert len(list(p.query("SELECT * FROM tumble_m"))) == len(bag(model.duck().execute(DUCK_TUMBLE).fetchall()))

    # a restart keeps the watermark: a row late before the restart is late after it
    wm = p.status()["watermarks"]["bid"]
    p.stop()
    p = make_pipeline(PROGRAM, storage_dir=storage)
    assert p.status()["watermarks"]["bid"] == wm
    before = p.status()["late_rows"]["bid"]
    old = T0 + pd.Timedelta(seconds=1)
    p.input_pandas("bid", frame([(1, 1, old)]))
    p.wait_for_idle()
    assert p.status()["late_rows"]["bid"] == before + 1
    import json
    import os
    with open(os.path.join(storage, "dead_letter", "bid.late.jsonl")) as f:
        last = json.loads(f.readlines()[-1])
    assert last["row"]["date_time"].startswith("2024-01-01 00:00:01") and "watermark" in last["error"]


WINDOW_JOIN = (
    "CREATE TABLE a (k BIGINT, ts TIMESTAMP LATENESS INTERVAL 2 SECONDS);\n"
    "CREATE TABLE b (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND);\n"
    "CREATE VIEW wa AS SELECT k, window_end, COUNT(*) AS n FROM TUMBLE(a, ts, INTERVAL '5' SECOND) "
    "GROUP BY k, window_end;\n"
    "CREATE VIEW wb AS SELECT k, window_end, COUNT(*) AS n FROM TUMBLE(b, ts, INTERVAL '5' SECOND) "
    "GROUP BY k, window_end;\n"
    "CREATE MATERIALIZED VIEW j AS SELECT wa.k, wa.window_end, wa.n AS na, wb.n AS nb FROM wa JOIN wb "
    "ON wa.k = wb.k AND wa.window_end = wb.window_end;")
DUCK_WINDOW_JOIN = (
    "WITH wa AS (SELECT k, time_bucket(INTERVAL 5 SECOND, ts) + INTERVAL 5 SECOND AS window_end, COUNT(*) AS n "
    "FROM a WHERE ts IS NOT NULL GROUP BY ALL), wb AS (SELECT k, time_bucket(INTERVAL 5 SECOND, ts) + "
    "INTERVAL 5 SECOND AS window_end, COUNT(*) AS n FROM b WHERE ts IS NOT NULL GROUP BY ALL) "
    "SELECT wa.k, wa.window_end, wa.n, wb.n FROM wa JOIN wb ON wa.k = wb.k AND wa.window_end = wb.window_end")


def test_window_join_drops_closed_state_on_both_sides(make_pipeline):
    """Two streams (one per spelling) joined on their windows: the join's inputs are trimmed by the smaller of
    the two watermarks, and the result stays equal to DuckDB over the on-time rows."""
    import duckdb
    p = make_pipeline(WINDOW_JOIN)
    rng = random.Random(3)
    on_time = {"a": [], "b": []}
    wm = {"a": None, "b": None}
    clock = {"a": 0.0, "b": 0.0}
    for i in range(25):
        for t in ("a", "b"):
            rows = []
            for _ in range(rng.randint(3, 12)):
                clock[t] += rng.uniform(0, 0.5 if t == "a" else 0.4)
                at = clock[t] - (rng.uniform(3, 10) if rng.random() < 0.1 else rng.uniform(0, 1.5))
                rows.append((rng.randrange(3), T0 + pd.Timedelta(seconds=round(at, 3))))
            p.input_pandas(t, pd.DataFrame(rows, columns=["k", "ts"]).astype({"ts": "datetime64[us]"}))
            p.wait_for_idle()
            start = wm[t]
            for r in rows:
                us = int((r[1] - pd.Timestamp(0)).total_seconds() * 1_000_000)
                if start is not None and us < start:
                    continue
                on_time[t].append(r)
                wm[t] = max(wm[t] or us - 2_000_000, us - 2_000_000)
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        for t in ("a", "b"):
            con.execute(f"CREATE TABLE {t} (k BIGINT, ts TIMESTAMP)")
            con.executemany(f"INSERT INTO {t} VALUES (?, ?)", on_time[t])
        expected = bag(con.execute(DUCK_WINDOW_JOIN).fetchall())
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM j"))
        assert not diff(got, expected), f"round {i}: {diff(got, expected)}"
    assert p.status()["closed_state_rows_dropped"] > 0
    sizes = p.status()["state_size"]
    total = len(on_time["a"]) + len(on_time["b"])
    for op in p.program.gc:
        key = p.engine.keys[op]
        assert sizes.get(key, {"rows": 0})["rows"] < total / 3, (key, sizes.get(key), p.explain("j"))


def test_materialized_view_can_drop_closed_windows(make_pipeline):
    """``WITH ('closed_windows' = 'drop')``: a MATERIALIZED view keeps (and answers queries for) the open
    windows only; its state stays small while the default view keeps every window."""
    # (two views with the same plan would share its state: all_w is another query over the same windows)
    p = make_pipeline(f"{SCHEMA};\nCREATE MATERIALIZED VIEW open_w WITH ('closed_windows' = 'drop') AS {TUMBLE};\n"
                      f"CREATE MATERIALIZED VIEW all_w AS SELECT * FROM ({TUMBLE}) w WHERE n > 0;")
    model = Model()
    for ins, dels in batches(9, 30):
        p.input_pandas("bid", frame(ins))
        p.wait_for_idle()
        model.step(ins, [])
        expected = bag(model.duck().execute(DUCK_TUMBLE).fetchall())
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM open_w"))
        wm = pd.Timestamp(model.watermark, unit="us")
        still_open = {k: n for k, n in expected.items() if pd.Timestamp(k[1]) >= wm}
        assert {k: n for k, n in got.items() if pd.Timestamp(k[1]) >= wm} == still_open
        assert not (got - expected), "a kept window is a window of the on-time rows"
        assert not diff(bag(tuple(r.values()) for r in p.query("SELECT * FROM all_w")), expected)
    n_all = len(list(p.query("SELECT * FROM all_w")))
    assert len(list(p.query("SELECT * FROM open_w"))) < n_all / 2, "closed windows left the view"
