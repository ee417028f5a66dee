"""A chaos run: a pipeline with Kafka and PostgreSQL (change data capture) in, and Kafka and PostgreSQL
out, run by ``sqlengine run`` under a supervisor loop that kills and restarts it, sometimes starting the
next process before the old one has exited, while

- the broker goes down and comes back (a ``tests.support.tcp_proxy.TcpProxy`` in front of Tansu is cut: Tansu
  keeps its topics in memory only, so stopping it would lose them);
- PostgreSQL is shut down (fast, or immediate as after a crash) and started again;
- the Kafka producer adds a field to its messages half-way through;
- malformed messages (broken JSON, a wrong type) are mixed in.

At the end a last run catches up, and ``verify`` checks that the outputs, integrated, equal DuckDB's
recomputation over every valid input (nothing lost, nothing doubled), that every bad message is in the
dead letter exactly once, and that the headless logs name every outage.

``tests/stress/test_chaos.py`` runs it for about a minute; ``benchmarks/chaos.py`` as long as asked.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from tests.support.killable import ROOT

EVENTS_SCHEMA = "CREATE TABLE events (id BIGINT NOT NULL, k INT, v BIGINT)"
ORDERS_SCHEMA = "CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer INT NOT NULL, amount BIGINT)"
EV_BY_K = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM events GROUP BY k"
JOINED = ("SELECT o.customer, COUNT(*) AS n, SUM(e.v) AS sv, SUM(o.amount) AS sa "
          "FROM orders o JOIN events e ON o.customer = e.k GROUP BY o.customer")
EV_BY_K_COLUMNS = ["k", "n", "s"]
PARTITIONS = 2
NAME = "chaos"
RUN_OPTIONS = ["--wait-for-lock", "300", "--log-format", "json", "--interval", "1"]


def _decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def program(bootstrap: str, pg_uri: str) -> str:
    kin = {"name": "kin", "transport": {"name": "kafka_input", "config": {
        "bootstrap.servers": bootstrap, "topics": ["events"], "poll_timeout_ms": 50, "max_batch_messages": 300}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}}
    pgin = {"name": "pg", "transport": {"name": "postgres_input", "config": {
        "uri": pg_uri, "table": "orders", "mode": "cdc", "snapshot_reader": "driver", "poll_interval_ms": 50}}}
    kout = {"name": "kout", "transport": {"name": "kafka_output", "config": {
        "bootstrap.servers": bootstrap, "topic": "ev_by_k", "key": ["k"]}}}
    pgout = {"name": "pgout", "transport": {"name": "postgres_output", "config": {
        "uri": pg_uri, "table": "joined", "key": ["customer"]}}}
    return (f"{EVENTS_SCHEMA} WITH ('connectors' = '{_decl(kin)}');\n"
            f"{ORDERS_SCHEMA} WITH ('connectors' = '{_decl(pgin)}');\n"
            f"CREATE MATERIALIZED VIEW ev_by_k WITH ('connectors' = '{_decl(kout)}') AS {EV_BY_K};\n"
            f"CREATE MATERIALIZED VIEW joined WITH ('connectors' = '{_decl(pgout)}') AS {JOINED};\n")


# ---------------------------------------------------------------- the inputs
class EventProducer:
    """Insert/delete messages for ``events`` (a row's messages all go to partition ``id % 2``, so its delete
    is read after its insert), duplicates and NULLs; from ``evolve_after`` messages on, every message has
    an extra field; about 1 % are malformed.  Produced through the proxy by an idempotent producer that
    rides out broker outages."""

    def __init__(self, bootstrap: str, seed: int, rate: float = 200.0, evolve_after: int = 10**9):
        from confluent_kafka import Producer
        self.rng = random.Random(seed)
        self.rate, self.evolve_after = rate, evolve_after
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 600_000, "logger": _quiet_logger()})
        self.live: List[dict] = []
        self.valid: List[dict] = []          # the valid records, in production order
        self.malformed: List[bytes] = []
        self.malformed_at: List[Tuple[int, int]] = []   # (partition, offset) of each malformed message
        self.failed: List[str] = []
        self.sent = 0
        self.next_id = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> "EventProducer":
        self._thread.start()
        return self

    def message(self) -> Tuple[int, bytes, bool]:
        rng = self.rng
        evolved = self.sent >= self.evolve_after
        if rng.random() < 0.01:
            part = rng.randrange(PARTITIONS)
            bad = rng.choice([b'{"insert": {"id": 5, "k": ', b'{"insert": {"id": "x%d", "k": 1, "v": 2}}' % self.sent,
                              b'not json at all', b'{"insert": {"id": 1, "k": "seven", "v": 1}}'])
            return part, bad, False
        if self.live and rng.random() < 0.3:
            row = self.live.pop(rng.randrange(len(self.live)))
            rec = {"delete": row}
        else:
            if self.live and rng.random() < 0.1:
                row = dict(rng.choice(self.live))    # a duplicate row
            else:
                row = {"id": self.next_id, "k": rng.choice([0, 1, 2, 3, 4, 5, 6, 7, None]),
                       "v": rng.choice([1, 2, 5, -3, 100, None])}
                self.next_id += 1
            self.live.append(row)
            rec = {"insert": row}
        self.valid.append(rec)
        (kind, row), = rec.items()
        body = {kind: {**row, "note": f"added field {self.sent}"}} if evolved else rec
        return row["id"] % PARTITIONS, json.dumps(body).encode(), True

    def _run(self) -> None:
        while not self._stop.is_set():
            part, value, ok = self.message()
            self.sent += 1

            def report(err, msg, ok=ok):
                if err is not None:
                    self.failed.append(str(err))
                elif not ok:
                    self.malformed_at.append((msg.partition(), msg.offset()))
            if not ok:
                self.malformed.append(value)
            while True:
                try:
                    self.producer.produce("events", value=value, partition=part, on_delivery=report)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
            self._stop.wait(self.rng.expovariate(self.rate))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        left = self.producer.flush(300)
        if left or self.failed:
            raise AssertionError(f"the producer could not deliver: {left} left, errors {self.failed[:3]}")


def _quiet_logger():
    import logging
    log = logging.getLogger("chaos.producer")
    log.propagate = False
    log.addHandler(logging.NullHandler())
    return log


class OrdersWriter:
    """Random transactions on the PostgreSQL table ``orders``; rides out PostgreSQL outages (a transaction
    that was in flight may or may not have committed: the oracle is PostgreSQL's table itself)."""

    def __init__(self, uri: str, seed: int):
        self.uri, self.rng = uri, random.Random(seed)
        self.next_id = 1
        self.transactions = 0
        self.outage_errors = 0
        self.conn = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-pg-writer", daemon=True)
        self.error: Optional[BaseException] = None

    def start(self) -> "OrdersWriter":
        self._thread.start()
        return self

    def _connect(self):
        import psycopg
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.uri, autocommit=True, connect_timeout=3)
        return self.conn

    def transaction(self) -> None:
        rng, conn = self.rng, self._connect()
        with conn.transaction():
            for _ in range(rng.choice([1, 1, 2, 3, 5])):
                r = rng.random()
                if r < 0.5:
                    conn.execute("INSERT INTO orders VALUES (%s, %s, %s)",
                                 (self.next_id, rng.randrange(8), rng.choice([None, rng.randrange(1000)])))
                    self.next_id += 1
                elif r < 0.75:
                    conn.execute("UPDATE orders SET amount = %s, customer = %s WHERE id = %s",
                                 (rng.choice([None, rng.randrange(1000)]), rng.randrange(8),
                                  rng.randrange(self.next_id)))
                else:
                    conn.execute("DELETE FROM orders WHERE id = %s", (rng.randrange(self.next_id),))
        self.transactions += 1

    def _run(self) -> None:
        import psycopg
        while not self._stop.is_set():
            try:
                self.transaction()
            except psycopg.OperationalError:
                self.outage_errors += 1
                self.conn = None
                self._stop.wait(0.2)
            except BaseException as e:   # noqa: BLE001 - reported by stop()
                self.error = e
                return
            self._stop.wait(self.rng.uniform(0.01, 0.08))

    def stop(self) -> str:
        """Stop; then one more transaction, and the WAL position before it (the source must read past it)."""
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise AssertionError(f"the writer failed: {type(self.error).__name__}: {self.error}")
        self.next_id += 1
        for _ in range(100):
            try:
                conn = self._connect()
                lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
                conn.execute("INSERT INTO orders VALUES (%s, 0, 1)", (self.next_id,))
                return lsn
            except Exception:   # noqa: BLE001 - PostgreSQL coming back
                self.conn = None
                time.sleep(0.3)
        raise AssertionError("PostgreSQL did not come back")


