"""``delta_table_output``: a view's changes, or its contents, in a Delta Lake table, exactly once.

    CREATE MATERIALIZED VIEW totals WITH ('connectors' = '[{"name": "lake", "transport": {
        "name": "delta_table_output", "config": {"uri": "/lake/totals", "mode": "mirror", "key": ["g"]}}}]')
    AS SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY g

Written with delta-rs (the ``deltalake`` package, ``pip install 'sqlengine[delta]'``); no JVM.  ``uri`` is
a local path (or a ``file://`` URI).  The table is created at the first write when it does not exist,
with the view's columns and their types (plus ``__weight`` and ``__step`` in changelog mode), partitioned
by ``partition_by`` if given.

**Modes.**
- ``changelog`` (the default): each step that changed the view appends its changed rows, with
  ``__weight`` (+n: n copies inserted, -n: n copies deleted) and ``__step``, in one commit.  Summing the
  weights per row over the table gives the view's contents.
- ``mirror``: the table holds the view's contents (a row the view holds n times is there n times), kept
  up to date with one commit per step: a MERGE, or an append when the step only inserts.  It starts
  from the view's contents (``seed``), replacing what the table held, in one commit, so it needs a
  MATERIALIZED VIEW.

  With ``key`` (columns that identify a row of the view, e.g. the GROUP BY columns), the MERGE matches
  rows by key (NULL-safe): a key with a net delete and no new row is deleted, a key with a new row is
  updated or inserted.  The key must be unique in the view; a step that inserts two rows with one key
  is an error.
  Without ``key``, rows are matched on all their columns (NULL-safe) and multiplicities are kept: rows
  the step inserts are appended as many times as they are inserted; for a row with a net delete, the
  MERGE deletes all its copies and inserts back as many as remain.  How many copies the table holds is
  read from the table before the MERGE (a scan of the table joined with the step's deleted rows), so a
  mirror without key costs a scan of the table per step that deletes: give a key for big tables.

**Exactly once.**  Every commit of a step carries a Delta transaction identifier (``txn`` action): the
application id ``sqlengine-<pipeline id>-<view>-<connector>`` and the step as its version, in the same
atomic commit as the data.  ``open()`` reads the application id's version back from the table, which is
the last step the table holds; the engine delivers the steps after it, and a step it holds (a replay after
a crash) is not written again.

**Ownership.**  The table records the id of the pipeline that writes it in the table property
``sqlengine.pipeline`` (set when the connector creates the table, or when it first opens a table that
has none).  A table that another pipeline writes is refused with an error, rather than mixing two
pipelines' steps: use another path, or remove the table.  In changelog mode a table that holds rows this
connector did not write is refused too (a mirror replaces such rows).  Other writers must not change the
table while the pipeline runs (a concurrent commit makes the step's commit fail and retry).

**Errors.**  A path that is not writable: a ``ConnectorError`` in ``status()``; the connector retries with
backoff (the steps wait in the outbox) and the pipeline goes on.  A path holding something else than a
Delta table, a table whose columns are not the view's, one holding another pipeline's output or rows this
connector did not write: a ``PermanentConnectorError``; the connector stops in state ``failed``.  Options are checked when the program is compiled: an unknown ``key`` or ``partition_by``
column, ``key`` outside mirror mode, mirror mode on a view that is not MATERIALIZED.
"""
from __future__ import annotations

import difflib
import os
from typing import Any, List

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner.errors import ConnectorError, PermanentConnectorError

from .base import Sink, opt, register_sink
from .delta_input import delta_error_text, local_path, plain_batches, plain_schema

WHAT = "delta_table_output"
WEIGHT = "__weight"
STEP = "__step"
OWNER_PROPERTY = "sqlengine.pipeline"   # the id of the pipeline whose output the table holds
_OP = "__sqlengine_op"                  # the MERGE source's action column (never a view column)


