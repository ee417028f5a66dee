"""The test oracle: DuckDB recomputes each view from scratch over the tables' current contents.

The one oracle of the suite: how values are canonicalised and how two bags are compared is defined here only, for
the differential tests, the fuzzer, the connector and crash tests and the TPC-H/Nexmark workloads alike
(:mod:`tests.support.workload_oracle` keeps only the workloads' tables, batches and runs).

Also a bag model of the tables (inserts add a copy, deletes remove at most
one existing copy per row) and an exact multiset comparison:

- :func:`canon` gives each value an exact, hashable form: NULL is ``None``, NaN is
  one value equal to itself (not NULL), -0.0 equals 0.0 (as in SQL), +-inf are
  themselves, decimals stay exact (``Decimal('1.50') == Decimal('1.5')``),
  timestamps are naive UTC, dates stay dates (a DATE is not a midnight TIMESTAMP);
- :func:`diff` cancels rows present on both sides with equal multiplicity
  exactly, then matches the remaining rows one to one (equal in every
  non-float column, floats within a relative 1e-9 / absolute 1e-12), each match
  consuming one copy on each side; whatever is left, with its multiplicity, is a
  difference, and so is any negative weight.

A stale retraction (``0.8249579113843054`` left beside ``0.82495791138430541``)
is therefore an extra row, never absorbed by the float tolerance.

Rows come from sources that keep NULL and NaN apart wherever they can: DuckDB's ``fetchall()``, the engine's
``query()`` and ``query_arrow()`` (:func:`bag_of_arrow`), never a pandas conversion of a result, in which a NULL of a
float column becomes NaN.  The one source that is a pandas frame is a listener's change stream (``listen(view)
.to_pandas()``: the engine converts each Arrow chunk with ``to_pandas``): there a NaN of a float column is
``NULL_OR_NAN`` (:func:`bag_from_changes`), matched with either; the view's contents, read through Arrow, are held
to NULL and NaN exactly.
"""
from __future__ import annotations

import bisect
import datetime as dt
import decimal
import math
import re
from collections import Counter, defaultdict
from typing import Dict, List, Sequence, Tuple

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

REL_TOL = 1e-9
ABS_TOL = 1e-12


class _Special:
    """A marker value equal only to itself: NaN, or "NULL or NaN" (see :func:`bag_from_changes`)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name

    def __reduce__(self):
        return (_special, (self.name,))


NAN = _Special("NaN")
NULL_OR_NAN = _Special("NULL|NaN")   # a pandas float column's NaN: the frame cannot tell NULL from NaN


def _special(name):
    return NAN if name == "NaN" else NULL_OR_NAN


def canon(v):
    """The exact, hashable form of one value (see the module docstring)."""
    if v is None or v is pd.NaT or v is pd.NA:
        return None
    if isinstance(v, _Special):
        return v
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return NAN
        return 0.0 if f == 0 else f
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return NAN
        return decimal.Decimal(0) if v.is_zero() else v
    if isinstance(v, np.datetime64):
        v = pd.Timestamp(v)
        if v is pd.NaT:
            return None
    if isinstance(v, pd.Timestamp):
        if v.tzinfo is not None:
            v = v.tz_convert("UTC").tz_localize(None)
        if v.nanosecond or not 1 <= v.year <= 9999:   # beyond datetime's range: the Timestamp itself
            return v
        return v.to_pydatetime()
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None) if v.tzinfo is not None else v
    if isinstance(v, np.generic):
        return canon(v.item())
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(canon(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), canon(x)) for k, x in v.items()))
    return v


def bag(rows: Sequence[Sequence]) -> Counter:
    """The multiset of ``rows``, each row a tuple of :func:`canon` values."""
    return Counter(tuple(canon(x) for x in r) for r in rows)


def bag_of_arrow(table: pa.Table) -> Counter:
    """The multiset of an Arrow table's rows (e.g. ``query_arrow``), NULL and NaN kept apart."""
    return bag(zip(*(c.to_pylist() for c in table.columns))) if table.num_columns else Counter()


def plain(v):
    """A canonical value back as a value Arrow and DuckDB take (``NULL_OR_NAN``, which cannot be told, as NULL)."""
    if v is NAN:
        return float("nan")
    if v is NULL_OR_NAN:
        return None
    return v


