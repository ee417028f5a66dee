"""Interval joins at run time: a join whose condition bounds the time difference of its two sides drops the
old rows of both sides (``planner/watermarks.py``: an integral read by an inner interval join).

Two streams with event time (one per spelling: LATENESS and WATERMARK FOR), random batches with
out-of-order rows, late rows and deletes (some late too), one step each.  After every step an interval-join
view equals DuckDB over the rows that were not late (a MATERIALIZED view, queried, and a plain one with the
time range in WHERE and strict comparisons, whose changes are integrated); at the end the state of the
trimmed operators holds only the rows of the last seconds.  Then Nexmark q7 as Flink writes it, end to end.
"""
import random

import duckdb
import pandas as pd

from tests.support.oracle import bag, bag_from_changes, diff

T0 = pd.Timestamp("2024-01-01 00:00:00")
NULL_TS = object()


def us(ts) -> int:
    return ts.value // 1000


class Streams:
    """The on-time rows of each table and its watermark, as the engine judges them: a row whose time is
    below the watermark at the start of its step is late (dropped, insert or delete); the watermark is then
    the largest time seen minus the lateness."""

    def __init__(self, lateness_us, ts_index):
        self.lateness = lateness_us   # table -> microseconds
        self.ts = ts_index            # table -> index of the event-time column in a row
        self.rows = {t: [] for t in lateness_us}
        self.wm = {t: None for t in lateness_us}
        self.late = {t: 0 for t in lateness_us}

    def step(self, table, rows, delete=False):
        start = self.wm[table]
        for r in rows:
            ts = r[self.ts[table]]
            if ts is not None and start is not None and us(ts) < start:
                self.late[table] += 1
                continue
            if ts is not None:
                w = us(ts) - self.lateness[table]
                self.wm[table] = w if self.wm[table] is None else max(self.wm[table], w)
            if delete:
                self.rows[table].remove(r)
            else:
                self.rows[table].append(r)

    def duck(self, schemas):
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        for t, cols in schemas.items():
            con.execute(f"CREATE TABLE {t} ({cols})")
            if self.rows[t]:
                con.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(self.rows[t][0]))})",
                                [list(r) for r in self.rows[t]])
        return con


def sizes_of_trimmed(p):
    sizes = p.status()["state_size"]
    return {op: sizes.get(p.engine.keys[op], {"rows": 0})["rows"] for op in p.program.gc}


# ---------------------------------------------------------------------------------------- two streams
INTERVAL_JOIN = (
    "CREATE TABLE a (k BIGINT, v BIGINT, ts TIMESTAMP LATENESS INTERVAL 2 SECONDS);\n"
    "CREATE TABLE b (k BIGINT, w BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n"
    "CREATE MATERIALIZED VIEW j AS SELECT a.k, a.v, a.ts AS ta, b.w, b.ts AS tb FROM a JOIN b "
    "ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '3' SECOND AND a.ts + INTERVAL '1' SECOND;\n"
    "CREATE VIEW s AS SELECT a.v, b.w, b.ts FROM a, b WHERE a.k = b.k AND a.ts - INTERVAL '2' SECOND < b.ts "
    "AND b.ts + INTERVAL '500' MILLISECOND < a.ts + INTERVAL '1' SECOND;")
DUCK_J = ("SELECT a.k, a.v, a.ts, b.w, b.ts FROM a JOIN b ON a.k = b.k "
          "AND b.ts BETWEEN a.ts - INTERVAL 3 SECOND AND a.ts + INTERVAL 1 SECOND")
DUCK_S = ("SELECT a.v, b.w, b.ts FROM a JOIN b ON a.k = b.k AND a.ts - INTERVAL 2 SECOND < b.ts "
          "AND b.ts < a.ts + INTERVAL 500 MILLISECOND")
DUCK_SCHEMAS = {"a": "k BIGINT, v BIGINT, ts TIMESTAMP", "b": "k BIGINT, w BIGINT, ts TIMESTAMP"}


def frame(table, rows):
    names = ["k", "v", "ts"] if table == "a" else ["k", "w", "ts"]
    return pd.DataFrame(rows, columns=names).astype({"k": "Int64", names[1]: "Int64", "ts": "datetime64[us]"})


