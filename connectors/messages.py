"""Message payloads: decoding a batch of messages (Kafka values) into the engine's chunks, and encoding a
view's changes into messages.

**Decoding** (``decoder(fmt, table)`` -> ``decode(values, where)`` -> ``Chunks``).  One message is one record:

* ``json``: one JSON object per message, in the format's ``update_format``: ``raw`` (a row, an insert),
  ``insert_delete`` (``{"insert": row}`` or ``{"delete": row}``) or ``debezium`` (``{"before": row|null,
  "after": row|null, "op": ...}``, also wrapped as ``{"payload": {...}}``: ``before`` is deleted, ``after``
  inserted).  Fast path: the batch's payloads are joined with newlines and parsed by ``pyarrow.json`` with an
  explicit schema built from the table (fields that are no column of the table are skipped under the
  format's ``unknown_fields`` "ignore", the default, and errors under "reject"), then converted column by
  column with the rules of ``sqlengine.ingest.inputs`` (timestamps with ``parse_timestamps``, NOT NULL and primary-key checks
  with ``finish``).  If pyarrow rejects the batch (a malformed message, a value of the wrong JSON type, an
  unknown or differently cased column, a message holding several lines, a Debezium envelope with more
  fields than before/after/op), the batch is split (``_split_fast``): the messages that are not one JSON
  object on one line are found at once (DuckDB's ``json_valid`` over the batch), the others converted on the
  fast path again, halving the groups pyarrow still rejects; only those bad messages and groups of at most 64
  messages take the exact slow path: each message parsed with ``json.loads`` and converted with
  ``sqlengine.ingest.inputs.json_chunks``, so bad messages go to the dead letter and the rest is applied.
  (Under ``on_error`` "reject", and when the split would break a primary-key table's one-pass duplicate
  check, the whole batch takes the exact path.)  (Known difference: the fast path takes ``{"insert": row, "delete":
  null}`` as an insert where the slow path rejects the second key.)
* ``csv``: each message holds data line(s) without a header, the table's columns in order (then the
  format's ``weight_column``/``op_column`` if set); the format's ``delimiter`` applies, its ``header`` is
  ignored.  Wrong field counts and bad values go to the dead letter.
* ``avro``: each message is one record in Avro binary encoding (no container header) written with the
  format's ``schema``; decoded with fastavro.  ``update_format`` as for JSON, applied to the decoded
  record.  Bytes that do not decode (or leave bytes over) go to the dead letter.

A message with no value (a tombstone) or only whitespace is skipped.  Dead-letter records of message
input also carry the message's ``topic``, ``partition`` and ``offset``.

**Encoding** (``encode_json``): one message per unit of weight, ``{"insert": row}`` / ``{"delete": row}``
(``insert_delete``; a row of weight +3 is three insert messages) or ``{"before": null, "after": row,
"op": "c"}`` / ``{"before": row, "after": null, "op": "d"}`` (``debezium``).  Values: timestamps as
``"YYYY-MM-DD HH:MM:SS[.ffffff]"``, dates as ``"YYYY-MM-DD"``, decimals as JSON strings holding the exact
decimal (``"12.50"``: a JSON number would go through binary floating point in most readers; the engine's
inputs read such strings back exactly), NULL as ``null``.
"""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from planner.errors import InputError
from planner.types import element_type, struct_fields
from sqlengine import nested
from sqlengine.ingest import Chunk, Errors, convert_strings, finish, json_chunks
from sqlengine.types import arrow_type

from . import json_maps
from .base import Format, opt, register_format

UPDATE_FORMATS = ("raw", "insert_delete", "debezium")
_FAST_KINDS = ("bool", "int", "float", "string", "decimal", "timestamp", "date")


