"""``postgres_output``: keeps a PostgreSQL table equal to a view.

    CREATE MATERIALIZED VIEW customer_totals WITH ('connectors' = '[{"transport": {"name": "postgres_output",
        "config": {"uri": "postgresql://app@127.0.0.1:5432/shop", "table": "customer_totals",
                   "key": ["customer"]}}}]') AS SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer;

The table is created when it does not exist, with the view's columns (BIGINT -> bigint, DECIMAL(p,s) ->
numeric(p,s), VARCHAR -> text, TIMESTAMP -> timestamp, ...) and the ``key`` as its primary key.  An
existing table must have the view's columns with fitting types (other columns, with defaults, may
exist); a missing or mismatched column is an error naming it.

**Applying a step.**  Each step's changes are copied into a temporary table with ``COPY`` (one round trip
for any number of rows) and applied in one transaction:
- with ``key``: the rows of keys the step deletes are deleted, then the step's new rows are inserted
  with ``INSERT ... ON CONFLICT (key) DO UPDATE``.  The key must be a key of the view (at most one row per
  key value).  The table gets a PRIMARY KEY on it, or, when the view's key columns may be NULL, a
  ``UNIQUE NULLS NOT DISTINCT`` constraint (NULL is one key value, as in GROUP BY);
- without ``key``: the table is a multiset like the view: a row deleted n times loses n of its copies
  (matched on all columns, NULLs equal), a row inserted n times gets n copies.  Matching on all columns
  scans the table: declare a key for big views.

**Exactly once.**  The same transaction records the step in ``sqlengine_sink_progress`` (a small table in
the same schema, one row per output table: the pipeline id and the last step applied).  ``open()`` reads
it back, a replayed step is skipped, and a table written by another pipeline is refused.  The view must be
MATERIALIZED: a sink added to a pipeline that already ran starts from the view's contents (replacing the
table's rows in one transaction).
"""
from __future__ import annotations

import io
from typing import Dict

import pyarrow as pa
import pyarrow.csv as pacsv

from planner.errors import PermanentConnectorError

from .base import Sink, opt, register_sink
from .postgres_common import check_columns, check_table_name, connect, pg_error, pg_type, qualified, quote, \
    split_table, table_columns
from .postgres_values import as_text, needs_text_out

WEIGHT = "__weight"
PROGRESS = "sqlengine_sink_progress"
WHAT = "postgres_output"


