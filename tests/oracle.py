"""The test oracle: DuckDB recomputes each view from scratch over the tables' current contents.

Also a bag model of the tables (inserts add a copy, deletes remove at most
one existing copy per row) and a multiset comparison with float tolerance.
"""
from __future__ import annotations

import datetime as dt
import decimal
import math
from collections import Counter
from typing import Dict, List, Sequence, Tuple

import duckdb
import pandas as pd


def canon(v):
    """A hashable, comparable form of one value; floats and decimals are rounded for tolerance."""
    if v is None:
        return None
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    if isinstance(v, bool):
        return v
    if isinstance(v, (decimal.Decimal, float)) or type(v).__name__.startswith("float"):
        f = float(v)
        if math.isnan(f):
            return None
        if f == int(f) and abs(f) < 2 ** 53:
            return int(f)
        return float(f"{f:.6g}")
    if hasattr(v, "item") and not isinstance(v, (pd.Timestamp,)):
        return canon(v.item())
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime().replace(tzinfo=None)
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None)
    return v


def bag(rows: Sequence[Sequence]) -> Counter:
    return Counter(tuple(canon(x) for x in r) for r in rows)


def bag_from_changes(df: pd.DataFrame, weight: str = "__weight") -> Counter:
    """Integrate a stream of weighted changes into a bag."""
    c: Counter = Counter()
    cols = [x for x in df.columns if x != weight]
    for r, w in zip(df[cols].itertuples(index=False, name=None), df[weight]):
        c[tuple(canon(x) for x in r)] += int(w)
    return +c if all(v >= 0 for v in c.values()) else Counter({k: v for k, v in c.items() if v != 0})


def diff(actual: Counter, expected: Counter) -> str:
    if actual == expected:
        return ""
    extra = actual - expected
    missing = expected - actual
    neg = {k: v for k, v in actual.items() if v < 0}
    return (f"extra rows {list(extra.items())[:5]}; missing rows {list(missing.items())[:5]}"
            + (f"; negative weights {list(neg.items())[:5]}" if neg else ""))


class Model:
    """Table contents under bag semantics, and DuckDB recomputation of views over them."""

    def __init__(self, schema_sql: str, tables: Dict[str, List[str]]):
        self.schema_sql = schema_sql
        self.columns = tables
        self.rows: Dict[str, Counter] = {t: Counter() for t in tables}

    def insert(self, table: str, rows: Sequence[tuple]) -> None:
        for r in rows:
            self.rows[table][tuple(r)] += 1

    def delete(self, table: str, rows: Sequence[tuple]) -> None:
        for r in rows:
            r = tuple(r)
            if self.rows[table][r] > 0:
                self.rows[table][r] -= 1
        self.rows[table] = +self.rows[table]

    def duck(self, views=()) -> duckdb.DuckDBPyConnection:
        """A DuckDB with the current table contents and the given (name, select, _) views defined."""
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(self.schema_sql)
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
