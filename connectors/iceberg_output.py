"""``iceberg_output``: a view's changes in an Apache Iceberg table, exactly once, one commit per step.

    CREATE MATERIALIZED VIEW v WITH ('connectors' = '[{"name": "ice", "transport": {"name": "iceberg_output",
        "config": {"catalog": {"type": "sql", "uri": "sqlite:////data/catalog.db", "warehouse": "file:///data/wh"},
                   "table": "analytics.v", "mode": "apply", "key": ["g"]}}}]') AS SELECT g, COUNT(*) AS n ...

Options: ``catalog`` (required): the pyiceberg catalog properties, passed to ``load_catalog(catalog_name,
**catalog)`` (values are turned into strings); ``catalog_name`` (default ``"default"``); ``table``
(required): ``"namespace.table"`` (``"a.b.t"``: table ``t`` in the nested namespace ``a.b``); ``mode``:
``"changelog"`` (default) or ``"apply"``; ``key``: view columns, apply mode only (below);
``properties``: table properties set when the sink creates the table.

**The table.**  The namespace is created when missing.  The table is created by the first commit (in the
same catalog commit as the first step's rows), with the view's columns, every one optional, as
BOOLEAN → boolean, TINYINT/SMALLINT/INT → int, BIGINT → long, REAL → float, DOUBLE → double,
DECIMAL(p, s) → decimal(p, s), VARCHAR → string, DATE → date, TIMESTAMP → timestamp (microseconds, no
time zone; the engine's TIMESTAMPs are naive UTC).  The types are taken from the view's changes, so the
table appears with the first step that changes the view.  An existing table is used if it has exactly
the expected columns (changelog: the view's plus ``__weight`` and ``__step``) with the same types or
types they promote to (int → long, float → double, a wider decimal precision); otherwise the sink fails
for good (``PermanentConnectorError``, state ``failed``) saying which column differs.

``changelog`` mode appends each step's changed rows with ``__weight`` (long: +n inserted, -n deleted)
and ``__step`` (long): one Iceberg snapshot per step.  Summing ``__weight`` per row over the table
integrates to the view's contents.

``apply`` mode keeps the table equal to the view (a row that occurs n times in the view is n rows of the
table).  For each step the sink reads the table's rows that the step may touch, with a filter built from
the changed rows (``In`` per filter column over the changed rows' values, plus ``IsNull`` where a value
is NULL): the filter columns are ``key`` when given (e.g. the GROUP BY columns), otherwise every column.
It adds the step's changes to those rows (a row's new count is its old count plus its weight), then in
ONE catalog commit deletes what the filter matches and appends the result.  The filter only has to
match every stored copy of every changed row, and any superset is fine (the extra rows are written back
unchanged); so a ``key`` need not be unique and duplicates are counted, not guessed (a count that would
go below zero, which only a table changed behind the sink's back can cause, becomes zero).  REAL and DOUBLE
columns are left out of the filter (NaN and -0.0 do not compare the way rows do), which makes it
coarser, never wrong.  Apply mode needs a MATERIALIZED VIEW: a sink that starts after the pipeline
already ran is seeded with the view's contents, which replace the table's in one commit; likewise the
first step written to a table that holds no step of this sink replaces whatever the table held.

**Exactly once.**  Every commit also sets the table properties ``sqlengine.step`` (the step it holds),
``sqlengine.pipeline`` (the id of the pipeline's storage) and ``sqlengine.sink`` (``view.connector``),
and tags its snapshots' summaries with ``sqlengine.step`` and ``sqlengine.pipeline``.  The properties
change in the same atomic catalog commit as the rows, so ``open()`` reads back the last step the table
holds, and ``write`` of a step at or before it does nothing.  A table whose properties name another
pipeline, or another sink of this one, is refused (``PermanentConnectorError``): its steps are not this
sink's.

Failures (the catalog unreachable, the warehouse not writable, a concurrent commit) raise
``ConnectorError`` naming the table and the cause; the engine reopens the sink and retries the step.
Files written by a commit that failed are left unreferenced (Iceberg's orphan-file cleanup removes them).
The sinks of one process write their data files in parallel but commit one at a time (two commits at once
to one SQLite catalog can fail with "database is locked"; across processes that is retried like any
failure).  A SQLite catalog's file is created on first use, its directory is not.

Limits: every step adds small data files and a snapshot, and apply mode rewrites the data files holding
the rows it touches (copy-on-write); nothing here compacts files or expires snapshots, so run Iceberg
maintenance for long-running pipelines.  Partitioned tables are not created (an existing partitioned
table works if pyiceberg can write it).
"""
from __future__ import annotations

