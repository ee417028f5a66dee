"""``delta_table_input``: a table's input from a Delta Lake table, as a snapshot and then its changes.

    CREATE TABLE orders (id BIGINT NOT NULL, customer VARCHAR, amount DECIMAL(10,2))
    WITH ('connectors' = '[{"name": "orders", "transport": {"name": "delta_table_input",
        "config": {"uri": "/lake/orders", "mode": "snapshot_and_follow"}}}]')

The table is read with delta-rs (the ``deltalake`` package, ``pip install 'sqlengine[delta]'``); no JVM.
``uri`` is a local path (or a ``file://`` URI).

**Modes.**
- ``snapshot_and_follow`` (the default): the table's contents at the start version, then the changes of
  every later version, one version at a time, as they are committed.
- ``snapshot``: the contents at the start version, then the connector finishes.
- ``follow``: only the changes of the versions after the start version.

The start version is ``version``, by default the table's latest version when the connector first opens.

**Changes.**  A version's changes are read from the table's change data feed (``load_cdf``): ``insert``
and ``update_postimage`` rows are inserts, ``delete`` and ``update_preimage`` rows are deletes.  The
change data feed exists for versions written while the table property ``delta.enableChangeDataFeed`` is
``true``.  Without it only versions that add rows can be followed (appends, and versions that change no
data, such as OPTIMIZE); a version that deletes or rewrites rows (DELETE, UPDATE, MERGE, an overwrite)
stops the connector with an error saying so; it retries, and does not skip the version.  Enable the feed
before such changes::

    DeltaTable(uri).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})

(or ``configuration={"delta.enableChangeDataFeed": "true"}`` when creating the table).  A version's
deletes are applied before its inserts, so an update of a row of a table with a PRIMARY KEY is a delete
of the old row then an insert of the new one.

**Exactly once.**  One batch per version (the snapshot is one batch too, read lazily in record batches,
so it need not fit in memory), logged with the position ``{"version": v}``: the table's contents up to
version ``v`` are in.  After a restart the engine reopens the connector at the position of the last
batch that reached its input log and the connector goes on with version ``v + 1``, so no version is read
twice or skipped.  In ``follow`` mode the start version is logged (in an empty batch) before any change,
so a restart does not move it.  The versions must still be in the table's log: a ``VACUUM`` or log
cleanup that removed the files of versions not read yet is an error.

**Columns.**  The SQL table's columns are matched by name (case-insensitively) with the Delta table's;
other Delta columns are not read.  A column of the SQL table that the Delta table lacks is NULL, unless it
is NOT NULL: then the connector stops with an error naming the missing columns.  A Delta
column whose type cannot hold the SQL column's (a string for an INT is parsed; a list for a VARCHAR is
an error) stops it with an error naming the column.  A value that does not fit (a BIGINT too big for an
INT column, NULL in a NOT NULL column) goes to the dead letter, naming the version, like bad input rows.

**Errors.**  Unreadable files, a version without a change data feed that deletes rows: a ``ConnectorError``
in ``status()`` naming the connector and the cause; the connector retries with backoff from its last logged
position, and the pipeline goes on.  A path that does not exist or is not a Delta table, a table whose
columns do not fit the SQL table, a position after the table's latest version (the table was replaced):
a ``PermanentConnectorError``; the connector stops in state ``failed``.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, Iterator, List, Optional
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc

from planner.errors import ConnectorError, PermanentConnectorError

from .base import Source, SourceBatch, opt, register_source
from .formats import _COMPATIBLE, _kind, arrow_batches_chunks, unit_chunks

WHAT = "delta_table_input"
CDF_PROPERTY = "delta.enableChangeDataFeed"
_WEIGHT = "__sqlengine_weight"       # the weight column the conversion reads (never a Delta column's name)
_DELETES = ("delete", "update_preimage")
_VIEWS = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def local_path(uri: str) -> Optional[str]:
    """The local directory a path or ``file://`` URI names (absolute), or None for another URI scheme."""
    u = urlparse(uri)
    if u.scheme == "file":
        return os.path.abspath(u.path or "/")
    if u.scheme and len(u.scheme) > 1:   # (a one-letter scheme is a Windows drive)
        return None
    return os.path.abspath(uri)


def delta_error_text(e: BaseException) -> str:
    """The first line of a delta-rs error, without its Rust debug tail."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:500]


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with view types (delta-rs reads strings as ``string_view``) as plain ones."""
    return pa.schema([f.with_type(_VIEWS.get(f.type, f.type)) for f in schema])