# ---------------------------------------------------------------- the supervisor and the outages
@dataclass
class Life:
    proc: subprocess.Popen
    log: str
    started: float
    ended: Optional[float] = None
    how: str = ""


@dataclass
class Outage:
    what: str            # "kafka" or "postgres"
    start: float
    end: float = 0.0
    mode: str = ""


class Supervisor:
    """Runs ``sqlengine run`` again and again: each run is SIGKILLed, or stopped with SIGTERM while the next
    starts at once (it waits for the storage lock), or the next starts first and the old one is killed.
    Most runs last 4-9 s; one in three 12-18 s, so that some live through whole outages."""

    def __init__(self, program_path: str, storage: str, logs: str, seed: int):
        self.program_path, self.storage, self.logs = program_path, storage, logs
        self.rng = random.Random(seed)
        self.lives: List[Life] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-supervisor", daemon=True)
        os.makedirs(logs, exist_ok=True)

    def spawn(self) -> Life:
        path = os.path.join(self.logs, f"run-{len(self.lives):03d}.log")
        args = [sys.executable, "-m", "sqlengine", "run", self.program_path, "--storage", self.storage,
                "--name", NAME] + RUN_OPTIONS
        with open(path, "wb") as out:
            proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        life = Life(proc, path, time.time())
        self.lives.append(life)
        return life

    def start(self) -> "Supervisor":
        self._thread.start()
        return self

    def _run(self) -> None:
        life = self.spawn()
        # most processes live a few seconds; one in three lives long enough to see outages through
        while not self._stop.wait(self.rng.uniform(12.0, 18.0) if self.rng.random() < 1 / 3
                                  else self.rng.uniform(4.0, 9.0)):
            how = self.rng.choice(["kill", "kill", "term-overlap", "kill-overlap"])
            life.how = how
            if how == "kill":
                life.proc.kill()
                life.proc.wait()
                life.ended = time.time()
                life = self.spawn()
            elif how == "term-overlap":       # SIGTERM: the old one drains while the new one waits for the lock
                life.proc.send_signal(signal.SIGTERM)
                old, life = life, self.spawn()
                self._reap(old, 120)
            else:                             # the new one starts first, then the old one dies
                new = self.spawn()
                time.sleep(self.rng.uniform(0.3, 2.0))
                life.proc.kill()
                life.proc.wait()
                life.ended = time.time()
                life = new
        life.how = "final-term"
        life.proc.send_signal(signal.SIGTERM)
        self._reap(life, 120)

    def _reap(self, life: Life, timeout: float) -> None:
        def wait():
            try:
                life.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                life.proc.kill()
                life.proc.wait()
                life.how += " (did not stop in time: killed)"
            life.ended = time.time()
        threading.Thread(target=wait, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(300)
        for life in self.lives:
            if life.proc.poll() is None:
                life.proc.wait(150)


class Outages:
    """Alternately cuts the broker's link and shuts PostgreSQL down, for a few seconds each."""

    def __init__(self, proxy, pg, seed: int, every: Tuple[float, float] = (5.0, 9.0),
                 down: Tuple[float, float] = (2.0, 4.0)):
        self.proxy, self.pg, self.rng = proxy, pg, random.Random(seed)
        self.every, self.down = every, down
        self.done: List[Outage] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-outages", daemon=True)

    def start(self) -> "Outages":
        self._thread.start()
        return self

    def _run(self) -> None:
        turn = 0
        while not self._stop.wait(self.rng.uniform(*self.every)):
            if turn % 2 == 0:
                o = Outage("kafka", time.time())
                self.proxy.cut()
                self._stop.wait(self.rng.uniform(*self.down))
                self.proxy.restore()
            else:
                o = Outage("postgres", time.time(), mode=self.rng.choice(["fast", "immediate"]))
                self.pg.shutdown(o.mode)
                self._stop.wait(self.rng.uniform(*self.down))
                self.pg.start_again()
            o.end = time.time()
            self.done.append(o)
            turn += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)


