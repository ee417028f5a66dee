"""``datagen``: generated rows for a table (like Feldera's datagen), for demos, tests and benchmarks.

    CREATE TABLE orders (id BIGINT NOT NULL, customer INT, amount DECIMAL(10, 2), ts TIMESTAMP)
    WITH ('connectors' = '[{"transport": {"name": "datagen", "config": {
        "count": 1000000, "rate": 50000, "seed": 7, "deletes": 0.1,
        "columns": {"id": {"sequence": {"start": 1}},
                    "customer": {"zipf": {"n": 1000, "s": 1.1}},
                    "amount": {"uniform": {"min": 1, "max": 500}, "null_fraction": 0.05},
                    "ts": {"timestamp": {"start": "2024-01-01 00:00:00", "rate": 1000}}}}}}]')

Row ``i`` depends only on (seed, column, i): every value is a hash of those (splitmix64), computed
vectorized with numpy, so the position is just the number of rows emitted and a restart continues the
same stream.  Column generators (each may add ``"null_fraction": f``):

* ``{"sequence": {"start": s, "step": k}}``: s + k*i (integers, decimals, floats; VARCHAR: its text);
  integers wrap around inside their type's range.
* ``{"uniform": {"min": a, "max": b}}``: uniform in [a, b] (integers inclusive; floats/decimals; DATE and
  TIMESTAMP with text bounds); BOOLEAN: true or false.
* ``{"zipf": {"n": N, "s": 1.1}}``: 1..N, rank k with probability proportional to 1/k^s (integers, VARCHAR).
* ``{"choice": [v1, v2, ...]}``: one of the values, uniformly.
* ``{"timestamp": {"start": "2024-01-01 00:00:00", "rate": r}}``: start + i/r seconds (TIMESTAMP, DATE).

A column without a spec: integers and decimals count up (``sequence``), floats are uniform in [0, 1),
VARCHAR is the row number as text, BOOLEAN alternates, DATE counts days and TIMESTAMP seconds from
2024-01-01.

``deletes`` (a fraction f in 0..1): about f of the rows are deleted again later, row i (if chosen, by
hash) between 1 and ``delete_lag`` (default 1000) rows after it was inserted, in the batch that inserts row i + lag; a row is
never deleted twice.  With ``count`` the rows whose delete would come after the last row are kept.
``rate`` limits the rows inserted per second (default: as fast as possible).
"""
from __future__ import annotations

import datetime as dt
import time
import zlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlengine.ingest import Errors, convert_values, finish
from sqlengine.types import arrow_type

from .base import Source, SourceBatch, opt, register_source
from .nexmark_gen import _mix

KINDS = ("sequence", "uniform", "zipf", "choice", "timestamp")
DELETE_LAG = 1000          # a deleted row goes between 1 and DELETE_LAG rows after its insert
MAX_ZIPF_N = 10_000_000
EPOCH = "2024-01-01 00:00:00"
_INT_RANGE = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
_KINDS_FOR = {   # column base type -> the generators it takes
    "int": ("sequence", "uniform", "zipf", "choice"),
    "DECIMAL": ("sequence", "uniform", "choice"),
    "REAL": ("sequence", "uniform", "choice"), "DOUBLE": ("sequence", "uniform", "choice"),
    "VARCHAR": ("sequence", "zipf", "choice"),
    "BOOLEAN": ("sequence", "uniform", "choice"),
    "DATE": ("uniform", "choice", "timestamp"), "TIMESTAMP": ("uniform", "choice", "timestamp"),
}


def _group(base: str) -> str:
    return "int" if base in _INT_RANGE else base


