"""Formats: how rows become bytes and back.

A format writes a view's changes to a file (``write_file``) for the file sink.  Sources decode with
the same classes (see ``decode`` and ``read_file``), converting to the table's column types with the
engine's input converters, so that bad records get the same errors and dead letters as pushed input.
"""
from __future__ import annotations

import io
import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from planner.errors import EngineError, InputError
from sqlengine.ingest import (Chunk, Errors, convert_strings, convert_values, csv_header, csv_tables, finish,
                              json_chunks, match_columns, parse_json)
from sqlengine import nested
from sqlengine.types import arrow_type

from .base import Format, opt, register_format

_WEIGHT_OPTIONS = {
    "weight_column": opt(str, doc="reading: a column (not a table column) holding each row's weight, a nonzero "
                                  "integer: +n inserts n copies, -n deletes n copies"),
    "op_column": opt(str, doc="reading: a column (not a table column) holding 'insert' or 'delete'"),
}
UNKNOWN_FIELDS_OPTION = opt(str, default="ignore", choices=("ignore", "reject"),
                            doc="reading: a field or column that is not a column of the table is skipped "
                                "(ignore), or makes the record (a JSON/Avro record, a CSV/Parquet row) a bad "
                                "row naming it (reject)")


def _write_atomically(path: str, write) -> None:
    """``write(tmp_path)``, fsync, rename to ``path``: readers never see a half-written file."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    write(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


@register_format
class ParquetFormat(Format):
    name = "parquet"
    extension = "parquet"
    OPTIONS: Dict[str, Any] = {**_WEIGHT_OPTIONS, "unknown_fields": UNKNOWN_FIELDS_OPTION}

    def write_file(self, table: pa.Table, path: str) -> None:
        import pyarrow.parquet as pq
        _write_atomically(path, lambda tmp: pq.write_table(table, tmp))

    def read_file(self, path: str):
        """The ``Chunks`` of one local Parquet file (read lazily, by row groups)."""
        import pyarrow.parquet as pq

        def chunks(errs: Errors, chunk_rows: int):
            f = pq.ParquetFile(path)
            yield from arrow_batches_chunks(self.ctx.table, f.schema_arrow, f.iter_batches(batch_size=chunk_rows),
                                            self.config, errs)
        return chunks

    def decode(self, data: bytes):
        """The ``Chunks`` of one Parquet file's bytes."""
        import pyarrow.parquet as pq
        return self.read_arrow(lambda: pq.read_table(pa.BufferReader(data)))

    def read_arrow(self, load: Callable[[], pa.Table]):
        """The ``Chunks`` of the Arrow table ``load()`` gives (e.g. a Spark read), columns matched by name."""
        def chunks(errs: Errors, chunk_rows: int):
            table = load()
            yield from arrow_batches_chunks(self.ctx.table, table.schema, table.to_batches(max_chunksize=chunk_rows),
                                            self.config, errs)
        return chunks


