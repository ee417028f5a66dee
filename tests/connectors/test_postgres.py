"""``postgres_input`` (CDC, poll and snapshot modes) and ``postgres_output`` against a real PostgreSQL 15
started by the tests: random inserts, updates and deletes in PostgreSQL, each view checked after every
batch against DuckDB recomputing it from PostgreSQL's current contents, and the output tables checked
against the views; restarts; bad input."""
import json
import random
import time

import duckdb
import pytest

from planner.errors import ConnectorError
from tests.support.oracle import bag, diff

SCHEMA = ("CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(10,2), "
          "note VARCHAR);\n"
          "CREATE TABLE customers (cid INT NOT NULL, region VARCHAR, ts TIMESTAMP)")
TOTALS = ("SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total, MAX(o.note) AS last_note "
          "FROM orders o JOIN customers c ON o.customer = c.cid GROUP BY c.region")
REGIONS = "SELECT region, cid FROM customers WHERE cid < 8"


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def source(uri, table, **config):
    return {"name": "pg", "transport": {"name": "postgres_input", "config": {"uri": uri, "table": table,
                                                                            "poll_interval_ms": 20, **config}}}


def sink(uri, table, **config):
    return {"name": "out", "transport": {"name": "postgres_output", "config": {"uri": uri, "table": table, **config}}}


def make_db(postgres, name):
    uri = postgres.create_database(name)
    with postgres.connect(name) as c:
        c.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(10,2), note text)")
        c.execute("CREATE TABLE customers (cid int NOT NULL, region text, ts timestamptz)")
        c.execute("ALTER TABLE customers REPLICA IDENTITY FULL")
    return uri


def program(uri, **src):
    return (f"CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(10,2), "
            f"note VARCHAR) WITH ('connectors' = '{decl(source(uri, 'orders', **src))}');\n"
            f"CREATE TABLE customers (cid INT NOT NULL, region VARCHAR, ts TIMESTAMP) "
            f"WITH ('connectors' = '{decl(source(uri, 'public.customers', **src))}');\n"
            f"CREATE MATERIALIZED VIEW totals WITH ('connectors' = '{decl(sink(uri, 'totals', key=['region']))}') "
            f"AS {TOTALS};\n"
            f"CREATE MATERIALIZED VIEW regions WITH ('connectors' = '{decl(sink(uri, 'out.regions'))}') AS {REGIONS};")


class Writer:
    """Random transactions of inserts, updates (also of keys) and deletes, with NULLs and duplicates."""

    def __init__(self, postgres, db, seed):
        self.pg, self.db, self.rng = postgres, db, random.Random(seed)
        self.next_id = 1

    def batch(self, conn, n):
        rng = self.rng
        with conn.transaction():
            for _ in range(n):
                r = rng.random()
                if r < 0.35:
                    conn.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)",
                                 (self.next_id, rng.randrange(10), rng.choice([None, rng.randrange(10000) / 100]),
                                  rng.choice([None, "", "a", "b'c", "zz"])))
                    self.next_id += 1
                elif r < 0.5:
                    conn.execute("UPDATE orders SET amount = %s, customer = %s WHERE id = %s",
                                 (rng.randrange(500), rng.randrange(10), rng.randrange(self.next_id)))
                elif r < 0.55:
                    conn.execute("UPDATE orders SET id = %s WHERE id = %s", (self.next_id, rng.randrange(self.next_id)))
                    self.next_id += 1
                elif r < 0.65:
                    conn.execute("DELETE FROM orders WHERE id = %s", (rng.randrange(self.next_id),))
                elif r < 0.85:
                    conn.execute("INSERT INTO customers VALUES (%s, %s, '2024-05-01 10:00:00+02')",
                                 (rng.randrange(10), rng.choice(["north", "south", None, "east"])))
                elif r < 0.93:
                    conn.execute("DELETE FROM customers WHERE ctid = (SELECT ctid FROM customers WHERE cid = %s "
                                 "LIMIT 1)", (rng.randrange(10),))
                else:
                    conn.execute("UPDATE customers SET region = %s WHERE ctid = (SELECT ctid FROM customers "
                                 "WHERE cid = %s LIMIT 1)", (rng.choice(["north", "west", None]), rng.randrange(10)))


