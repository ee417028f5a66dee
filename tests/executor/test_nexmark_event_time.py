"""Nexmark's event-time queries (workloads/nexmark_event_time: q5, q7, q8 over HOP/TUMBLE windows, q11 over
SESSION windows, q12 over the clock of NOW()) on
streams with LATENESS 4 s, fed in event-time order with out-of-order rows and late rows, one step per
table batch.  After every step each view equals DuckDB's recomputation over the rows that were not late,
and the state the planner may drop is dropped (the closed windows leave it)."""
from __future__ import annotations

import random
import re

import duckdb
import numpy as np
import pandas as pd
import pytest

import workloads
from tests.support.oracle import bag, diff

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

LATENESS_US = 4_000_000
CLOCK = "2024-06-01 12:00:05"
SUITE = "nexmark_event_time"


def duck_sql(select: str) -> str:
    return workloads.duckdb_event_time(select, CLOCK)


def us(ts) -> int:
    return int((pd.Timestamp(ts) - pd.Timestamp(0)).total_seconds() * 1_000_000)


def batches(seed: int, n_batches: int = 12):
    """Per batch, per table, the rows: event-time ordered slices of the generated events, with 4% of the rows
    moved 6-40 s back (mostly late) and 20% up to 3 s back (out of order, on time)."""
    from workloads.nexmark import gen
    tables = gen.generate(2400, seed, events_per_second=40)
    rng = np.random.default_rng(seed)
    generated = {}
    for name, df in tables.items():
        n = len(df)
        generated[name] = df["date_time"].copy()
        shift = np.where(rng.random(n) < 0.04, rng.uniform(6, 40, n), np.where(rng.random(n) < 0.2,
                                                                                rng.uniform(0, 3, n), 0.0))
        df["date_time"] = (df["date_time"] - pd.to_timedelta(np.round(shift * 1000), unit="ms")).astype("datetime64[us]")
    start = min(g.min() for g in generated.values())
    span = max(g.max() for g in generated.values()) - start
    out = []
    for i in range(n_batches):
        lo, hi = start + span * i / n_batches, start + span * (i + 1) / n_batches
        part = {}
        for name, df in tables.items():
            # a row is sent with the batch of its generated time; its (shifted) event time may be older
            g = generated[name]
            part[name] = df[(g >= lo) & ((g < hi) if i < n_batches - 1 else (g <= hi))]
        out.append(part)
    return out


def test_nexmark_event_time_queries(make_pipeline):
    schema = workloads.schema(SUITE)
    queries = workloads.select_sql(SUITE)
    sql = schema + "\n" + ";\n".join(f"CREATE MATERIALIZED VIEW {n} AS {q}" for n, q in queries.items())
    p = make_pipeline(sql, start=False)
    p.set_clock(CLOCK)   # q12's processing time: NOW(), here a fixed clock
    p.start()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(re.sub(r"LATENESS INTERVAL 4 SECONDS", "", schema))
    watermark = {}
    late = {}
    rng = random.Random(5)
    for i, part in enumerate(batches(3)):
        names = list(part)
        rng.shuffle(names)
        for name in names:
            df = part[name]
            if not len(df):
                continue
            p.input_pandas(name, df)
            p.wait_for_idle()
            wm = watermark.get(name)
            ts = df["date_time"].map(us)
            on_time = df[(ts >= wm)] if wm is not None else df
            late[name] = late.get(name, 0) + len(df) - len(on_time)
            if len(on_time):
                top = int(on_time["date_time"].map(us).max()) - LATENESS_US
                watermark[name] = top if wm is None else max(wm, top)
                con.register("batch", on_time)
                con.execute(f"INSERT INTO {name} SELECT * FROM batch")
                con.unregister("batch")
        for view, select in queries.items():
            expected = bag(con.execute(duck_sql(select)).fetchall())
            got = bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {view}"))
            assert not diff(got, expected), f"batch {i}, {view}: {diff(got, expected)}"
        assert {t: n for t, n in p.status()["late_rows"].items() if n} == {t: n for t, n in late.items() if n}
    assert sum(late.values()) > 20
    st = p.status()
    assert st["closed_state_rows_dropped"] > 0
    rows_in = sum(int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in ("person", "auction", "bid"))
    for op in p.program.gc:
        key = p.engine.keys[op]
        assert st["state_size"].get(key, {"rows": 0})["rows"] < rows_in / 2, (key, st["state_size"].get(key))
    sizes = {v: len(list(p.query(f"SELECT * FROM {v}"))) for v in queries}
    assert all(sizes.values()), sizes   # every query has a result to compare
