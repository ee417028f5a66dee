"""Benchmark and acceptance workloads: TPC-H and Nexmark as views (see SOURCES.md).

Each suite (``"tpch"``, ``"nexmark"``) is a directory with ``schema.sql`` (its
tables), one ``qNN.sql`` per query (a header of ``-- Key: value`` comment lines,
then one ``CREATE VIEW name AS SELECT ...``) and ``gen.py`` (a deterministic data
generator with ``generate(...)`` and ``make_batches(...)``).

>>> sorted(load_queries("tpch"))[:2]
['tpch_q01', 'tpch_q02']
>>> len(load_queries("tpch")), len(load_queries("nexmark"))
(22, 22)
>>> headers("nexmark")["q19"]["Deterministic"].startswith("NOT")
True
>>> sorted(n for n, ok in deterministic("nexmark").items() if not ok)
['q105', 'q19']
>>> select_sql("nexmark")["q00"]
'SELECT auction, bidder, price, date_time, extra FROM bid'
"""
from __future__ import annotations

import os
import re
from typing import Dict, Iterable, List, Optional

SUITES = ("tpch", "nexmark", "nexmark_event_time")   # the last: Nexmark over streams with LATENESS (TUMBLE/HOP)
_DIR = os.path.dirname(os.path.abspath(__file__))

_VIEW = re.compile(r"^\s*CREATE\s+(?:MATERIALIZED\s+)?VIEW\s+([A-Za-z_]\w*)\s+AS\s+(.*?)\s*;?\s*$",
                   re.I | re.S)
_HEADER = re.compile(r"^--\s*([A-Z][A-Za-z ]*?):\s*(.*)$")


def suite_dir(suite: str) -> str:
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    return os.path.join(_DIR, suite)


def schema(suite: str) -> str:
    """The suite's CREATE TABLE statements (``schema.sql``)."""
    with open(os.path.join(suite_dir(suite), "schema.sql")) as f:
        return f.read()


def query_files(suite: str) -> Dict[str, str]:
    """{view name: path of its qNN.sql file}, in file-name order."""
    d = suite_dir(suite)
    out = {}
    for fn in sorted(os.listdir(d), key=lambda f: (len(f), f)):
        if re.fullmatch(r"q\d+\.sql", fn):
            out[_parse(os.path.join(d, fn))[0]] = os.path.join(d, fn)
    return out


def _strip_comments(sql: str) -> str:
    return "\n".join(l for l in sql.splitlines() if not l.lstrip().startswith("--"))


def _parse(path: str):
    with open(path) as f:
        text = f.read()
    hdr: Dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        m = _HEADER.match(line)
        if m:
            hdr[m.group(1)] = m.group(2).strip()
    body = _strip_comments(text).strip()
    m = _VIEW.match(body)
    if not m:
        raise ValueError(f"{path}: not one CREATE VIEW statement")
    return m.group(1), m.group(2).strip(), hdr


def load_queries(suite: str) -> Dict[str, str]:
    """{view name: ``CREATE VIEW name AS SELECT ...`` (no header comments, no trailing ';')}."""
    return {name: f"CREATE VIEW {name} AS\n{sel}" for name, sel in select_sql(suite).items()}


def select_sql(suite: str) -> Dict[str, str]:
    """{view name: the view's SELECT text} (runs as is in DuckDB over the suite's tables)."""
    return {name: _parse(p)[1] for name, p in query_files(suite).items()}


def headers(suite: str) -> Dict[str, Dict[str, str]]:
    """{view name: {header key: value}} from each file's leading ``-- Key: value`` lines,
    e.g. ``Source``, ``Adapted``, ``Deterministic`` (Nexmark), ``Usable as a view`` (TPC-H)."""
    return {name: _parse(p)[2] for name, p in query_files(suite).items()}


def deterministic(suite: str) -> Dict[str, bool]:
    """{view name: False if the header says its result depends on evaluation (tie) order}."""
    out = {}
    for name, h in headers(suite).items():
        v = h.get("Deterministic", "yes").strip().lower()
        out[name] = not v.startswith("not") and not v.startswith("no")
    return out


def program(suite: str, names: Optional[Iterable[str]] = None, materialized: bool = True) -> str:
    """The schema plus the given views (default: all) as one program text."""
    qs = select_sql(suite)
    names = list(qs) if names is None else list(names)
    kw = "CREATE MATERIALIZED VIEW" if materialized else "CREATE VIEW"
    views: List[str] = [f"{kw} {n} AS\n{qs[n]};" for n in names]
    return schema(suite).rstrip() + "\n\n" + "\n\n".join(views) + "\n"


def duckdb_event_time(select: str, clock: Optional[str] = None) -> str:
    """A ``nexmark_event_time`` query as DuckDB runs it from scratch: ``HOP`` / ``TUMBLE`` / ``SESSION`` table
    functions as subqueries that add ``window_start`` and ``window_end`` (windows aligned to the epoch, as the
    engine's), and ``NOW()`` as the timestamp ``clock``."""
    def hop(m):
        table, t, slide, size = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        return (f"(SELECT t.*, ws AS window_start, ws + INTERVAL {size} SECOND AS window_end FROM {table} t, "
                f"(SELECT unnest(range({size // slide})) AS k) r, LATERAL (SELECT time_bucket(INTERVAL {slide} "
                f"SECOND, t.{t}) - INTERVAL {slide} SECOND * r.k AS ws) w WHERE t.{t} IS NOT NULL)")

    def tumble(m):
        table, t, size = m.group(1), m.group(2), int(m.group(3))
        b = f"time_bucket(INTERVAL {size} SECOND, t.{t})"
        return (f"(SELECT t.*, {b} AS window_start, {b} + INTERVAL {size} SECOND AS window_end FROM {table} t "
                f"WHERE t.{t} IS NOT NULL)")

    def session(m):
        table, t, gap, key = m.group(1), m.group(2), int(m.group(3)), m.group(4)
        return (f"(SELECT s.* EXCLUDE (__new, __sid), MIN({t}) OVER (PARTITION BY {key}, __sid) AS window_start, "
                f"MAX({t}) OVER (PARTITION BY {key}, __sid) + INTERVAL {gap} SECOND AS window_end FROM "
                f"(SELECT *, SUM(__new) OVER (PARTITION BY {key} ORDER BY {t}) AS __sid FROM "
                f"(SELECT *, CASE WHEN LAG({t}) OVER w IS NULL OR {t} - LAG({t}) OVER w >= "
                f"INTERVAL {gap} SECOND THEN 1 ELSE 0 END AS __new FROM {table} WHERE {t} IS NOT NULL "
                f"WINDOW w AS (PARTITION BY {key} ORDER BY {t}))) s)")
    select = re.sub(r"SESSION\((\w+), (\w+), INTERVAL '(\d+)' SECOND, (\w+)\)", session, select)
    select = re.sub(r"HOP\((\w+), (\w+), INTERVAL '(\d+)' SECOND, INTERVAL '(\d+)' SECOND\)", hop, select)
    select = re.sub(r"TUMBLE\((\w+), (\w+), INTERVAL '(\d+)' SECOND\)", tumble, select)
    return select.replace("NOW()", f"TIMESTAMP '{clock}'") if clock is not None else select