def quote(name: str) -> str:
    """A column name as a (DataFusion or DuckDB) SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def expand(rows: pa.Table, weights) -> pa.Table:
    """Each row of ``rows`` repeated by its (positive) weight."""
    w = np.asarray(weights, dtype=np.int64)
    if w.size and (w == 1).all():
        return rows
    return rows.take(pa.array(np.repeat(np.arange(len(w)), np.maximum(w, 0))))


@register_sink
class DeltaTableOutput(Sink):
    transport = "delta_table_output"
    OPTIONS = {
        "uri": opt(str, required=True, doc="the Delta table: a local path or a file:// URI (created if missing)"),
        "mode": opt(str, default="changelog", choices=("changelog", "mirror"),
                    doc="append each step's changes with __weight and __step, or keep the table equal to the view"),
        "key": opt(list, doc="mirror: the view columns that identify a row (default: match rows on all columns)"),
        "partition_by": opt(list, doc="columns to partition a table the connector creates by"),
    }
    FORMATS = ()
    EXTRA = "delta"
    MODULES = ("deltalake",)

    def validate(self) -> None:
        c, where, view = self.config, self.ctx.where, self.ctx.relation
        names = [n for n, _ in self.ctx.columns]
        if not c["uri"]:
            raise where.error(f"transport {WHAT}: \"uri\" must not be empty", "uri")
        if local_path(c["uri"]) is None:
            raise where.error(f"transport {WHAT}: \"uri\" must be a local path or a file:// URI, not {c['uri']!r}",
                              "uri")
        if c["mode"] == "mirror" and not self.ctx.materialized:
            raise where.error(f"transport {WHAT}: mirror mode needs a MATERIALIZED VIEW ({view} is not): the "
                              f"table starts from the view's contents", "mode")
        if c["key"] is not None:
            if c["mode"] != "mirror":
                raise where.error(f"transport {WHAT}: \"key\" is only used in mirror mode", "key")
            self._check_columns("key", c["key"], names)
            if not c["key"]:
                raise where.error(f"transport {WHAT}: \"key\" must name at least one column of {view}", "key")
        if c["partition_by"] is not None:
            extra = [WEIGHT, STEP] if c["mode"] == "changelog" else []
            self._check_columns("partition_by", c["partition_by"], names + extra)
            if c["partition_by"] and len(c["partition_by"]) >= len(names) + len(extra):
                raise where.error(f"transport {WHAT}: \"partition_by\" cannot name every column", "partition_by")
        reserved = [n for n in names if n in (WEIGHT, STEP, _OP)]
        if reserved:
            raise where.error(f"transport {WHAT}: view {view} has a column named {reserved[0]}, which the "
                              f"connector uses itself; rename it")

    def _check_columns(self, option: str, given: Any, names: List[str]) -> None:
        where, view = self.ctx.where, self.ctx.relation
        if not all(isinstance(x, str) for x in given):
            raise where.error(f"transport {WHAT}: \"{option}\" must be a list of column names, not {given!r}",
                              option)
        for x in given:
            if x not in names:
                close = difflib.get_close_matches(x, names, n=1)
                hint = f" (did you mean \"{close[0]}\"?)" if close else ""
                raise where.error(f"transport {WHAT}: {option} column \"{x}\" is not a column of {view}{hint}. "
                                  f"Columns: {', '.join(names)}", option)
        if len(set(given)) != len(given):
            raise where.error(f"transport {WHAT}: \"{option}\" names a column twice", option)

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.path = local_path(config["uri"]) or config["uri"]
        self.mirror = config["mode"] == "mirror"
        self.SEEDED = self.mirror      # a mirror starts from the view's contents
        self.key: List[str] = list(config["key"] or [])
        self.dt = None                 # the DeltaTable (None: it does not exist yet)
        self.held = 0                  # the last step the table holds
        self.fresh = True              # the table holds nothing this connector wrote

    # ------------------------------------------------------------ opening
    def _error(self, message: str, permanent: bool = False) -> ConnectorError:
        return (PermanentConnectorError if permanent else ConnectorError)(f"{WHAT}: {message}")

    @property
    def app_id(self) -> str:
        """The Delta transaction id of this connector's commits."""
        return f"sqlengine-{self.ctx.pipeline_id}-{self.ctx.relation}-{self.ctx.connector}"

    def columns(self) -> List[str]:
        """The table's columns."""
        names = [n for n, _ in self.ctx.columns]
        return names if self.mirror else names + [WEIGHT, STEP]

    def open(self) -> int:
        from deltalake import DeltaTable
        self.dt, self.held, self.fresh = None, 0, True
        try:
            if not DeltaTable.is_deltatable(self.path):
                if os.path.isdir(self.path) and os.listdir(self.path) or os.path.isfile(self.path):
                    raise self._error(f"{self.path} exists and is not a Delta table; remove it or use another path",
                                      permanent=True)
                return 0
            dt = DeltaTable(self.path)
        except ConnectorError:
            raise
        except Exception as e:   # noqa: BLE001 - delta-rs raises DeltaError, OSError, ...
            raise self._error(f"cannot open the Delta table {self.path}: {delta_error_text(e)}") from None
        owner = dt.metadata().configuration.get(OWNER_PROPERTY)
        me = self.ctx.pipeline_id
        if owner and me and owner != me:
            raise self._error(f"{self.path} holds the output of another pipeline ({owner}); remove it or use "
                              f"another path", permanent=True)
        have = pa.schema(dt.schema()).names
        if have != self.columns():
            raise self._error(f"the Delta table {self.path} has the columns {', '.join(have)}, not those of "
                              f"{'view ' + self.ctx.relation if self.mirror else 'the changelog'} "
                              f"({', '.join(self.columns())}); remove it or use another path", permanent=True)
        self.held = int(dt.transaction_version(self.app_id) or 0)
        self.fresh = self.held == 0
        if self.fresh and not self.mirror and dt.file_uris():
            raise self._error(f"the Delta table {self.path} holds rows this connector did not write; remove it or "
                              f"use another path", permanent=True)
        if not owner and me:
            self._run(lambda: dt.alter.set_table_properties({OWNER_PROPERTY: me}, raise_if_not_exists=False),
                      "claim")
        self.dt = dt
        return self.held

    # ------------------------------------------------------------ writing
    def _run(self, what, doing: str):
        try:
            return what()
        except ConnectorError:
            raise
        except Exception as e:   # noqa: BLE001 - delta-rs raises DeltaError, OSError, CommitFailedError, ...
            raise self._error(f"cannot {doing} the Delta table {self.path}: {delta_error_text(e)}") from None

    def _commit_properties(self, step: int):
        from deltalake import CommitProperties, Transaction
        return CommitProperties(app_transactions=[Transaction(self.app_id, step)])

    def _prepare(self, data: pa.Table) -> pa.Table:
        """``data`` with the table's columns and types (creating the table, from its schema, if missing)."""
        from deltalake import DeltaTable
        data = data.cast(plain_schema(data.schema))
        if self.dt is None:
            def create():
                os.makedirs(self.path, exist_ok=True)
                conf = {OWNER_PROPERTY: self.ctx.pipeline_id} if self.ctx.pipeline_id else None
                return DeltaTable.create(self.path, data.schema, partition_by=self.config["partition_by"] or None,
                                         configuration=conf, raise_if_key_not_exists=False)
            self.dt = self._run(create, "create")
        target = pa.schema(self.dt.schema())
        try:
            return data.select(target.names).cast(target)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise self._error(f"the rows do not fit the Delta table {self.path} ({target}): {e}",
                              permanent=True) from None

    def _write(self, data: pa.Table, step: int, mode: str = "append") -> None:
        from deltalake import write_deltalake
        data = self._prepare(data)
        self._run(lambda: write_deltalake(self.dt, data, mode=mode, commit_properties=self._commit_properties(step)),
                  "write to")

    def write(self, step: int, changes: pa.Table) -> None:
        if step <= self.held:
            return   # a step the table holds (a replay): no effect
        if not changes.num_rows:
            return
        if not self.mirror:
            t = changes.append_column(STEP, pa.array(np.full(changes.num_rows, step, dtype=np.int64)))
            self._write(t, step)
        else:
            self._mirror(step, changes)
        self.held = step
        self.fresh = False

    def seed(self, step: int, contents: pa.Table) -> None:
        """Replace the table's contents with the view's (columns plus ``__weight``) at ``step``, in one commit."""
        if not self.mirror:
            return
        w = contents.column(WEIGHT).to_numpy(zero_copy_only=False)
        self._write(expand(contents.drop_columns([WEIGHT]), w), step, mode="overwrite")
        self.held = step
        self.fresh = False

    # ------------------------------------------------------------ mirror mode
    def _mirror(self, step: int, changes: pa.Table) -> None:
        from sqlengine.zset import W, consolidate_arrow
        names = [n for n, _ in self.ctx.columns]
        c = consolidate_arrow(changes.rename_columns(names + [W]))
        w = c.column(W).to_numpy(zero_copy_only=False)
        rows = c.drop_columns([W])
        pos, neg = rows.filter(pa.array(w > 0)), rows.filter(pa.array(w < 0))
        wpos, wneg = w[w > 0], w[w < 0]
        if self.fresh:   # the view's contents after the first step are its changes
            self._write(expand(pos, wpos), step, mode="overwrite")
            return
        if self.key:
            self._check_unique(pos, wpos, step)
        if not neg.num_rows:   # inserts only: an append
            self._write(expand(pos, wpos), step)
            return
        if self.key:
            self._merge_by_key(step, pos, neg, names)
        else:
            self._merge_rows(step, pos, wpos, neg, wneg, names)

    def _check_unique(self, pos: pa.Table, wpos, step: int) -> None:
        counts = pa.table({**{k: pos.column(k) for k in self.key}, "n": pa.array(wpos)}) \
            .group_by(self.key, use_threads=False).aggregate([("n", "sum")])
        dup = counts.filter(pc.greater(counts.column("n_sum"), 1))
        if dup.num_rows:
            shown = ", ".join(f"{k}={v!r}" for k, v in dup.slice(0, 1).to_pylist()[0].items() if k != "n_sum")
            raise self._error(f"the key ({', '.join(self.key)}) is not unique in view {self.ctx.relation}: step "
                              f"{step} inserts {dup.column('n_sum')[0].as_py()} rows with {shown}")

    def _merge(self, step: int, source: pa.Table, predicate: str):
        source = self._prepare(source.drop_columns([_OP])).append_column(_OP, source.column(_OP))
        # streamed_exec=False: the source (one step's changes) is in memory, and its statistics let delta-rs
        # skip target files that cannot match (an early pruning predicate on the key's range)
        return self.dt.merge(source, predicate=predicate, source_alias="s", target_alias="t", streamed_exec=False,
                             commit_properties=self._commit_properties(step))

    def _merge_by_key(self, step: int, pos: pa.Table, neg: pa.Table, names: List[str]) -> None:
        """One MERGE: keys deleted (without a new row) are deleted, new rows are upserted by key."""
        new_keys = pos.select(self.key)
        gone = neg.select(self.key).group_by(self.key, use_threads=False).aggregate([])
        if new_keys.num_rows:
            gone = gone.join(new_keys, keys=self.key, join_type="left anti")   # (NULL keys: see below)
        # a NULL key updated in this step is both in `gone` and in `pos` (the anti join does not match NULLs):
        # the MERGE source then has a delete and an upsert for it; drop the delete, the upsert replaces the row
        if gone.num_rows and any(gone.column(k).null_count for k in self.key):
            pos_keys = {tuple(r.values()) for r in new_keys.to_pylist()}
            keep = [tuple(r.values()) not in pos_keys for r in gone.to_pylist()]
            gone = gone.filter(pa.array(keep, pa.bool_()))
        deletes = pa.table({n: gone.column(n) if n in self.key else pa.nulls(gone.num_rows, pos.schema.field(n).type)
                            for n in names}).cast(pos.schema)
        source = pa.concat_tables([pos, deletes])
        ops = ["upsert"] * pos.num_rows + ["delete"] * deletes.num_rows
        source = source.append_column(_OP, pa.array(ops, pa.string()))
        on = " AND ".join(f"(t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)})" for k in self.key)
        sets = {quote(n): f"s.{quote(n)}" for n in names}
        merger = self._merge(step, source, on)
        self._run(lambda: merger.when_matched_delete(predicate=f"s.{_OP} = 'delete'")
                  .when_matched_update(updates=sets, predicate=f"s.{_OP} = 'upsert'")
                  .when_not_matched_insert(updates=sets, predicate=f"s.{_OP} = 'upsert'").execute(), "merge into")

    def _merge_rows(self, step: int, pos: pa.Table, wpos, neg: pa.Table, wneg, names: List[str]) -> None:
        """One MERGE without a key: every copy of a row with a net delete is deleted and the copies that remain
        are inserted back; inserted rows are inserted as many times as their weight."""
        held = self._copies(neg, names)
        remain = np.maximum(held + wneg, 0)
        keep = expand(neg, remain)
        source = pa.concat_tables([neg, keep, expand(pos, wpos)])
        ops = ["delete"] * neg.num_rows + ["insert"] * (source.num_rows - neg.num_rows)
        source = source.append_column(_OP, pa.array(ops, pa.string()))
        on = " AND ".join(f"(t.{quote(n)} IS NOT DISTINCT FROM s.{quote(n)})" for n in names)
        sets = {quote(n): f"s.{quote(n)}" for n in names}
        merger = self._merge(step, source, f"({on}) AND s.{_OP} = 'delete'")
        self._run(lambda: merger.when_matched_delete()
                  .when_not_matched_insert(updates=sets, predicate=f"s.{_OP} = 'insert'").execute(), "merge into")

    def _copies(self, rows: pa.Table, names: List[str]) -> np.ndarray:
        """How many copies of each of ``rows`` (distinct) the table holds now (a scan joined with them)."""
        import duckdb
        dt = self.dt
        schema = plain_schema(pa.schema(dt.schema()))

        def scan():
            reader = pa.RecordBatchReader.from_stream(dt.scan(columns=names))
            return pa.RecordBatchReader.from_batches(schema, plain_batches(reader, schema))
        probe = self._prepare(rows).append_column("__i", pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        on = " AND ".join(f"(t.{quote(n)} IS NOT DISTINCT FROM d.{quote(n)})" for n in names)
        con = duckdb.connect(":memory:")
        try:
            con.execute("SET threads TO 2")
            con.register("d", probe)
            con.register("t", self._run(scan, "read"))
            found = con.execute(f"SELECT d.__i, count(*) FROM d JOIN t ON {on} GROUP BY d.__i").fetchall()
        finally:
            con.close()
        held = np.zeros(rows.num_rows, dtype=np.int64)
        for i, n in found:
            held[i] = n
        return held

    def close(self) -> None:
        self.dt = None