# ====================================================================== the avro format
@register_format
class AvroFormat(Format):
    """Avro binary records, one per message, written with ``schema`` (a JSON Avro schema)."""
    name = "avro"
    extension = "avro"
    OPTIONS = {"schema": opt(str, required=True, doc="the Avro schema of the records, as a JSON string"),
               "update_format": opt(str, default="raw", choices=UPDATE_FORMATS,
                                    doc="each record is a row (raw), {insert|delete: row} or a Debezium envelope"),
               "unknown_fields": opt(str, default="ignore", choices=("ignore", "reject"),
                                     doc="a field of the records that is not a column of the table is skipped "
                                         "(ignore) or makes the record a bad row naming it (reject)")}

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        try:
            import fastavro
        except ImportError:
            raise ctx.where.error("format avro needs fastavro: pip install 'sqlengine[kafka]'", "avro") from None
        try:
            self.parsed = fastavro.parse_schema(json.loads(config["schema"]))
        except Exception as e:   # noqa: BLE001 - JSON or Avro schema errors of every kind
            raise ctx.where.error(f"format avro: \"schema\" is not a valid Avro schema: {type(e).__name__}: {e}",
                                  "schema") from None


# ====================================================================== decoding
class Batch:
    """The payloads of one batch of messages and where each came from (for dead-letter records)."""

    def __init__(self, values: List[bytes], coords: Optional[Callable[[int], Dict[str, Any]]] = None):
        self.values = values
        self.coords = coords

    def annotate(self, errs: Errors, message_of: Callable[[int], Optional[int]] = lambda r: r) -> None:
        if self.coords is None:
            return
        for rec in errs.bad.values():
            row = rec.get("row")
            if row is None or "offset" in rec:
                continue
            m = message_of(row)
            if m is not None and 0 <= m < len(self.values):
                rec.update(self.coords(m))


def _text(v: bytes) -> str:
    try:
        return v.decode()
    except UnicodeDecodeError:
        return v.decode("latin-1")


def _bad_message(errs: Errors, row: int, message: str, raw: Any) -> None:
    """Record message ``row`` as bad before it is converted (its placeholder record is then rejected by the
    converters, which keep this first record)."""
    text = f"table {errs.table}, row {row}: {message}"
    if errs.reject:
        raise InputError(text)
    errs.bad[row] = {"table": errs.table, "row": row, "column": None, "error": text, "raw": raw}


def _debezium_records(recs: Sequence[Any]) -> Tuple[List[Any], List[int]]:
    """Debezium envelopes -> insert_delete records, and the message index of each."""
    out: List[Any] = []
    msg: List[int] = []
    for i, r in enumerate(recs):
        p = r.get("payload", r) if isinstance(r, dict) else r
        if not isinstance(p, dict) or not ({"before", "after"} & set(p)):
            out.append(r if r is not None else None)   # json_chunks reports it
            msg.append(i)
            continue
        if p.get("before") is not None:
            out.append({"delete": p["before"]})
            msg.append(i)
        if p.get("after") is not None:
            out.append({"insert": p["after"]})
            msg.append(i)
    return out, msg


def records_chunks(t, batch: Batch, records: List[Any], update_format: str, errs: Errors,
                   chunk_rows: int, unknown_fields: str = "reject") -> Iterator[Chunk]:
    """The exact path: decoded records (one per message; placeholders for bad messages already recorded in
    ``errs``) converted by ``sqlengine.ingest.inputs.json_chunks``."""
    if update_format == "debezium":
        recs, msg = _debezium_records(records)
        bad = {r: rec for r, rec in errs.bad.items()}   # message-numbered records of undecodable messages
        errs.bad.clear()
        remap = {}
        for j, m in enumerate(msg):
            if m in bad and m not in remap:
                remap[m] = j
        for m, rec in bad.items():
            j = remap.get(m, m)
            errs.bad[j] = {**rec, "row": j}
        yield from json_chunks(t, recs, "insert_delete", errs, chunk_rows, unknown_fields)
        batch.annotate(errs, lambda r: msg[r] if r < len(msg) else None)
        return
    yield from json_chunks(t, records, update_format, errs, chunk_rows, unknown_fields)
    batch.annotate(errs)