import importlib.util
import itertools
import threading
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional

import pyarrow as pa

from planner.errors import ConnectorError, PermanentConnectorError

from .base import Sink, opt, register_sink

WEIGHT = "__weight"
STEP = "__step"
P_STEP, P_PIPELINE, P_SINK = "sqlengine.step", "sqlengine.pipeline", "sqlengine.sink"
# Sinks of one process open catalogs, create namespaces and commit one at a time (the data files are written
# before, in parallel): pyiceberg's SQL catalog creates its own tables on first use, and two sinks doing it at
# once make one fail; two commits at once to one SQLite file can fail with "database is locked".
_CATALOG_LOCK = threading.Lock()


def _text(e: BaseException) -> str:
    """A short description of a library exception (SQLAlchemy's messages run over several lines)."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:300]}"


def iceberg_type(t: pa.DataType, ids=None):
    """The Iceberg type of a view column's Arrow type (None if there is none); nested types (a list, a map, a
    struct) take their fields' ids from ``ids`` (the catalog assigns fresh ones when it creates the table).

    >>> iceberg_type(pa.int16()), iceberg_type(pa.decimal128(10, 2)), iceberg_type(pa.timestamp("us"))
    (IntegerType(), DecimalType(precision=10, scale=2), TimestampType())
    >>> str(iceberg_type(pa.map_(pa.string(), pa.list_(pa.struct([("a", pa.int32())])))))
    'map<string, list<struct<10000: a: optional int>>>'
    """
    from pyiceberg import types as I
    ids = ids if ids is not None else itertools.count(10_000)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = iceberg_type(t.value_type, ids)
        return None if inner is None else I.ListType(element_id=next(ids), element_type=inner, element_required=False)
    if pa.types.is_map(t):
        k, v = iceberg_type(t.key_type, ids), iceberg_type(t.item_type, ids)
        return None if k is None or v is None else I.MapType(key_id=next(ids), key_type=k, value_id=next(ids),
                                                             value_type=v, value_required=False)
    if pa.types.is_struct(t):
        fields = []
        for i in range(t.num_fields):
            ft = iceberg_type(t.field(i).type, ids)
            if ft is None:
                return None
            fields.append(I.NestedField(field_id=next(ids), name=t.field(i).name, field_type=ft, required=False))
        return I.StructType(*fields)
    if pa.types.is_time(t):
        return I.TimeType()
    if pa.types.is_boolean(t):
        return I.BooleanType()
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return I.IntegerType()
    if pa.types.is_int64(t):
        return I.LongType()
    if pa.types.is_float32(t):
        return I.FloatType()
    if pa.types.is_float64(t):
        return I.DoubleType()
    if pa.types.is_decimal(t) and t.precision <= 38:
        return I.DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t) or pa.types.is_null(t):
        return I.StringType()   # a column that is always NULL (SELECT NULL AS x) becomes string
    if pa.types.is_date32(t):
        return I.DateType()
    if pa.types.is_timestamp(t):
        return I.TimestamptzType() if t.tz else I.TimestampType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return I.BinaryType()
    return None


def promotes(have, want) -> bool:
    """Values of Iceberg type ``have`` can be written to a column of type ``want`` (Iceberg's promotions).

    >>> from pyiceberg.types import DecimalType, IntegerType, LongType
    >>> promotes(IntegerType(), LongType()), promotes(DecimalType(10, 2), DecimalType(12, 2))
    (True, True)
    >>> promotes(LongType(), IntegerType())
    False
    """
    from pyiceberg import types as I
    nested = (I.ListType, I.MapType, I.StructType)
    if have == want or (isinstance(have, nested) and isinstance(want, nested)
                        and _shape(have) == _shape(want)):   # (nested: their field ids aside)
        return True
    if isinstance(have, I.IntegerType) and isinstance(want, I.LongType):
        return True
    if isinstance(have, I.FloatType) and isinstance(want, I.DoubleType):
        return True
    return (isinstance(have, I.DecimalType) and isinstance(want, I.DecimalType)
            and have.scale == want.scale and have.precision <= want.precision)


def _shape(t):
    """An Iceberg type without its field ids."""
    from pyiceberg import types as I
    if isinstance(t, I.ListType):
        return ("list", _shape(t.element_type))
    if isinstance(t, I.MapType):
        return ("map", _shape(t.key_type), _shape(t.value_type))
    if isinstance(t, I.StructType):
        return ("struct",) + tuple((f.name, _shape(f.field_type)) for f in t.fields)
    return str(t)


def _consolidate(t: pa.Table) -> pa.Table:
    """Equal rows merged, weights summed, zero weights dropped (``t`` has ``__weight``)."""
    from sqlengine.zset import W, consolidate_arrow
    names = t.column_names
    return consolidate_arrow(t.rename_columns([W if c == WEIGHT else c for c in names])).rename_columns(names)


def _expand(t: pa.Table) -> pa.Table:
    """Each row repeated by its weight (rows with weight <= 0 dropped), without ``__weight``."""
    import numpy as np
    w = t.column(WEIGHT).to_numpy()
    rows = t.drop_columns([WEIGHT])
    if len(w) and (w == 1).all():
        return rows
    return rows.take(pa.array(np.repeat(np.arange(len(w)), np.maximum(w, 0)), pa.int64()))


@register_sink
class IcebergOutput(Sink):
    transport = "iceberg_output"
    OPTIONS = {
        "catalog": opt(dict, required=True, doc='pyiceberg catalog properties, e.g. {"type": "sql", "uri": '
                                                '"sqlite:////x/catalog.db", "warehouse": "file:///x/wh"}'),
        "catalog_name": opt(str, default="default", doc="the catalog's name, for load_catalog"),
        "table": opt(str, required=True, doc='"namespace.table" (created when missing)'),
        "mode": opt(str, default="changelog", choices=("changelog", "apply"),
                    doc="append each step's changes with __weight and __step, or keep the table equal to the view"),
        "key": opt(list, doc="apply mode: the view's columns the delete filter is built from (default: all)"),
        "properties": opt(dict, default={}, doc="table properties set when the sink creates the table"),
    }
    FORMATS = ()
    EXTRA = "iceberg"
    MODULES = ("pyiceberg",)

    def validate(self) -> None:
        c, where, what = self.config, self.ctx.where, "transport iceberg_output"
        for k, v in c["catalog"].items():
            if not isinstance(v, (str, int, float, bool)):
                raise where.error(f"{what}: catalog property \"{k}\" must be a string, number or boolean, "
                                  f"not {v!r}", "catalog")
        if not c["catalog"]:
            raise where.error(f"{what}: \"catalog\" is empty; give the catalog's properties, e.g. "
                              '{"type": "sql", "uri": ..., "warehouse": ...}', "catalog")
        kind, uri = str(c["catalog"].get("type", "")), str(c["catalog"].get("uri", ""))
        sql_catalog = kind == "sql" or uri.startswith(("sqlite:", "postgresql"))
        if sql_catalog and importlib.util.find_spec("sqlalchemy") is None:
            raise where.error(f"{what}: a SQL catalog needs sqlalchemy: pip install 'sqlengine[{self.EXTRA}]'",
                              "catalog")
        parts = c["table"].split(".")
        if len(parts) < 2 or not all(p.strip() for p in parts):
            raise where.error(f"{what}: \"table\" must be \"namespace.table\", not {c['table']!r}", "table")
        for k, v in c["properties"].items():
            if not isinstance(v, (str, int, float, bool)) or k.startswith("sqlengine."):
                raise where.error(f"{what}: table property \"{k}\" must be a string, number or boolean, and "
                                  "names starting with \"sqlengine.\" are the sink's own", "properties")
        names = {n.lower(): n for n, _ in self.ctx.columns}
        if c["mode"] == "apply":
            if not self.ctx.materialized:
                raise where.error(f"{what}: apply mode needs a MATERIALIZED VIEW ({self.ctx.relation} is not): "
                                  "its contents are what the table starts from", "mode")
        elif c["key"] is not None:
            raise where.error(f"{what}: \"key\" is for apply mode (\"mode\": \"apply\"); changelog mode appends "
                              "every change", "key")
        if c["key"] is not None:
            if not c["key"]:
                raise where.error(f"{what}: \"key\" must name at least one column (or leave it out)", "key")
            for k in c["key"]:
                if not isinstance(k, str) or k.lower() not in names:
                    import difflib
                    close = difflib.get_close_matches(str(k).lower(), list(names), n=1)
                    hint = f" (did you mean \"{names[close[0]]}\"?)" if close else ""
                    raise where.error(f"{what}: key column {k!r} is not a column of {self.ctx.relation}{hint}. "
                                      f"Columns: {', '.join(names.values())}", "key")
        elif c["mode"] == "changelog":
            clash = [n for n in names if n in (WEIGHT, STEP)]
            if clash:
                raise where.error(f"{what}: changelog mode adds the column {clash[0]}, which {self.ctx.relation} "
                                  "already has; rename it", "mode")

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.SEEDED = config["mode"] == "apply"   # apply starts from the view's contents
        self.identifier = tuple(config["table"].split("."))
        names = {n.lower(): n for n, _ in ctx.columns}
        self.key = [names.get(k.lower(), k) for k in config["key"]] if config["key"] else None
        self.catalog = None
        self.table = None            # the pyiceberg Table (None: not created yet)
        self.held = 0                # the last step the table holds
        self.checked: Optional[pa.Schema] = None   # the data schema already checked against the table

    # ------------------------------------------------------------ opening: read back
    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    @property
    def sink_id(self) -> str:
        return f"{self.ctx.relation}.{self.ctx.connector}"

    @contextmanager
    def _failing(self, doing: str) -> Iterator[None]:
        try:
            yield
        except ConnectorError:
            raise
        except Exception as e:   # noqa: BLE001 - the catalog's, the file system's, SQLAlchemy's ...
            raise ConnectorError(f"iceberg_output: {doing}: {_text(e)}") from e

    def open(self) -> int:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
        self.close()   # a failed open() is retried without close(): no catalog (and its connections) left over
        props = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in self.config["catalog"].items()}
        self.held, self.checked = 0, None
        with self._failing(f"cannot open catalog {self.config['catalog_name']!r}"), _CATALOG_LOCK:
            self.catalog = load_catalog(self.config["catalog_name"], **props)
        try:
            with self._failing(f"cannot load table {self.name}"):
                try:
                    self.table = self.catalog.load_table(self.identifier)
                except (NoSuchTableError, NoSuchNamespaceError):
                    return 0
            self._claim(self.table.properties)
            self._check_columns([n for n, _ in self.ctx.columns])
            self.held = int(self.table.properties.get(P_STEP, "0") or 0)
        except BaseException:
            self.close()
            raise
        return self.held

    def _claim(self, props: Dict[str, str]) -> None:
        """The table holds this sink's output (or no sink's yet): another's steps would be taken for ours."""
        other, sink = props.get(P_PIPELINE), props.get(P_SINK)
        me = self.ctx.pipeline_id
        if other and me and other != me:
            raise PermanentConnectorError(f"iceberg_output: table {self.name} holds the output of another pipeline "
                                          f"({other}); drop it or use another table")
        if sink and sink != self.sink_id and (not other or not me or other == me):
            raise PermanentConnectorError(f"iceberg_output: table {self.name} holds the output of sink {sink} of "
                                          f"this pipeline; each sink needs its own table")

    def _expected(self, view_names: List[str]) -> List[str]:
        return view_names + ([WEIGHT, STEP] if self.config["mode"] == "changelog" else [])

    def _check_columns(self, view_names: List[str]) -> None:
        have = [f.name for f in self.table.schema().fields]
        want = self._expected(view_names)
        missing = [n for n in want if n not in have]
        extra = [n for n in have if n not in want]
        if missing or extra:
            raise PermanentConnectorError(f"iceberg_output: table {self.name} has columns {', '.join(have)}, but "
                                          f"{self.config['mode']} mode writes {', '.join(want)}"
                                          + (f" (missing {', '.join(missing)})" if missing else "")
                                          + (f" (not in the view: {', '.join(extra)})" if extra else ""))

    def close(self) -> None:
        cat, self.catalog, self.table = self.catalog, None, None
        if cat is not None and hasattr(cat, "close"):
            cat.close()

    # ------------------------------------------------------------ schema and data
    def _schema_of(self, data: pa.Schema):
        from pyiceberg.schema import Schema
        from pyiceberg.types import NestedField
        fields = []
        for i, f in enumerate(data, start=1):
            t = iceberg_type(f.type)
            if t is None:
                raise ConnectorError(f"iceberg_output: column {f.name} of {self.ctx.relation} is {f.type}, "
                                     "which has no Iceberg type")
            fields.append(NestedField(field_id=i, name=f.name, field_type=t, required=False))
        return Schema(*fields)

    def _conform(self, data: pa.Table) -> pa.Table:
        """``data`` (named columns) as the table's Arrow schema: its column order and types."""
        schema = self.table.schema()
        if self.checked is None or not self.checked.equals(data.schema):
            self._check_columns([n for n in data.column_names if n not in (WEIGHT, STEP)])
            for f in data.schema:
                want = schema.find_field(f.name)
                have = iceberg_type(f.type)
                if have is None or not promotes(have, want.field_type):
                    raise PermanentConnectorError(
                        f"iceberg_output: column {f.name} of table {self.name} is {want.field_type}, but the view's "
                        f"{f.name} is {f.type} ({have or 'no Iceberg type'})")
                if want.required:
                    raise PermanentConnectorError(f"iceberg_output: column {f.name} of table {self.name} is "
                                                  "required (NOT NULL); the sink writes optional columns")
            self.checked = data.schema
        target = schema.as_arrow()
        cols = []
        for f in target:
            c = data.column(f.name)
            safe = not (pa.types.is_timestamp(c.type) and c.type.unit == "ns")   # ns -> us truncates
            nested = pa.types.is_nested(c.type)   # (cast anyway: Arrow's type equality ignores the field ids)
            cols.append(c.cast(f.type, safe=safe) if c.type != f.type or nested else c)
        return pa.Table.from_arrays(cols, schema=target)

    def _properties(self, step: int) -> Dict[str, str]:
        out = {P_STEP: str(step), P_SINK: self.sink_id}
        if self.ctx.pipeline_id:
            out[P_PIPELINE] = self.ctx.pipeline_id
        return out

    def _summary(self, step: int) -> Dict[str, str]:
        out = {P_STEP: str(step)}
        if self.ctx.pipeline_id:
            out[P_PIPELINE] = self.ctx.pipeline_id
        return out

    def _create(self, step: int, rows: pa.Table) -> None:
        """Create the table holding ``rows`` and step ``step``, in one catalog commit."""
        with _CATALOG_LOCK:
            self.catalog.create_namespace_if_not_exists(self.identifier[:-1])
        schema = self._schema_of(rows.schema)
        props = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in self.config["properties"].items()}
        tx = self.catalog.create_table_transaction(self.identifier, schema, properties=props)
        target = tx.table_metadata.schema().as_arrow()   # (with the field ids the catalog assigned)
        data = pa.Table.from_arrays([rows.column(f.name).cast(f.type, safe=False) for f in target], schema=target)
        if data.num_rows:
            tx.append(data, snapshot_properties=self._summary(step))
        tx.set_properties(self._properties(step))
        self._commit(tx)
        self.table = self.catalog.load_table(self.identifier)   # the staged table cannot be read
        self.checked = None

    def _commit(self, tx) -> None:
        """One catalog commit: the rows, the snapshots and the step, or nothing."""
        with _CATALOG_LOCK:
            tx.commit_transaction()

    def _records(self) -> int:
        snap = self.table.current_snapshot()
        return 0 if snap is None else int(snap.summary.additional_properties.get("total-records", "1"))

    # ------------------------------------------------------------ writing
    def write(self, step: int, changes: pa.Table) -> None:
        if step <= self.held:
            return   # the table holds it already
        doing = f"cannot write step {step} to table {self.name}"
        with self._failing(doing):
            if self.config["mode"] == "changelog":
                rows = changes.append_column(STEP, pa.array([step] * changes.num_rows, pa.int64()))
                if self.table is None:
                    self._create(step, rows)
                else:
                    data = self._conform(rows)
                    tx = self.table.transaction()
                    tx.append(data, snapshot_properties=self._summary(step))
                    tx.set_properties(self._properties(step))
                    self._commit(tx)
            elif self.table is None or self.held == 0:
                # the view was empty before this step (seed() covers a sink that starts later): the table is
                # exactly the step's inserts
                self._replace(step, _expand(_consolidate(changes)))
            else:
                self._apply(step, _consolidate(changes))
        self.held = step

    def seed(self, step: int, contents: pa.Table) -> None:
        if self.config["mode"] != "apply" or step <= self.held:
            return
        with self._failing(f"cannot seed table {self.name} with the contents at step {step}"):
            self._replace(step, _expand(contents))
        self.held = step

    def _replace(self, step: int, rows: pa.Table) -> None:
        """The table's contents become ``rows``, in one commit."""
        from pyiceberg.expressions import AlwaysTrue
        if self.table is None:
            self._create(step, rows)
            return
        data = self._conform(rows)
        tx = self.table.transaction()
        if self._records():
            tx.delete(AlwaysTrue(), snapshot_properties=self._summary(step))
        if data.num_rows:
            tx.append(data, snapshot_properties=self._summary(step))
        tx.set_properties(self._properties(step))
        self._commit(tx)

    def _filter(self, changes: pa.Table):
        """A filter matching every stored copy of every row in ``changes`` (and possibly more)."""
        from pyiceberg.expressions import AlwaysTrue, And, In, IsNull, Or
        names = self.key or [n for n in changes.column_names if n != WEIGHT]
        terms = []
        for n in names:
            c = changes.column(n)
            if pa.types.is_floating(c.type):
                continue   # NaN and -0.0: equality is not row identity; leaving the column out is coarser, not wrong
            values = pa.compute.unique(c.drop_null()).to_pylist()
            term = None
            if values:
                term = In(n, values)
            if c.null_count:
                term = IsNull(n) if term is None else Or(term, IsNull(n))
            terms.append(term)
        if not terms:
            return AlwaysTrue()
        return terms[0] if len(terms) == 1 else And(*terms)

    def _apply(self, step: int, changes: pa.Table) -> None:
        """Rewrite the rows the step touches: old copies plus the changes, in one commit."""
        if not changes.num_rows:
            tx = self.table.transaction()
            tx.set_properties(self._properties(step))
            self._commit(tx)
            return
        view = [n for n in changes.column_names if n != WEIGHT]
        target = self._conform(changes.drop_columns([WEIGHT]))   # checks the table's columns; Iceberg's types
        row_filter = self._filter(changes)
        old = self.table.scan(row_filter=row_filter, selected_fields=tuple(view)).to_arrow()
        old = pa.Table.from_arrays([old.column(f.name).cast(f.type) for f in target.schema], schema=target.schema)
        both = pa.concat_tables([
            old.append_column(WEIGHT, pa.array([1] * old.num_rows, pa.int64())),
            target.append_column(WEIGHT, changes.column(WEIGHT).cast(pa.int64()))])
        region = _expand(_consolidate(both)) if both.num_rows else both.drop_columns([WEIGHT])
        tx = self.table.transaction()
        if old.num_rows:
            tx.delete(row_filter, snapshot_properties=self._summary(step))
        if region.num_rows:
            tx.append(region, snapshot_properties=self._summary(step))
        tx.set_properties(self._properties(step))
        self._commit(tx)
