"""Lowering circuit operators to DuckDB SQL over Arrow, for steps small enough to run on the driver.

The same algebra as :mod:`sqlengine.executor.lower` (which builds Spark plans), over
the same positional frames (``c0..`` plus the weight :data:`W`), with the
same contracts: ``ins`` are the input changes (``None`` where a join, union
or set operation input did not change), ``reads`` the state rows the op reads
as unconsolidated runs.  Here ``reads`` may be *pruned* to a superset of the
rows whose key the change touches (see :mod:`sqlengine.state.cache`); every
lowering matches keys exactly itself, so the extra rows do not matter.

The planner's expressions are DuckDB SQL already, so nothing is transpiled.
``probe_specs`` says, for each state an op reads, which key expressions the
op matches it on and which rows of the op's changes supply the keys, so the
runtime can prune the read before the op runs.
"""
from __future__ import annotations

import itertools
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
from planner.bind_window import total_order
from planner.circuit import Op
from planner.errors import UnsupportedError
from planner.logical import Aggregate, Expr, Filter, Join, Project, Window, col
from planner.rules.exprs import shift
from planner.types import UNKNOWN

from sqlengine import private_duckdb
from sqlengine.executor import arrow_ops
from sqlengine.executor.row_errors import DATA_ERRORS, MAX_MESSAGES, RowErrors, first_line, named_row, user_names
from sqlengine.zset import W

AGG_FUNCS = {"COUNT", "SUM", "AVG", "MIN", "MAX", "STDDEV_SAMP", "STDDEV_POP", "VAR_SAMP", "VAR_POP"}


def cols(n: int, start: int = 0) -> List[str]:
    return [col(i) for i in range(start, start + n)]


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


def _prefix_columns(sql: str, names: Sequence[str], prefix: str) -> str:
    e = sqlglot.parse_one(sql, read=DIALECT)
    names = set(names)
    for c in e.find_all(exp.Column):
        if c.name in names:
            c.set("this", exp.to_identifier(prefix + c.name))
    return e.sql(dialect="duckdb")


def _select(items: Sequence[str]) -> str:
    return ", ".join(items)


def _null_safe_eq(a: str, b: str) -> str:
    return f"{a} IS NOT DISTINCT FROM {b}"


def readable(sql: str, names: Sequence[str]) -> str:
    """A planner expression with its positional columns ``c<i>`` named as the user wrote them."""
    e = sqlglot.parse_one(sql, read=DIALECT)
    for c in e.find_all(exp.Column):
        if c.name.startswith("c") and c.name[1:].isdigit() and int(c.name[1:]) < len(names):
            c.set("this", exp.to_identifier(names[int(c.name[1:])]))
    return e.sql(dialect="duckdb")


def _old_and_new(keys: List[str], change: str) -> str:
    """CTEs ``old`` (the rows of state ``S`` whose ``keys`` equal, NULL-safely, those of a row of ``change``;
    all of ``S`` without keys) and ``new`` (``old`` plus ``change``)."""
    old = "SELECT * FROM S"
    if keys:
        cond = " AND ".join(_null_safe_eq(f"x.{c}", f"t.{c}") for c in keys)
        old = f"SELECT x.* FROM S x SEMI JOIN (SELECT DISTINCT {_select(keys)} FROM {change}) t ON {cond}"
    return f"WITH old AS ({old}), new AS (SELECT * FROM old UNION ALL BY NAME SELECT * FROM {change})"


class ProbeSpec:
    """How an op reads one state: by key expressions ``spec`` (over the state's columns), with the probe
    keys computed from ``sources``: (input index, key expressions over that input's change).  ``spec``
    empty: the op reads the whole state."""

    def __init__(self, spec: Tuple[str, ...], sources: List[Tuple[int, Tuple[str, ...]]]):
        self.spec = spec
        self.sources = sources