def _fast_type(t, top: bool = False) -> bool:
    """Whether pyarrow's JSON reader gives a column of type ``t`` as the exact path would: the scalar kinds
    (dates and timestamps at the top level, read as text and parsed), and ARRAYs and ROWs of numbers, booleans
    and text.  Not a VARIANT or a UUID (text on the data plane, but a VARIANT's JSON string "abc" is '"abc"' and a
    UUID is made lower case: sqlengine.nested converts them), nor a MAP (a JSON object is no Arrow map: the
    reader takes the MAPs of ``connectors.json_maps.vectorised`` as structs, and that module makes them maps)."""
    if t.base == "ARRAY":
        return _fast_type(element_type(t))
    if t.base == "STRUCT":
        return all(_fast_type(ft) for _, ft in struct_fields(t))
    kinds = _FAST_KINDS if top else ("bool", "int", "float", "string", "decimal")
    return _kind(arrow_type(t)) in kinds and t.base not in nested.CONVERTED


class JsonDecoder:
    def __init__(self, t, update_format: str, unknown_fields: str = "reject"):
        self.t = t
        self.update_format = update_format
        self.unknown_fields = unknown_fields
        self.lower = {f.name.lower() for f in t.fields}
        self.maps = [f.name for f in t.fields if f.type.base == "MAP"]   # (read as structs: connectors.json_maps)
        self.fast = all(_fast_type(f.type, top=True) or (json_maps.vectorised(f.type) and update_format == "raw")
                        for f in t.fields)
        row = json_maps.read_schema(t.fields, self._read_type)
        if update_format == "raw":
            self.schema = pa.schema(list(row))
        elif update_format == "insert_delete":
            self.schema = pa.schema([("insert", row), ("delete", row)])
        else:
            self.schema = pa.schema([("before", row), ("after", row), ("op", pa.string())])
        self.fast_batches = 0
        self.slow_batches = 0
        self.split_batches = 0   # batches converted fast but for a few messages (see _split_fast)
        self.slow_rows = 0       # messages converted on the exact, row-by-row path
        self.split_next = False  # the last batch needed the split: split the next at once

    @staticmethod
    def _read_type(f) -> pa.DataType:
        target = arrow_type(f.type)
        if pa.types.is_timestamp(target) or pa.types.is_date(target):
            return pa.string()
        return target

    def __call__(self, batch: Batch):
        def chunks(errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
            out = None
            if self.fast and batch.values and not (self.split_next and not errs.reject):
                saved = dict(errs.bad)
                try:
                    out = list(self._fast(batch, errs, chunk_rows))
                    self.fast_batches += 1
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, _NotFast):
                    errs.bad.clear()
                    errs.bad.update(saved)
                    out = None
            if out is not None:
                batch.annotate(errs)
                yield from out
                return
            if self.fast and batch.values and not errs.reject:
                split = _split_fast(self, batch, errs, chunk_rows)
                if split is not None:
                    yield from split
                    return
            self.slow_batches += 1
            self.slow_rows += len(batch.values)
            yield from self._slow(batch, errs, chunk_rows)
        return chunks

    # ------------------------------------------------------------ the exact path
    def _slow(self, batch: Batch, errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
        records: List[Any] = []
        for i, v in enumerate(batch.values):
            try:
                records.append(nested.loads(v))
            except (ValueError, UnicodeDecodeError) as e:
                msg = f"malformed JSON: {e.msg} (line {e.lineno} column {e.colno})" \
                    if isinstance(e, json.JSONDecodeError) else f"malformed JSON: {e}"
                _bad_message(errs, i, msg, _text(v))
                records.append(None)
        yield from records_chunks(self.t, batch, records, self.update_format, errs, chunk_rows,
                                  self.unknown_fields)

    # ------------------------------------------------------------ the fast path
    def _check_fields(self, names: Sequence[str], top: bool) -> None:
        """With ``unknown_fields`` "ignore" pyarrow infers fields beyond the explicit schema, appended after
        its fields: fine for fields of a row that are no column of the table, but a differently cased column
        (matched by the exact path), or an extra field of an envelope, takes the exact path."""
        extra = list(names)[len(self.t.fields) if (not top or self.update_format == "raw") else
                            len(self.schema):]
        if top and self.update_format != "raw" and extra:
            raise _NotFast("an envelope with more fields")
        if any(str(n).lower() in self.lower for n in extra):
            raise _NotFast("a differently cased column")

    def _fast(self, batch: Batch, errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
        import pyarrow.json as pj
        t = self.t
        seen: dict = {}
        values = batch.values
        for start in range(0, len(values), chunk_rows):
            part = values[start:start + chunk_rows]
            data = b"\n".join(part)
            ignore = self.unknown_fields == "ignore"
            table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=True,
                                                                                 block_size=max(1 << 22, 1)),
                                 parse_options=pj.ParseOptions(explicit_schema=self.schema,
                                                               unexpected_field_behavior="infer"
                                                               if ignore or self.maps else "error"))
            if table.num_rows != len(part):
                raise _NotFast("a message holds no object or several")
            if self.maps:   # (the fields the reader inferred: only inside the MAP columns, unless ignored)
                why = None if ignore else json_maps.same_shape(table.schema, self.schema, self.maps)
                if why is not None or json_maps.null_values(part, self.maps):
                    raise _NotFast(why or "a MAP value that is JSON null")
            if ignore:
                self._check_fields(table.column_names, True)
                for name in table.column_names[:len(self.schema)]:
                    if pa.types.is_struct(table.schema.field(name).type) and name not in self.maps:
                        self._check_fields([f.name for f in table.schema.field(name).type], False)
            raw = (lambda i, part=part: json.loads(part[i]))
            if self.update_format == "raw":
                errs.start_chunk(start, raw=raw)
                cols = [table.column(i).combine_chunks() for i in range(len(t.fields))]
                try:
                    cols = [json_maps.as_map(c, f.type) if f.name in self.maps else c for c, f in zip(cols, t.fields)]
                except json_maps.NotVectorised as e:
                    raise _NotFast(str(e)) from None
                yield self._finish(cols, 1, errs, seen)
            elif self.update_format == "insert_delete":
                ins = table.column("insert").combine_chunks()
                dele = table.column("delete").combine_chunks()
                is_ins, is_del = pc.is_valid(ins), pc.is_valid(dele)
                if pc.any(pc.equal(is_ins, is_del)).as_py():
                    raise _NotFast("a message with both or neither of insert and delete")
                errs.start_chunk(start, raw=raw)
                cols = [pc.if_else(is_ins, pc.struct_field(ins, [i]), pc.struct_field(dele, [i]))
                        for i in range(len(t.fields))]
                weights = pc.if_else(is_ins, 1, -1).to_numpy(zero_copy_only=False).tolist()
                yield self._finish(cols, weights, errs, seen)
            else:
                before = table.column("before").combine_chunks()
                after = table.column("after").combine_chunks()
                ib = pc.indices_nonzero(pc.is_valid(before))
                ia = pc.indices_nonzero(pc.is_valid(after))
                ids = pa.concat_arrays([ib, ia]).to_numpy(zero_copy_only=False) + start
                if not len(ids):
                    continue
                errs.start_chunk(start, row_ids=ids, raw=lambda i, ids=ids: json.loads(values[int(ids[i])]))
                cols = [pa.concat_arrays([pc.struct_field(before, [i]).take(ib), pc.struct_field(after, [i]).take(ia)])
                        for i in range(len(t.fields))]
                weights = [-1] * len(ib) + [1] * len(ia)
                yield self._finish(cols, weights, errs, seen)

    def _finish(self, cols: List[pa.Array], weights, errs: Errors, seen: dict) -> Chunk:
        arrays = []
        for f, arr in zip(self.t.fields, cols):
            target = arrow_type(f.type)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            if pa.types.is_timestamp(target) or pa.types.is_date(target):
                arr = convert_strings(arr, f.type, f.name, errs)
            elif arr.type != target:
                arr = arr.cast(target)
            arrays.append(arr)
        return finish(self.t, arrays, weights, errs, seen)