# ---------------------------------------------------------------- one whole run
@dataclass
class Result:
    problems: List[str]
    lives: int
    kills: int
    outages: Dict[str, int]
    messages: int
    malformed: int
    transactions: int
    steps: int
    figures: Dict[str, object] = field(default_factory=dict)


def run(root: str, seconds: float, seed: int = 1) -> Result:
    """The whole chaos run in directory ``root``, for about ``seconds`` seconds of chaos."""
    from tests.support.kafka_broker import Broker
    from tests.support.postgres_server import PostgresServer
    from tests.support.tcp_proxy import TcpProxy
    pg = PostgresServer().start()
    broker = proxy = None
    try:
        from tests.support.net import free_port
        broker_port = free_port()
        proxy = TcpProxy(("127.0.0.1", broker_port)).start()
        broker = Broker(port=broker_port, advertised_port=proxy.port).start()
        broker.create_topic("events", PARTITIONS)
        broker.create_topic("ev_by_k", 1)
        pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount bigint)")
        uri = pg.uri
        prog = os.path.join(root, "chaos.sql")
        with open(prog, "w") as f:
            f.write(program(broker.bootstrap, uri))
        storage = os.path.join(root, "storage")
        writer = OrdersWriter(uri, seed).start()
        rate = 150.0
        producer = EventProducer(broker.bootstrap, seed, rate=rate, evolve_after=int(rate * seconds / 2)).start()
        sup = Supervisor(prog, storage, os.path.join(root, "logs"), seed).start()
        outages = Outages(proxy, pg, seed).start()
        time.sleep(seconds)
        outages.stop()
        proxy.restore()
        producer.stop()
        until = writer.stop()
        sup.stop()
        problems = [f"run {i} ended by itself with {life.proc.returncode} ({life.how}):\n{_tail(life.log)}"
                    for i, life in enumerate(sup.lives)
                    if life.proc.returncode not in (-9, 0) and life.how != "final-term"]
        figures: Dict[str, object] = {}
        problems += verify(broker, uri, prog, storage, producer, until, figures)
        problems += check_logs(sup.lives, outages.done, figures)
        kills = sum(1 for life in sup.lives if life.proc.returncode == -9)
        return Result(problems, len(sup.lives), kills, dict(Counter(o.what for o in outages.done)), producer.sent,
                      len(producer.malformed), writer.transactions, int(figures.get("steps", 0)), figures)
    finally:
        if broker is not None:
            broker.stop()
        if proxy is not None:
            proxy.cut()
        pg.stop()


