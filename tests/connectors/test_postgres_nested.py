"""PostgreSQL's arrays, ``jsonb`` / ``json``, ``uuid``, ``bytea``, ``time``, ``timestamptz`` and ``interval`` through
``postgres_input`` (the driver's snapshot, then CDC through wal2json; Spark's JDBC snapshot) and
``postgres_output``, against a real PostgreSQL 15: random inserts, updates and deletes in PostgreSQL, with NULLs at
every level, empty arrays and JSON keys given twice; after every batch the engine's table equals PostgreSQL's
(bags, exact multiplicities), a view over it equals DuckDB's recomputation, and the output table equals the view."""
import datetime as dt
import json
import random
import time
import uuid

import duckdb
import pytest

from tests.support.oracle import bag, diff

from .test_postgres import decl, sink, source, wait_consumed, wait_delivered, wal_lsn

PG_TABLE = ("CREATE TABLE ev (id bigint PRIMARY KEY, tags text[], scores float8[], grid int[], amounts numeric(6,2)[], "
            "attrs jsonb, doc json, counts jsonb, u uuid, raw bytea, t time, ts timestamptz, days date[], gap interval)")
TYPES = [("id", "BIGINT"), ("tags", "VARCHAR[]"), ("scores", "DOUBLE[]"), ("grid", "INT[][]"),
         ("amounts", "DECIMAL(6,2)[]"), ("attrs", "VARIANT"), ("doc", "VARIANT"), ("counts", "MAP(VARCHAR, INT)"),
         ("u", "UUID"), ("raw", "BLOB"), ("t", "TIME"), ("ts", "TIMESTAMP"), ("days", "DATE[]"), ("gap", "INTERVAL")]
COLUMNS = "id BIGINT NOT NULL PRIMARY KEY, " + ", ".join(f"{n} {t}" for n, t in TYPES[1:])
TAGS = "SELECT x AS tag, COUNT(*) AS n, SUM(id) AS ids FROM ev CROSS JOIN UNNEST(tags) AS u(x) GROUP BY x"
WIDE = ("SELECT id, tags, scores, grid, counts, u, raw, t, ts, days, attrs, cardinality(tags) AS ntags, "
        "attrs->>'$.k' AS k, gap FROM ev")


def program(uri, **src):
    return (f"CREATE TABLE ev ({COLUMNS}) WITH ('connectors' = '{decl(source(uri, 'ev', **src))}');\n"
            f"CREATE MATERIALIZED VIEW tags WITH ('connectors' = '{decl(sink(uri, 'out_tags', key=['tag']))}') "
            f"AS {TAGS};\n"
            f"CREATE MATERIALIZED VIEW wide WITH ('connectors' = '{decl(sink(uri, 'out_wide', key=['id']))}') "
            f"AS {WIDE};")