class _NotFast(Exception):
    pass


# ---------------------------------------------------------------------- the split path (a few bad messages)
#
# A batch the fast path rejects as a whole is split rather than converted row by row: DuckDB's json_valid
# finds the messages that are not one JSON object on one line (cheap next to converting them); the others are
# converted on the fast path, and if pyarrow still rejects them (a value of the wrong JSON type, an unknown
# field) they are halved until the rejected groups are small (``_SPLIT_LEAF`` messages), which take the exact
# path.  Messages that do not parse go to the dead letter, once each, numbered as in the batch.  Tables with
# a primary key keep the one-pass duplicate-key check: the split applies there only when the bad messages
# do not parse at all (else the batch takes the exact path as a whole).  Not under on_error = "reject"
# (the batch fails anyway, with the error of its first bad message from the exact path).  After a batch that
# needed it, the next batch is split at once (no whole-batch attempt first), until a batch is clean.

_SPLIT_LEAF = 64
_FAST_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, _NotFast)
_SUSPECTS = ("SELECT coalesce(json_valid(v) AND prefix(v, '{') AND NOT contains(v, chr(10)) AND "
             "NOT contains(v, chr(13)), false) AS ok FROM _sqlengine_msgs")


class _Renumbered(Errors):
    """The errors of a subset of a batch's messages, numbered as in the batch: row ``j`` of the subset is
    message ``index[j]``."""

    def __init__(self, table: str, index: Sequence[int]):
        super().__init__(table, "dead_letter")
        self.index = index

    def row(self, i: int) -> int:
        return self.index[super().row(i)]