def _tail(path: str, n: int = 3000) -> str:
    with open(path, "rb") as f:
        return f.read()[-n:].decode(errors="replace")


# ---------------------------------------------------------------- checking
def events_bag(valid: List[dict]) -> List[tuple]:
    """The rows of ``events`` after applying the valid messages in order (a multiset)."""
    live: Counter = Counter()
    for rec in valid:
        (kind, row), = rec.items()
        key = (row["id"], row["k"], row["v"])
        live[key] += 1 if kind == "insert" else -1
    assert all(v >= 0 for v in live.values()), "a delete before its insert"
    return [k for k, v in live.items() for _ in range(v)]


def topic_records(messages, malformed: set) -> List[dict]:
    """The valid records in the input topic, in each partition's order (without the added field)."""
    out = []
    for part, offset, _k, value, _h in sorted(messages, key=lambda m: (m[0], m[1])):
        if (part, offset) in malformed:
            continue
        (kind, row), = json.loads(value).items()
        out.append({kind: {c: row[c] for c in ("id", "k", "v")}})
    return out


def integrate_topic(messages) -> Tuple[Counter, List[str]]:
    from tests.support.oracle import canon
    bag: Counter = Counter()
    seen: Counter = Counter()
    counts: Dict[int, set] = {}
    for _p, _o, _k, value, headers in messages:
        step, seq, count = (int(headers[h]) for h in ("sqlengine.step", "sqlengine.seq", "sqlengine.count"))
        seen[(step, seq)] += 1
        counts.setdefault(step, set()).add(count)
        (kind, row), = json.loads(value).items()
        bag[tuple(canon(row[c]) for c in EV_BY_K_COLUMNS)] += 1 if kind == "insert" else -1
    problems = []
    dup = sorted(k for k, v in seen.items() if v > 1)
    if dup:
        problems.append(f"output topic: (step, seq) written more than once: {dup[:5]}")
    for step, cs in counts.items():
        n = max(cs)
        if len(cs) != 1 or {s for (st, s) in seen if st == step} != set(range(n)):
            problems.append(f"output topic: step {step} incomplete or inconsistent")
    return Counter({k: v for k, v in bag.items() if v}), problems