class LocalLowerer:
    """Runs ops on Arrow tables with a private DuckDB connection."""

    def __init__(self):
        self.con = private_duckdb.connect()
        self.con.execute("SET threads = 1")   # steps are small: planning dominates, not scans
        self.lock = threading.Lock()
        self._names = itertools.count()
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
        out = self.run(f"SELECT __rid, __bad FROM (SELECT __rid, CASE {flags} END AS __bad FROM T) "
                       f"WHERE __bad IS NOT NULL ORDER BY __rid", T=t)
        return out.column(0).to_numpy(), out.column(1).to_numpy()

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
        if op.kind == "aggregate":
            keys = tuple(cols(len(node.keys)))
            return [ProbeSpec(keys, [(0, keys)])]
        if op.kind == "distinct":
            keys = tuple(cols(len(node.fields)))
            return [ProbeSpec(keys, [(0, keys)])]
        if op.kind == "setop":
            keys = tuple(cols(len(node.fields)))
            return [ProbeSpec(keys, [(0, keys), (1, keys)]), ProbeSpec(keys, [(0, keys), (1, keys)])]
        if op.kind == "window":
            keys = tuple(duck(p.sql) for p in node.partition)
            return [ProbeSpec(keys, [(0, keys)] if keys else [])]
        return []

    def lower(self, op: Op, ins: List[Optional[pa.Table]], reads: List[pa.Table], initial: bool = False
              ) -> pa.Table:
        handler = getattr(self, f"lower_{op.kind}", None)
        if handler is None:
            raise UnsupportedError(f"operator {op.kind} has no local lowering")
        if op.kind == "aggregate":
            return handler(op, ins, reads, initial)
        return handler(op, ins, reads)

    # ------------------------------------------------------------ linear
    def lower_map(self, op: Op, ins, reads) -> pa.Table:
        (d,) = ins
        node = op.node
        if isinstance(node, Filter):
            try:
                return self.run(f"SELECT * FROM d WHERE ({duck(node.predicate.sql)})", d=d)
            except DATA_ERRORS:
                return self._careful_map(op, d, [node.predicate.sql], "WHERE")
        if isinstance(node, Project):
            fast = arrow_ops.project_columns(node, d)
            if fast is not None:
                return fast
            items = [f"({duck(e.sql)}) AS {col(i)}" for i, e in enumerate(node.exprs)]
            try:
                return self.run(f"SELECT {_select(items + [W])} FROM d", d=d)
            except DATA_ERRORS:
                return self._careful_map(op, d, [e.sql for e in node.exprs], "SELECT")
        raise UnsupportedError(f"linear node {type(node).__name__} has no local lowering")

    def _careful_map(self, op: Op, d: pa.Table, exprs: List[str], clause: str) -> pa.Table:
        """A filter or projection of the rows of ``d`` where no expression fails; the others are recorded."""
        rids, which = self.bad_rows(d, exprs)
        names = [f.name for f in op.node.input.fields]
        self.record(op, d, rids, which, exprs, names, f"{clause} of {op.node.describe()}"[:200])
        keep = np.ones(d.num_rows, dtype=bool)
        keep[rids] = False
        good = d.filter(pa.array(keep))
        with self.carefully():
            return self.lower_map(op, [good], [])

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
        node: Join = op.node
        dl, dr = ins
        lold, rold = reads
        if node.kind in ("semi", "anti"):
            return [self._padded(node, dl, dr, lold, rold, left=True, how="SEMI" if node.kind == "semi" else "ANTI")]
        out = []
        if dl is not None:
            out.append(self._join(op, dl, rold))
            if dr is not None:
                out.append(self._join(op, dl, dr))
        if dr is not None:
            out.append(self._join(op, lold, dr))
        if node.kind in ("left", "full"):
            out.append(self._padded(node, dl, dr, lold, rold, left=True))
        if node.kind in ("right", "full"):
            out.append(self._padded(node, dl, dr, lold, rold, left=False))
        return out

    def _join(self, op: Op, left: pa.Table, right: pa.Table) -> pa.Table:
        node: Join = op.node
        fast = arrow_ops.equi_join(node, left, right)
        if fast is not None:
            return fast
        nl, nr = len(node.left.fields), len(node.right.fields)
        r = f"SELECT {_select([f'{col(j)} AS {col(nl + j)}' for j in range(nr)] + [f'{W} AS __w2'])} FROM R"
        if node.left_keys:
            lk = [f"({self.x(k.sql)}) AS __lk{i}" for i, k in enumerate(node.left_keys)]
            rk = [f"({self.x(k.sql)}) AS __rk{i}" for i, k in enumerate(node.right_keys)]
            eq = _null_safe_eq if node.null_safe else (lambda a, b: f"{a} = {b}")
            cond = " AND ".join(eq(f"l.__lk{i}", f"r.__rk{i}") for i in range(len(lk)))
            frm = (f"(SELECT *, {_select(lk)} FROM L) l JOIN (SELECT *, {_select(rk)} FROM ({r})) r ON {cond}")
        else:
            frm = f"L l CROSS JOIN ({r}) r"
        where = f" WHERE ({duck(node.residual.sql)})" if node.residual is not None else ""
        sql = f"SELECT {_select(cols(nl + nr))}, l.{W} * r.__w2 AS {W} FROM {frm}{where}"
        if not (self.careful and node.residual is not None):
            return self.run(sql, L=left, R=right)
        # each pair of this term is a change: record the pairs whose condition fails, keep the others out
        pairs = self.run(f"SELECT {_select(cols(nl + nr))}, l.{W} * r.__w2 AS {W} FROM {frm}", L=left, R=right)
        names = [f.name for f in node.left.fields] + [f.name for f in node.right.fields]
        rids, which = self.bad_rows(pairs, [node.residual.sql])
        self.record(op, pairs, rids, which, [node.residual.sql], names, f"ON of {node.describe()}"[:200])
        return self.run(f"SELECT * FROM P WHERE ({self.x(node.residual.sql)})", P=pairs)

    def _padded(self, node: Join, dl, dr, lold, rold, left: bool, how: str = "ANTI") -> pa.Table:
        """See ``Lowerer._padded``: the change of one side's rows without (ANTI) or with (SEMI) a match,
        recomputed for the touched keys, NULL-padded for outer joins."""
        nl, nr = len(node.left.fields), len(node.right.fields)
        nk = len(node.left_keys)
        keys = [f"__k{i}" for i in range(nk)]
        lcols, rcols = cols(nl), cols(nr, nl)

        def lside(name):
            return f"SELECT *, {_select([f'({self.x(k.sql)}) AS __k{i}' for i, k in enumerate(node.left_keys)])} FROM {name}" \
                if nk else f"SELECT * FROM {name}"

        def rside(name):
            ren = f"SELECT {_select([f'{col(j)} AS {col(nl + j)}' for j in range(nr)] + [W])} FROM {name}"
            return f"SELECT *, {_select([f'({self.x(k.sql)}) AS __k{i}' for i, k in enumerate(node.right_keys)])} " \
                   f"FROM ({ren})" if nk else ren

        tables = {"LOLD": lold, "ROLD": rold}
        changes = []
        if dl is not None:
            tables["DL"] = dl
            changes.append(f"SELECT {_select(keys)} FROM ({lside('DL')})")
        if dr is not None:
            tables["DR"] = dr
            changes.append(f"SELECT {_select(keys)} FROM ({rside('DR')})")
        ctes = []
        if nk:
            ctes.append(f"touched AS (SELECT DISTINCT * FROM ({' UNION ALL '.join(changes)}))")

        def restrict(sql):
            if not nk:
                return sql
            cond = " AND ".join(_null_safe_eq(f"x.{k}", f"t.{k}") for k in keys)
            return f"SELECT x.* FROM ({sql}) x SEMI JOIN touched t ON {cond}"

        lo, ro = restrict(lside("LOLD")), restrict(rside("ROLD"))
        a_cols, b_cols = (lcols, rcols) if left else (rcols, lcols)
        a_old, b_old = (lo, ro) if left else (ro, lo)
        da, db = ("DL", "DR") if left else ("DR", "DL")
        a_side, b_side = (lside, rside) if left else (rside, lside)
        ctes += [f"a_old AS ({a_old})", f"b_old AS ({b_old})"]
        a_new = "SELECT * FROM a_old" + (f" UNION ALL BY NAME {a_side(da)}" if da in tables else "")
        b_new = "SELECT * FROM b_old" + (f" UNION ALL BY NAME {b_side(db)}" if db in tables else "")
        ctes += [f"a_new AS ({a_new})", f"b_new AS ({b_new})"]
        b_all = b_cols + keys

        def unmatched(a, b):
            pos = (f"SELECT {_select([f'{c} AS __b{c}' for c in b_all])} FROM {b} "
                   f"GROUP BY ALL HAVING SUM({W}) > 0")
            conds = [f"a.{k} = b.__b{k}" for k in keys]
            if node.residual is not None:
                conds.append(f"({_prefix_columns(self.x(node.residual.sql), b_cols, '__b')})")
            return f"SELECT a.* FROM {a} a {how} JOIN ({pos}) b ON {' AND '.join(conds) or 'TRUE'}"

        def pad(sql, sign):
            if node.kind in ("semi", "anti"):
                items = lcols
            elif left:
                items = lcols + [f"NULL AS {c}" for c in rcols]
            else:
                items = [f"NULL AS {c}" for c in lcols] + rcols
            return f"SELECT {_select(items)}, {W} * {sign} AS {W} FROM ({sql})"

        sql = (f"WITH {', '.join(ctes)} {pad(unmatched('a_new', 'b_new'), 1)} "
               f"UNION ALL {pad(unmatched('a_old', 'b_old'), -1)}")
        return self.run(sql, **tables)

    # ------------------------------------------------------------ stateful
    def lower_setop(self, op: Op, ins, reads) -> pa.Table:
        n = len(op.node.fields)
        cs = cols(n)
        tables = {"LOLD": reads[0], "ROLD": reads[1]}
        parts = []
        changes = []
        for i, d in enumerate(ins):
            if d is not None:
                tables[f"D{i}"] = d
                changes.append(f"SELECT {_select(cs)} FROM D{i}")

        def tagged(name, slot):
            return f"SELECT {_select(cs)}, " + _select([f"{W if i == slot else '0'}::BIGINT AS m{i}" for i in range(4)]) \
                   + f" FROM {name}"

        cond = " AND ".join(_null_safe_eq(f"x.{c}", f"t.{c}") for c in cs)
        for slot, name in ((0, "LOLD"), (1, "ROLD")):
            parts.append(tagged(f"(SELECT x.* FROM {name} x SEMI JOIN touched t ON {cond})", slot))
        for i in range(2):
            if f"D{i}" in tables:
                parts.append(tagged(f"D{i}", 2 + i))
        node = op.node

        def mult(a, b):
            if node.op == "intersect":
                return f"LEAST({a}, {b})" if node.all else f"(CASE WHEN {a} > 0 AND {b} > 0 THEN 1 ELSE 0 END)"
            return f"GREATEST({a} - {b}, 0)" if node.all else f"(CASE WHEN {a} > 0 AND {b} <= 0 THEN 1 ELSE 0 END)"

        w = f"(GREATEST({mult('(m0 + m2)', '(m1 + m3)')}, 0) - GREATEST({mult('m0', 'm1')}, 0))::BIGINT"
        sql = (f"WITH touched AS (SELECT DISTINCT * FROM ({' UNION ALL '.join(changes)})), "
               f"g AS (SELECT {_select(cs)}, " + _select([f"SUM(m{i}) AS m{i}" for i in range(4)])
               + f" FROM ({' UNION ALL '.join(parts)}) GROUP BY ALL) "
               f"SELECT {_select(cs)}, {w} AS {W} FROM g WHERE {w} != 0")
        return self.run(sql, **tables)

    def lower_distinct(self, op: Op, ins, reads) -> pa.Table:
        (d,) = ins
        (state,) = reads
        cs = cols(len(op.node.fields))
        cond = " AND ".join(_null_safe_eq(f"x.{c}", f"t.{c}") for c in cs)
        w = "((CASE WHEN n > 0 THEN 1 ELSE 0 END) - (CASE WHEN o > 0 THEN 1 ELSE 0 END))::BIGINT"
        sql = (f"WITH g AS (SELECT {_select(cs)}, SUM(o) AS o, SUM({W}) AS n FROM ("
               f"SELECT x.*, x.{W} AS o FROM S x SEMI JOIN (SELECT DISTINCT {_select(cs)} FROM D) t "
               f"ON {cond} UNION ALL BY NAME SELECT *, 0::BIGINT AS o FROM D) GROUP BY ALL) "
               f"SELECT {_select(cs)}, {w} AS {W} FROM g WHERE {w} != 0")
        return self.run(sql, S=state, D=d)

    @staticmethod
    def _expanded(name: str, cs: List[str]) -> str:
        """Rows with positive consolidated weight, each repeated weight times (without the weight)."""
        pos = f"SELECT {_select(cs)}, SUM({W})::BIGINT AS __n FROM {name} GROUP BY ALL HAVING SUM({W}) > 0" if cs else \
            f"SELECT SUM({W})::BIGINT AS __n FROM {name} HAVING SUM({W}) > 0"
        keep = _select(cs) if cs else "1 AS __one"
        return f"SELECT {keep} FROM (SELECT *, UNNEST(range(__n)) AS __rep FROM ({pos}))"

    def lower_window(self, op: Op, ins, reads) -> pa.Table:
        node: Window = op.node
        (d,) = ins
        (state,) = reads
        n = len(node.input.fields)
        cs = cols(n)
        if node.partition:
            pk = [f"({duck(p.sql)})" for p in node.partition]
            cond = " AND ".join(_null_safe_eq(f"x.__p{i}", f"t.__p{i}") for i in range(len(pk)))
            keyed = _select([f"{k} AS __p{i}" for i, k in enumerate(pk)])
            old = (f"SELECT x.* EXCLUDE ({_select([f'__p{i}' for i in range(len(pk))])}) FROM "
                   f"(SELECT *, {keyed} FROM S) x SEMI JOIN (SELECT DISTINCT {keyed} FROM D) t ON {cond}")
        else:
            old = "SELECT * FROM S"
        calls = [f"{duck(total_order(c.sql, n))} AS {col(n + i)}" for i, c in enumerate(node.calls)]

        def compute(name, sign):
            return f"SELECT {_select(cs + calls)}, {sign}::BIGINT AS {W} FROM ({self._expanded(name, cs)})"

        sql = (f"WITH old AS ({old}), new AS (SELECT * FROM old UNION ALL SELECT * FROM D) "
               f"{compute('new', 1)} UNION ALL {compute('old', -1)}")
        return self.run(sql, S=state, D=d)

    def lower_aggregate(self, op: Op, ins, reads, initial: bool = False) -> pa.Table:
        if op.mode == "accumulate":
            raise UnsupportedError("accumulating aggregates are lowered in two phases (partial, output)")
        node: Aggregate = op.node
        fast = arrow_ops.aggregate_recompute(node, ins[0], None if initial else reads[0])
        if fast is not None:
            return fast
        k = len(node.keys)
        n_in = len(node.input.fields)
        keys = cols(k)
        aggs = []
        for i, a in enumerate(node.aggs):
            if a.func == "COUNT_STAR":
                aggs.append(f"COUNT(*) AS {col(k + i)}")
            elif a.func in AGG_FUNCS:
                aggs.append(f"{a.func}({'DISTINCT ' if a.distinct else ''}{duck(a.args[0].sql)}) AS {col(k + i)}")
            else:
                raise UnsupportedError(f"aggregate {a.func} has no local lowering")
        group = " GROUP BY ALL" if k else ""

        def agg(name, weight):
            return (f"SELECT {_select(keys + aggs)}, {weight}::BIGINT AS {W} "
                    f"FROM ({self._expanded(name, cols(n_in))}){group}")

        (d,) = ins
        if initial:
            return self.run(agg("D", 1), D=d)
        sql = f"{_old_and_new(keys, 'D')} {agg('new', 1)} UNION ALL {agg('old', -1)}"
        return self.run(sql, S=reads[0], D=d)

    # accumulate mode (see Lowerer.acc_columns): partial sums of the change, then totals over state
    def aggregate_partial(self, op: Op, d: pa.Table) -> pa.Table:
        fast = arrow_ops.aggregate_partial(op.node, d)
        if fast is not None:
            return fast
        node: Aggregate = op.node
        k = len(node.keys)
        parts = [f"SUM({W}) AS __cnt"]
        for i, a in enumerate(node.aggs):
            if a.func == "COUNT_STAR":
                continue
            x = duck(a.args[0].sql)
            nn = f"SUM(CASE WHEN ({x}) IS NOT NULL THEN {W} ELSE 0 END) AS __n{i}"
            if a.args[0].sql in d.column_names and pa.types.is_integer(d.schema.field(a.args[0].sql).type):
                x = f"CAST({x} AS HUGEINT)"   # exact: a sum beyond BIGINT is a row error, never wrapped
            parts += [nn] if a.func == "COUNT" else [f"SUM(({x}) * {W}) AS __s{i}", nn]
        group = " GROUP BY ALL" if k else ""
        return self.run(f"SELECT {_select(cols(k) + parts)} FROM D{group}", D=d)

    def aggregate_output(self, op: Op, partial: pa.Table, state: pa.Table, accs: List[str],
                         initial: bool = False) -> pa.Table:
        fast = arrow_ops.aggregate_output(op.node, partial, state, accs, initial)
        if fast is not None:
            return fast
        node: Aggregate = op.node
        k = len(node.keys)
        keys = cols(k)
        sums = [f"COALESCE(SUM({c}), 0) AS {c}" if c.startswith(("__cnt", "__n")) else f"SUM({c}) AS {c}"
                for c in accs]
        outs = []
        for i, a in enumerate(node.aggs):
            if a.func == "COUNT_STAR":
                e = "__cnt"
            elif a.func == "COUNT":
                e = f"__n{i}"
            elif a.func == "SUM":
                e = f"CASE WHEN __n{i} > 0 THEN __s{i} END"
            else:
                e = f"CASE WHEN __n{i} > 0 THEN __s{i} / __n{i} END"
            outs.append(f"{e} AS {col(k + i)}")

        def total(name, weight):
            g = f"SELECT {_select(keys + sums)} FROM {name}" + (" GROUP BY ALL HAVING SUM(__cnt) != 0" if k else "")
            return f"SELECT {_select(keys + outs)}, {weight}::BIGINT AS {W} FROM ({g})"

        if initial:
            return self.run(total("P", 1), P=partial)
        sql = f"{_old_and_new(keys, 'P')} {total('new', 1)} UNION ALL {total('old', -1)}"
        return self.run(sql, S=state, P=partial)