_local = threading.local()   # a DuckDB connection per decoding thread


def _duckdb():
    con = getattr(_local, "con", None)
    if con is None:
        import duckdb
        con = _local.con = duckdb.connect(":memory:", config={"threads": 1})
    return con


def _suspects(values: Sequence[bytes]) -> List[int]:
    """The messages that are not one JSON object on one line (in order)."""
    try:
        arr = pa.array(values, pa.binary()).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):   # not UTF-8: classify in Python
        arr = None
    if arr is not None:
        import duckdb
        con = _duckdb()
        try:
            con.register("_sqlengine_msgs", pa.table({"v": arr}))
            try:
                ok = con.sql(_SUSPECTS).to_arrow_table().column(0)
            finally:
                con.unregister("_sqlengine_msgs")
        except duckdb.Error:   # (not expected: then in Python, as below)
            ok = None
        if ok is not None and len(ok) == len(values):
            return pc.indices_nonzero(pc.invert(ok)).to_pylist()
    out = []
    for i, v in enumerate(values):
        try:
            rec = nested.loads(v)
        except (ValueError, UnicodeDecodeError):
            out.append(i)
            continue
        if not isinstance(rec, dict) or b"\n" in v or b"\r" in v:
            out.append(i)
    return out


def _malformed(e: Exception) -> str:
    return f"malformed JSON: {e.msg} (line {e.lineno} column {e.colno})" \
        if isinstance(e, json.JSONDecodeError) else f"malformed JSON: {e}"