def verify(broker, uri: str, prog: str, storage: str, producer: EventProducer, until: str,
           figures: Dict[str, object]) -> List[str]:
    """A last run catches up; then the outputs against DuckDB over the valid inputs, and the dead letter."""
    import psycopg

    from sqlengine import Pipeline
    from tests.support.oracle import Model, diff
    from tests.support.postgres_crash_child import exact, lsn_int
    problems: List[str] = []
    ends = {k: v for k, v in broker.end_offsets("events").items() if v > 0}
    with open(prog) as f:
        sql = f.read()
    p = Pipeline.from_sql(sql, name=NAME, storage_dir=storage, spark_conf={"sqlengine.spark.start": "lazy"})
    p.start()
    try:
        deadline = time.monotonic() + 180
        while True:
            cs = p.status()["connectors"]
            if (cs["events.kin"]["position"] == ends
                    and lsn_int((cs["orders.pg"]["position"] or {}).get("lsn")) > lsn_int(until)):
                break
            if time.monotonic() > deadline:
                return [f"the last run did not catch up: {json.dumps(cs, default=str)[:2000]}"]
            time.sleep(0.05)
        while True:
            p.wait_for_idle(timeout_s=120)
            sinks = [c for c in p.status()["connectors"].values() if c["kind"] == "sink"]
            if all(c["lag"] == 0 and c["state"] == "running" for c in sinks):
                break
            if time.monotonic() > deadline:
                return [f"the sinks did not catch up: {sinks}"]
            time.sleep(0.05)
        with psycopg.connect(uri, autocommit=True) as conn:
            orders = conn.execute("SELECT id, customer, amount FROM orders").fetchall()
            joined_table = exact(conn.execute("SELECT customer, n, sv, sa FROM joined").fetchall())
        events = events_bag(producer.valid)
        raw_topic = broker.consume_all("events", timeout=60)
        in_topic = topic_records(raw_topic, set(producer.malformed_at))
        if Counter(map(json.dumps, in_topic)) != Counter(map(json.dumps, producer.valid)):
            problems.append(f"the broker holds other messages than were produced: "
                            f"{len(in_topic)} valid ones in the topic, {len(producer.valid)} produced")
            events = events_bag(in_topic)
        model = Model(f"{EVENTS_SCHEMA}; {ORDERS_SCHEMA};", {"events": ["id", "k", "v"],
                                                             "orders": ["id", "customer", "amount"]})
        model.insert("events", events)
        model.insert("orders", orders)
        con = model.duck()
        for table, rows in (("events", events), ("orders", orders)):
            got = exact(tuple(r.values()) for r in p.query(f"SELECT * FROM {table}"))
            if diff(got, exact(rows)):
                problems.append(f"table {table} differs from its source: {diff(got, exact(rows))}")
                with open(os.path.join(os.path.dirname(storage), "events_topic.jsonl"), "w") as f:
                    for part, offset, _k, value, _h in raw_topic:   # for the post-mortem
                        f.write(json.dumps({"partition": part, "offset": offset, "value": value.decode("latin-1")}) + "\n")
        want_k = model.view(con, EV_BY_K)
        got_k, topic_problems = integrate_topic(broker.consume_all("ev_by_k", timeout=60))
        problems += topic_problems
        if diff(got_k, want_k):
            problems.append(f"output topic ev_by_k differs from DuckDB's recomputation: {diff(got_k, want_k)}")
        want_j = exact(con.execute(JOINED).fetchall())
        if diff(joined_table, want_j):
            problems.append(f"output table joined differs from DuckDB's recomputation: {diff(joined_table, want_j)}")
        view_j = exact(tuple(r.values()) for r in p.query("SELECT * FROM joined"))
        if diff(view_j, want_j):
            problems.append(f"view joined differs from DuckDB's recomputation: {diff(view_j, want_j)}")
        dead = dead_letters(p.status()["connectors"]["events.kin"], storage)
        want_dead = Counter(producer.malformed_at)
        if dead != want_dead:
            problems.append(f"dead letter: {sum((dead - want_dead).values())} extra or repeated, "
                            f"{sum((want_dead - dead).values())} missing: "
                            f"extra {sorted((dead - want_dead).items())[:5]}, missing {sorted(want_dead - dead)[:5]}")
        figures["steps"] = p.status()["step"]
        figures["events_rows"] = len(events)
        figures["orders_rows"] = len(orders)
    finally:
        p.stop()
    return problems