@register_sink
class PostgresOutput(Sink):
    transport = WHAT
    OPTIONS = {
        "uri": opt(str, required=True, doc="libpq connection URI, e.g. postgresql://user:password@host:5432/db"),
        "table": opt(str, required=True, doc="the PostgreSQL table, \"schema.table\" or \"table\" (schema public); "
                                            "created if missing"),
        "key": opt(list, default=[], doc="view columns that are a key of the view: rows are upserted and deleted "
                                         "by them (else matched on all columns)"),
    }
    FORMATS = ()
    EXTRA = "postgres"
    MODULES = ("psycopg",)
    SEEDED = True

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        check_table_name(c["table"], where, WHAT)
        if not self.ctx.materialized:
            raise where.error(f"{WHAT}: view {self.ctx.relation} must be a MATERIALIZED VIEW: a sink added later "
                              "starts from the view's contents", "table")
        names = [n for n, _ in self.ctx.columns]
        for k in c["key"]:
            if not isinstance(k, str) or k.lower() not in {n.lower() for n in names}:
                raise where.error(f"{WHAT}: key column {k!r} is not a column of view {self.ctx.relation} "
                                  f"({', '.join(names)})", "key")
        for n, t in self.ctx.columns:
            try:
                mapped = pg_type(t)
            except KeyError:
                mapped = None
            if mapped is None:
                raise where.error(f"{WHAT}: column {n} of type {t.sql} has no PostgreSQL type")

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.schema, self.pg_table = split_table(config["table"], strict=False)
        self.pg_name = f"{self.schema}.{self.pg_table}"
        self.conn = None
        self.names = [n for n, _ in ctx.columns]
        by_lower = {n.lower(): n for n in self.names}
        self.key = [by_lower.get(str(k).lower(), k) for k in config["key"]]   # (an unknown one: see validate)
        self.pg_cols: Dict[str, str] = {}

    # ------------------------------------------------------------ opening
    def open(self) -> int:
        self.close()
        self.conn = connect(self.config["uri"], f"connector {self.ctx.connector} ({WHAT})")
        import psycopg
        try:
            with self.conn.transaction():   # sinks opening at once: CREATE ... IF NOT EXISTS is not safe concurrently
                self.conn.execute("SELECT pg_advisory_xact_lock(hashtext('sqlengine_sink_progress'))")
                return self._open()
        except psycopg.Error as e:   # (permanent: missing privileges, a schema that cannot be created, ...)
            raise pg_error(f"{WHAT}: {self.pg_name}: {str(e).strip()}", e) from None

    def _open(self) -> int:
        table = qualified(self.schema, self.pg_table)
        if self.conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone() is None:
            self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.schema)}")
        cols = table_columns(self.conn, self.schema, self.pg_table)
        if cols is None:
            types = dict(self.ctx.columns)
            nullable = any(types[k].nullable for k in self.key)
            ddl = ", ".join(f"{quote(n)} {pg_type(t)}" + (" NOT NULL" if n in self.key and not nullable else "")
                            for n, t in self.ctx.columns)
            if self.key:   # a key the view may hold NULL in: NULL is one value of it
                ddl += (", UNIQUE NULLS NOT DISTINCT" if nullable else ", PRIMARY KEY") + \
                    f" ({', '.join(quote(k) for k in self.key)})"
            self.conn.execute(f"CREATE TABLE IF NOT EXISTS {table} ({ddl})")
            cols = table_columns(self.conn, self.schema, self.pg_table)
        self.pg_cols = check_columns(WHAT, f"view {self.ctx.relation}", list(self.ctx.columns), cols, self.pg_name,
                                     reading=False)
        if self.key:
            self._check_key(table)
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS {qualified(self.schema, PROGRESS)} "
                          "(sink text PRIMARY KEY, pipeline text NOT NULL, step bigint NOT NULL)")
        row = self.conn.execute(f"SELECT pipeline, step FROM {qualified(self.schema, PROGRESS)} WHERE sink = %s",
                                (self.pg_table,)).fetchone()
        if row is None:
            return 0
        if self.ctx.pipeline_id and row[0] != self.ctx.pipeline_id:
            raise PermanentConnectorError(f"{WHAT}: {self.pg_name} holds the output of another pipeline ({row[0]}); "
                                          f"drop the table and its row in {self.schema}.{PROGRESS}, or use another "
                                          "table")
        return int(row[1])

    def _check_key(self, table: str) -> None:
        """ON CONFLICT needs a unique index on exactly the key columns."""
        want = {self.pg_cols[k] for k in self.key}
        idx = self.conn.execute(
            "SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
            "a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisunique GROUP BY i.indexrelid",
            (table,)).fetchall()
        if not any(set(r[0]) == want for r in idx):
            raise PermanentConnectorError(f"{WHAT}: {self.pg_name} has no primary key or unique index on the key "
                                          f"({', '.join(self.key)}); add one or use another table")

    # ------------------------------------------------------------ writing
    def write(self, step: int, changes: pa.Table) -> None:
        self._transaction(step, changes, replace=False)

    def seed(self, step: int, contents: pa.Table) -> None:
        self._transaction(step, contents, replace=True)

    def _transaction(self, step: int, changes: pa.Table, replace: bool) -> None:
        import psycopg
        progress = qualified(self.schema, PROGRESS)
        try:
            with self.conn.transaction():
                row = self.conn.execute(f"SELECT step FROM {progress} WHERE sink = %s FOR UPDATE",
                                        (self.pg_table,)).fetchone()
                if row is not None and row[0] >= step and not replace:
                    return   # a replayed step: already applied
                self._apply(changes, replace)
                self.conn.execute(f"INSERT INTO {progress} (sink, pipeline, step) VALUES (%s, %s, %s) ON CONFLICT "
                                  "(sink) DO UPDATE SET pipeline = excluded.pipeline, step = excluded.step",
                                  (self.pg_table, self.ctx.pipeline_id, step))
        except psycopg.Error as e:   # (permanent: a value that does not fit the column, a dropped table, ...)
            raise pg_error(f"{WHAT}: writing step {step} to {self.pg_name} failed: {str(e).strip()}", e) from None

    def _copy_changes(self, changes: pa.Table) -> None:
        """The changes into the temporary table ``sqlengine_changes`` (view columns + w), by COPY of CSV."""
        cols = ", ".join(f"{quote(self.pg_cols[n])} {pg_type(t)}" for n, t in self.ctx.columns)
        self.conn.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS sqlengine_changes ({cols}, sqlengine_w bigint) "
                          "ON COMMIT DELETE ROWS")
        buf = io.BytesIO()
        t = changes.select(self.names + [WEIGHT])
        for i, (n, ftype) in enumerate(self.ctx.columns):   # arrays, JSON, bytea: as the text COPY reads
            if needs_text_out(ftype):
                t = t.set_column(i, n, as_text(t.column(i).combine_chunks(), ftype))
        # every non-NULL string quoted, so that an empty string is not read back as NULL
        pacsv.write_csv(t, buf, pacsv.WriteOptions(include_header=False, quoting_style="all_valid"))
        names = ", ".join(quote(self.pg_cols[n]) for n in self.names)
        with self.conn.cursor().copy(f"COPY sqlengine_changes ({names}, sqlengine_w) FROM STDIN (FORMAT csv)") as cp:
            cp.write(buf.getvalue())

    def _apply(self, changes: pa.Table, replace: bool) -> None:
        table = qualified(self.schema, self.pg_table)
        if replace:
            self.conn.execute(f"DELETE FROM {table}")
        if not changes.num_rows:
            return
        self._copy_changes(changes)
        cols = [quote(self.pg_cols[n]) for n in self.names]
        collist = ", ".join(cols)
        if self.key:
            keys = [quote(self.pg_cols[k]) for k in self.key]
            types = dict(self.ctx.columns)
            match = " AND ".join(f"(t.{q} = c.{q} OR (t.{q} IS NULL AND c.{q} IS NULL))" if types[k].nullable
                                 else f"t.{q} = c.{q}" for k, q in zip(self.key, keys))
            self.conn.execute(f"DELETE FROM {table} t USING sqlengine_changes c WHERE c.sqlengine_w < 0 AND {match}")
            rest = [c for c in cols if c not in keys]
            update = (f"DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in rest)}" if rest else "DO NOTHING")
            self.conn.execute(f"INSERT INTO {table} ({collist}) SELECT {collist} FROM sqlengine_changes "
                              f"WHERE sqlengine_w > 0 ON CONFLICT ({', '.join(keys)}) {update}")
        else:
            same = " AND ".join(f"t.{c} IS NOT DISTINCT FROM d.{c}" for c in cols)
            self.conn.execute(
                f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM (SELECT t.ctid, row_number() OVER "
                f"(PARTITION BY {', '.join('t.' + c for c in cols)}) AS rn, d.n FROM {table} t JOIN "
                f"(SELECT {collist}, -sum(sqlengine_w) AS n FROM sqlengine_changes WHERE sqlengine_w < 0 "
                f"GROUP BY {collist}) d ON {same}) x WHERE rn <= n)")
            self.conn.execute(f"INSERT INTO {table} ({collist}) SELECT {collist} FROM sqlengine_changes, "
                              "generate_series(1, sqlengine_w) WHERE sqlengine_w > 0")

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:   # noqa: BLE001 - closing is best effort
                pass
            self.conn = None
