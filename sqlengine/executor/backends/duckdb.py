"""The driver's backend: DuckDB over Arrow, for steps and operators small enough to run there.

Each operator's change is its kind's (:mod:`sqlengine.executor.ops`): the rules of
:mod:`sqlengine.executor.delta_rules` (the ones Spark runs too, see :mod:`sqlengine.executor.backends.spark`), over
positional frames (``c0..`` plus the weight :data:`W`), with Arrow fast paths
(:mod:`sqlengine.executor.arrow_ops`) first where they pay.  ``ins`` are the input changes (``None`` where
an op that skips unchanged inputs had none), ``reads`` the state rows the op reads as unconsolidated runs,
which may be *pruned* to a superset of the rows whose key the change touches (see
:mod:`sqlengine.state.cache`); every rule matches keys exactly itself, so the extra rows do not matter.

This module gives the operators what they run on: :meth:`DuckDBBackend.rule` (a rule in the planner's
dialect, DuckDB's, so compiling is only :func:`duck`), and row-error isolation: on a row whose expression
fails, an operator runs its rule again with the expressions under ``TRY`` (:meth:`DuckDBBackend.carefully`,
:meth:`DuckDBBackend.x_rule`) and records the row (:meth:`DuckDBBackend.bad_rows`, :meth:`DuckDBBackend.record`,
:mod:`sqlengine.executor.row_errors`).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from functools import lru_cache
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from planner.bind import DIALECT
from planner.circuit import Op
from planner.logical import Expr
from planner.rules.exprs import shift
from planner.types import UNKNOWN

from sqlengine import private_duckdb
from sqlengine.executor import delta_rules as rules
from sqlengine.executor import ops
from sqlengine.executor.row_errors import (DATA_ERRORS, MAX_MESSAGES, RowErrors, first_line, named_row, readable,
                                           user_names)


def _to_duckdb(n: exp.Expression) -> exp.Expression:
    if isinstance(n, exp.Anonymous) and n.name.upper() == "TIMESTAMP_MICROS":   # the planner's TUMBLE/HOP
        return exp.Anonymous(this="MAKE_TIMESTAMP", expressions=list(n.expressions))
    return n


@lru_cache(maxsize=4096)
def duck(sql: str) -> str:
    """A planner expression as DuckDB runs it (the planner writes a few Spark functions, e.g. for TUMBLE)."""
    return sqlglot.parse_one(sql, read=DIALECT).transform(_to_duckdb).sql(dialect="duckdb")


def quoted(name: str) -> str:
    """``name`` as a DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def beside_nulls(t: pa.Table) -> pa.Table:
    """``t`` and a row of NULLs, in one chunk (one vector: DuckDB scans each chunk of a table as vectors of its own)."""
    return pa.concat_tables([t, pa.table({f.name: pa.nulls(1, f.type) for f in t.schema})]).combine_chunks()


def shift_columns(sql: str, by: int) -> str:
    """``sql`` with every positional column ``c<i>`` renamed ``c<i+by>`` (the planner's renumbering)."""
    return shift(Expr(sql, UNKNOWN), by).sql