def _split_fast(dec: "JsonDecoder", batch: Batch, errs: Errors, chunk_rows: int) -> Optional[List[Chunk]]:
    """The chunks of a batch the fast path rejected, converted as described above (None: convert it on the
    exact path as a whole; ``errs`` is then unchanged)."""
    values = batch.values
    n = len(values)
    dec.split_next = False
    suspects = _suspects(values)
    runs: List[List[int]] = []   # the other messages, in runs of consecutive messages between suspects
    prev = 0
    for s in suspects + [n]:
        if s > prev:
            runs.append(list(range(prev, s)))
        prev = s + 1
    good = [i for r in runs for i in r]
    pk = bool(dec.t.primary_key)
    whole = _all_but_malformed(dec, batch, errs, chunk_rows, suspects, good)
    if whole is not None:
        return whole
    # every piece keeps its place: the rows of a batch are applied in message order (a delete before its
    # insert in the same batch would be clamped away), so the pieces are put back in order at the end
    pieces: List[Tuple[int, List[Chunk]]] = []
    bad: Dict[int, dict] = {}
    fast_rows = 0
    slow_rows = 0
    pending = runs[::-1]
    slow_groups: List[List[int]] = [[s] for s in suspects]
    dbz_next = n   # numbers of the debezium records' errors (after the batch's messages)
    while pending:
        part = pending.pop()
        sub = _Renumbered(errs.table, part)
        try:
            got = list(dec._fast(Batch([values[i] for i in part]), sub, chunk_rows))
        except _FAST_ERRORS:
            if pk:
                return None
            if len(part) <= _SPLIT_LEAF:
                slow_groups.append(part)
            else:
                h = len(part) // 2
                pending += [part[h:], part[:h]]
            continue
        pieces.append((part[0], got))
        bad.update(sub.bad)
        fast_rows += len(part)
    for group in slow_groups:   # on the exact path, a group at a time
        records: List[Any] = []
        idx: List[int] = []
        mal = Errors(errs.table, "dead_letter")
        for i in group:
            try:
                rec = nested.loads(values[i])
            except (ValueError, UnicodeDecodeError) as e:
                _bad_message(mal, i, _malformed(e), _text(values[i]))
                continue
            records.append(rec)
            idx.append(i)
        bad.update(mal.bad)
        if not records:
            continue
        if pk:
            return None
        sub_batch = Batch([values[i] for i in idx])
        if dec.update_format == "debezium":   # rows are numbered by record, several per message
            rest = Errors(errs.table, "dead_letter")
            if batch.coords is not None:
                sub_batch.coords = lambda j, idx=idx: batch.coords(idx[j])
            got = list(records_chunks(dec.t, sub_batch, records, dec.update_format, rest, chunk_rows,
                                      dec.unknown_fields))
            bad.update({dbz_next + k: rec for k, rec in rest.bad.items()})
            dbz_next += max(rest.bad, default=-1) + 1
        else:
            rest = _Renumbered(errs.table, idx)
            got = list(records_chunks(dec.t, sub_batch, records, dec.update_format, rest, chunk_rows,
                                      dec.unknown_fields))
            bad.update(rest.bad)
        pieces.append((idx[0], got))
        slow_rows += len(records)
    out: List[Chunk] = [c for _, got in sorted(pieces, key=lambda x: x[0]) for c in got]
    # (a clean batch: back to one attempt)
    return _split_done(dec, batch, errs, bad, out, bool(suspects) or fast_rows < len(good), slow_rows)


def _split_done(dec: "JsonDecoder", batch: Batch, errs: Errors, bad: Dict[int, dict], out: List[Chunk],
                split_next: bool, slow_rows: int = 0) -> List[Chunk]:
    """A split batch's chunks ``out``, its bad messages ``bad`` recorded in ``errs`` and the decoder's counts
    kept (``split_next``: split the next batch at once)."""
    errs.bad.update(bad)
    batch.annotate(errs)
    dec.split_next = split_next
    dec.split_batches += dec.split_next
    dec.slow_rows += slow_rows
    return out


def _all_but_malformed(dec: "JsonDecoder", batch: Batch, errs: Errors, chunk_rows: int, suspects: List[int],
                       good: List[int]) -> Optional[List[Chunk]]:
    """The usual split (a few truncated or garbled messages): when every suspect is malformed JSON (so none of
    them is a row to place among the others), the other messages in one fast conversion, in their order, and
    the suspects dead-lettered; None when a suspect parses, or the fast path rejects the others."""
    values = batch.values
    mal = Errors(errs.table, "dead_letter")
    for i in suspects:
        try:
            nested.loads(values[i])
            return None
        except (ValueError, UnicodeDecodeError) as e:
            _bad_message(mal, i, _malformed(e), _text(values[i]))
    sub = _Renumbered(errs.table, good)
    try:
        out = list(dec._fast(Batch([values[i] for i in good]), sub, chunk_rows)) if good else []
    except _FAST_ERRORS:
        return None
    return _split_done(dec, batch, errs, {**mal.bad, **sub.bad}, out, bool(suspects))


def _kind(t: pa.DataType) -> str:
    for kind, test in (("bool", pa.types.is_boolean), ("int", pa.types.is_integer), ("float", pa.types.is_floating),
                       ("decimal", pa.types.is_decimal), ("string", pa.types.is_string),
                       ("timestamp", pa.types.is_timestamp), ("date", pa.types.is_date)):
        if test(t):
            return kind
    return str(t)