def to_arrow(rows: Counter, schema: pa.Schema) -> pa.Table:
    """A bag of canonical rows (positive multiplicities) as an Arrow table of ``schema``, each row repeated."""
    out = [[] for _ in schema.names]
    for r, n in rows.items():
        for _ in range(n):
            for col, v in zip(out, r):
                col.append(plain(v))
    return pa.table([pa.array(col, type=f.type) for col, f in zip(out, schema)], schema=schema)


def bag_from_changes(df: pd.DataFrame, weight: str = "__weight") -> Counter:
    """Integrate a stream of weighted changes into a bag (exact keys; rows with a net weight of 0 dropped, negative
    weights kept so that :func:`diff` reports them).

    The frame comes from pandas' conversion of Arrow, in which a NULL of a numeric column is NaN: a NaN in a
    float column of ``df`` is therefore ``NULL_OR_NAN``, which :func:`diff` matches with either.
    """
    c: Counter = Counter()
    cols = [x for x in df.columns if x != weight]
    lossy = [pd.api.types.is_float_dtype(df[x].dtype) for x in cols]
    for r, w in zip(df[cols].itertuples(index=False, name=None), df[weight]):
        key = tuple(NULL_OR_NAN if lo and isinstance(x, float) and math.isnan(x) else _lossy_nested(canon(x))
                    for x, lo in zip(r, lossy))
        c[key] += int(w)
    return Counter({k: v for k, v in c.items() if v != 0})


def _lossy_nested(v):
    """A nested value of a pandas frame, whose NumPy arrays hold a NULL float as NaN: each NaN inside it as
    ``NULL_OR_NAN``."""
    if isinstance(v, tuple):
        return tuple(NULL_OR_NAN if x is NAN else _lossy_nested(x) for x in v)
    return v


def _lossy_count(v) -> int:
    """How many ``NULL_OR_NAN`` values ``v`` (a value, or a tuple of them, nested) holds."""
    if isinstance(v, (tuple, list)):
        return sum(_lossy_count(x) for x in v)
    return 1 if v is NULL_OR_NAN else 0


def _is_float(v) -> bool:
    """A float, or a nested value (a tuple) holding one."""
    if isinstance(v, tuple):
        return any(_is_float(x) for x in v)
    return isinstance(v, float) or v is NAN or v is NULL_OR_NAN


def _close(x, y) -> bool:
    """One value of a float column against another: exact for non-numbers, tolerant for finite numbers; nested
    values (tuples) element by element."""
    if isinstance(x, tuple) or isinstance(y, tuple):
        return isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y) and \
            all(_close(a, b) for a, b in zip(x, y))
    if x is NULL_OR_NAN or y is NULL_OR_NAN:
        return x is None or y is None or isinstance(x, _Special) and isinstance(y, _Special)
    if x is None or y is None or x is NAN or y is NAN:
        return x is y
    if isinstance(x, (str, bool, dt.date)) or isinstance(y, (str, bool, dt.date)):
        return x == y
    fx, fy = float(x), float(y)
    if math.isinf(fx) or math.isinf(fy):
        return fx == fy
    return abs(fx - fy) <= max(REL_TOL * max(abs(fx), abs(fy)), ABS_TOL)


_ARITY = _Special("a row of another width")


