"""A pipeline reading two PostgreSQL tables by change data capture (``postgres_input``, mode ``cdc``) and
writing two views back to PostgreSQL (``postgres_output``), killed (SIGKILL) and restarted by
``tests/stress/test_postgres_crash.py`` and ``benchmarks/postgres_crash_stress.py`` while a writer keeps
committing random transactions to the source tables.

- ``orders`` has a PRIMARY KEY (in PostgreSQL and in the SQL program); ``customers`` has none (PostgreSQL
  logs its whole old rows: ``REPLICA IDENTITY FULL``) and holds duplicate rows.
- ``totals``: a join-aggregate view, written to the PostgreSQL table ``totals`` with ``key`` ``region``
  (a nullable key: NULL is one region).
- ``mix``: a view with many duplicate rows, written to ``mix`` without a key (a multiset).

    python -m tests.support.postgres_crash_child URI STORAGE [--until LSN]

Without ``--until`` the child runs until it is killed.  With it, it runs until both sources read a
transaction that committed after WAL position ``LSN``, every step ran and every sink holds every step,
then stops cleanly and prints ``done``.

``verify`` checks after the last clean run, from a fresh run over the same storage: the tables and views
equal PostgreSQL's current source tables and DuckDB recomputing the views from them, the output tables
equal the views exactly (as multisets: no change lost or applied twice), and PostgreSQL holds exactly one
replication slot per source.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from typing import List, Optional, Tuple

STARTED = time.time()

PG_TABLES = ("CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(10,2), note text);\n"
             "CREATE TABLE customers (cid int NOT NULL, region text, ts timestamp);\n"
             "ALTER TABLE customers REPLICA IDENTITY FULL;")
SCHEMA = ("CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(10,2), "
          "note VARCHAR);\n"
          "CREATE TABLE customers (cid INT NOT NULL, region VARCHAR, ts TIMESTAMP)")
TOTALS = ("SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total, MAX(o.note) AS last_note "
          "FROM orders o JOIN customers c ON o.customer = c.cid GROUP BY c.region")
MIX = ("SELECT cid AS k, region AS v FROM customers WHERE cid < 8 "
       "UNION ALL SELECT customer AS k, note AS v FROM orders WHERE amount < 20")
VIEWS = (("totals", TOTALS, "totals"), ("mix", MIX, "mix"))
SOURCES = ("orders.pg", "customers.pg")


def _decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def program(uri: str) -> str:
    def source(table):
        return {"name": "pg", "transport": {"name": "postgres_input", "config": {
            "uri": uri, "table": table, "mode": "cdc", "snapshot_reader": "driver", "poll_interval_ms": 20}}}

    def sink(table, **config):
        return {"name": "out", "transport": {"name": "postgres_output", "config": {"uri": uri, "table": table,
                                                                                  **config}}}
    return (f"CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(10,2), "
            f"note VARCHAR) WITH ('connectors' = '{_decl(source('orders'))}');\n"
            f"CREATE TABLE customers (cid INT NOT NULL, region VARCHAR, ts TIMESTAMP) "
            f"WITH ('connectors' = '{_decl(source('public.customers'))}');\n"
            f"CREATE MATERIALIZED VIEW totals WITH ('connectors' = '{_decl(sink('totals', key=['region']))}') "
            f"AS {TOTALS};\n"
            f"CREATE MATERIALIZED VIEW mix WITH ('connectors' = '{_decl(sink('mix'))}') AS {MIX};")


def open_pipeline(uri: str, storage: str):
    from sqlengine import Pipeline
    return Pipeline.from_sql(program(uri), storage_dir=storage, name="pgcrash",
                             spark_conf={"sqlengine.spark.start": "lazy"})


# ---------------------------------------------------------------- the PostgreSQL side (used by the parent)
def lsn_int(lsn: Optional[str]) -> int:
    from connectors.postgres_input import lsn_int as f
    return f(lsn)


def current_lsn(conn) -> str:
    return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


class Writer:
    """Random transactions on ``orders`` and ``customers``: inserts, updates (also of the primary key and
    of duplicate rows), deletes, NULLs, duplicates; now and then a bulk update of many rows."""

    def __init__(self, conn, seed: int):
        self.conn, self.rng = conn, random.Random(seed)
        self.next_id = 1
        self.transactions = 0
        self.changes = 0

    def initial(self, orders: int = 20000, customers: int = 40) -> None:
        with self.conn.transaction():
            for _ in range(orders):
                self._insert_order()
            for _ in range(customers):
                self._insert_customer()
        self.transactions += 1

    def _insert_order(self) -> None:
        rng = self.rng
        self.conn.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)",
                          (self.next_id, rng.randrange(10), rng.choice([None, rng.randrange(10000) / 100]),
                           rng.choice([None, "", "a", "b'c", "zz", "é,\"x\"\n"])))
        self.next_id += 1

    def _insert_customer(self) -> None:
        rng = self.rng
        self.conn.execute("INSERT INTO customers VALUES (%s, %s, %s)",
                          (rng.randrange(10), rng.choice(["north", "south", None, "east", ""]),
                           rng.choice([None, "2024-05-01 10:00:00", "1999-12-31 23:59:59.5"])))

    def transaction(self) -> None:
        rng, conn = self.rng, self.conn
        n = rng.choice([1, 1, 2, 3, 5, 8, 20])
        with conn.transaction():
            for _ in range(n):
                r = rng.random()
                if r < 0.30:
                    self._insert_order()
                elif r < 0.45:
                    conn.execute("UPDATE orders SET amount = %s, customer = %s WHERE id = %s",
                                 (rng.choice([None, rng.randrange(5000) / 100]), rng.randrange(10),
                                  rng.randrange(self.next_id)))
                elif r < 0.50:   # a key change: delete of the old key, insert of the new one
                    conn.execute("UPDATE orders SET id = %s WHERE id = %s", (self.next_id, rng.randrange(self.next_id)))
                    self.next_id += 1
                elif r < 0.60:
                    conn.execute("DELETE FROM orders WHERE id = %s", (rng.randrange(self.next_id),))
                elif r < 0.61:   # a bulk update of many rows in one transaction
                    conn.execute("UPDATE orders SET amount = coalesce(amount, 0) + 1 WHERE customer = %s",
                                  (rng.randrange(10),))
                elif r < 0.75:
                    self._insert_customer()
                elif r < 0.88:   # deletes one copy of a (possibly duplicated) row
                    conn.execute("DELETE FROM customers WHERE ctid = (SELECT ctid FROM customers WHERE cid = %s "
                                 "LIMIT 1)", (rng.randrange(10),))
                else:            # an update that may make a row a duplicate of another
                    conn.execute("UPDATE customers SET region = %s, cid = %s WHERE ctid = (SELECT ctid FROM "
                                 "customers WHERE cid = %s LIMIT 1)",
                                 (rng.choice(["north", "west", None]), rng.randrange(10), rng.randrange(10)))
                self.changes += 1
        self.transactions += 1


def create_tables(pg, db: str, seed: int = 1) -> Tuple[str, "Writer"]:
    """A database ``db`` with the source tables and their initial rows; (its URI, the writer that
    wrote them, on a connection of its own)."""
    uri = pg.create_database(db)
    conn = pg.connect(db)
    for stmt in PG_TABLES.split(";\n"):
        conn.execute(stmt)
    w = Writer(conn, seed)
    w.initial()
    return uri, w


class WriterThread:
    """Commits ``Writer`` transactions every few milliseconds until ``stop()``."""

    def __init__(self, writer: Writer, pause_s: Tuple[float, float] = (0.005, 0.05)):
        self.w, self.pause_s = writer, pause_s
        self._stop = threading.Event()
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="pg-writer", daemon=True)

    def start(self) -> "WriterThread":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.w.transaction()
                self._stop.wait(self.w.rng.uniform(*self.pause_s))
        except BaseException as e:   # noqa: BLE001 - reported by stop()
            self.error = e

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise AssertionError(f"the writer failed: {type(self.error).__name__}: {self.error}")


def final_transaction(writer: Writer) -> str:
    """After the writer stopped: the WAL position now, then one more transaction on both tables (so
    each source reads a commit after that position).  Returns the position, for ``--until``."""
    lsn = current_lsn(writer.conn)
    with writer.conn.transaction():
        writer._insert_order()
        writer._insert_customer()
    return lsn


# ---------------------------------------------------------------- running the child
def kill_time(rng: random.Random, i: int, kills: int) -> float:
    """When to kill run ``i`` of ``kills``: the first fifth (at least one) after 0.6-1.5 s, while the
    process starts, creates the replication slots and reads the snapshot (with Spark started lazily the
    20,000-row snapshot is logged about 1.1 s after the spawn) or, once that is done, while a restarted run
    replays its log and reopens the sinks; the others after 1.5-4 s, during change capture and sink writes."""
    return rng.uniform(0.6, 1.5) if i < max(1, kills // 5) else rng.uniform(1.5, 4.0)


def run_child(uri: str, storage: str, kill_after: Optional[float] = None, until: Optional[str] = None,
              timeout: float = 180) -> Tuple[int, str]:
    """Run the child; with ``kill_after`` seconds, SIGKILL it then (if still running).  Returns its exit
    code (-9 if killed) and its output."""
    from tests.support.killable import ROOT
    args = [sys.executable, "-m", "tests.support.postgres_crash_child", uri, storage] + (["--until", until] if until else [])
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if kill_after is not None:
            try:
                proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                proc.kill()
        out = proc.communicate(timeout=timeout)[0].decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out


# ---------------------------------------------------------------- in the child
def _connector_errors(p) -> dict:
    return {k: (c["state"], c["last_error"]) for k, c in p.status()["connectors"].items()}


def wait_consumed(p, until: str, timeout: float = 120) -> None:
    """Until both sources logged a transaction that committed after ``until``, every step ran and every
    sink holds every step."""
    end = time.monotonic() + timeout
    for key in SOURCES:
        while lsn_int((p.status()["connectors"][key]["position"] or {}).get("lsn")) <= lsn_int(until):
            p._check()
            if time.monotonic() > end:
                raise TimeoutError(f"source {key} did not reach {until}: {_connector_errors(p)}")
            time.sleep(0.02)
    while True:
        p.wait_for_idle(timeout_s=max(1.0, end - time.monotonic()))
        sinks = [c for c in p.status()["connectors"].values() if c["kind"] == "sink"]
        if all(c["lag"] == 0 and c["state"] == "running" for c in sinks):
            return
        if time.monotonic() > end:
            raise TimeoutError(f"sinks did not catch up: {_connector_errors(p)}")
        time.sleep(0.05)


def main(argv: List[str]) -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tests.support.postgres_crash_child")
    ap.add_argument("uri")
    ap.add_argument("storage")
    ap.add_argument("--until", help="stop cleanly once everything up to this WAL position is consumed")
    a = ap.parse_args(argv)
    p = open_pipeline(a.uri, a.storage)
    p.start()
    if a.until:
        wait_consumed(p, a.until)
        p.stop()
        print("done", flush=True)
        return
    last = None
    while True:   # until killed; a failed pipeline exits with its error
        st = p.status()
        if st["error"]:
            print(f"pipeline failed: {st['error']}", flush=True)
            raise SystemExit(3)
        line = progress(st)
        if line != last:
            print(json.dumps({"t": round(time.time() - STARTED, 2), **line}, default=str), flush=True)
            last = line
        time.sleep(0.05)


def progress(st: dict) -> dict:
    """What the child prints (whenever it changes): the step, each source's state and position, each sink's
    state and lag (committed steps it does not hold yet), and the connectors' last errors."""
    cs = st["connectors"]
    return {"step": st["step"],
            "sources": {k: [c["state"], (c["position"] or {}).get("lsn")] for k, c in cs.items()
                        if c["kind"] == "source"},
            "sinks": {k: [c["state"], c["lag"]] for k, c in cs.items() if c["kind"] == "sink"},
            "errors": sorted({c["last_error"] for c in cs.values() if c["last_error"]})}


