"""Running the operators' delta rules on the driver: DuckDB over Arrow, for steps small enough to run there.

The rules are :mod:`sqlengine.executor.delta_rules`' (the ones Spark runs too, see
:mod:`sqlengine.executor.lower`), over positional frames (``c0..`` plus the weight :data:`W`): ``ins`` are
the input changes (``None`` where a join, union or set operation input did not change), ``reads`` the
state rows the op reads as unconsolidated runs.  Here ``reads`` may be *pruned* to a superset of the rows
whose key the change touches (see :mod:`sqlengine.state.cache`); every rule matches keys exactly itself,
so the extra rows do not matter.  Arrow fast paths (:mod:`sqlengine.executor.arrow_ops`) take the shapes
where they pay before a rule runs; on a row whose expression fails, the rule runs again with the
expressions under ``TRY`` and the row is recorded (:mod:`sqlengine.executor.row_errors`).

The rules are in the planner's dialect, DuckDB's, so compiling is only :func:`duck`.
``probe_specs`` says, for each state an op reads, which key expressions the
op matches it on and which rows of the op's changes supply the keys, so the
runtime can prune the read before the op runs.
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
from planner.errors import UnsupportedError
from planner.logical import Expr, Filter, Join, Project, col
from planner.rules.exprs import shift
from planner.types import UNKNOWN

from sqlengine import private_duckdb
from sqlengine.executor import arrow_ops
from sqlengine.executor import delta_rules as rules
from sqlengine.executor.delta_rules import cols
from sqlengine.executor.row_errors import DATA_ERRORS, MAX_MESSAGES, RowErrors, first_line, named_row, user_names
from sqlengine.zset import W

def _to_duckdb(n: exp.Expression) -> exp.Expression:
    if isinstance(n, exp.Anonymous) and n.name.upper() == "TIMESTAMP_MICROS":   # the planner's TUMBLE/HOP
        return exp.Anonymous(this="MAKE_TIMESTAMP", expressions=list(n.expressions))
    return n


@lru_cache(maxsize=4096)
def duck(sql: str) -> str:
    """A planner expression as DuckDB runs it (the planner writes a few Spark functions, e.g. for TUMBLE)."""
    return sqlglot.parse_one(sql, read=DIALECT).transform(_to_duckdb).sql(dialect="duckdb")


def shift_columns(sql: str, by: int) -> str:
    """``sql`` with every positional column ``c<i>`` renamed ``c<i+by>`` (the planner's renumbering)."""
    return shift(Expr(sql, UNKNOWN), by).sql


def readable(sql: str, names: Sequence[str]) -> str:
    """A planner expression with its positional columns ``c<i>`` named as the user wrote them."""
    e = sqlglot.parse_one(sql, read=DIALECT)
    for c in e.find_all(exp.Column):
        if c.name.startswith("c") and c.name[1:].isdigit() and int(c.name[1:]) < len(names):
            c.set("this", exp.to_identifier(names[int(c.name[1:])]))
    return e.sql(dialect="duckdb")


class ProbeSpec:
    """How an op reads one state: by key expressions ``spec`` (over the state's columns), with the probe
    keys computed from ``sources``: (input index, key expressions over that input's change).  ``spec``
    empty: the op reads the whole state."""

    def __init__(self, spec: Tuple[str, ...], sources: List[Tuple[int, Tuple[str, ...]]]):
        self.spec = spec
        self.sources = sources


class LocalLowerer:
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
    def bad_rows(self, t: pa.Table, exprs: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """(row positions, index of the first failing expression) of the rows of ``t`` where an expression
        fails."""
        if not exprs or not t.num_rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        flags = " ".join(f"WHEN TRY(hash({duck(e)})) IS NULL THEN {i}" for i, e in enumerate(exprs))  # hash(NULL) is not NULL
        t = t.append_column("__rid", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        try:
            out = self.run(f"SELECT __rid, __bad FROM (SELECT __rid, CASE {flags} END AS __bad FROM T) "
                           f"WHERE __bad IS NOT NULL ORDER BY __rid", T=t)
        except DATA_ERRORS:   # TRY does not reach every failure (a CAST under IN (list)): halve the rows instead
            return self._bisect_bad_rows(t, exprs)
        return out.column(0).to_numpy(), out.column(1).to_numpy()

    def _bisect_bad_rows(self, t: pa.Table, exprs: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """``bad_rows`` by evaluating each expression over halves of ``t`` (with its ``__rid``) until the rows that
        fail are alone: about (failing rows) x log2(rows) small queries."""
        rids, which = [], []
        for i, e in enumerate(exprs):
            pending = [t]
            while pending:
                part = pending.pop()
                try:
                    self.run(f"SELECT hash({duck(e)}) FROM T", T=part)
                    continue
                except DATA_ERRORS:
                    pass
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
        try:
            self.run(f"SELECT ({duck(expr)}) FROM T", T=row)
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

    # ------------------------------------------------------------ what state each op reads, and by which key
    @staticmethod
    def probe_specs(op: Op) -> List[ProbeSpec]:
        node = op.node
        if op.kind == "join":
            nl = len(node.left.fields)
            lk = tuple(duck(k.sql) for k in node.left_keys)
            rk = tuple(shift_columns(duck(k.sql), -nl) for k in node.right_keys)
            if not lk:
                return [ProbeSpec((), []), ProbeSpec((), [])]
            both = [(0, lk), (1, rk)]
            return [ProbeSpec(lk, both), ProbeSpec(rk, both)]
        if op.kind == "aggregate":   # its input's integral; its own output's (keeps_output): keys first in both
            keys = tuple(cols(len(node.keys)))
            return [ProbeSpec(keys, [(0, keys)]) for _ in op.reads or (0,)]
        if op.kind == "distinct":
            keys = tuple(cols(len(node.fields)))
            return [ProbeSpec(keys, [(0, keys)])]
        if op.kind == "setop":
            keys = tuple(cols(len(node.fields)))
            return [ProbeSpec(keys, [(0, keys), (1, keys)]), ProbeSpec(keys, [(0, keys), (1, keys)])]
        if op.kind == "window":   # its input's integral; its own output's (keeps_output): the input's columns first
            keys = tuple(duck(p.sql) for p in node.partition)
            return [ProbeSpec(keys, [(0, keys)] if keys else []) for _ in op.reads or (0,)]
        return []

    def lower(self, op: Op, ins: List[Optional[pa.Table]], reads: List[pa.Table], initial: bool = False
              ) -> pa.Table:
        handler = getattr(self, f"lower_{op.kind}", None)
        if handler is None:
            raise UnsupportedError(f"operator {op.kind} has no local lowering")
        if op.kind == "aggregate":
            return handler(op, ins, reads, initial)
        return handler(op, ins, reads)

    # ------------------------------------------------------------ the rules (delta_rules), run on DuckDB
    def rule(self, sql: str, **tables: pa.Table) -> pa.Table:
        """Run a rule of :mod:`sqlengine.executor.delta_rules` over ``tables``."""
        return self.run(duck(sql), **tables)

    def _x(self):
        return rules.under_try if self.careful else rules.as_is

    # ------------------------------------------------------------ linear
    def lower_map(self, op: Op, ins, reads) -> pa.Table:
        (d,) = ins
        node = op.node
        if isinstance(node, Project):
            fast = arrow_ops.project_columns(node, d)
            if fast is not None:
                return fast
        try:
            return self.rule(rules.map_sql(node), D=d)
        except DATA_ERRORS:
            if self.careful:
                raise
            exprs = [node.predicate.sql] if isinstance(node, Filter) else [e.sql for e in node.exprs]
            return self._careful_map(op, d, exprs, "WHERE" if isinstance(node, Filter) else "SELECT")

    def _careful_map(self, op: Op, d: pa.Table, exprs: List[str], clause: str) -> pa.Table:
        """A filter or projection of the rows of ``d`` where no expression fails; the others are recorded.  A
        batch that fails where no row fails alone (DuckDB evaluates some expressions over the whole batch) runs
        in parts."""
        rids, which = self.bad_rows(d, exprs)
        names = [f.name for f in op.node.input.fields]
        self.record(op, d, rids, which, exprs, names, f"{clause} of {op.node.describe()}"[:200])
        keep = np.ones(d.num_rows, dtype=bool)
        keep[rids] = False
        good = d.filter(pa.array(keep))
        if not good.num_rows:   # (an expression that fails on every row may fail with no row at all: a constant)
            if isinstance(op.node, Filter):
                return good
            return pa.table([pa.nulls(0) for _ in op.node.exprs] + [good.column(W)],
                            names=[col(i) for i in range(len(op.node.exprs))] + [W])
        with self.carefully():
            try:
                return self.lower_map(op, [good], [])
            except DATA_ERRORS:
                return self._map_in_parts(op, good)

    def _map_in_parts(self, op: Op, t: pa.Table) -> pa.Table:
        """The map over ``t`` in halves, down to single rows where a half fails: for a batch DuckDB fails as a
        whole (a vector of a NULLIF and a CAST) where no row fails alone, and TRY does not help."""
        try:
            return self.rule(rules.map_sql(op.node), D=t)
        except DATA_ERRORS:
            if t.num_rows <= 1:
                raise
        half = t.num_rows // 2
        return pa.concat_tables([self._map_in_parts(op, t.slice(0, half)), self._map_in_parts(op, t.slice(half))],
                                promote_options="permissive")

    def lower_union(self, op: Op, ins, reads) -> List[pa.Table]:
        return [d for d in ins if d is not None]

    # ------------------------------------------------------------ bilinear
    def lower_join(self, op: Op, ins, reads) -> List[pa.Table]:
        try:
            return self._lower_join(op, ins, reads)
        except DATA_ERRORS:
            if self.careful:
                raise
        node: Join = op.node
        nl = len(node.left.fields)
        names = [f.name for f in node.left.fields] + [f.name for f in node.right.fields]
        what = f"ON of {node.describe()}"[:200]
        if ins[0] is not None:
            self.record(op, ins[0], *self.bad_rows(ins[0], [k.sql for k in node.left_keys]),
                        [k.sql for k in node.left_keys], names, what)
        if ins[1] is not None:
            dr = ins[1].rename_columns([col(nl + j) if c != W else W for j, c in enumerate(ins[1].column_names)])
            self.record(op, dr, *self.bad_rows(dr, [k.sql for k in node.right_keys]),
                        [k.sql for k in node.right_keys], names, what)
        with self.carefully():
            return self._lower_join(op, ins, reads)

    def _lower_join(self, op: Op, ins, reads) -> List[pa.Table]:
        tables = {"DL": ins[0], "DR": ins[1], "LOLD": reads[0], "ROLD": reads[1]}
        out = []
        for term in rules.join_rule(op.node, ins[0] is not None, ins[1] is not None, self._x()):
            if term.join is not None:
                out.append(self._join(op, *(tables[n] for n in term.join)))
            else:
                out.append(self.rule(term.sql, **{n: t for n, t in tables.items() if t is not None}))
        return out

    def _join(self, op: Op, left: pa.Table, right: pa.Table) -> pa.Table:
        node: Join = op.node
        fast = arrow_ops.equi_join(node, left, right)
        if fast is not None:
            return fast
        if not (self.careful and node.residual is not None):
            return self.rule(rules.join_sql(node, "L", "R", self._x()), L=left, R=right)
        # each pair of this term is a change: record the pairs whose condition fails, keep the others out
        pairs = self.rule(rules.join_sql(node, "L", "R", self._x(), residual=False), L=left, R=right)
        names = [f.name for f in node.left.fields] + [f.name for f in node.right.fields]
        rids, which = self.bad_rows(pairs, [node.residual.sql])
        self.record(op, pairs, rids, which, [node.residual.sql], names, f"ON of {node.describe()}"[:200])
        return self.rule(f"SELECT * FROM P WHERE ({rules.under_try(node.residual.sql)})", P=pairs)

    # ------------------------------------------------------------ stateful
    def lower_setop(self, op: Op, ins, reads) -> pa.Table:
        tables = {"LOLD": reads[0], "ROLD": reads[1], "D0": ins[0], "D1": ins[1]}
        return self.rule(rules.setop_sql(op.node, ins[0] is not None, ins[1] is not None),
                         **{n: t for n, t in tables.items() if t is not None})

    def lower_distinct(self, op: Op, ins, reads) -> pa.Table:
        return self.rule(rules.distinct_sql(op.node), S=reads[0], D=ins[0])

    def lower_window(self, op: Op, ins, reads) -> pa.Table:
        if len(reads) > 1:   # it retracts what it emitted (planner.circuit.keeps_output)
            return self.rule(rules.window_sql(op.node, emitted=True), S=reads[0], D=ins[0], O=reads[1])
        return self.rule(rules.window_sql(op.node), S=reads[0], D=ins[0])

    def lower_aggregate(self, op: Op, ins, reads, initial: bool = False) -> pa.Table:
        if op.mode == "accumulate":
            raise UnsupportedError("accumulating aggregates are lowered in two phases (partial, output)")
        if initial:
            fast = arrow_ops.aggregate_recompute(op.node, ins[0], None)
            return fast if fast is not None else self.rule(rules.aggregate_sql(op.node, initial=True), D=ins[0])
        emitted = reads[1] if len(reads) > 1 else None   # it retracts what it emitted (circuit.keeps_output)
        fast = arrow_ops.aggregate_recompute(op.node, ins[0], reads[0], emitted)
        if fast is not None:
            return fast
        if emitted is not None:
            return self.rule(rules.aggregate_sql(op.node, emitted=True), S=reads[0], D=ins[0], O=emitted)
        return self.rule(rules.aggregate_sql(op.node), S=reads[0], D=ins[0])

    # accumulate mode (see delta_rules.acc_columns): partial sums of the change, then totals over state
    def aggregate_partial(self, op: Op, d: pa.Table) -> pa.Table:
        fast = arrow_ops.aggregate_partial(op.node, d)
        if fast is not None:
            return fast
        return self.rule(rules.partial_sql(op.node), D=d)

    def aggregate_output(self, op: Op, partial: pa.Table, state: pa.Table, accs: List[str],
                         initial: bool = False) -> pa.Table:
        fast = arrow_ops.aggregate_output(op.node, partial, state, accs, initial)
        if fast is not None:
            return fast
        if initial:
            return self.rule(rules.output_sql(op.node, accs, initial=True), P=partial)
        return self.rule(rules.output_sql(op.node, accs), S=state, P=partial)
