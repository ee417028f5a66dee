"""``postgres_input``: a table of a live PostgreSQL server, as a snapshot and then its changes.

    CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer BIGINT, amount DECIMAL(10,2))
    WITH ('connectors' = '[{"name": "pg", "transport": {"name": "postgres_input",
        "config": {"uri": "postgresql://app@127.0.0.1:5432/shop", "table": "orders"}}}]')

**Modes.**
- ``cdc`` (the default): the table's contents at a consistent point, then every INSERT, UPDATE and DELETE
  committed after it, through logical replication.  An UPDATE is a delete of the old row plus an insert of
  the new one.
- ``poll``: rows whose ``poll_column`` (an increasing column: a serial id, an insertion timestamp) is
  above the last value read, every ``poll_interval_ms``; for servers where replication is not allowed.
  Inserts only: updates and deletes are not seen, and a row committed late with a lower value than one
  already read is missed (a sequence value is taken before its transaction commits).
- ``snapshot``: the table's contents once, then the connector finishes.

**Change capture.**  The connector decodes the write-ahead log with the ``wal2json`` output plugin
(Debian's ``postgresql-15-wal2json``), through the SQL functions ``pg_logical_slot_peek_changes`` and
``pg_replication_slot_advance`` on an ordinary connection.  Why wal2json and not the built-in
``pgoutput``: pgoutput is only reachable through the streaming replication protocol, which confirms
positions as a side effect of the stream and needs a publication; peeking with wal2json lets the engine
decide exactly when the slot's confirmed position moves (only after the step that consumed the changes
committed), needs no publication, and gives typed JSON that the engine's converters already read.

**Exactly once.**  The replication slot (``slot``, by default one named after the pipeline, table and
connector) is created together with an exported snapshot: the initial contents are read in a
transaction that imports that snapshot, so they are exactly the table at the slot's consistent point,
and the changes decoded from the slot are exactly those after it.  Each batch is logged with the commit
LSN it ends at; the slot is advanced to a position only after a step that consumed it committed.  After a
crash the engine reopens the connector at the last logged position and transactions up to it are
skipped, so nothing is lost or read twice.  A slot keeps the server's WAL until it is advanced: drop the
slot (``SELECT pg_drop_replication_slot('...')``) when the pipeline is deleted.

**Reading the snapshot.**  ``snapshot_reader`` ``jdbc`` reads it with Spark's JDBC source, in
``partitions`` parallel range partitions of an integer primary-key column, each partition importing the
exported snapshot (the driver jar is Debian's ``libpostgresql-jdbc-java``, ``/usr/share/java/postgresql.jar``,
added to the Spark session when first needed); ``driver`` reads it through one psycopg cursor on the
driver; ``auto`` (the default) uses ``jdbc`` for tables PostgreSQL estimates at ``jdbc_min_rows`` rows or
more, else ``driver`` (a small table is not worth a Spark job).

**Keys.**  With a PRIMARY KEY in the SQL table, a delete needs only the key (PostgreSQL's REPLICA
IDENTITY DEFAULT logs the old key), and the changes of one batch are netted per key.  Without one, deletes
and updates need the whole old row: the PostgreSQL table must have ``REPLICA IDENTITY FULL``, else the
connector stops with an error saying so.

**Errors.**  A server that is down or restarting, a full disk: a ``ConnectorError`` naming the connector and
the cause in ``status()``; the connector retries with backoff and the pipeline goes on.  Bad credentials, a
role or database that does not exist, a missing table, a column missing in PostgreSQL or of a type that
does not fit the SQL column (named), missing privileges, a replica identity that cannot log deletes, a lost
replication slot: a ``PermanentConnectorError``; the connector stops in state ``failed`` (see
``connectors.postgres_common.PERMANENT_SQLSTATE_CLASSES``).  A value that does not convert goes to the dead
letter like any bad input row.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from decimal import Decimal
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from planner.errors import ConnectorError, PermanentConnectorError
from sqlengine.ingest import convert_values, finish
from sqlengine.types import arrow_type

from .base import Source, SourceBatch, opt, register_source
from .postgres_common import check_columns, check_table_name, connect, pg_error, qualified, quote, redact, \
    split_table, table_columns
from .postgres_values import decoder, snapshot_column, text_column

JDBC_JAR = "/usr/share/java/postgresql.jar"
WHAT = "postgres_input"


def lsn_int(lsn: Optional[str]) -> int:
    """'16/B374D848' -> an int that orders like the LSN; None -> -1."""
    if not lsn:
        return -1
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def _py(v: Any, target: pa.DataType) -> Any:
    """A decoded value made acceptable to ``convert_values`` for the column's Arrow type."""
    if isinstance(v, Decimal) and pa.types.is_floating(target):
        return float(v)
    if isinstance(v, Decimal) and pa.types.is_integer(target) and v == v.to_integral_value():
        return int(v)
    return v