def _match(actual: Counter, expected: Counter) -> Tuple[Counter, Counter]:
    """The rows of ``actual`` and ``expected`` (positive multiplicities) that no row of the other side matches one
    to one: equal in the columns that hold no float on either side, close in the others."""
    rows = list(actual) + list(expected)
    width = max((len(r) for r in rows), default=0)
    approx = [any(j < len(r) and _is_float(r[j]) for r in rows) for j in range(width)]
    if not any(approx):
        return actual, expected

    def split(r):
        if len(r) != width:
            return (_ARITY, r), None
        return tuple(None if approx[j] else v for j, v in enumerate(r)), tuple(r[j] for j in range(width) if approx[j])

    def first(nums):   # a sort key on the first float column: finite numbers in order, the rest grouped
        x = nums[0]
        if isinstance(x, (int, float, decimal.Decimal)) and not isinstance(x, bool) and math.isfinite(float(x)):
            return (1, float(x))
        if x is None or isinstance(x, _Special):
            return (0, 0.0)
        return (2, float(x)) if isinstance(x, (int, float, decimal.Decimal)) else (3, 0.0)

    ga, ge = defaultdict(list), defaultdict(list)
    for src, g in ((actual, ga), (expected, ge)):
        for r, n in src.items():
            k, nums = split(r)
            g[k].append([nums, r, n])
    left_a, left_e = Counter(), Counter()
    for k in set(ga) | set(ge):
        xs, ys = ga.get(k, []), ge.get(k, [])
        if k[0] is _ARITY or not xs or not ys:
            for nums, r, n in xs:
                left_a[r] += n
            for nums, r, n in ys:
                left_e[r] += n
            continue
        ys.sort(key=lambda y: first(y[0]))
        keys = [first(y[0]) for y in ys]
        # the rows with fewer lossy NULL|NaN values first: a lossy value matches either, so a row that is exact
        # where another is lossy takes its one candidate before the lossy row can (seed 69608: a NULL field
        # beside a NaN one)
        xs.sort(key=lambda x: _lossy_count(x[0]))
        for x in xs:
            kx = first(x[0])
            if kx[0] == 1:
                tol = max(REL_TOL * abs(kx[1]) * 2, ABS_TOL * 2)
                lo, hi = bisect.bisect_left(keys, (1, kx[1] - tol)), bisect.bisect_right(keys, (1, kx[1] + tol))
                candidates = range(lo, hi)
            else:   # NULL, NaN or an infinity first: scan (the lossy NULL|NaN may match any of them)
                candidates = range(len(ys))
            for i in candidates:
                y = ys[i]
                if x[2] == 0:
                    break
                if y[2] and all(_close(a, b) for a, b in zip(x[0], y[0])):
                    m = min(x[2], y[2])
                    x[2] -= m
                    y[2] -= m
            if x[2]:
                left_a[x[1]] += x[2]
        for nums, r, n in ys:
            if n:
                left_e[r] += n
    return left_a, left_e


def diff(actual: Counter, expected: Counter) -> str:
    """"" when the bags are equal (see the module docstring), else the differences with their multiplicities."""
    neg = {k: v for k, v in actual.items() if v < 0}
    if not neg and +actual == +expected:
        return ""
    a, e = +actual, +expected
    common = a & e
    extra, missing = _match(a - common, e - common)
    if not extra and not missing and not neg:
        return ""
    parts = []
    if extra:
        parts.append(f"extra rows {sorted(extra.items(), key=repr)[:5]} ({sum(extra.values())} in all)")
    if missing:
        parts.append(f"missing rows {sorted(missing.items(), key=repr)[:5]} ({sum(missing.values())} in all)")
    if neg:
        parts.append(f"negative weights {sorted(neg.items(), key=repr)[:5]}")
    return "; ".join(parts)


class _Row(tuple):
    """A table row as the engine tells rows apart: -0.0 is not 0.0 (Python's tuples find them equal), NaN is NaN."""

    def _key(self):
        return tuple(("-0.0" if math.copysign(1.0, x) < 0 else "0.0") if isinstance(x, float) and x == 0 else
                     "nan" if isinstance(x, float) and math.isnan(x) else x for x in self)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return self._key() == (_Row(other)._key() if isinstance(other, tuple) else other)

    def __ne__(self, other):
        return not self == other


def _signed_canon(x):
    return x if isinstance(x, float) and x == 0 else canon(x)


_WITH_OPTIONS = re.compile(r"\)\s*WITH\s*\((?:'[^']*'\s*=\s*'[^']*'\s*,?\s*)+\)\s*;", re.I)


def without_table_options(schema: str) -> str:
    """``schema`` without the engine's table options (``WITH ('append_only' = 'true')``), which DuckDB has not."""
    return _WITH_OPTIONS.sub(");", schema)