@register_format
class CsvFormat(Format):
    name = "csv"
    extension = "csv"
    OPTIONS = {"delimiter": opt(str, default=",", doc="the field separator, one character"),
               "header": opt(bool, default=True, doc="the first line names the columns (reading without a "
                                                      "header: the table's columns in order, then the "
                                                      "weight/op column if any)"),
               **_WEIGHT_OPTIONS, "unknown_fields": UNKNOWN_FIELDS_OPTION}

    def read_file(self, path: str):
        """The ``Chunks`` of one local CSV file (read in blocks: bounded memory)."""
        return lambda errs, chunk_rows: csv_file_chunks(self.ctx.table, path, self.config, errs, chunk_rows)

    def read_range(self, path: str, start: int, end: int):
        """The ``Chunks`` of bytes ``[start, end)`` of a local CSV file, whole lines (read in blocks); after the
        first read of a file with a header, the names come from its first line."""
        def chunks(errs: Errors, chunk_rows: int):
            names, begin = None, start
            with open(path, "rb") as raw:
                if self.config["header"]:
                    names = csv_header(path, self.config["delimiter"])
                    if not names:
                        raise InputError(f"table {self.ctx.table.name}: the CSV file has no header line")
                    if not start:
                        begin = min(end, len(raw.readline()))
                raw.seek(begin)
                source = io.BufferedReader(_Range(raw, end - begin), 1 << 20)
                yield from csv_file_chunks(self.ctx.table, source, self.config, errs, chunk_rows, names=names)
        return chunks

    def decode(self, data: bytes):
        """The ``Chunks`` of CSV bytes."""
        return lambda errs, chunk_rows: csv_file_chunks(self.ctx.table, io.BytesIO(bytes(data)), self.config,
                                                        errs, chunk_rows)

    def write_file(self, table: pa.Table, path: str) -> None:
        import pyarrow.csv as pcsv
        opts = pcsv.WriteOptions(include_header=self.config["header"], delimiter=self.config["delimiter"])
        _write_atomically(path, lambda tmp: pcsv.write_csv(table, tmp, write_options=opts))


@register_format
class JsonFormat(Format):
    name = "json"
    extension = "jsonl"
    OPTIONS = {"update_format": opt(str, default="insert_delete", choices=("raw", "insert_delete", "debezium"),
                                    doc="raw rows (inserts), {\"insert\"|\"delete\": row}, or a Debezium envelope"),
               "unknown_fields": UNKNOWN_FIELDS_OPTION}

    def read_file(self, path: str):
        """The ``Chunks`` of one local file of JSON lines (or one JSON array)."""
        def chunks(errs: Errors, chunk_rows: int):
            with open(path, "rb") as f:
                data = f.read()
            yield from json_text_chunks(self.ctx.table, data.decode(), self.config["update_format"], errs,
                                        chunk_rows, self.config["unknown_fields"])
        return chunks

    def read_range(self, path: str, start: int, end: int):
        """The ``Chunks`` of bytes ``[start, end)`` (whole lines) of a local file of JSON lines."""
        def chunks(errs: Errors, chunk_rows: int):
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
            yield from self.decode(data)(errs, chunk_rows)
        return chunks

    def decode(self, data: bytes):
        """The ``Chunks`` of JSON bytes (JSON lines, one object, or an array)."""
        return lambda errs, chunk_rows: json_text_chunks(self.ctx.table, bytes(data).decode(),
                                                         self.config["update_format"], errs, chunk_rows,
                                                         self.config["unknown_fields"])

    def write_file(self, table: pa.Table, path: str) -> None:
        import duckdb

        def write(tmp: str) -> None:
            con = duckdb.connect(":memory:")
            con.register("t", table)
            con.execute(f"COPY (SELECT * FROM t) TO '{tmp}' (FORMAT json)")
            con.close()
        _write_atomically(path, write)


# ====================================================================== reading (sources)
#
# A source hands the engine a ``Chunks`` callable per batch: ``(errs, chunk_rows) -> (rows c0.., weights)``.
# The formats build them with the engine's converters (``sqlengine.ingest.inputs``), so that bad records get
# the same checks (types, NOT NULL, primary keys) and dead letters as pushed input.
#
# A unit of input (a file, a message) is converted with its own ``Errors`` collector, whose dead-letter
# records are copied into the batch's, each naming the unit (``"file"``).  A unit that cannot be read at
# all (no header, unknown or missing NOT NULL columns, a column of an incompatible type, a corrupt file)
# becomes ONE dead-letter record naming it and the problem, and the source goes on with the next unit
# (under ``on_error="reject"`` the connector stops with that error instead).  Such a problem found in the
# middle of a big file leaves the rows read before it applied (the record says from which row on the
# file was not read).

UNIT_ERRORS = (InputError, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeDecodeError,
               ValueError, TypeError)
