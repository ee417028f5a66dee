"""SESSION(rel, ts, gap [, key, ...]) windows under inserts, deletes, out-of-order rows, NULLs and duplicates,
checked after every step against an independent sessionization in Python: per key, the rows sorted by time
split where consecutive times are at least ``gap`` apart; a session runs from its first time to its last
time plus ``gap``.  Deletes split sessions and late rows merge them."""
import random
from collections import Counter

import pandas as pd
import pytest

from planner.errors import BindError
from sqlengine import Pipeline

GAP = pd.Timedelta(seconds=10)
PROGRAM = ("CREATE TABLE bid (bidder BIGINT, price BIGINT, date_time TIMESTAMP);\n"
           "CREATE MATERIALIZED VIEW q11 AS SELECT bidder, COUNT(*) AS n, SUM(price) AS total, window_start, "
           "window_end FROM SESSION(bid, date_time, INTERVAL '10' SECOND, bidder) "
           "GROUP BY bidder, window_start, window_end;\n"
           "CREATE MATERIALIZED VIEW all_sessions AS SELECT window_start, window_end, COUNT(*) AS n "
           "FROM SESSION(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end;")
T0 = pd.Timestamp("2024-01-01")


def sessions(rows, keyed=True):
    """Counter of (key, count, sum, start, end) (keyed) or (start, end, count)."""
    by_key = {}
    for bidder, price, ts in rows:
        if ts is None:
            continue
        by_key.setdefault(bidder if keyed else 0, []).append((ts, price))
    out = Counter()
    for key, items in by_key.items():
        items.sort(key=lambda x: x[0])
        groups = [[items[0]]]
        for prev, cur in zip(items, items[1:]):
            if cur[0] - prev[0] >= GAP:
                groups.append([])
            groups[-1].append(cur)
        for g in groups:
            start, end = g[0][0], g[-1][0] + GAP
            prices = [p for _, p in g if p is not None]
            total = sum(prices) if prices else None
            out[(key, len(g), total, start, end) if keyed else (start, end, len(g))] += 1
    return out


def test_sessions_merge_and_split(make_pipeline):
    p = make_pipeline(PROGRAM)
    rng = random.Random(4)
    live = []
    for step in range(30):
        batch = []
        for _ in range(rng.randint(1, 10)):
            ts = None if rng.random() < 0.04 else T0 + pd.Timedelta(seconds=rng.randrange(0, 300))
            batch.append((rng.choice([1, 2, 3, None]), rng.choice([5, 7, None]), ts))
        if rng.random() < 0.2 and live:
            batch.append(rng.choice(live))   # a duplicate row
        frame = pd.DataFrame(batch, columns=["bidder", "price", "date_time"]).astype(
            {"bidder": "Int64", "price": "Int64", "date_time": "datetime64[us]"})
        p.input_pandas("bid", frame)
        live += batch
        if live and rng.random() < 0.5:
            gone = [live.pop(rng.randrange(len(live))) for _ in range(min(len(live), rng.randint(1, 4)))]
            p.input_pandas("bid", pd.DataFrame(gone, columns=["bidder", "price", "date_time"]).astype(
                {"bidder": "Int64", "price": "Int64", "date_time": "datetime64[us]"}), delete=True)
        p.wait_for_idle()
        got = Counter((r["bidder"], r["n"], r["total"], pd.Timestamp(r["window_start"]), pd.Timestamp(r["window_end"]))
                      for r in p.query("SELECT * FROM q11"))
        assert got == sessions(live), f"step {step}"
        got = Counter((pd.Timestamp(r["window_start"]), pd.Timestamp(r["window_end"]), r["n"])
                      for r in p.query("SELECT * FROM all_sessions"))
        assert got == sessions(live, keyed=False), f"step {step}"
    assert any(n > 1 for _, n, *_ in sessions(live)), "some sessions hold several rows"


@pytest.mark.parametrize("view, message", [
    ("SELECT * FROM SESSION(bid, nope, INTERVAL '10' SECOND)", "unknown column 'nope' in SESSION"),
    ("SELECT * FROM SESSION(bid, price, INTERVAL '10' SECOND)", "SESSION needs a TIMESTAMP column"),
    ("SELECT * FROM SESSION(bid, date_time)", "SESSION takes (table, time column, gap"),
])
def test_session_errors(view, message):
    with pytest.raises(BindError, match=message.replace("(", r"\(")):
        Pipeline.from_sql("CREATE TABLE bid (bidder BIGINT, price BIGINT, date_time TIMESTAMP);\n"
                          f"CREATE VIEW v AS {view}")