def phase(out: str) -> str:
    """Where a killed run was, from the last progress line it printed: ``startup`` (none printed yet: the
    process was importing and opening its storage), ``snapshot`` (a source had not logged its snapshot:
    creating the replication slot or reading the table), ``sink writes`` (a sink was behind), else ``cdc``."""
    last = None
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                last = json.loads(line)
            except ValueError:
                pass
    if last is None:
        return "startup"
    if any(pos is None for _, pos in last["sources"].values()):
        return "snapshot"
    if any(lag for _, lag in last["sinks"].values()):
        return "sink writes"
    return "cdc"


def errors_seen(out: str) -> set:
    """The distinct connector errors a run reported."""
    seen = set()
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                seen.update(json.loads(line)["errors"])
            except (ValueError, KeyError):
                pass
    return seen


# ---------------------------------------------------------------- checking the result
def exact(rows) -> "Counter":
    """Rows as a multiset, compared exactly: no rounding (a DECIMAL sum off by one cent differs); a
    Decimal equals the same number at another scale, a datetime is compared without its time zone."""
    import datetime as dt
    from collections import Counter

    def norm(v):
        if isinstance(v, dt.datetime):
            return v.replace(tzinfo=None)
        if isinstance(v, float):
            raise AssertionError(f"unexpected float {v!r}: every compared column is exact")
        return v
    return Counter(tuple(norm(v) for v in r) for r in rows)