def dead_letters(status: dict, storage: str) -> Counter:
    path = os.path.join(storage, "dead_letter", "events.kin.jsonl")
    out: Counter = Counter()
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                out[(rec.get("partition"), rec.get("offset"))] += 1
    return out


def log_records(path: str) -> List[dict]:
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def _when(rec: dict) -> Optional[float]:
    t = rec.get("time") or rec.get("ts")
    if isinstance(t, (int, float)):
        return float(t)
    if isinstance(t, str):
        import datetime as dt
        try:
            return dt.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def check_logs(lives: List[Life], outages: List[Outage], figures: Optional[Dict[str, object]] = None,
               slack: float = 15.0) -> List[str]:
    """Every outage that a pipeline process lived through (up, past its start-up, for at least two seconds
    of it) is named in that process's log: a warning or error mentioning the system that went away,
    written during the outage or soon after."""
    problems = []
    watched = 0
    logs = {life.log: log_records(life.log) for life in lives}
    up = {}   # when each process had its pipeline running: its "started" record (after the lock, the opening)
    for life in lives:
        t = next((_when(r) for r in logs[life.log] if " started at step " in str(r.get("message", ""))), None)
        if t is not None:
            up[life.log] = t
    for o in outages:
        watchers = [life for life in lives if life.log in up
                    and min(life.ended or 1e18, o.end) - max(up[life.log] + 1.0, o.start) >= 2.0]
        if not watchers:
            continue
        watched += 1
        words = ("kafka", "events.kin") if o.what == "kafka" else ("postgres", "orders.pg")

        def names(rec: dict, life: Life) -> bool:
            t = _when(rec)
            text = json.dumps(rec).lower()
            return (t is not None and o.start - 1 <= t <= min(life.ended or 1e18, o.end + slack)
                    and rec.get("level") in ("WARNING", "ERROR") and any(w in text for w in words))
        if not any(names(rec, life) for life in watchers for rec in logs[life.log]):
            problems.append(f"the {o.what} outage at {time.strftime('%H:%M:%S', time.gmtime(o.start))} "
                            f"({o.end - o.start:.1f} s) is not named in the log of {watchers[0].log}")
    if figures is not None:
        figures["outages_watched"] = watched   # outages a process lived through: the ones checked
    return problems