class DuckDBBackend:
    """Runs ops on Arrow tables with a private DuckDB connection."""

    def __init__(self, threads: Optional[int] = 1):
        """``threads``: DuckDB's (1: steps are small, planning dominates, not scans; None: DuckDB's default, for
        bulk work such as merges and scans of whole states)."""
        self.con = private_duckdb.connect()
        if threads is not None:
            self.con.execute(f"SET threads = {int(threads)}")
        self.lock = threading.Lock()
        self.careful = False                  # expressions under TRY: a failing row is recorded, not raised
        self.errors: Optional[RowErrors] = None
        self.op_views = {}                    # op id -> the views it feeds (for error records)
        self.python_names: frozenset = frozenset()   # the Python functions registered here (lower case)

    @contextmanager
    def carefully(self):
        self.careful = True
        try:
            yield
        finally:
            self.careful = False

    def x(self, sql: str) -> str:
        """A planner expression as DuckDB runs it; under ``careful``, a failure gives NULL instead."""
        return f"TRY({duck(sql)})" if self.careful else duck(sql)

    # ------------------------------------------------------------ row errors
    def bad_rows(self, t: pa.Table, exprs: Sequence[str], failed: bool = False) -> Tuple[np.ndarray, np.ndarray]:
        """(row positions, index of the first failing expression) of the rows of ``t`` where an expression
        fails.  ``failed``: the expressions failed over ``t`` as a batch, so where TRY finds no row failing (it
        evaluates a row alone, see :meth:`_fails`) the rows are looked for in halves of ``t``."""
        if not exprs or not t.num_rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        flags = " ".join(f"WHEN TRY(hash({duck(e)})) IS NULL THEN {i}" for i, e in enumerate(exprs))  # hash(NULL) is not NULL
        t = t.append_column("__rid", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        try:
            out = self.run(f"SELECT __rid, __bad FROM (SELECT __rid, CASE {flags} END AS __bad FROM T) "
                           f"WHERE __bad IS NOT NULL ORDER BY __rid", T=t)
        except DATA_ERRORS:   # TRY does not reach every failure (a CAST under IN (list)): halve the rows instead
            return self._bisect_bad_rows(t, exprs)
        if failed and not out.num_rows:
            return self._bisect_bad_rows(t, exprs)
        return out.column(0).to_numpy(), out.column(1).to_numpy()

    def _fails(self, e: str, part: pa.Table) -> bool:
        """Does ``e`` fail on the rows of ``part``?  One row is evaluated beside a row of NULLs: DuckDB takes
        shortcuts on a batch of one row (a constant vector) that it does not take on a batch of many, so a row
        may fail only beside others (``NULLIF(c, c) / CAST(big AS DECIMAL(10,2))`` beside a NULL); beside a row
        of NULLs it is evaluated as in any batch."""
        if part.num_rows == 1:
            part = beside_nulls(part)
        try:
            self.run(f"SELECT hash({duck(e)}) FROM T", T=part)
            return False
        except DATA_ERRORS:
            return True

    def _bisect_bad_rows(self, t: pa.Table, exprs: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """``bad_rows`` by evaluating each expression over halves of ``t`` (with its ``__rid``) until the rows that
        fail are alone: about (failing rows) x log2(rows) small queries."""
        rids, which = [], []
        for i, e in enumerate(exprs):
            pending = [t]
            while pending:
                part = pending.pop()
                if not self._fails(e, part):
                    continue
                if part.num_rows == 1:
                    rids.append(part.column("__rid")[0].as_py())
                    which.append(i)
                else:
                    half = part.num_rows // 2
                    pending += [part.slice(half), part.slice(0, half)]
            t = t.filter(pc.invert(pc.is_in(t.column("__rid"), pa.array(rids, pa.int64())))) if rids else t
        order = np.argsort(np.array(rids, np.int64), kind="stable")
        return np.array(rids, np.int64)[order], np.array(which, np.int64)[order]

    def message(self, row: pa.Table, expr: str) -> str:
        try:   # (beside a row of NULLs, as _fails evaluates it)
            self.run(f"SELECT ({duck(expr)}) FROM T",
                     T=beside_nulls(row))
        except DATA_ERRORS as e:
            return first_line(e)
        return "error"   # pragma: no cover - the row failed under TRY

    def record(self, op: Op, t: pa.Table, rids: np.ndarray, which: np.ndarray, exprs: Sequence[str],
               names: Sequence[str], what: str) -> None:
        """Record rows ``rids`` of ``t`` (positional columns named ``names``) as failing ``exprs[which]``."""
        if self.errors is None or not len(rids):
            return
        views = self.op_views.get(op.id, [])
        rows = t.take(pa.array(rids)).to_pylist()
        first = None
        for n, (r, k) in enumerate(zip(rows, which)):
            # DuckDB's message names the positional columns: say the user's names
            msg = user_names(self.message(t.slice(int(rids[n]), 1), exprs[k]), names) if n < MAX_MESSAGES else first
            first = first or msg
            values, w = named_row(r, names)
            self.errors.add(op.id, views, readable(exprs[k], names), msg, [values], [w], operator=what)

    # ------------------------------------------------------------ plumbing
    def run(self, sql: str, **tables: pa.Table) -> pa.Table:
        """Run ``sql`` with each keyword table registered under its name."""
        with self.lock:
            for name, t in tables.items():
                self.con.register(name, t)
            try:
                return self.con.sql(sql).to_arrow_table()
            finally:
                for name in tables:
                    self.con.unregister(name)

    def lower(self, op: Op, ins: List[Optional[pa.Table]], reads: List[pa.Table], initial: bool = False
              ) -> pa.Table:
        """The change of ``op`` on the driver: its kind's rule (:mod:`sqlengine.executor.ops`) run here."""
        return ops.of(op.kind).local(self, op, ins, reads, initial)

    # ------------------------------------------------------------ the rules (delta_rules), run on DuckDB
    def rule(self, sql: str, **tables: pa.Table) -> pa.Table:
        """Run a rule of :mod:`sqlengine.executor.delta_rules` over ``tables``."""
        return self.run(duck(sql), **tables)

    def x_rule(self):
        """How the rules render a planner expression here: as is, or under ``TRY`` (``careful``)."""
        return rules.under_try if self.careful else rules.as_is