def test_interval_join_drops_old_rows_on_both_sides(make_pipeline):
    p = make_pipeline(INTERVAL_JOIN, start=False)
    changes = p.listen("s")
    p.start()
    # the planner trims both tables' integrals (read only by the interval joins)
    circuit = p.program.circuit
    for t in ("a", "b"):
        assert circuit.tables[t][1] in p.program.gc, p.explain("j")
    assert circuit.outputs["j"].integral not in p.program.gc   # a materialized view keeps its rows

    rng = random.Random(5)
    model = Streams({"a": 2_000_000, "b": 1_000_000}, {"a": 2, "b": 2})
    clock = {"a": 0.0, "b": 0.0}
    inserted = 0
    for i in range(30):
        for t in ("a", "b"):
            rows = []
            for _ in range(rng.randint(3, 12)):
                clock[t] += rng.uniform(0, 0.5 if t == "a" else 0.45)
                late = rng.random() < 0.12
                at = clock[t] - (rng.uniform(3, 10) if late else rng.uniform(0, 1.5))
                ts = None if rng.random() < 0.03 else T0 + pd.Timedelta(milliseconds=round(at * 1000))
                rows.append((rng.randrange(3), rng.randrange(1000), ts))
            p.input_pandas(t, frame(t, rows))
            p.wait_for_idle()
            model.step(t, rows)
            inserted += len(rows)
            if rng.random() < 0.4 and model.rows[t]:
                # deletes of accepted rows, in a step of their own: recent ones apply, old ones are late
                gone = rng.sample(model.rows[t], min(len(model.rows[t]), rng.randint(1, 3)))
                p.input_pandas(t, frame(t, gone), delete=True)
                p.wait_for_idle()
                model.step(t, gone, delete=True)
        con = model.duck(DUCK_SCHEMAS)
        expected = bag(con.execute(DUCK_J).fetchall())
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM j"))
        assert not diff(got, expected), f"round {i}: j: {diff(got, expected)}"
        expected = bag(con.execute(DUCK_S).fetchall())
        got = bag_from_changes(changes.to_pandas())
        assert not diff(got, expected), f"round {i}: s: {diff(got, expected)}"
        st = p.status()
        assert st["late_rows"].get("a", 0) == model.late["a"] and st["late_rows"].get("b", 0) == model.late["b"]
    assert model.late["a"] + model.late["b"] > 5
    assert len(expected) > 10, "the joins matched rows"
    assert p.status()["closed_state_rows_dropped"] > 0
    # the trimmed state holds the last seconds' rows only (and the few rows with a NULL time)
    for op, rows in sizes_of_trimmed(p).items():
        assert rows < inserted / 6, (op, rows, inserted, p.explain("j"))


# ---------------------------------------------------------------------------------------- Nexmark q7
Q7 = (
    "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP, "
    "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);\n"
    "CREATE MATERIALIZED VIEW q7 AS\n"
    "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (\n"
    "  SELECT MAX(price) AS maxprice, window_end AS date_time FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)\n"
    "  GROUP BY window_start, window_end) B1\n"
    "ON B.price = B1.maxprice WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time;")
DUCK_Q7 = (
    "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT MAX(price) AS maxprice, "
    "time_bucket(INTERVAL 10 SECOND, date_time) + INTERVAL 10 SECOND AS date_time FROM bid "
    "WHERE date_time IS NOT NULL GROUP BY time_bucket(INTERVAL 10 SECOND, date_time)) B1 "
    "ON B.price = B1.maxprice WHERE B.date_time BETWEEN B1.date_time - INTERVAL 10 SECOND AND B1.date_time")


def test_nexmark_q7_flink_form_drops_old_bids(make_pipeline):
    p = make_pipeline(Q7)
    bid_integral = p.program.circuit.tables["bid"][1]
    assert bid_integral in p.program.gc, p.explain("q7")
    assert p.program.gc[bid_integral].describe("<") == "c3 < min(W(bid) - 10s)"

    rng = random.Random(11)
    model = Streams({"bid": 4_000_000}, {"bid": 3})
    clock = 0.0
    inserted = 0
    for i in range(30):
        rows = []
        for _ in range(rng.randint(5, 20)):
            clock += rng.uniform(0, 0.6)
            late = rng.random() < 0.1
            at = clock - (rng.uniform(5, 20) if late else rng.uniform(0, 4))
            ts = None if rng.random() < 0.03 else T0 + pd.Timedelta(milliseconds=round(at * 1000))
            rows.append((rng.randrange(5), rng.randrange(50), rng.randrange(1, 40), ts))
        df = pd.DataFrame(rows, columns=["auction", "bidder", "price", "date_time"]).astype(
            {"auction": "Int64", "bidder": "Int64", "price": "Int64", "date_time": "datetime64[us]"})
        p.input_pandas("bid", df)
        p.wait_for_idle()
        model.step("bid", rows)
        inserted += len(rows)
        if rng.random() < 0.5 and model.rows["bid"]:
            # deletes of recent bids (a window's MAX goes down) and of old ones (late)
            n = len(model.rows["bid"])
            picked = set(rng.sample(range(max(0, n - 30), n), min(n, 3))) | {rng.randrange(n)}
            gone = [model.rows["bid"][j] for j in sorted(picked)]
            p.input_pandas("bid", pd.DataFrame(gone, columns=df.columns).astype(df.dtypes.to_dict()), delete=True)
            p.wait_for_idle()
            model.step("bid", gone, delete=True)
        con = model.duck({"bid": "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP"})
        expected = bag(con.execute(DUCK_Q7).fetchall())
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM q7"))
        assert not diff(got, expected), f"step {i}: {diff(got, expected)}"
    assert model.late["bid"] > 3 and len(expected) > 10
    assert p.status()["closed_state_rows_dropped"] > 0
    sizes = sizes_of_trimmed(p)
    assert sizes[bid_integral] < inserted / 4, (sizes, inserted, p.explain("q7"))