def verify(uri: str, storage: str, until: str) -> list:
    """After the final clean run: the problems found (an empty list if none)."""
    import duckdb
    import psycopg

    from tests.support.oracle import diff
    problems = []
    p = open_pipeline(uri, storage)
    p.start()
    try:
        wait_consumed(p, until)
        with psycopg.connect(uri, autocommit=True) as conn:
            con = duckdb.connect()
            con.execute(SCHEMA)
            for t in ("orders", "customers"):
                rows = conn.execute(f"SELECT * FROM {t}").fetchall()
                got = exact(tuple(r.values()) for r in p.query(f"SELECT * FROM {t}"))
                if diff(got, exact(rows)):
                    problems.append(f"table {t} differs from PostgreSQL's (a change lost or applied twice): "
                                    f"{diff(got, exact(rows))}")
                if rows:
                    con.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(rows[0]))})", rows)
            for view, select, out in VIEWS:
                expected = exact(con.execute(select).fetchall())
                got = exact(tuple(r.values()) for r in p.query(f"SELECT * FROM {view}"))
                if diff(got, expected):
                    problems.append(f"view {view} differs from DuckDB's: {diff(got, expected)}")
                table = exact(conn.execute(f"SELECT * FROM {out}").fetchall())
                if diff(table, got):
                    problems.append(f"output table {out} differs from view {view} (a step lost or applied "
                                    f"twice): {diff(table, got)}")
            slots = sorted(r[0] for r in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()").fetchall())
            want = sorted(d.connector.slot for d in p._declared if d.kind == "source")
            if slots != want:
                problems.append(f"replication slots {slots}, expected one per source: {want}")
            step = p.status()["step"]
            for sink, s in conn.execute("SELECT sink, step FROM sqlengine_sink_progress").fetchall():
                if s > step:
                    problems.append(f"sink progress of {sink} is step {s}, after the pipeline's step {step}")
    finally:
        p.stop()
    return problems


if __name__ == "__main__":
    main(sys.argv[1:])
