"""Row errors: a row whose expression fails at run time is kept out of the view and recorded.

Where SQL says an expression errors (a failed CAST, ``10 // 0``, an integer
overflow, ``json_extract`` of a text that is not JSON, a SUM outside BIGINT's
range), the failing row does not enter the operator's output, and one record
per view the operator feeds goes to the **error relation**, committed with the
step's state: ``sqlengine_errors`` in ad-hoc queries, counted per view in
``status()["errors"]``.  A step that is replayed after a crash records its
errors again only because the first attempt did not commit, so each failure
is recorded once.

The rule is a function of the row alone (a projection or filter of one row, a
join key of one row, a join condition of one pair of rows, the total of one
group), so the same row fails the same way whenever it is inserted or
deleted, and a view stays equal to its query over the rows that did not fail.

>>> errs = RowErrors()
>>> errs.add(3, ["v"], "CAST(c0 AS INT)", "Conversion Error: 'abc'", [{"s": "abc"}], [1])
>>> t = errs.table(7)
>>> t.to_pylist()[0]["view"], t.to_pylist()[0]["row"], t.to_pylist()[0]["step"]
('v', '{"s": "abc"}', 7)
"""
from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from planner.bind import DIALECT
from planner.logical import Aggregate, Project

ERRORS_KEY = "errors"                 # state key of the error relation's runs
ERRORS_RELATION = "sqlengine_errors"  # its name in ad-hoc queries
SCHEMA = pa.schema([("step", pa.int64()), ("view", pa.string()), ("operator", pa.string()),
                    ("expression", pa.string()), ("error", pa.string()), ("row", pa.string()),
                    ("weight", pa.int64())])
# exceptions DuckDB raises for a value (not for a plan): these make a row error, anything else fails the step
DATA_ERRORS = (duckdb.ConversionException, duckdb.OutOfRangeException, duckdb.InvalidInputException)
MAX_MESSAGES = 1000   # per operator and step, the first rows get their own message; the rest share the first


_POSITIONAL = re.compile(r"\bc(\d+)\b")


def user_names(text: str, names: Sequence[str]) -> str:
    """``text`` (an error message) with the positional columns ``c<i>`` named as the user wrote them."""
    return _POSITIONAL.sub(lambda m: names[int(m.group(1))] if int(m.group(1)) < len(names) else m.group(0), text)


def named_row(row: dict, names: Sequence[str]) -> Tuple[dict, int]:
    """(the values of a data-plane row ``c0.., __w`` keyed by ``names``, its weight)."""
    row = dict(row)
    w = row.pop("__w", 1)
    return {user_names(c, names) if _POSITIONAL.fullmatch(c) else c: v for c, v in row.items()}, w


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def row_json(row: dict) -> str:
    return json.dumps(row, default=str, sort_keys=False)


class RowErrors:
    """The row errors of one step, in the order they were found."""

    def __init__(self):
        self.records: List[tuple] = []

    def __len__(self) -> int:
        return len(self.records)

    def add(self, op_id: int, views: Sequence[str], expression: str, message: str, rows: List[dict],
            weights: Sequence[int], operator: str = "") -> None:
        for r, w in zip(rows, weights):
            for v in views:
                self.records.append((v, operator or f"#{op_id}", expression, message, row_json(r), int(w)))

    def counts(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for v, *_ in self.records:
            out[v] = out.get(v, 0) + 1
        return out

    def table(self, step: int) -> pa.Table:
        cols = list(zip(*self.records)) if self.records else [[]] * 6
        return pa.Table.from_arrays([pa.array([step] * len(self.records), pa.int64())] +
                                    [pa.array(list(c), t.type) for c, t in zip(cols, list(SCHEMA)[1:])],
                                    schema=SCHEMA)


def read_errors(store, runs: Optional[List[str]] = None) -> pa.Table:
    """The committed error relation of ``store`` (a ``StateStore``), oldest step first (or the rows of its
    ``runs``, paths relative to the store)."""
    import pyarrow.parquet as pq
    paths = store.paths(ERRORS_KEY) if runs is None else [os.path.join(store.root, r) for r in runs]
    parts = [pq.read_table(p).cast(SCHEMA) for p in paths]
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


def readable(sql: str, names: Sequence[str]) -> str:
    """A planner expression with its positional columns ``c<i>`` named as the user wrote them."""
    e = sqlglot.parse_one(sql, read=DIALECT)
    for c in e.find_all(exp.Column):
        if c.name.startswith("c") and c.name[1:].isdigit() and int(c.name[1:]) < len(names):
            c.set("this", exp.to_identifier(names[int(c.name[1:])]))
    return e.sql(dialect="duckdb")


def field_labels(node) -> List[str]:
    """Names for the columns of ``node``'s rows in error records: an aggregate's internal key and call
    columns are shown as the expressions they compute, over the input's column names."""
    if isinstance(node, Aggregate):
        ins = [f.name for f in node.input.fields]
        pre = node.input
        exprs = list(pre.exprs) if isinstance(pre, Project) else []
        base = [f.name for f in pre.input.fields] if isinstance(pre, Project) else ins

        def label(sql):
            if sql[1:].isdigit() and exprs and int(sql[1:]) < len(exprs):
                return readable(exprs[int(sql[1:])].sql, base)
            return readable(sql, ins)
        out = [label(k.sql) for k in node.keys]
        for a in node.aggs:
            out.append("COUNT(*)" if a.func == "COUNT_STAR" else
                       f"{a.func}({'DISTINCT ' if a.distinct else ''}{', '.join(label(x.sql) for x in a.args)})")
        return out
    return [f.name for f in node.fields]