class _Hash:
    """Deterministic per-row random values: hash of (seed, stream, row)."""

    def __init__(self, seed: int):
        self.seed = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]

    def u64(self, stream: int, rows: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            x = rows.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(stream)
            return _mix(_mix(x) ^ self.seed)

    def uniform(self, stream: int, rows: np.ndarray) -> np.ndarray:
        return (self.u64(stream, rows) >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _stream(name: str, what: str) -> int:
    return zlib.crc32(f"{name.lower()}/{what}".encode()) * 0x9E3779B1 & 0xFFFFFFFFFFFFFFFF


def _micros(text: str) -> int:
    """Timestamp text -> microseconds since 1970 (naive = UTC)."""
    t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if t.tzinfo is not None:
        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return int((t - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1))


def _decimal_array(units: np.ndarray, target: pa.DataType) -> pa.Array:
    """Unscaled int64 values -> a decimal128 array (built from its 16-byte little-endian buffers)."""
    units = units.astype(np.int64)
    both = np.empty((len(units), 2), dtype=np.int64)
    both[:, 0] = units
    both[:, 1] = np.where(units < 0, -1, 0)
    return pa.Array.from_buffers(target, len(units), [None, pa.py_buffer(both.tobytes())])


class Column:
    """The generator of one column, checked against its type."""

    def __init__(self, name: str, ftype, spec: Optional[dict], error):
        self.name, self.ftype = name, ftype
        self.target = arrow_type(ftype)
        base = ftype.base
        self.group = _group(base)
        if spec is not None and not isinstance(spec, dict):
            raise error(f"datagen: column {name}: the spec must be a JSON object like {{\"uniform\": "
                        f"{{\"min\": 0, \"max\": 9}}}}; generators: {', '.join(KINDS)}")
        self.null_fraction = 0.0
        if spec is not None:
            spec = dict(spec)
            nf = spec.pop("null_fraction", 0.0)
            if isinstance(nf, bool) or not isinstance(nf, (int, float)) or not 0 <= nf <= 1:
                raise error(f"datagen: column {name}: null_fraction must be a number in 0..1, not {nf!r}")
            if nf > 0 and not ftype.nullable:
                raise error(f"datagen: column {name} is NOT NULL; it cannot have a null_fraction")
            self.null_fraction = float(nf)
            unknown = [k for k in spec if k not in KINDS]
            if unknown or len(spec) != 1:
                what = f"unknown generator {unknown[0]!r}" if unknown else \
                    ("no generator" if not spec else f"more than one generator ({', '.join(spec)})")
                raise error(f"datagen: column {name}: {what}; generators: {', '.join(KINDS)} "
                            f"(plus \"null_fraction\")")
            self.kind, self.args = next(iter(spec.items()))
        else:
            self.kind, self.args = self._default(base)
        allowed = _KINDS_FOR.get(self.group, ())
        if self.kind not in allowed:
            raise error(f"datagen: column {name} ({ftype.sql}) cannot use the {self.kind} generator; "
                        f"for {ftype.sql} use: {', '.join(allowed) or '(none)'}")
        getattr(self, f"_check_{self.kind}")(error)

    def _default(self, base: str) -> Tuple[str, Any]:
        if self.group in ("int", "DECIMAL", "VARCHAR", "BOOLEAN"):
            return "sequence", {"start": 0}
        if base in ("REAL", "DOUBLE"):
            return "uniform", {"min": 0.0, "max": 1.0}
        return "timestamp", {"start": EPOCH, "rate": 1.0 if base == "TIMESTAMP" else 1 / 86400}

    # ------------------------------------------------------------ checks
    def _obj(self, error, allowed: Dict[str, tuple], required=()) -> dict:
        a = self.args
        if not isinstance(a, dict):
            raise error(f"datagen: column {self.name}: {self.kind} takes an object with "
                        f"{', '.join(allowed)}, not {a!r}")
        for k, v in a.items():
            if k not in allowed:
                raise error(f"datagen: column {self.name}: {self.kind} has no option {k!r}; options: "
                            f"{', '.join(allowed)}")
            if isinstance(v, bool) or not isinstance(v, allowed[k]):
                raise error(f"datagen: column {self.name}: {self.kind} option {k!r} must be "
                            f"{'/'.join(t.__name__ for t in allowed[k])}, not {v!r}")
        for k in required:
            if k not in a:
                raise error(f"datagen: column {self.name}: {self.kind} needs {k!r}")
        return a

    def _int_bounds(self) -> Tuple[int, int]:
        bits = _INT_RANGE[self.ftype.base]
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def _check_sequence(self, error) -> None:
        a = self._obj(error, {"start": (int, float), "step": (int, float)})
        self.start, self.step = a.get("start", 0), a.get("step", 1)
        if self.group in ("int", "VARCHAR", "BOOLEAN") and not (isinstance(self.start, int) and
                                                                  isinstance(self.step, int)):
            raise error(f"datagen: column {self.name}: sequence start and step must be integers for "
                        f"{self.ftype.sql}")

    def _check_uniform(self, error) -> None:
        if self.group == "BOOLEAN":
            self._obj(error, {})
            return
        if self.group in ("DATE", "TIMESTAMP"):
            a = self._obj(error, {"min": (str,), "max": (str,)}, required=("min", "max"))
            try:
                self.lo, self.hi = _micros(a["min"]), _micros(a["max"])
            except ValueError as e:
                raise error(f"datagen: column {self.name}: uniform bounds must be timestamps like "
                            f"'2024-01-01 00:00:00': {e}") from None
        else:
            a = self._obj(error, {"min": (int, float), "max": (int, float)}, required=("min", "max"))
            self.lo, self.hi = a["min"], a["max"]
            if self.group == "int":
                if not (isinstance(self.lo, int) and isinstance(self.hi, int)):
                    raise error(f"datagen: column {self.name}: uniform min and max must be integers for "
                                f"{self.ftype.sql}")
                lo, hi = self._int_bounds()
                if not (lo <= self.lo and self.hi <= hi):
                    raise error(f"datagen: column {self.name}: uniform bounds do not fit {self.ftype.sql} "
                                f"({lo} .. {hi})")
        if self.lo > self.hi:
            raise error(f"datagen: column {self.name}: uniform min {a['min']!r} is greater than max {a['max']!r}")

    def _check_zipf(self, error) -> None:
        a = self._obj(error, {"n": (int,), "s": (int, float)}, required=("n",))
        self.n, self.s = a["n"], float(a.get("s", 1.1))
        if not 1 <= self.n <= MAX_ZIPF_N or self.s <= 0:
            raise error(f"datagen: column {self.name}: zipf needs 1 <= n <= {MAX_ZIPF_N} and s > 0")
        if self.group == "int" and self.n > self._int_bounds()[1]:
            raise error(f"datagen: column {self.name}: zipf n={self.n} does not fit {self.ftype.sql}")
        self.cdf = None

    def _check_choice(self, error) -> None:
        from planner.errors import InputError
        if not isinstance(self.args, list) or not self.args:
            raise error(f"datagen: column {self.name}: choice takes a non-empty list of values")
        if None in self.args and not self.ftype.nullable:
            raise error(f"datagen: column {self.name} is NOT NULL; its choices cannot include null")
        errs = Errors("datagen", "reject")
        try:
            self.choices = convert_values(list(self.args), self.ftype, self.name, errs)
            errs.check()
        except InputError as e:
            text = e.message.split(": ", 1)[-1]
            raise error(f"datagen: column {self.name}: choice values must be {self.ftype.sql}: {text}") from None

    def _check_timestamp(self, error) -> None:
        a = self._obj(error, {"start": (str,), "rate": (int, float)})
        try:
            self.t0 = _micros(a.get("start", EPOCH))
        except ValueError as e:
            raise error(f"datagen: column {self.name}: timestamp start must be like '2024-01-01 00:00:00': "
                        f"{e}") from None
        self.rate = float(a.get("rate", 1.0))
        if self.rate <= 0:
            raise error(f"datagen: column {self.name}: timestamp rate (rows per second of event time) must be > 0")

    # ------------------------------------------------------------ generation
    def values(self, h: _Hash, rows: np.ndarray) -> pa.Array:
        arr = getattr(self, f"_gen_{self.kind}")(h, rows)
        if self.null_fraction > 0:
            mask = h.uniform(_stream(self.name, "null"), rows) < self.null_fraction
            arr = pc.if_else(pa.array(mask), pa.nulls(len(rows), self.target), arr)
        return arr

    def _numbers(self, values: np.ndarray, scaled: bool = False) -> pa.Array:
        """numpy numbers -> the column's type (ints wrap inside their type; decimals: ``scaled`` units)."""
        t = self.target
        if self.group == "int":
            bits = _INT_RANGE[self.ftype.base]
            v = values.astype(np.int64)
            if bits < 64:
                v = v.astype({8: np.int8, 16: np.int16, 32: np.int32}[bits])   # wraps
            return pa.array(v, t)
        if self.group == "DECIMAL":
            units = values if scaled else np.round(values * 10 ** t.scale)
            return _decimal_array(units, t)
        if self.group == "VARCHAR":
            return pc.cast(pa.array(values.astype(np.int64)), pa.string())
        if self.group == "BOOLEAN":
            return pa.array(values.astype(np.int64) % 2 == 1)
        return pa.array(values.astype(np.float64)).cast(t)

    def _gen_sequence(self, h, rows):
        if isinstance(self.start, int) and isinstance(self.step, int):
            with np.errstate(over="ignore"):
                return self._numbers(np.int64(self.start) + rows * np.int64(self.step),
                                     scaled=False) if self.group != "DECIMAL" else \
                    _decimal_array((self.start + rows * self.step) * 10 ** self.target.scale, self.target)
        return self._numbers(self.start + rows * float(self.step))

    def _gen_uniform(self, h, rows):
        u = h.uniform(_stream(self.name, "uniform"), rows)
        if self.group == "BOOLEAN":
            return pa.array(u < 0.5)
        if self.group in ("DATE", "TIMESTAMP"):
            us = self.lo + np.floor(u * (self.hi - self.lo + 1)).astype(np.int64)
            return self._time(us)
        if self.group == "int":
            return self._numbers(self.lo + np.floor(u * (self.hi - self.lo + 1)).astype(np.int64))
        if self.group == "DECIMAL":
            sc = 10 ** self.target.scale
            lo, hi = int(round(self.lo * sc)), int(round(self.hi * sc))
            return _decimal_array(lo + np.floor(u * (hi - lo + 1)).astype(np.int64), self.target)
        return self._numbers(self.lo + u * (self.hi - self.lo))

    def _gen_zipf(self, h, rows):
        if self.cdf is None:
            w = 1.0 / np.power(np.arange(1, self.n + 1, dtype=np.float64), self.s)
            self.cdf = np.cumsum(w) / w.sum()
        u = h.uniform(_stream(self.name, "zipf"), rows)
        k = np.minimum(np.searchsorted(self.cdf, u, side="right"), self.n - 1) + 1
        return self._numbers(k)

    def _gen_choice(self, h, rows):
        idx = (h.u64(_stream(self.name, "choice"), rows) % np.uint64(len(self.choices))).astype(np.int64)
        return self.choices.take(pa.array(idx))

    def _gen_timestamp(self, h, rows):
        return self._time(self.t0 + np.floor(rows * (1e6 / self.rate)).astype(np.int64))

    def _time(self, us: np.ndarray) -> pa.Array:
        if self.group == "DATE":
            return pa.array((us // 86_400_000_000).astype(np.int32), pa.date32())
        return pa.array(us, pa.timestamp("us"))


class Generator:
    """A table's generated rows: ``rows(lo, hi)`` are rows lo..hi-1; ``deleted(lo, hi)`` the rows whose
    delete comes with the inserts of rows lo..hi-1."""

    def __init__(self, table, config: Dict[str, Any], error=None):
        if error is None:
            def error(msg, key=None):
                from planner.errors import ConnectorError
                return ConnectorError(msg)
        self.table = table
        self.config = config
        self.hash = _Hash(int(config.get("seed") or 0))
        specs = dict(config.get("columns") or {})
        by_lower = {f.name.lower(): f for f in table.fields}
        for k in specs:
            if str(k).lower() not in by_lower:
                raise error(f"datagen: {k!r} is not a column of table {table.name}; columns: "
                            f"{', '.join(f.name for f in table.fields)}", k)
        given = {str(k).lower(): v for k, v in specs.items()}
        self.columns: List[Column] = []
        for f in table.fields:
            spec = given.get(f.name.lower())
            self.columns.append(Column(f.name, f.type, spec,
                                       lambda msg, _k=next((k for k in specs if str(k).lower() == f.name.lower()),
                                                           None): error(msg, _k)))
        self.delete_fraction = float(config.get("deletes") or 0.0)
        self.delete_lag = int(config.get("delete_lag") or DELETE_LAG)

    def rows(self, lo: int, hi: int) -> pa.Table:
        from planner.logical import col
        r = np.arange(lo, hi, dtype=np.int64)
        return pa.Table.from_arrays([c.values(self.hash, r) for c in self.columns],
                                    names=[col(i) for i in range(len(self.columns))])

    def deleted(self, lo: int, hi: int) -> np.ndarray:
        """Indexes of the rows deleted when rows lo..hi-1 are inserted (each row at most once)."""
        if self.delete_fraction <= 0 or hi <= lo:
            return np.zeros(0, dtype=np.int64)
        cand = np.arange(max(0, lo - self.delete_lag), hi, dtype=np.int64)
        chosen = self.hash.uniform(_stream("", "delete"), cand) < self.delete_fraction
        lag = 1 + (self.hash.u64(_stream("", "lag"), cand) % np.uint64(self.delete_lag)).astype(np.int64)
        due = cand + lag
        return cand[chosen & (due >= lo) & (due < hi)]

    def batch(self, lo: int, hi: int) -> Tuple[pa.Table, Any]:
        """Rows lo..hi-1 inserted and the rows due for deletion, as (positional rows, weights)."""
        ins = self.rows(lo, hi)
        dels = self.deleted(lo, hi)
        if not len(dels):
            return ins, 1
        gone = self._rows_at(dels)
        return pa.concat_tables([ins, gone]), [1] * ins.num_rows + [-1] * gone.num_rows

    def _rows_at(self, idx: np.ndarray) -> pa.Table:
        from planner.logical import col
        return pa.Table.from_arrays([c.values(self.hash, idx) for c in self.columns],
                                    names=[col(i) for i in range(len(self.columns))])

    def named(self, t: pa.Table) -> pa.Table:
        return t.rename_columns([f.name for f in self.table.fields])


@register_source
class Datagen(Source):
    transport = "datagen"
    OPTIONS = {
        "count": opt(int, doc="total rows to insert (absent: unbounded)"),
        "rate": opt(int, float, doc="rows inserted per second (absent: as fast as possible)"),
        "seed": opt(int, default=0, doc="the random seed: the rows depend only on (seed, row number)"),
        "columns": opt(dict, default={}, doc="column -> generator spec (sequence, uniform, zipf, choice, "
                                             "timestamp; null_fraction)"),
        "deletes": opt(int, float, default=0, doc="fraction (0..1) of the rows deleted again, 1..delete_lag rows "
                                                  "later"),
        "delete_lag": opt(int, default=DELETE_LAG, doc="a deleted row goes at most this many rows after its insert"),
        "batch_rows": opt(int, default=100_000, doc="rows per batch at most"),
    }

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        if c["count"] is not None and c["count"] < 0:
            raise where.error("transport datagen: \"count\" must be >= 0", "count")
        if c["rate"] is not None and c["rate"] <= 0:
            raise where.error("transport datagen: \"rate\" must be > 0", "rate")
        if not 0 <= c["deletes"] <= 1:
            raise where.error("transport datagen: \"deletes\" must be a fraction in 0..1", "deletes")
        if c["delete_lag"] <= 0:
            raise where.error("transport datagen: \"delete_lag\" must be > 0", "delete_lag")
        if c["batch_rows"] <= 0:
            raise where.error("transport datagen: \"batch_rows\" must be > 0", "batch_rows")
        self.gen = Generator(self.ctx.table, c, where.error)

    def open(self, position: Any) -> None:
        if not hasattr(self, "gen"):
            self.gen = Generator(self.ctx.table, self.config)
        position = position or {}
        self.next = int(position.get("rows", 0))
        self.deletes = int(position.get("deletes", 0))
        self.t0, self.sent = time.monotonic(), 0

    def poll(self, max_rows: int) -> Optional[SourceBatch]:
        n = min(max_rows, self.config["batch_rows"])
        count, rate = self.config["count"], self.config["rate"]
        if count is not None:
            n = min(n, count - self.next)
            if n <= 0:
                return None
        if rate is not None:
            allowed = int((time.monotonic() - self.t0) * rate) - self.sent
            n = min(n, allowed, max(1, int(rate / 10)))
            if n <= 0:
                time.sleep(min(0.2, (self.sent + 1) / rate - (time.monotonic() - self.t0)) if rate else 0.2)
                return None
        lo, hi = self.next, self.next + n
        n_del = len(self.gen.deleted(lo, hi))
        self.next, self.sent = hi, self.sent + n
        self.deletes += n_del
        gen, t = self.gen, self.ctx.table

        def chunks(errs, chunk_rows, lo=lo, hi=hi):
            rows, weights = gen.batch(lo, hi)
            if t.primary_key:   # duplicate keys within the batch are bad rows
                errs.start_chunk(0, raw=lambda i: gen.named(rows.slice(i, 1)).to_pylist()[0])
                yield finish(t, [rows.column(i).combine_chunks() for i in range(rows.num_columns)], weights, errs, {})
            else:
                yield rows, weights
        return SourceBatch(chunks, {"rows": hi, "deletes": self.deletes})

    def finished(self) -> bool:
        return self.config["count"] is not None and self.next >= self.config["count"]

    def lag(self) -> Optional[int]:
        return None if self.config["count"] is None else self.config["count"] - self.next