class Model:
    """Table contents under bag semantics, and DuckDB recomputation of views over them."""

    def __init__(self, schema_sql: str, tables: Dict[str, List[str]]):
        self.schema_sql = schema_sql
        self.columns = tables
        self.rows: Dict[str, Counter] = {t: Counter() for t in tables}

    def insert(self, table: str, rows: Sequence[tuple]) -> None:
        for r in rows:
            self.rows[table][_Row(r)] += 1

    def delete(self, table: str, rows: Sequence[tuple]) -> None:
        """Remove one copy of each row, matched by exact value (NaN matches NaN, -0.0 does not match 0.0)."""
        for r in rows:
            r = _Row(r)
            if self.rows[table][r] <= 0:
                want = _Row(_signed_canon(x) for x in r)
                r = next((k for k, n in self.rows[table].items()
                          if n > 0 and _Row(_signed_canon(x) for x in k) == want), r)
            if self.rows[table][r] > 0:
                self.rows[table][r] -= 1
        self.rows[table] = +self.rows[table]

    def duck(self, views=(), setup=None) -> duckdb.DuckDBPyConnection:
        """A DuckDB with the current table contents and the given (name, select, _) views defined (after
        ``setup(con)``, e.g. the functions the views call)."""
        con = duckdb.connect()
        if setup is not None:
            setup(con)
        con.execute("SET TimeZone = 'UTC'")
        con.execute(without_table_options(self.schema_sql))
        for t, cols in self.columns.items():
            rows = list(self.rows[t].elements())
            if rows:
                ph = ", ".join("?" for _ in cols)
                con.executemany(f"INSERT INTO {t} VALUES ({ph})", [list(r) for r in rows])
        for name, select, *_ in views:
            con.execute(f"CREATE VIEW {name} AS {select}")
        return con

    def view(self, con, select_sql: str) -> Counter:
        return bag(con.execute(select_sql).fetchall())


def churn_rounds(seed: int, n: int, inserts, duplicates: Tuple[str, int], deletes: Sequence[str], max_gone: int):
    """``n`` rounds of random changes, each a list of ``(table, delete, rows)`` batches: per table of
    ``inserts`` (name -> (row counts to choose from, ``row(rnd, serial)``)), new rows; ``duplicates`` =
    (table, k): k copies of rows already there, added to that table's batch; then, per table of ``deletes``,
    a delete of a quarter of its rows (at most ``max_gone``)."""
    import random
    rnd = random.Random(seed)
    live: Dict[str, list] = {t: [] for t in inserts}
    serial = 0
    for _ in range(n):
        ops = []
        for table, (counts, row) in inserts.items():
            rows = []
            for _ in range(rnd.choice(counts)):
                serial += 1
                rows.append(row(rnd, serial))
            if table == duplicates[0]:
                rows += rnd.sample(live[table], min(duplicates[1], len(live[table])))
            ops.append((table, False, rows))
            live[table] += rows
        for table in deletes:
            gone = rnd.sample(live[table], min(len(live[table]) // 4, max_gone))
            ops.append((table, True, gone))
            for r in gone:
                live[table].remove(r)
        yield ops


def check_views(p, model: "Model", views: Dict[str, str], label: str) -> None:
    """Every view of ``views`` (name -> query) read from pipeline ``p`` equals DuckDB's recomputation."""
    con = model.duck()
    try:
        for name, q in views.items():
            got = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")])
            assert not diff(got, model.view(con, q)), f"{label}: view {name}: {diff(got, model.view(con, q))}"
    finally:
        con.close()


def feed(p, model: "Model", ops, columns: Dict[str, List[str]]) -> None:
    """Apply one round of ``(table, delete, rows)`` batches to pipeline ``p`` and to ``model``, then wait
    until ``p`` has processed them."""
    for table, delete, rows in ops:
        p.input_pandas(table, pd.DataFrame([list(r) for r in rows], columns=columns[table], dtype=object),
                       delete=delete)
        (model.delete if delete else model.insert)(table, rows)
    p.wait_for_idle()


def reopen_with_rule(make_pipeline, monkeypatch, sql: str, storage: str, rule: str, model: "Model", first,
                     columns: Dict[str, List[str]]):
    """A pipeline fed the batches ``first`` with planner rule ``rule`` switched off (as by a version before
    the rule), stopped, and reopened on the same storage with it on: (the reopened pipeline, the state keys
    the first one had)."""
    monkeypatch.setenv("SQLENGINE_RULES", f"-{rule}")
    p = make_pipeline(sql, storage_dir=storage)
    feed(p, model, first, columns)
    before = set(p.store.current.runs)
    p.stop()
    monkeypatch.delenv("SQLENGINE_RULES")
    return make_pipeline(sql, storage_dir=storage), before


def materialized(schema: str, views: Dict[str, str]) -> str:
    """A program: ``schema`` and one MATERIALIZED VIEW per entry of ``views`` (name -> query)."""
    return schema + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in views.items())