def plain_batches(reader, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A reader's record batches cast to ``schema`` (its plain form)."""
    for b in reader:
        if b.schema != schema:
            b = pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(b.columns, schema)], schema=schema)
        yield b


def rebatch(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """Record batches of about ``rows`` rows (delta-rs reads small ones)."""
    buf: List[pa.RecordBatch] = []
    n = 0
    for b in batches:
        buf.append(b)
        n += b.num_rows
        if n >= rows:
            yield from pa.Table.from_batches(buf).combine_chunks().to_batches()
            buf, n = [], 0
    if n:
        yield from pa.Table.from_batches(buf).combine_chunks().to_batches()


@register_source
class DeltaTableInput(Source):
    transport = "delta_table_input"
    OPTIONS = {
        "uri": opt(str, required=True, doc="the Delta table: a local path or a file:// URI"),
        "version": opt(int, doc="the version to start from (default: the latest when the connector first opens)"),
        "mode": opt(str, default="snapshot_and_follow", choices=("snapshot_and_follow", "snapshot", "follow"),
                    doc="the contents then the changes; the contents only; the changes after the start version only"),
        "poll_interval_ms": opt(int, default=1000, doc="how often to look for new versions"),
    }
    FORMATS = ()
    EXTRA = "delta"
    MODULES = ("deltalake",)

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        if not c["uri"]:
            raise where.error(f"transport {WHAT}: \"uri\" must not be empty", "uri")
        if local_path(c["uri"]) is None:
            raise where.error(f"transport {WHAT}: \"uri\" must be a local path or a file:// URI, not {c['uri']!r}",
                              "uri")
        if c["version"] is not None and c["version"] < 0:
            raise where.error(f"transport {WHAT}: \"version\" must be 0 or more, not {c['version']}", "version")
        if c["poll_interval_ms"] <= 0:
            raise where.error(f"transport {WHAT}: \"poll_interval_ms\" must be positive", "poll_interval_ms")

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.path = local_path(config["uri"]) or config["uri"]
        self.dt = None                    # the DeltaTable, at the latest version seen
        self.version: Optional[int] = None   # the last version whose changes are in (None: nothing read yet)
        self.latest: Optional[int] = None
        self.checked_at: Optional[float] = None
        self.cdf = False                  # the change data feed is on as of ``self.version``
        self.schema: Optional[pa.Schema] = None   # the Delta table's schema as of ``self.version``
        self.done = False                 # snapshot mode: the snapshot was read

    # ------------------------------------------------------------ opening
    def _error(self, message: str, permanent: bool = False) -> ConnectorError:
        return (PermanentConnectorError if permanent else ConnectorError)(f"{WHAT}: {message}")

    def _load(self, version: Optional[int] = None):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError
        try:
            return DeltaTable(self.path) if version is None else DeltaTable(self.path, version=version)
        except TableNotFoundError as e:
            why = "does not exist" if not os.path.exists(self.path) else "is not a Delta table (no _delta_log)"
            raise self._error(f"{self.path} {why}: {delta_error_text(e)}", permanent=True) from None
        except Exception as e:   # noqa: BLE001 - delta-rs raises DeltaError, OSError, ...
            at = "" if version is None else f" at version {version}"
            raise self._error(f"cannot read the Delta table {self.path}{at}: {delta_error_text(e)}") from None

    def open(self, position: Any) -> None:
        self.dt = self._load()
        self.latest = self.dt.version()
        self.checked_at = time.monotonic()
        self.done = False
        self.version = None
        if position is not None:
            self.version = int(position["version"])
            if self.version > self.latest:
                raise self._error(f"the position (version {self.version}) is after the latest version of "
                                  f"{self.path} ({self.latest}): was the table replaced?", permanent=True)
            self.done = self.config["mode"] == "snapshot"
            at = self._load(self.version) if self.version != self.latest else self.dt
            self.cdf = self._cdf_on(at)
            self.schema = self._arrow_schema(at)
            self._check_schema(self.schema, f"version {self.version}")
            return
        start = self.config["version"]
        if start is not None and start > self.latest:
            raise self._error(f"\"version\" {start} does not exist yet: the latest version of {self.path} is "
                              f"{self.latest}")
        at = self._load(start) if start is not None and start != self.latest else self.dt
        self.cdf = self._cdf_on(at)
        self.schema = self._arrow_schema(at)
        self._check_schema(self.schema, f"version {at.version()}")
        self._start = at

    @staticmethod
    def _cdf_on(dt) -> bool:
        return str(dt.metadata().configuration.get(CDF_PROPERTY, "false")).lower() == "true"

    @staticmethod
    def _arrow_schema(dt) -> pa.Schema:
        return plain_schema(pa.schema(dt.schema()))

    def _check_schema(self, schema: pa.Schema, what: str) -> None:
        """Every NOT NULL column of the SQL table is in the Delta table, and every matched column's type can
        hold the SQL column's."""
        from sqlengine.types import arrow_type
        t = self.ctx.table
        by_lower = {n.lower(): i for i, n in enumerate(schema.names)}
        missing = [f.name for f in t.fields if f.name.lower() not in by_lower and not f.type.nullable]
        if missing:
            raise self._error(f"the Delta table {self.path} ({what}) has no column {', '.join(missing)}, "
                              f"NOT NULL in table {t.name}. Its columns: {', '.join(schema.names)}", permanent=True)
        if not any(f.name.lower() in by_lower for f in t.fields):
            raise self._error(f"the Delta table {self.path} ({what}) has none of the columns of table {t.name} "
                              f"({', '.join(f.name for f in t.fields)}). Its columns: {', '.join(schema.names)}",
                              permanent=True)
        for f in t.fields:
            i = by_lower.get(f.name.lower())
            if i is None:
                continue
            src, want = _kind(schema.types[i]), _kind(arrow_type(f.type))
            if not (src == want or src in ("string", "null") or src in _COMPATIBLE.get(want, ())):
                raise self._error(f"column {f.name} is {schema.types[i]} in the Delta table {self.path} ({what}) "
                                  f"but {f.type.sql} in table {t.name}", permanent=True)

    def _columns(self, schema: pa.Schema) -> List[str]:
        """The Delta columns read: those matching a column of the SQL table."""
        names = {f.name.lower() for f in self.ctx.table.fields}
        return [n for n in schema.names if n.lower() in names]

    # ------------------------------------------------------------ reading
    def poll(self, max_rows: int) -> Optional[SourceBatch]:
        if self.version is None:
            return self._first()
        if self.config["mode"] == "snapshot":
            self.done = True
            return None
        nxt = self.version + 1
        if self.latest is None or self.latest < nxt:
            wait = self.checked_at + self.config["poll_interval_ms"] / 1000 - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, 0.2))
                return None
            self.checked_at = time.monotonic()
            try:
                self.dt.update_incremental()
            except Exception as e:   # noqa: BLE001
                raise self._error(f"cannot read the log of {self.path}: {delta_error_text(e)}") from None
            self.latest = self.dt.version()
            if self.latest < nxt:
                time.sleep(min(0.2, self.config["poll_interval_ms"] / 1000))
                return None
        batch = self._version_batch(nxt)
        self.version = nxt
        return batch

    def _first(self) -> SourceBatch:
        """The snapshot of the start version (or, in follow mode, an empty batch logging it)."""
        at = self._start
        v = at.version()
        if self.config["mode"] == "follow":
            self.version = v
            return SourceBatch(lambda errs, rows: iter(()), {"version": v})
        schema = self.schema
        cols = self._columns(schema)
        read_schema = pa.schema([schema.field(c) for c in cols])

        def read(errs, chunk_rows):
            reader = pa.RecordBatchReader.from_stream(at.scan(columns=cols))
            yield from arrow_batches_chunks(self.ctx.table, read_schema,
                                            rebatch(plain_batches(reader, read_schema), chunk_rows), {}, errs)
        self.version = v
        self.done = self.config["mode"] == "snapshot"
        return SourceBatch(unit_chunks([(f"{self.path}@{v} (snapshot)", self._guard(read, v))], recoverable=()),
                           {"version": v}, bytes=self._bytes(at))

    def _guard(self, chunks: Callable, v: int) -> Callable:
        """``chunks`` with delta-rs failures as ``ConnectorError`` (the source retries the version) rather
        than as a bad unit (which would skip it)."""
        from deltalake.exceptions import DeltaError

        def guarded(errs, chunk_rows):
            try:
                yield from chunks(errs, chunk_rows)
            except (DeltaError, OSError) as e:
                raise self._error(f"cannot read version {v} of {self.path}: {delta_error_text(e)}") from None
        return guarded

    @staticmethod
    def _bytes(dt) -> int:
        try:
            sizes = pa.table(dt.get_add_actions(flatten=True)).column("size_bytes")
            return int(pc.sum(sizes).as_py() or 0)
        except Exception:   # noqa: BLE001 - only for the status' byte count
            return 0

    def _commit(self, v: int) -> List[Dict[str, Any]]:
        """The actions of version ``v``'s commit (the JSON lines of ``_delta_log/<v>.json``)."""
        path = os.path.join(self.path, "_delta_log", f"{v:020d}.json")
        try:
            with open(path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            raise self._error(f"version {v} of {self.path} is no longer in the table's log (log cleanup or "
                              f"VACUUM removed it before it was read)") from None
        except (OSError, ValueError) as e:
            raise self._error(f"cannot read the commit of version {v} of {self.path}: {e}") from None

    def _version_batch(self, v: int) -> SourceBatch:
        """The changes of version ``v`` (the one after ``self.version``): its deletes, then its inserts."""
        from deltalake import Schema
        actions = self._commit(v)
        cdc = False
        removes = adds = 0
        cdf, schema = self.cdf, self.schema
        for a in actions:
            if "metaData" in a:   # the table's properties or schema changed in this version
                conf = a["metaData"].get("configuration") or {}
                cdf = str(conf.get(CDF_PROPERTY, "false")).lower() == "true"
                if a["metaData"].get("schemaString"):
                    schema = plain_schema(pa.schema(Schema.from_json(a["metaData"]["schemaString"])))
            elif "cdc" in a:
                cdc = True
            elif "remove" in a and a["remove"].get("dataChange", True):
                removes += 1
            elif "add" in a and a["add"].get("dataChange", True):
                adds += 1
        if removes and not cdc and not cdf:
            op = next((a["commitInfo"].get("operation") for a in actions if "commitInfo" in a), None) or "a change"
            raise self._error(
                f"version {v} of {self.path} ({op}) deletes or rewrites rows, and the table has no change data "
                f"feed, so only appends can be followed. Enable the feed (table property "
                f"{CDF_PROPERTY} = true, e.g. DeltaTable(uri).alter.set_table_properties("
                f"{{\"{CDF_PROPERTY}\": \"true\"}})) before deleting or updating rows, or restart the pipeline "
                f"from a snapshot of the table (a new storage directory)")
        self._check_schema(schema, f"version {v}")
        self.cdf, self.schema = cdf, schema
        if not (cdc or removes or adds):   # no data change (OPTIMIZE, a property change): nothing to read
            return SourceBatch(lambda errs, rows: iter(()), {"version": v})
        cols = self._columns(schema)
        read_schema = pa.schema([schema.field(c) for c in cols] + [pa.field("_change_type", pa.string())])
        dt = self.dt

        def changes(deletes: bool):
            weight = -1 if deletes else 1
            names = ", ".join(f"'{x}'" for x in _DELETES)
            predicate = f"_change_type {'IN' if deletes else 'NOT IN'} ({names})"

            def read(errs, chunk_rows):
                reader = pa.RecordBatchReader.from_stream(
                    dt.load_cdf(starting_version=v, ending_version=v, columns=cols + ["_change_type"],
                                predicate=predicate))
                out_schema = pa.schema(list(read_schema)[:-1] + [pa.field(_WEIGHT, pa.int64())])

                def weighted():
                    for b in rebatch(plain_batches(reader, read_schema), chunk_rows):
                        w = pa.array([weight] * b.num_rows, pa.int64())
                        yield pa.RecordBatch.from_arrays(b.columns[:-1] + [w], schema=out_schema)
                yield from arrow_batches_chunks(self.ctx.table, out_schema, weighted(),
                                                {"weight_column": _WEIGHT}, errs)
            return self._guard(read, v)
        units = [(f"{self.path}@{v} (deleted rows)", changes(True)),
                 (f"{self.path}@{v} (inserted rows)", changes(False))]
        return SourceBatch(unit_chunks(units, recoverable=()), {"version": v})

    def finished(self) -> bool:
        return self.config["mode"] == "snapshot" and self.done

    def lag(self) -> Optional[int]:
        if self.latest is None or self.version is None:
            return None
        return max(self.latest - self.version, 0)   # versions behind the latest seen

    def close(self) -> None:
        self.dt = None