@register_source
class PostgresInput(Source):
    transport = WHAT
    OPTIONS = {
        "uri": opt(str, required=True, doc="libpq connection URI, e.g. postgresql://user:password@host:5432/db"),
        "table": opt(str, required=True, doc="the PostgreSQL table, \"schema.table\" or \"table\" (schema public)"),
        "mode": opt(str, default="cdc", choices=("cdc", "poll", "snapshot"),
                    doc="cdc: snapshot then logical replication; poll: new rows by an increasing column; "
                        "snapshot: the contents once"),
        "snapshot": opt(bool, default=True, doc="cdc: start with the table's contents (else only later changes)"),
        "snapshot_reader": opt(str, default="auto", choices=("auto", "jdbc", "driver"),
                               doc="jdbc: Spark's JDBC source in parallel partitions; driver: one psycopg cursor"),
        "jdbc_min_rows": opt(int, default=500_000, doc="auto: tables estimated at this many rows use jdbc"),
        "partitions": opt(int, default=4, doc="jdbc: parallel partitions (by an integer primary-key column)"),
        "jdbc_jar": opt(str, default=JDBC_JAR, doc="jdbc: the PostgreSQL JDBC driver jar"),
        "slot": opt(str, doc="cdc: the replication slot's name (default: derived from the pipeline, table and "
                             "connector)"),
        "poll_column": opt(str, doc="poll: the increasing column"),
        "poll_interval_ms": opt(int, default=100, doc="how often to look for changes or new rows"),
    }
    FORMATS = ()
    EXTRA = "postgres"
    MODULES = ("psycopg",)

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        check_table_name(c["table"], where, WHAT)
        if c["poll_interval_ms"] <= 0:
            raise where.error(f"{WHAT}: \"poll_interval_ms\" must be positive", "poll_interval_ms")
        if c["partitions"] < 1:
            raise where.error(f"{WHAT}: \"partitions\" must be at least 1", "partitions")
        names = {n.lower() for n, _ in self.ctx.columns}
        if c["mode"] == "poll":
            if not c["poll_column"]:
                raise where.error(f"{WHAT}: mode \"poll\" needs \"poll_column\" (an increasing column)", "mode")
            if c["poll_column"].lower() not in names:
                raise where.error(f"{WHAT}: poll_column {c['poll_column']!r} is not a column of table "
                                  f"{self.ctx.relation}", "poll_column")
        elif c["poll_column"]:
            raise where.error(f"{WHAT}: \"poll_column\" is for mode \"poll\" (mode is {c['mode']!r})", "poll_column")
        if c["slot"] is not None and not (c["slot"].replace("_", "a").isalnum() and c["slot"] == c["slot"].lower()):
            raise where.error(f"{WHAT}: slot {c['slot']!r} must be lower-case letters, digits and _", "slot")
        for n, t in self.ctx.columns:
            try:
                arrow_type(t)
            except KeyError:
                raise where.error(f"{WHAT}: column {n} of type {t.sql} cannot be read from PostgreSQL") from None

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.schema, self.pg_table = split_table(config["table"], strict=False)
        self.pg_name = f"{self.schema}.{self.pg_table}"
        self.fields = list(ctx.table.fields) if ctx.table is not None else []
        self.key = tuple(ctx.key)
        self.conn = None
        self.repl = None                  # the replication connection holding an exported snapshot
        self.position: Any = None
        self._committed: Any = None       # the position the last committed step consumed
        self._advanced = -1               # the slot's confirmed position as far as we know (an int LSN)
        self._pending: Optional[SourceBatch] = None   # the snapshot, read by the first poll
        self._columns: Dict[str, str] = {}
        self._pg_types: Dict[str, str] = {}   # SQL column -> its PostgreSQL type
        self._decoders: List[Any] = []        # per field: connectors.postgres_values.decoder, or None
        self._done = False
        self._next_poll = 0.0
        self._last_empty = 0.0

    # ------------------------------------------------------------ opening
    @property
    def slot(self) -> str:
        if self.config["slot"]:
            return self.config["slot"]
        h = hashlib.sha1(f"{self.ctx.pipeline_id}|{self.ctx.relation}|{self.ctx.connector}".encode()).hexdigest()
        return f"sqlengine_{self.ctx.relation.lower()[:30]}_{h[:12]}".replace("-", "_")

    def committed(self, position: Any) -> None:
        self._committed = position

    def open(self, position: Any) -> None:
        import psycopg
        try:
            self._open(position)
        except psycopg.Error as e:   # (a permanent one: missing privileges, ...)
            raise pg_error(f"{WHAT}: opening {self.pg_name}: {str(e).strip()}", e) from None

    def _open(self, position: Any) -> None:
        self.close()
        self.position = position
        self._done = False
        self.conn = connect(self.config["uri"], f"connector {self.ctx.connector} ({WHAT})")
        cols = table_columns(self.conn, self.schema, self.pg_table)
        if cols is None:
            raise PermanentConnectorError(f"{WHAT}: table {self.pg_name} does not exist in "
                                          f"{redact(self.config['uri'])}")
        self._columns = check_columns(WHAT, f"table {self.ctx.relation}",
                                      [(f.name, f.type) for f in self.fields], cols, self.pg_name, reading=True)
        pg_of = {c[0]: c[1] for c in cols}
        self._pg_types = {f.name: pg_of[self._columns[f.name]] for f in self.fields}
        self._decoders = [decoder(self._pg_types[f.name], f.type) for f in self.fields]
        mode = self.config["mode"]
        if mode == "cdc":
            self._open_cdc(position)
        elif mode == "snapshot" and position is None:
            self._pending = self._snapshot_batch(None, {"snapshot": True})

    def _open_cdc(self, position: Any) -> None:
        self._check_identity()
        slot = self.conn.execute("SELECT confirmed_flush_lsn::text, plugin FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (self.slot,)).fetchone()
        if position is None:
            # nothing of this connector reached the log: start over (a slot left by a run that crashed
            # before its first batch was logged has no use: its snapshot is gone)
            if slot is not None:
                self.conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            self._create_slot()
            return
        if slot is None:
            raise PermanentConnectorError(f"{WHAT}: replication slot {self.slot} does not exist any more, so the "
                                          f"changes after LSN {position['lsn']} are lost; clear the pipeline's "
                                          "storage to start over from a new snapshot")
        if lsn_int(slot[0]) > lsn_int(position["lsn"]):
            raise PermanentConnectorError(f"{WHAT}: replication slot {self.slot} was advanced to {slot[0]}, past "
                                          f"this pipeline's position {position['lsn']}: another reader uses it")
        self._advanced = lsn_int(slot[0])

    def _check_identity(self) -> None:
        row = self.conn.execute("SELECT c.relreplident::text FROM pg_class c JOIN pg_namespace n ON "
                                "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                                (self.schema, self.pg_table)).fetchone()
        if self.key:
            pk = self.conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
                "a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                (qualified(self.schema, self.pg_table),)).fetchall()
            pg_key = {r[0].lower() for r in pk}
            if row[0] != "f" and pg_key != {k.lower() for k in self.key}:
                raise PermanentConnectorError(
                    f"{WHAT}: table {self.ctx.relation} has PRIMARY KEY ({', '.join(self.key)}) but PostgreSQL table "
                    f"{self.pg_name} logs deletes by {('(' + ', '.join(sorted(pg_key)) + ')') if pg_key else 'nothing'}"
                    f"; give it the same primary key or ALTER TABLE {self.pg_name} REPLICA IDENTITY FULL")
        elif row[0] != "f":
            raise PermanentConnectorError(f"{WHAT}: table {self.ctx.relation} has no PRIMARY KEY, so deletes and "
                                          f"updates need the whole old row: ALTER TABLE {self.pg_name} REPLICA "
                                          "IDENTITY FULL (or declare the table's PRIMARY KEY in the SQL program)")

    def _create_slot(self) -> None:
        import psycopg
        if not self.config["snapshot"]:
            lsn = self.conn.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'wal2json')",
                                    (self.slot,)).fetchone()[0]
            self._pending = SourceBatch(lambda errs, n: iter(()), {"lsn": lsn})
            return
        uri = self.config["uri"]
        try:
            self.repl = psycopg.connect(uri, autocommit=True, connect_timeout=5, replication="database")
        except psycopg.Error as e:
            raise pg_error(f"{WHAT}: cannot open a replication connection to {redact(uri)} (the user needs "
                           f"the REPLICATION attribute): {str(e).strip()}", e) from None
        res = self.repl.pgconn.exec_(
            f"CREATE_REPLICATION_SLOT {quote(self.slot)} LOGICAL wal2json EXPORT_SNAPSHOT".encode())
        if res.status != 2:   # PGRES_TUPLES_OK
            raise ConnectorError(f"{WHAT}: cannot create replication slot {self.slot}: "
                                 f"{(res.error_message or b'').decode().strip()}")
        lsn, snapshot = res.get_value(0, 1).decode(), res.get_value(0, 2).decode()
        self._pending = self._snapshot_batch(snapshot, {"lsn": lsn})

    # ------------------------------------------------------------ the snapshot
    def _select_list(self, item=snapshot_column) -> str:
        """The columns as psycopg reads them (``item``: as Spark's JDBC reader does, ``text_column``)."""
        return ", ".join(item(self._pg_types[f.name], quote(self._columns[f.name])) for f in self.fields)

    def _snapshot_batch(self, snapshot: Optional[str], position: Any) -> SourceBatch:
        reader = self.config["snapshot_reader"]
        if reader == "auto":
            est = self.conn.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
                                    (qualified(self.schema, self.pg_table),)).fetchone()[0]
            reader = "jdbc" if est is not None and est >= self.config["jdbc_min_rows"] else "driver"
        read = self._read_jdbc if reader == "jdbc" else self._read_driver
        return SourceBatch(lambda errs, chunk_rows: read(snapshot, errs, chunk_rows), position)

    def _read_driver(self, snapshot: Optional[str], errs, chunk_rows: int):
        conn = connect(self.config["uri"], f"connector {self.ctx.connector} ({WHAT})")
        try:
            conn.autocommit = False
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                if snapshot:
                    conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                with conn.cursor(name="sqlengine_snapshot") as cur:
                    cur.itersize = chunk_rows
                    cur.execute(f"SELECT {self._select_list()} FROM {qualified(self.schema, self.pg_table)}")
                    seen: dict = {}
                    base = 0
                    while True:
                        rows = cur.fetchmany(chunk_rows)
                        if not rows:
                            break
                        yield self._convert(rows, 1, errs, seen, base)
                        base += len(rows)
        finally:
            conn.close()

    def _read_jdbc(self, snapshot: Optional[str], errs, chunk_rows: int):
        from sqlengine.executor.session import get_spark

        from .formats import arrow_batches_chunks
        jar = self.config["jdbc_jar"]
        if not os.path.exists(jar):
            raise PermanentConnectorError(f"{WHAT}: the PostgreSQL JDBC driver {jar} is missing (apt-get install "
                                          "libpostgresql-jdbc-java), or use \"snapshot_reader\": \"driver\"")
        spark = get_spark()
        # ADD JAR puts the driver on the session's class loader and makes it this thread's (JVM) context class
        # loader, which is where the JDBC source looks; each source thread is its own JVM thread, so every
        # read adds it (adding a jar again only logs a warning)
        spark.sql(f"ADD JAR '{jar}'")
        from urllib.parse import urlparse
        u = urlparse(self.config["uri"])
        url = f"jdbc:postgresql://{u.hostname or '127.0.0.1'}:{u.port or 5432}/{(u.path or '/postgres')[1:]}"
        reader = (spark.read.format("jdbc").option("url", url).option("driver", "org.postgresql.Driver")
                  .option("user", u.username or "postgres").option("fetchsize", "10000"))
        if u.password:
            reader = reader.option("password", u.password)
        init = "BEGIN ISOLATION LEVEL REPEATABLE READ"
        if snapshot:
            init += f"; SET TRANSACTION SNAPSHOT '{snapshot}'"
        reader = reader.option("sessionInitStatement", init)
        table = qualified(self.schema, self.pg_table)
        part = self._partition_column()
        if part and self.config["partitions"] > 1:
            lo, hi = self.conn.execute(f"SELECT min({quote(part)}), max({quote(part)}) FROM {table}").fetchone()
            if lo is not None and hi > lo:
                reader = (reader.option("partitionColumn", part).option("lowerBound", str(lo))
                          .option("upperBound", str(hi)).option("numPartitions", str(self.config["partitions"])))
        sub = f"(SELECT {self._select_list(text_column)} FROM {table}) AS sqlengine_snapshot"
        try:
            data = reader.option("dbtable", sub).load().toArrow()
        except Exception as e:   # noqa: BLE001 - py4j wraps the JDBC error
            text = str(getattr(e, "java_exception", e)).splitlines()[0][:500]
            raise ConnectorError(f"{WHAT}: Spark's JDBC read of {self.pg_name} failed: {text}") from None
        if not any(self._decoders):
            yield from arrow_batches_chunks(self.ctx.table, data.schema, data.to_batches(chunk_rows), {}, errs)
            return
        seen: dict = {}   # (arrays, JSON, UUID, TIME, bytea: their values decoded as the changes' are)
        base = 0
        for batch in data.to_batches(chunk_rows):
            rows = list(zip(*[c.to_pylist() for c in batch.columns])) if batch.num_columns else []
            if rows:
                yield self._convert(rows, 1, errs, seen, base)
                base += len(rows)

    def _partition_column(self) -> Optional[str]:
        for k in self.key:
            f = next(f for f in self.fields if f.name == k)
            if pa.types.is_integer(arrow_type(f.type)):
                return self._columns[k]
        return None

    # ------------------------------------------------------------ converting rows
    def _convert(self, rows: List[tuple], weights, errs, seen: dict, base: int, problems=()):
        """Positional rows (tuples in the table's column order, None where unknown) -> a checked chunk;
        ``problems``: (chunk row, column, message) of rows known to be bad."""
        errs.start_chunk(base, raw=lambda i: {f.name: rows[i][j] for j, f in enumerate(self.fields)})
        for i, column, message in problems:
            errs.add(i, column, message)
        arrays = []
        for j, f in enumerate(self.fields):
            target = arrow_type(f.type)
            values = [r[j] for r in rows]
            if self._decoders[j] is not None:
                values = self._decoded(values, self._decoders[j], f.name, errs)
            arrays.append(convert_values([_py(v, target) for v in values], f.type, f.name, errs))
        return finish(self.ctx.table, arrays, weights, errs, seen)

    def _decoded(self, values: List[Any], decode, column: str, errs) -> List[Any]:
        out = []
        for i, v in enumerate(values):
            try:
                out.append(None if v is None else decode(v))
            except (ValueError, TypeError, KeyError, IndexError) as e:
                errs.add(i, column, f"cannot read {str(v)[:80]!r} ({self._pg_types[column]} in PostgreSQL): {e}")
                out.append(None)
        return out

    # ------------------------------------------------------------ reading changes
    def poll(self, max_rows: int) -> Optional[SourceBatch]:
        import psycopg
        try:
            return self._poll(max_rows)
        except psycopg.Error as e:   # a server going down is transient; a dropped table or revoked privilege not
            raise pg_error(f"{WHAT}: reading {self.pg_name}: {str(e).strip()}", e) from None

    def _poll(self, max_rows: int) -> Optional[SourceBatch]:
        if self._pending is not None:
            batch, self._pending = self._pending, None
            self.position = batch.position
            return batch
        if self.repl is not None:     # the snapshot was logged: the exported snapshot is no longer needed
            self.repl.close()
            self.repl = None
        mode = self.config["mode"]
        if mode == "snapshot":
            self._done = True
            return None
        wait = self._next_poll - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 0.2))
            return None
        self._next_poll = time.monotonic() + self.config["poll_interval_ms"] / 1000
        return self._poll_changes(max_rows) if mode == "cdc" else self._poll_rows(max_rows)

    def _poll_changes(self, max_rows: int) -> Optional[SourceBatch]:
        committed = lsn_int((self._committed or {}).get("lsn"))
        if committed > self._advanced:
            self.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, self._committed["lsn"]))
            self._advanced = committed
        logged = lsn_int(self.position["lsn"])
        if logged > max(committed, self._advanced):
            time.sleep(0.002)
            self._next_poll = 0.0
            return None   # the last batch is not committed yet: the slot would give it again
        rows = self.conn.execute(
            "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, NULL, %s, 'format-version', '2', "
            "'include-transaction', 'true', 'add-tables', %s)",
            (self.slot, max_rows, f"{self.schema}.{self.pg_table}")).fetchall()
        changes: List[dict] = []
        txn: List[dict] = []
        end = None
        for lsn, data in rows:
            rec = json.loads(data, parse_float=Decimal)
            action = rec.get("action")
            if action == "B":
                txn = []
            elif action == "C":
                if lsn_int(lsn) > logged:
                    changes.extend(txn)
                    end = lsn
                txn = []
            elif action in ("I", "U", "D"):
                txn.append(rec)
        if end is None:
            return None
        if not changes:
            # only other tables' transactions: move the position on now and then, so the slot advances
            if time.monotonic() - self._last_empty < 1.0:
                return None
            self._last_empty = time.monotonic()
        position = {"lsn": end}
        self.position = position
        return SourceBatch(lambda errs, chunk_rows: self._change_chunks(changes, errs, chunk_rows), position,
                           bytes=sum(len(d) for _, d in rows))

    def _values(self, cols: Optional[List[dict]]) -> Dict[str, Any]:
        return {c["name"].lower(): c.get("value") for c in (cols or [])}

    def _row(self, values: Dict[str, Any], old: Optional[Dict[str, Any]] = None,
             missing: Optional[List[str]] = None) -> tuple:
        """The table's columns from decoded values.  An UPDATE's new row lacks the columns whose value was
        TOASTed and did not change: they come from the old row when it was logged whole (REPLICA IDENTITY
        FULL), else they are named in ``missing``."""
        out = []
        for f in self.fields:
            name = self._columns[f.name].lower()
            if name in values:
                out.append(values[name])
            elif old is not None and name in old:
                out.append(old[name])
            else:
                out.append(None)
                if missing is not None:
                    missing.append(f.name)
        return tuple(out)

    def _new_row(self, rec: dict, problems: list, i: int) -> tuple:
        missing: List[str] = []
        old = self._values(rec.get("identity")) if rec["action"] == "U" else None
        row = self._row(self._values(rec.get("columns")), old, missing if rec["action"] == "U" else None)
        for name in missing:
            problems.append((i, name, f"UPDATE of {self.pg_name} without the unchanged value of column {name} (a "
                                      f"large value stored out of line): ALTER TABLE {self.pg_name} REPLICA IDENTITY "
                                      "FULL so that the old row carries it"))
        return row

    def _change_chunks(self, changes: List[dict], errs, chunk_rows: int):
        """Decoded changes -> chunks.  With a primary key the batch is netted per key (the final row, or a
        delete of the key), in the order keys were first changed; without one, every change is a weighted row."""
        rows: List[tuple] = []
        weights: List[int] = []
        problems: List[tuple] = []   # (row, column, message): rows that go to the dead letter
        if self.key:
            kidx = [i for i, f in enumerate(self.fields) if f.name in self.key]
            final: Dict[tuple, Optional[tuple]] = {}
            lacking: Dict[tuple, List[tuple]] = {}
            for rec in changes:
                a = rec["action"]
                if a in ("U", "D"):
                    old = self._row(self._values(rec.get("identity")))
                    final[tuple(old[i] for i in kidx)] = None
                if a in ("I", "U"):
                    found: List[tuple] = []
                    new = self._new_row(rec, found, 0)
                    key = tuple(new[i] for i in kidx)
                    final[key] = new
                    lacking[key] = found
            for key, row in final.items():
                if row is None:
                    r = [None] * len(self.fields)
                    for i, v in zip(kidx, key):
                        r[i] = v
                    rows.append(tuple(r))
                    weights.append(-1)
                else:
                    problems += [(len(rows), c, m) for _, c, m in lacking.get(key, [])]
                    rows.append(row)
                    weights.append(1)
        else:
            for rec in changes:
                a = rec["action"]
                if a in ("U", "D"):
                    rows.append(self._row(self._values(rec.get("identity"))))
                    weights.append(-1)
                if a in ("I", "U"):
                    rows.append(self._new_row(rec, problems, len(rows)))
                    weights.append(1)
        seen: dict = {}
        for start in range(0, len(rows), chunk_rows):
            mine = [(i - start, c, m) for i, c, m in problems if start <= i < start + chunk_rows]
            yield self._convert(rows[start:start + chunk_rows], weights[start:start + chunk_rows], errs, seen, start,
                                mine)

    # ------------------------------------------------------------ poll mode
    def _poll_rows(self, max_rows: int) -> Optional[SourceBatch]:
        col = self._columns[next(f.name for f in self.fields if f.name.lower() == self.config["poll_column"].lower())]
        after = (self.position or {}).get("after")
        sql = f"SELECT {self._select_list()} FROM {qualified(self.schema, self.pg_table)}"
        params: Tuple[Any, ...] = ()
        if after is not None:
            sql += f" WHERE {quote(col)} > %s"
            params = (after,)
        rows = self.conn.execute(sql + f" ORDER BY {quote(col)} LIMIT %s", params + (max_rows,)).fetchall()
        if not rows:
            return None
        j = [f.name for f in self.fields].index(next(f.name for f in self.fields
                                                     if f.name.lower() == self.config["poll_column"].lower()))
        last = rows[-1][j]
        if last is None:
            raise ConnectorError(f"{WHAT}: poll_column {col} is NULL in some rows; it must be an increasing, "
                                 "non-NULL column")
        position = {"after": last.isoformat() if hasattr(last, "isoformat") else
                    (str(last) if isinstance(last, Decimal) else last)}
        self.position = position
        return SourceBatch(lambda errs, chunk_rows: self._row_chunks(rows, errs, chunk_rows), position)

    def _row_chunks(self, rows, errs, chunk_rows: int):
        seen: dict = {}
        for start in range(0, len(rows), chunk_rows):
            yield self._convert(rows[start:start + chunk_rows], 1, errs, seen, start)

    # ------------------------------------------------------------
    def finished(self) -> bool:
        return self._done

    def close(self) -> None:
        for c in (self.repl, self.conn):
            if c is not None:
                try:
                    c.close()
                except Exception:   # noqa: BLE001 - closing is best effort
                    pass
        self.repl = self.conn = None
        self._pending = None