_UNIT_SPAN = 10 ** 12   # dead-letter keys of unit k of a batch: k * _UNIT_SPAN + row


def unit_chunks(units: Sequence[Tuple[str, Callable[[Errors, int], Iterator[Chunk]]]],
                recoverable: Tuple[type, ...] = UNIT_ERRORS) -> Callable[[Errors, int], Iterator[Chunk]]:
    """One batch's ``Chunks`` from several named units, each ``(name, chunks)``; see above.  Exceptions not in
    ``recoverable`` (an ``OSError``: the storage is unreachable) propagate, so the source retries the batch."""

    def chunks(errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
        for k, (name, unit) in enumerate(units):
            sub = Errors(errs.table, "reject" if errs.reject else "dead_letter")
            rows = 0

            def merge():
                for row, rec in sub.bad.items():
                    errs.bad[k * _UNIT_SPAN + row] = {**rec, "file": name}
            try:
                for part, weights in unit(sub, chunk_rows):
                    rows += part.num_rows
                    merge()
                    yield part, weights
            except recoverable as e:
                text = e.message if isinstance(e, EngineError) else f"{type(e).__name__}: {e}"
                if text.startswith(f"table {errs.table}: "):
                    text = text[len(f"table {errs.table}: "):]
                after = f" (the file was not read after its first {rows} good rows)" if rows else ""
                if errs.reject:
                    raise InputError(f"table {errs.table}: {name}: {text}{after}") from None
                merge()
                errs.bad[(k + 1) * _UNIT_SPAN - 1] = {
                    "table": errs.table, "row": None, "column": None, "file": name, "raw": None,
                    "error": f"table {errs.table}: {name} cannot be read: {text}{after}"}
                continue
            merge()
    return chunks


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    for kind, test in (("bool", pa.types.is_boolean), ("int", pa.types.is_integer), ("float", pa.types.is_floating),
                       ("decimal", pa.types.is_decimal), ("string", lambda x: pa.types.is_string(x) or
                                                          pa.types.is_large_string(x)),
                       ("timestamp", pa.types.is_timestamp), ("date", pa.types.is_date), ("null", pa.types.is_null)):
        if test(t):
            return kind
    return str(t)


# the column kinds a file's column may have for a table column of a kind (strings are parsed)
_COMPATIBLE = {"bool": {"bool"}, "int": {"int", "float", "decimal"}, "float": {"int", "float", "decimal"},
               "decimal": {"int", "float", "decimal"}, "string": {"string"},
               "timestamp": {"timestamp", "date"}, "date": {"date", "timestamp"}}


def convert_typed(arr: pa.Array, f, errs: Errors) -> pa.Array:
    """A typed column read from a file (Parquet, Spark) -> the table column's type.  An incompatible column
    type raises ``InputError`` (the whole file is bad); values that do not fit go to ``errs``."""
    target = arrow_type(f.type)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.type == target and not nested.needs_canonical(f.type):
        return arr
    src, want = _kind(arr.type), _kind(target)
    if src == "null":
        return pa.nulls(len(arr), target)
    if f.type.base in nested.CONVERTED and src != "string":
        try:   # a nested column of the file: cast to the table's (a ROW's fields by name), made canonical
            return nested.canonical(arr, f.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError):
            raise InputError(f"column {f.name} is {arr.type} in the file but {f.type.sql} in the table") from None
        except ValueError:   # a map with a key twice: the values one by one, the bad rows named
            return convert_values(arr.to_pylist(), f.type, f.name, errs)
    if src == "string":
        arr = arr.cast(pa.string())
        return convert_strings(arr, f.type, f.name, errs)
    if src not in _COMPATIBLE.get(want, ()):
        raise InputError(f"column {f.name} is {arr.type} in the file but {f.type.sql} in the table")
    if src == "timestamp":
        arr = arr.cast(pa.timestamp(arr.type.unit))    # zoned -> the same instant as naive UTC
    try:
        return pc.cast(arr, target, safe=not (src == "timestamp" or want == "date"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return convert_values(arr.to_pylist(), f.type, f.name, errs)


def _weights_of(arr: pa.Array, column: str, op: bool, errs: Errors) -> List[int]:
    """The weight of each row from the weight column (a nonzero integer) or the op column (insert|delete)."""
    out: List[int] = []
    if op:
        for i, v in enumerate(arr.to_pylist()):
            w = {"insert": 1, "delete": -1}.get(v.strip().lower() if isinstance(v, str) else v)
            if w is None:
                errs.add(i, column, f"{column} must be 'insert' or 'delete', not {v!r}")
                w = 1
            out.append(w)
        return out
    if not pa.types.is_integer(arr.type):
        try:
            arr = pc.cast(arr, pa.int64()) if not pa.types.is_floating(arr.type) else arr
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    for i, v in enumerate(arr.to_pylist()):
        w = v
        if isinstance(v, str):
            try:
                w = int(v.strip())
            except ValueError:
                w = None
        elif isinstance(v, float) and v.is_integer():
            w = int(v)
        if not isinstance(w, int) or isinstance(w, bool) or w == 0:
            errs.add(i, column, f"{column} must be a nonzero integer weight (+n inserts, -n deletes), not {v!r}")
            w = 1
        out.append(w)
    return out


class _Columns:
    """How a file's columns map to the table: the table's columns and the weight or op column.

    Columns that are not table columns: skipped (``unknown_fields`` "ignore"), every row bad naming the first
    one ("reject"), or the whole file bad (None: callers without the option, e.g. Delta tables)."""

    def __init__(self, t, names: Sequence[str], weight: Optional[str], op: Optional[str],
                 unknown_fields: Optional[str] = None):
        self.special = weight or op
        self.op = op is not None
        self.special_at = None
        data = list(names)
        if self.special:
            low = [str(n).lower() for n in names]
            if self.special.lower() not in low:
                what = "op_column" if op else "weight_column"
                raise InputError(f"table {t.name}: the {what} '{self.special}' is missing. Columns: "
                                 f"{', '.join(map(str, names))}")
            self.special_at = low.index(self.special.lower())
            data = [n for j, n in enumerate(names) if j != self.special_at]
        # with a weight column, rows of a table with a primary key may be deletes that only carry the key
        mapping = match_columns(t, data, delete=bool(self.special) and bool(t.primary_key),
                                 unknown_fields="reject" if unknown_fields is None else "ignore")
        self.col_of = {f.name: list(names).index(mapping[f.name]) for f in t.fields if f.name in mapping}
        self.unknown = None
        if unknown_fields == "reject":
            known = {f.name.lower() for f in t.fields}
            extra = [str(n) for n in data if str(n).lower() not in known]
            if extra:
                self.unknown = (f"unknown column '{extra[0]}' (unknown_fields is 'reject'). Columns: "
                                f"{', '.join(f.name for f in t.fields)}")

    def convert(self, t, columns: Sequence[pa.Array], n: int, errs: Errors, seen: dict, convert):
        """Converted, checked rows and weights of one chunk of the file's columns."""
        weights: Any = 1
        if self.unknown:
            for i in range(n):
                errs.add(i, None, self.unknown)
        if self.special:
            weights = _weights_of(columns[self.special_at], self.special, self.op, errs)
        arrays = [convert(columns[self.col_of[f.name]], f) if f.name in self.col_of
                  else pa.nulls(n, arrow_type(f.type)) for f in t.fields]
        return finish(t, arrays, weights, errs, seen)


class _Range(io.RawIOBase):
    """The next ``size`` bytes of a binary file, as a readable stream."""

    def __init__(self, f, size: int):
        self.f, self.left = f, size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.left <= 0:
            return 0
        view = memoryview(b)[:min(len(b), self.left)]
        n = self.f.readinto(view)
        self.left -= n or 0
        return n or 0


def csv_file_chunks(t, source, config: Dict[str, Any], errs: Errors, chunk_rows: int,
                    names: Optional[List[str]] = None) -> Iterator[Chunk]:
    """Chunks from one CSV file (a path or a file object): fields read as text and converted to the table's
    types (an empty field is NULL); rows with the wrong number of fields go to the dead letter.  Like
    ``sqlengine.ingest.inputs.csv_chunks``, plus the format's delimiter, header and weight/op column.
    ``names``: the file's column names, ``source`` holding no header line (the rest of a file with a header).

    With a header, columns are matched by name: a column that is not a table column is skipped (the format's
    ``unknown_fields`` "ignore") or makes every row bad ("reject"); a missing nullable column is NULL.  Without a header
    the fields are positional (the table's columns in order), so a line with an extra field has the wrong
    number of fields and is a bad row."""
    weight, op = config.get("weight_column"), config.get("op_column")
    header = config["header"] and names is None
    if header:
        names = csv_header(source, config["delimiter"])
        if not names:
            raise InputError(f"table {t.name}: the CSV file has no header line")
    elif names is None:
        names = [f.name for f in t.fields] + ([weight or op] if (weight or op) else [])
    cols = _Columns(t, names, weight, op, config.get("unknown_fields"))
    seen: dict = {}
    for columns, n in csv_tables(t, source, names, errs, chunk_rows, first_line=2 if header else 1,
                                 delimiter=config["delimiter"], header=header):
        yield cols.convert(t, columns, n, errs, seen, lambda a, f: convert_strings(a, f.type, f.name, errs))


def arrow_batches_chunks(t, schema: pa.Schema, batches: Iterable[pa.RecordBatch], config: Dict[str, Any],
                         errs: Errors) -> Iterator[Chunk]:
    """Chunks from typed Arrow record batches (a Parquet file, a Spark read), columns matched by name."""
    names = schema.names
    cols = _Columns(t, names, config.get("weight_column"), config.get("op_column"), config.get("unknown_fields"))
    seen: dict = {}
    base = 0
    for b in batches:
        n = b.num_rows
        if not n:
            continue
        columns = [b.column(i) for i in range(len(names))]
        errs.start_chunk(base, raw=lambda i, b=b: b.slice(i, 1).to_pylist()[0])
        yield cols.convert(t, columns, n, errs, seen, lambda a, f: convert_typed(a, f, errs))
        base += n


def _debezium(records: List[Any]) -> List[Any]:
    """Debezium change envelopes (``{"payload": {"before", "after", "op"}}`` or the payload alone) as
    insert_delete records: ``before`` is deleted, ``after`` inserted."""
    out: List[Any] = []
    for r in records:
        p = r.get("payload", r) if isinstance(r, dict) else r
        if not isinstance(p, dict) or not ({"before", "after"} & set(p)):
            out.append(r)   # json_chunks reports it
            continue
        if p.get("before") is not None:
            out.append({"delete": p["before"]})
        if p.get("after") is not None:
            out.append({"insert": p["after"]})
    return out


def json_text_chunks(t, text, update_format: str, errs: Errors, chunk_rows: int,
                     unknown_fields: str = "reject") -> Iterator[Chunk]:
    """Chunks from JSON text (JSON lines, or one JSON array) in ``update_format``; ``unknown_fields`` as for
    ``sqlengine.ingest.inputs.json_chunks``."""
    if update_format == "debezium":
        records, malformed = parse_json(text, errs)
        if malformed:   # already recorded by parse_json; keep the others
            records = [r for i, r in enumerate(records) if i not in malformed]
        yield from json_chunks(t, _debezium(records), "insert_delete", errs, chunk_rows, unknown_fields)
        return
    yield from json_chunks(t, text, update_format, errs, chunk_rows, unknown_fields)