class Writer:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.next_id = 1

    def maybe(self, v, p=0.15):
        return None if self.rng.random() < p else v

    def row(self, i):
        r = self.rng
        tags = self.maybe([self.maybe(r.choice(["a", "b,c", 'q"x', "NULL", "", "ü"]), 0.1)
                           for _ in range(r.randint(0, 3))])
        scores = self.maybe([self.maybe(r.choice([1.5, -0.0, float("nan"), float("inf"), 1e300]), 0.1)
                             for _ in range(r.randint(0, 3))])
        grid = self.maybe([[r.randint(-5, 5), self.maybe(r.randint(0, 9))] for _ in range(r.randint(1, 2))])
        amounts = self.maybe([self.maybe(r.choice(["1.50", "-2.25", "0.00"])) for _ in range(r.randint(0, 2))])
        attrs = self.maybe(r.choice(['{"k": "v", "n": [1, null, {"z": 2}]}', '{"n": 2, "k": "w"}', "[1, 2]", '"s"',
                                     "null", '{"k": null}']))
        doc = self.maybe(r.choice(['{"b": 1, "a": 2}', '{"a": 1, "a": 3}', "[]", "7"]))
        counts = self.maybe(r.choice(['{"x": 1, "y": null}', "{}", '{"y": 2}']))
        u = self.maybe(str(uuid.UUID(int=r.randint(0, 5))).upper())
        raw = self.maybe(bytes(r.randint(0, 255) for _ in range(r.randint(0, 3))))
        t = self.maybe(dt.time(r.randint(0, 23), r.randint(0, 59), r.randint(0, 59), r.choice([0, 789000])))
        ts = self.maybe(dt.datetime(2024, 1, 2, 3, tzinfo=dt.timezone(dt.timedelta(hours=r.choice([0, 2, -5])))))
        days = self.maybe([self.maybe(dt.date(2024, 2, r.choice([1, 29])))])
        gap = self.maybe(r.choice(["1 day 02:00:00", "-1 day 2 hours", "1 mon", "36:00:00", "00:00:00.000001",
                                   "1 year 2 mons 3 days 04:05:06", "-1 mons -00:00:01", "0"]))
        return (i, tags, scores, grid, amounts, attrs, doc, counts, u, raw, t, ts, days, gap)

    def batch(self, conn, n):
        ids = [x[0] for x in conn.execute("SELECT id FROM ev").fetchall()]
        with conn.transaction():
            for _ in range(n):
                k = self.rng.random()
                if ids and k < 0.25:
                    conn.execute("DELETE FROM ev WHERE id = %s", (ids.pop(self.rng.randrange(len(ids))),))
                elif ids and k < 0.5:
                    i = self.rng.choice(ids)
                    conn.execute("UPDATE ev SET (tags, scores, grid, amounts, attrs, doc, counts, u, raw, t, ts, days, "
                                 "gap) = (%s, %s, %s, %s::numeric[], %s::jsonb, %s::json, %s::jsonb, %s, %s, %s, %s, "
                                 "%s, %s::interval) WHERE id = %s", self.row(i)[1:] + (i,))
                else:
                    conn.execute("INSERT INTO ev VALUES (%s, %s, %s, %s, %s::numeric[], %s::jsonb, %s::json, "
                                 "%s::jsonb, %s, %s, %s, %s, %s, %s::interval)", self.row(self.next_id))
                    ids.append(self.next_id)
                    self.next_id += 1


def canonical_json(text):
    """A JSON value's text as the engine keeps a VARIANT: keys sorted, compact, the last of a key given twice."""
    return None if text is None else json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def canonical_interval(text):
    """PostgreSQL's text of an interval as the engine keeps one (DuckDB's text of the same value)."""
    from connectors.postgres_values import pg_interval
    from sqlengine.intervals import interval_text
    return None if text is None else interval_text(pg_interval(text))


def pg_rows(conn):
    """PostgreSQL's rows as the engine holds them (JSON canonical, UUID lower case, timestamps in UTC)."""
    out = []
    for r in conn.execute("SELECT id, tags, scores, grid, amounts, attrs::text, doc::text, counts::text, u::text, "
                          "raw, t, ts, days, gap::text FROM ev").fetchall():
        (i, tags, scores, grid, amounts, attrs, doc, counts, u, raw, t, ts, days, gap) = r
        counts = None if counts is None else json.loads(counts)
        ts = None if ts is None else ts.astimezone(dt.timezone.utc).replace(tzinfo=None)
        out.append((i, tags, scores, grid, amounts, canonical_json(attrs), canonical_json(doc), counts, u,
                    None if raw is None else bytes(raw), t, ts, days, canonical_interval(gap)))
    return out