def wal_lsn(conn) -> int:
    from connectors.postgres_input import lsn_int
    return lsn_int(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def wait_consumed(p, before: int, keys=("orders.pg", "customers.pg"), timeout=60):
    """Until every source read a transaction that ended after WAL position ``before``, and the steps ran."""
    from connectors.postgres_input import lsn_int
    end = time.monotonic() + timeout
    for key in keys:
        while lsn_int((p.status()["connectors"][key]["position"] or {}).get("lsn")) <= before:
            assert time.monotonic() < end, {k: (c["state"], c["last_error"]) for k, c in p.status()["connectors"].items()}
            time.sleep(0.02)
    p.wait_for_idle(timeout_s=timeout)


def wait_delivered(p, timeout=60):
    end = time.monotonic() + timeout
    while True:
        st = p.status()
        sinks = [c for c in st["connectors"].values() if c["kind"] == "sink"]
        if all(c["lag"] == 0 and c["state"] == "running" for c in sinks):
            return
        assert time.monotonic() < end, [(c["relation"], c["state"], c["last_error"]) for c in sinks]
        time.sleep(0.02)


def check(p, conn):
    """The views equal DuckDB over PostgreSQL's source tables; the output tables equal the views."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(SCHEMA)
    for t in ("orders", "customers"):
        rows = conn.execute(f"SELECT * FROM {t}").fetchall()
        if t == "customers":
            rows = [(c, r, ts.replace(tzinfo=None) if ts else None) for c, r, ts in rows]
        if rows:
            con.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    for view, select, out in (("totals", TOTALS, "totals"), ("regions", REGIONS, "out.regions")):
        expected = bag(con.execute(select).fetchall())
        got = bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {view}"))
        assert not diff(got, expected), f"{view}: {diff(got, expected)}"
        table = bag(conn.execute(f"SELECT * FROM {out}").fetchall())
        assert not diff(table, expected), f"{out}: {diff(table, expected)}"


def test_cdc_round_trip_with_restart(postgres, make_pipeline, tmp_path):
    uri = make_db(postgres, "roundtrip")
    w = Writer(postgres, "roundtrip", seed=3)
    with postgres.connect("roundtrip") as conn:
        w.batch(conn, 60)                 # the snapshot
        storage = str(tmp_path / "storage")
        p = make_pipeline(program(uri), storage_dir=storage)
        for i in range(6):
            before = wal_lsn(conn)
            w.batch(conn, 25)
            wait_consumed(p, before)
            wait_delivered(p)
            check(p, conn)
        p.stop()
        before = wal_lsn(conn)
        w.batch(conn, 40)                 # while the pipeline is down
        p = make_pipeline(program(uri), storage_dir=storage)
        for i in range(3):
            wait_consumed(p, before)
            wait_delivered(p)
            check(p, conn)
            before = wal_lsn(conn)
            w.batch(conn, 25)
        slots = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
                             ).fetchone()[0]   # (other tests' databases keep their slots on the same server)
        assert slots == 2   # one per source, reused after the restart
        progress = conn.execute("SELECT sink, step FROM public.sqlengine_sink_progress").fetchall()
        assert progress and all(step > 1 for _, step in progress)


def test_jdbc_snapshot_is_consistent_with_the_slot(postgres, make_pipeline):
    """A snapshot read by Spark's JDBC source in parallel partitions, with changes committed right after the start:
    every row is counted once."""
    uri = make_db(postgres, "jdbc")
    with postgres.connect("jdbc") as conn:
        conn.execute("INSERT INTO orders SELECT i, mod(i, 10), i / 100.0, 'n' FROM generate_series(1, 20000) i")
        conn.execute("INSERT INTO customers SELECT i, 'r' || (mod(i, 3)), now() FROM generate_series(0, 9) i")
        sql = program(uri, snapshot_reader="jdbc", partitions=3)
        p = make_pipeline(sql)
        conn.execute("UPDATE orders SET amount = 1 WHERE id <= 500")
        before = wal_lsn(conn)            # past the UPDATE's transaction: the source must also have read the DELETE
        conn.execute("DELETE FROM orders WHERE id > 19000")
        wait_consumed(p, before)
        wait_delivered(p)
        check(p, conn)
        assert p.status()["connectors"]["orders.pg"]["errors"] == 0


def test_poll_and_snapshot_modes(postgres, make_pipeline):
    uri = make_db(postgres, "poll")
    with postgres.connect("poll") as conn:
        conn.execute("INSERT INTO orders SELECT i, mod(i, 4), i, NULL FROM generate_series(1, 50) i")
        conn.execute("INSERT INTO customers SELECT i, 'r' || (mod(i, 2)), NULL FROM generate_series(0, 3) i")
        sql = (f"CREATE TABLE orders (id BIGINT NOT NULL, customer INT NOT NULL, amount DECIMAL(10,2), note VARCHAR) "
               f"WITH ('connectors' = '{decl(source(uri, 'orders', mode='poll', poll_column='id'))}');\n"
               f"CREATE TABLE customers (cid INT NOT NULL, region VARCHAR, ts TIMESTAMP) "
               f"WITH ('connectors' = '{decl(source(uri, 'customers', mode='snapshot'))}');\n"
               f"CREATE MATERIALIZED VIEW v AS SELECT customer, COUNT(*) AS n, SUM(amount) AS s FROM orders "
               f"GROUP BY customer;\nCREATE MATERIALIZED VIEW c AS SELECT * FROM customers")
        p = make_pipeline(sql)

        def settled(n_orders):
            end = time.monotonic() + 30
            while sum(r["n"] for r in p.query("SELECT * FROM v")) != n_orders:
                assert time.monotonic() < end, {k: (c["state"], c["last_error"]) for k, c in p.status()["connectors"].items()}
                time.sleep(0.05)
        settled(50)
        conn.execute("INSERT INTO orders SELECT i, mod(i, 4), i, 'x' FROM generate_series(51, 80) i")
        settled(80)
        assert p.status()["connectors"]["customers.pg"]["state"] == "finished"
        assert len(list(p.query("SELECT * FROM c"))) == 4
        expected = bag(conn.execute("SELECT customer, count(*), sum(amount) FROM orders GROUP BY 1").fetchall())
        assert not diff(bag(tuple(r.values()) for r in p.query("SELECT * FROM v")), expected)


def test_replayed_step_is_a_no_op(postgres, make_pipeline):
    import pyarrow as pa
    uri = postgres.create_database("replay")
    sql = (f"CREATE TABLE t (k INT NOT NULL, v VARCHAR);\nCREATE MATERIALIZED VIEW v WITH ('connectors' = "
           f"'{decl(sink(uri, 'v'))}') AS SELECT k, v FROM t")
    p = make_pipeline(sql, start=False)
    s = next(d.connector for d in p._declared if d.kind == "sink")
    s.ctx.pipeline_id = "me"
    assert s.open() == 0
    rows = pa.table({"k": pa.array([1, 1, 2], pa.int32()), "v": ["", None, "x"], "__weight": pa.array([2, 1, 1])})
    s.write(1, rows)
    s.write(1, rows)
    s.write(2, pa.table({"k": pa.array([1], pa.int32()), "v": [""], "__weight": pa.array([-1])}))
    with postgres.connect("replay") as conn:
        assert bag(conn.execute("SELECT * FROM v").fetchall()) == bag([(1, ""), (1, None), (2, "x")])
    assert s.open() == 2
    s.ctx.pipeline_id = "another"
    with pytest.raises(ConnectorError, match="another pipeline"):
        s.open()
    s.close()


def wait_error(p, key, pattern, timeout=30):
    end = time.monotonic() + timeout
    while not (p.status()["connectors"][key]["last_error"] or "").__contains__(pattern):
        assert time.monotonic() < end, p.status()["connectors"][key]
        time.sleep(0.05)
    assert p.status()["state"] == "running"


def test_bad_inputs_keep_the_pipeline_running(postgres, make_pipeline):
    from tests.support.net import free_port
    uri = postgres.create_database("bad")
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/bad"
    sql = (f"CREATE TABLE a (id INT NOT NULL PRIMARY KEY, v INT) WITH ('connectors' = '{decl(source(down, 'a'))}');\n"
           f"CREATE TABLE b (id INT NOT NULL PRIMARY KEY, v INT) WITH ('connectors' = '{decl(source(uri, 'b'))}');\n"
           f"CREATE TABLE c (id INT NOT NULL PRIMARY KEY, v INT) WITH ('connectors' = '{decl(source(uri, 'c'))}');\n"
           f"CREATE TABLE d (id INT NOT NULL, v INT) WITH ('connectors' = '{decl(source(uri, 'd'))}');\n"
           f"CREATE TABLE e (id INT NOT NULL PRIMARY KEY, v INT) WITH ('connectors' = "
           f"'{decl(source(uri.replace('postgres@', 'nobody@'), 'e'))}');\n"
           f"CREATE MATERIALIZED VIEW vb AS SELECT * FROM b")
    with postgres.connect("bad") as conn:
        conn.execute("CREATE TABLE c (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE d (id int, v int)")
        p = make_pipeline(sql)
        wait_error(p, "a.pg", "cannot connect")
        wait_error(p, "b.pg", "table public.b does not exist")
        wait_error(p, "c.pg", "column v is text in PostgreSQL table public.c but INT")
        wait_error(p, "d.pg", "REPLICA IDENTITY FULL")
        wait_error(p, "e.pg", "nobody")
        # a server that is down is retried; the others are permanent: failed, not retried
        states = {k: c["state"] for k, c in p.status()["connectors"].items()}
        assert states == {"a.pg": "retrying", "b.pg": "failed", "c.pg": "failed", "d.pg": "failed",
                          "e.pg": "failed"}, states
        # the missing table appears: a restart of the pipeline tries the failed source again
        conn.execute("CREATE TABLE b (id int PRIMARY KEY, v int)")
        conn.execute("INSERT INTO b VALUES (1, 2)")
        p.restart()
        end = time.monotonic() + 30
        while list(p.query("SELECT * FROM vb")) != [{"id": 1, "v": 2}]:
            assert time.monotonic() < end, p.status()["connectors"]["b.pg"]
            time.sleep(0.1)


@pytest.mark.parametrize("config, message", [
    ({"uri": "postgresql://x/y", "table": "t", "mode": "poll"}, "needs \"poll_column\""),
    ({"uri": "postgresql://x/y", "table": "t", "mode": "poll", "poll_column": "zz"}, "poll_column 'zz' is not a column"),
    ({"uri": "postgresql://x/y", "table": "a.b.c"}, "more than two parts"),
    ({"uri": "postgresql://x/y", "table": "t", "slott": "x"}, "did you mean \"slot\""),
    ({"table": "t"}, "option \"uri\" is required"),
])
def test_input_declaration_errors(config, message):
    from sqlengine import Pipeline
    sql = (f"CREATE TABLE t (id INT NOT NULL, v INT)\n  WITH ('connectors' = "
           f"'{decl({'transport': {'name': 'postgres_input', 'config': config}})}')")
    with pytest.raises(ConnectorError, match=message) as e:
        Pipeline.from_sql(sql)
    assert e.value.line == 2


@pytest.mark.parametrize("view, config, message", [
    ("VIEW", {"uri": "postgresql://x/y", "table": "t"}, "must be a MATERIALIZED VIEW"),
    ("MATERIALIZED VIEW", {"uri": "postgresql://x/y", "table": "t", "key": ["nope"]}, "key column 'nope'"),
])
def test_output_declaration_errors(view, config, message):
    from sqlengine import Pipeline
    sql = (f"CREATE TABLE t (id INT NOT NULL, v INT);\nCREATE {view} v WITH ('connectors' = "
           f"'{decl({'transport': {'name': 'postgres_output', 'config': config}})}') AS SELECT * FROM t")
    with pytest.raises(ConnectorError, match=message) as e:
        Pipeline.from_sql(sql)
    assert e.value.line == 2


def test_output_table_with_a_wrong_column_is_reported(postgres, make_pipeline):
    uri = postgres.create_database("badout")
    with postgres.connect("badout") as conn:
        conn.execute("CREATE TABLE v (k int PRIMARY KEY, v boolean)")
        sql = (f"CREATE TABLE t (k INT NOT NULL, v INT);\nCREATE MATERIALIZED VIEW v WITH ('connectors' = "
               f"'{decl(sink(uri, 'v', key=['k']))}') AS SELECT k, v FROM t")
        p = make_pipeline(sql)
        wait_error(p, "v.out", "column v is boolean in PostgreSQL table public.v but INT")


def test_unchanged_large_values_in_updates(postgres, make_pipeline):
    """wal2json leaves a TOASTed value that an UPDATE did not change out of the new row: with REPLICA IDENTITY
    FULL it comes from the old row; without it, the row goes to the dead letter instead of reading as NULL."""
    uri = postgres.create_database("toast")
    rng = random.Random(1)   # (random text is stored out of line: it does not compress below the 2 kB threshold)
    big = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12800))
    with postgres.connect("toast") as conn:
        conn.execute("CREATE TABLE full_t (id int PRIMARY KEY, n int, doc text)")
        conn.execute("ALTER TABLE full_t REPLICA IDENTITY FULL")
        conn.execute("CREATE TABLE default_t (id int PRIMARY KEY, n int, doc text)")
        sql = "\n".join(
            f"CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, n INT, doc VARCHAR) WITH ('connectors' = "
            f"'{decl(source(uri, t))}');\nCREATE MATERIALIZED VIEW v_{t} AS SELECT id, n, length(doc) AS len FROM {t};"
            for t in ("full_t", "default_t"))
        p = make_pipeline(sql)
        wait_consumed(p, 0, keys=("full_t.pg", "default_t.pg"))
        # each source waits for a transaction past the position before its own table's statement: a source may
        # read the other table's transaction (empty for it) and move past an earlier position without its own rows
        for statement in ("INSERT INTO {} VALUES (1, 1, %s), (2, 1, 'small')", "UPDATE {} SET n = 2"):
            before = {}
            for t in ("full_t", "default_t"):
                before[t] = wal_lsn(conn)
                conn.execute(statement.format(t), (big,) if "%s" in statement else None)
            for t in ("full_t", "default_t"):
                wait_consumed(p, before[t], keys=(f"{t}.pg",))
        assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM v_full_t")) == [(1, 2, 12800), (2, 2, 5)]
        st = p.status()["connectors"]["default_t.pg"]
        rows = sorted(tuple(r.values()) for r in p.query("SELECT * FROM v_default_t"))
        assert rows == [(1, 1, 12800), (2, 2, 5)] and st["dead_letter_rows"] == 1   # row 1 kept its last good value