class CsvDecoder:
    def __init__(self, t, config: Dict[str, Any]):
        self.t = t
        self.config = {**config, "header": False}

    def __call__(self, batch: Batch):
        from .formats import csv_file_chunks

        def chunks(errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
            values = [v[:-1] if v.endswith(b"\n") else v for v in batch.values]
            one_line = all(b"\n" not in v and b"\r" not in v for v in values)
            data = b"\n".join(values) + b"\n"
            try:
                yield from csv_file_chunks(self.t, io.BytesIO(data), self.config, errs, chunk_rows)
            except pa.ArrowInvalid as e:
                raise InputError(f"table {self.t.name}: malformed CSV: {e}") from None
            if one_line:
                batch.annotate(errs)
        return chunks


class AvroDecoder:
    def __init__(self, t, fmt: AvroFormat):
        self.t = t
        self.parsed = fmt.parsed
        self.update_format = fmt.config["update_format"]
        self.unknown_fields = fmt.config.get("unknown_fields", "reject")

    def __call__(self, batch: Batch):
        from fastavro import schemaless_reader

        def chunks(errs: Errors, chunk_rows: int) -> Iterator[Chunk]:
            records: List[Any] = []
            for i, v in enumerate(batch.values):
                buf = io.BytesIO(v)
                try:
                    rec = schemaless_reader(buf, self.parsed)
                    if buf.tell() != len(v):
                        raise ValueError(f"{len(v) - buf.tell()} bytes left over after the record")
                except Exception as e:   # noqa: BLE001 - fastavro raises many kinds on bad bytes
                    _bad_message(errs, i, f"not an Avro record of the format's schema: {type(e).__name__}: {e}",
                                 v.hex() if len(v) <= 256 else v[:256].hex() + "...")
                    rec = None
                records.append(rec)
            yield from records_chunks(self.t, batch, records, self.update_format, errs, chunk_rows,
                                      self.unknown_fields)
        return chunks


def decoder(fmt: Format, t) -> Callable[[Batch], Callable[[Errors, int], Iterator[Chunk]]]:
    """A function turning a ``Batch`` of message values into the engine's ``Chunks``, for the format."""
    if fmt.name == "json":
        return JsonDecoder(t, fmt.config["update_format"], fmt.config.get("unknown_fields", "reject"))
    if fmt.name == "csv":
        return CsvDecoder(t, fmt.config)
    if fmt.name == "avro":
        return AvroDecoder(t, fmt)
    raise InputError(f"format {fmt.name} cannot decode messages")


# ====================================================================== encoding
def _default(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return v.decode("latin-1")
    if hasattr(v, "isoformat"):          # pandas Timestamp
        return v.isoformat(sep=" ")
    if hasattr(v, "item"):               # numpy scalars
        return v.item()
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


def encode_json(changes: pa.Table, update_format: str, key_columns: Sequence[str] = (),
                weight: str = "__weight") -> Iterator[Tuple[Optional[bytes], bytes]]:
    """(key, value) messages for a view's changes (its columns plus ``weight``), one per unit of weight."""
    names = [c for c in changes.column_names if c != weight]
    columns = [nested.python_values(changes.column(c)) for c in names]   # (a MAP as an object)
    rows = [dict(zip(names, r)) for r in zip(*columns)] if names else [{} for _ in range(changes.num_rows)]
    weights = changes.column(weight).to_pylist()
    dumps = json.JSONEncoder(default=_default, separators=(",", ":"), ensure_ascii=False).encode
    for row, w in zip(rows, weights):
        key = dumps({k: row[k] for k in key_columns}).encode() if key_columns else None
        if update_format == "debezium":
            value = dumps({"before": None, "after": row, "op": "c"} if w > 0 else
                          {"before": row, "after": None, "op": "d"}).encode()
        else:
            value = dumps({"insert": row} if w > 0 else {"delete": row}).encode()
        for _ in range(abs(int(w))):
            yield key, value