def check(p, conn):
    """The engine's table equals PostgreSQL's; its views equal DuckDB's recomputation over those rows; the output
    tables, read back from PostgreSQL, equal the views."""
    import pyarrow as pa

    from planner.types import SqlType
    from sqlengine.types import arrow_type
    rows = pg_rows(conn)
    got = bag(tuple(r.values()) for r in p.query("SELECT * FROM ev"))
    assert not diff(got, bag(rows)), f"table ev: {diff(got, bag(rows))}"
    names = [n for n, _ in TYPES]
    types = [arrow_type(SqlType(t.replace("VARIANT", "JSON"))) for _, t in TYPES]
    cols = [list(c) for c in zip(*rows)] if rows else [[] for _ in names]
    cols[7] = [None if v is None else list(v.items()) for v in cols[7]]   # (a MAP from its pairs)
    ev = pa.table([pa.array(c, t) for c, t in zip(cols, types)], names=names)   # noqa: F841 - read by DuckDB
    con = duckdb.connect()
    views = {}
    for view, select in (("tags", TAGS), ("wide", WIDE)):
        views[view] = bag(con.execute(select).fetchall())
        got = bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {view}"))
        assert not diff(got, views[view]), f"view {view}: {diff(got, views[view])}"
    out = bag(conn.execute("SELECT tag, n, ids FROM out_tags").fetchall())
    assert not diff(out, views["tags"]), f"out_tags: {diff(out, views['tags'])}"
    wide = [(i, tags, scores, json.loads(grid) if grid else None, json.loads(counts) if counts else None, u,
             None if raw is None else bytes(raw), t, ts, days, canonical_json(attrs), n, k, canonical_interval(gap))
            for i, tags, scores, grid, counts, u, raw, t, ts, days, attrs, n, k, gap in conn.execute(
                "SELECT id, tags, scores, grid::text, counts::text, u::text, raw, t, ts, days, attrs::text, ntags, k, "
                "gap::text FROM out_wide").fetchall()]
    mine = bag(tuple(r.values()) for r in p.query("SELECT * FROM wide"))
    assert not diff(bag(wide), mine), f"out_wide: {diff(bag(wide), mine)}"


def make_db(postgres, name):
    uri = postgres.create_database(name)
    with postgres.connect(name) as c:
        c.execute(PG_TABLE)
    return uri


def test_nested_and_special_types_through_cdc_and_back(postgres, make_pipeline):
    uri = make_db(postgres, "nested_cdc")
    w = Writer(seed=5)
    with postgres.connect("nested_cdc") as conn:
        w.batch(conn, 25)   # the snapshot (the driver's reader)
        p = make_pipeline(program(uri))
        before = 0
        for _ in range(4):
            w.batch(conn, 15)
            wait_consumed(p, before, keys=("ev.pg",))
            wait_delivered(p)
            check(p, conn)
            before = wal_lsn(conn)
        assert not p.status()["connectors"]["ev.pg"]["last_error"]


def test_a_jdbc_snapshot_reads_the_same_values(postgres, make_pipeline):
    uri = make_db(postgres, "nested_jdbc")
    w = Writer(seed=6)
    with postgres.connect("nested_jdbc") as conn:
        w.batch(conn, 30)
        p = make_pipeline(f"CREATE TABLE ev ({COLUMNS}) WITH ('connectors' = "
                          f"'{decl(source(uri, 'ev', mode='snapshot', snapshot_reader='jdbc', partitions=2))}')")
        end = time.monotonic() + 120
        while p.status()["connectors"]["ev.pg"]["state"] != "finished":
            assert time.monotonic() < end, p.status()["connectors"]["ev.pg"]
            time.sleep(0.05)
        p.wait_for_idle(timeout_s=60)
        rows = pg_rows(conn)
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM ev"))
        assert not diff(got, bag(rows)), diff(got, bag(rows))


@pytest.mark.parametrize("pg, sql, message", [
    ("tags int[]", "tags VARCHAR[]", "column tags is integer[] in PostgreSQL table public.bad but VARCHAR[]"),
    ("tags jsonb", "tags UUID", "column tags is jsonb"),
    ("tags text", "tags INT[]", "column tags is text"),
])
def test_a_column_of_another_type_is_named(postgres, make_pipeline, pg, sql, message):
    name = "nested_bad_" + "".join(ch if ch.isalnum() else "_" for ch in pg)
    uri = postgres.create_database(name)
    with postgres.connect(name) as c:
        c.execute(f"CREATE TABLE bad (id bigint PRIMARY KEY, {pg})")
    p = make_pipeline(f"CREATE TABLE bad (id BIGINT NOT NULL PRIMARY KEY, {sql}) WITH ('connectors' = "
                      f"'{decl(source(uri, 'bad'))}')")
    end = time.monotonic() + 30
    while time.monotonic() < end:
        c = p.status()["connectors"]["bad.pg"]
        if c["state"] == "failed":
            break
        time.sleep(0.05)
    assert c["state"] == "failed" and message in (c["last_error"] or ""), c
