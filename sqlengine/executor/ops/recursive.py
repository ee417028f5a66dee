"""A recursive CTE (``planner.logical.Recursive``): its fixed point, kept under inserts and deletes.

The op reads the contents of the relations its SQL reads (their integrals, as of the previous step), their
changes, and the rows it emitted before (the integral of its own change: the old fixed point ``R``).  It runs
the CTE's own SQL on DuckDB, on the driver, one iteration at a time:

* **From scratch** (the first step, a view added later, an empty ``R``, UNION ALL, or a change to a relation
  that the SQL reads where new rows can remove rows, e.g. under NOT EXISTS): ``R0 = base``, then ``N = step(N)``
  until no new row comes (for UNION: minus the rows found before), and the change is the new fixed point
  minus ``R``.
* **Incrementally** (UNION, every changed relation read where its rows only add rows):
  1. *over-delete* (DRed): the rows derived in one step from a deleted row (each occurrence of a changed
     relation given its deleted rows, the others their old contents, ``__rec`` the old fixed point), kept if
     in ``R``, then everything derived from those, transitively: ``D``;
  2. *rederive*: the rows of ``D`` that the new contents still derive from ``R - D`` in one step come back,
     and so does what they derive (step 3), so a deleted edge that closed a cycle removes exactly the rows no
     other path derives (where counting derivations would keep them alive through the cycle);
  3. *semi-naive inserts*: the rows derived in one step from an inserted row (each occurrence of a changed
     relation given its inserted rows, the others their new contents), minus the fixed point so far, then
     ``N = step(N) - R`` until nothing is new.
  The change is the rows added minus the rows deleted.  Each iteration joins the rows new in it with the
  relations; set differences against ``R`` scan it (the cost of a step grows with ``R`` by a scan, and with
  the change by everything else: see docs/limitations.md).

A fixed point not reached within the view's ``max_iterations`` (``WITH ('max_iterations' = 'N')``, 1000 by
default), or a row the SQL fails on, fails the view alone: its error goes to the error relation
(``sqlengine_errors``) and the view is emptied (what it emitted is retracted) until a later change lets it
converge; the other views go on.  On Spark, the op collects its inputs and runs here as well (a failure
fails the Spark step, which then runs on the driver and records the error).
"""
from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from typing import Dict, List, Optional

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from sqlengine.executor.op_schemas import with_weight
from sqlengine.executor.ops import ProbeSpec
from sqlengine.types import arrow_type
from sqlengine.zset import W

SKIPS_UNCHANGED = True
THREADS = max(1, min(4, os.cpu_count() or 1))   # DuckDB's threads for an evaluation: its joins and scans are big
_OCCURRENCE = re.compile(r"\b__o(\d+)\b")
_REC = re.compile(r"\b__rec\b")
_calls = itertools.count()
# how often each way of evaluating ran, in this process (for tests and benchmarks): "from_scratch", "incremental"
evaluations: Counter = Counter()


class NoFixedPoint(Exception):
    """The iteration did not converge within the view's ``max_iterations``."""


def probes(op) -> List[ProbeSpec]:
    return [ProbeSpec((), []) for _ in op.reads]   # the whole contents of each


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    return with_weight([arrow_type(f.type) for f in op.node.fields])


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Run:
    """One evaluation on connection ``con``: the temporary relations it makes carry the prefix ``p``."""

    def __init__(self, con, op, ins: List[Optional[pa.Table]], reads: List[pa.Table]):
        self.con, self.op, self.node = con, op, op.node
        self.p = f"__fx{next(_calls)}_"
        self.made: List[str] = []
        self.names = [f.name for f in self.node.fields]
        self.types = [f.type.sql for f in self.node.fields]
        self.ins, self.reads = ins, reads

    # ------------------------------------------------------------ relations
    def sql(self, text: str) -> None:
        self.con.execute(text).fetchall()   # (a result left unread blocks the connection)

    def table(self, name: str, query: str) -> str:
        full = self.p + name
        self.sql(f"CREATE OR REPLACE TEMP TABLE {full} AS {query}")
        self.made.append(full)
        return full

    def view(self, name: str, query: str) -> str:
        full = self.p + name
        self.sql(f"CREATE OR REPLACE TEMP VIEW {full} AS {query}")
        self.made.append("view:" + full)
        return full

    def arrow(self, name: str, t: pa.Table) -> str:
        full = self.p + name
        self.con.register(full, t)
        self.made.append("@" + full)
        return full

    def contents(self, name: str, raw: pa.Table, columns) -> str:
        """A view of the bag that the Z-set ``raw`` (c0.., W; runs, unconsolidated) holds, its columns named
        ``columns``: consolidated only when some weight is negative, expanded where a weight is above 1."""
        src = self.arrow(name + "_raw", raw)
        data = [f.name for f in raw.schema if f.name != W]
        w = raw.column(W)
        negative = pc.less(w, 0)
        if raw.num_rows and pc.any(negative).as_py():
            # only the rows that some run deletes are summed (the runs since the last merge: few); the others
            # are as they were written
            touched = self.arrow(name + "_neg", raw.filter(negative).select(data))
            same = " AND ".join(f"y.{c} IS NOT DISTINCT FROM x.{c}" for c in data)
            hit = f"EXISTS (SELECT 1 FROM {touched} AS y WHERE {same})"
            listed = ", ".join(data)
            src = self.table(name + "_sum", f"SELECT {listed}, {W} FROM {src} AS x WHERE NOT {hit} UNION ALL "
                                           f"SELECT {listed}, SUM({W})::BIGINT AS {W} FROM {src} AS x WHERE {hit} "
                                           f"GROUP BY ALL HAVING SUM({W}) > 0")
            many = True
        else:
            many = bool(raw.num_rows) and pc.max(w).as_py() > 1
        cols = ", ".join(f"{c} AS {_q(n)}" for c, n in zip(data, columns))
        view = self.p + name
        query = f"SELECT {cols} FROM {src}"
        if many:   # (a weight above 1: that many copies; most rows have weight 1 and are read as they are)
            query = (f"SELECT {cols} FROM {src} WHERE {W} = 1 UNION ALL "
                     f"SELECT {cols} FROM {src}, range({src}.{W}) WHERE {W} > 1")
        self.sql(f"CREATE OR REPLACE TEMP VIEW {view} AS {query}")
        self.made.append("view:" + view)
        return view

    def cleanup(self) -> None:
        for name in reversed(self.made):
            try:
                if name.startswith("@"):
                    self.con.unregister(name[1:])
                elif name.startswith("view:"):
                    self.sql(f"DROP VIEW IF EXISTS {name[5:]}")
                else:
                    self.sql(f"DROP TABLE IF EXISTS {name}")
            except duckdb.Error:   # pragma: no cover - a failed statement left the connection as it was
                pass

    # ------------------------------------------------------------ the parts
    def part(self, text: str, versions: Dict[int, str], rec: Optional[str]) -> str:
        """``text`` (the base or the step) reading ``versions[k]`` for occurrence k and ``rec`` for ``__rec``,
        its columns cast to the base's types and named as the CTE's."""
        body = _OCCURRENCE.sub(lambda m: versions[int(m.group(1))], text)
        if rec is not None:
            body = _REC.sub(rec, body)
        cols = ", ".join(f"CAST(#{i + 1} AS {t}) AS {_q(n)}" for i, (t, n) in enumerate(zip(self.types, self.names)))
        return f"SELECT {cols} FROM ({body})"

    def match(self, t: str) -> str:
        """A condition: the row ``x`` is in ``t`` (NULLs equal, as in a set).  As EXISTS rather than INTERSECT or
        EXCEPT: DuckDB then builds its hash table on the side with fewer rows (the new rows, not the fixed point)."""
        same = " AND ".join(f"y.{_q(n)} IS NOT DISTINCT FROM x.{_q(n)}" for n in self.names)
        return f"EXISTS (SELECT 1 FROM {t} AS y WHERE {same})"

    def distinct_where(self, query: str, condition: str) -> str:
        return f"SELECT DISTINCT * FROM ({query}) AS x WHERE {condition}"

    def occurrences(self, base: bool):
        n = self.node.base_occurrences
        return range(0, n) if base else range(n, len(self.node.occurrences))

    def count(self, name: str) -> int:
        return self.con.sql(f"SELECT COUNT(*) FROM {name}").fetchall()[0][0]

    # ------------------------------------------------------------ evaluation
    def evaluate(self) -> pa.Table:
        node = self.node
        rels = len(node.relations)
        old = [self.contents(f"old{j}", self.reads[j], node.relation_columns[j]) for j in range(rels)]
        changed = [j for j in range(rels) if self.ins[j] is not None and self.ins[j].num_rows]
        new = list(old)
        for j in changed:
            both = pa.concat_tables([self.reads[j], self.ins[j].select(self.reads[j].schema.names)
                                     .cast(self.reads[j].schema)])
            new[j] = self.contents(f"new{j}", both, node.relation_columns[j])
        r_old = self.contents("R", self.reads[rels], self.names)
        incremental = node.distinct and self.count(r_old) > 0 and all(
            node.monotone[k] for k, j in enumerate(node.occurrences) if j in changed)
        evaluations["incremental" if incremental else "from_scratch"] += 1
        if incremental:
            plus, minus = {}, {}
            for j in changed:
                d = self.arrow(f"chg{j}", self.ins[j])
                data = [f.name for f in self.ins[j].schema if f.name != W]
                cols = ", ".join(f"{c} AS {_q(n)}" for c, n in zip(data, node.relation_columns[j]))
                summed = self.table(f"dsum{j}", f"SELECT {', '.join(data)}, SUM({W})::BIGINT AS {W} FROM {d} "
                                                f"GROUP BY ALL HAVING SUM({W}) <> 0")
                plus[j] = self.table(f"plus{j}", f"SELECT {cols} FROM {summed} WHERE {W} > 0")
                minus[j] = self.table(f"minus{j}", f"SELECT {cols} FROM {summed} WHERE {W} < 0")
            added, removed = self.incremental(old, new, plus, minus, r_old)
            change = (f"SELECT *, 1::BIGINT AS {W} FROM (SELECT * FROM {added} EXCEPT SELECT * FROM {removed}) "
                      f"UNION ALL SELECT *, -1::BIGINT AS {W} FROM (SELECT * FROM {removed} EXCEPT "
                      f"SELECT * FROM {added})")
        else:
            fixed = self.from_scratch(new)
            cols = ", ".join(_q(n) for n in self.names)
            change = (f"SELECT {cols}, SUM({W})::BIGINT AS {W} FROM (SELECT *, 1::BIGINT AS {W} FROM {fixed} "
                      f"UNION ALL SELECT *, -1::BIGINT AS {W} FROM {r_old}) GROUP BY ALL HAVING SUM({W}) <> 0")
        out = self.con.sql(change).to_arrow_table()
        return out.rename_columns([f"c{i}" for i in range(len(self.names))] + [W])

    def all_of(self, tables, base: bool, rec: Optional[str]) -> str:
        return self.part(self.node.base if base else self.node.step,
                         {k: tables[j] for k, j in enumerate(self.node.occurrences)}, rec)

    def from_scratch(self, new: List[str]) -> str:
        """The fixed point over the relations' contents ``new``, as DuckDB's WITH RECURSIVE iterates it."""
        node = self.node
        fixed = self.table("fixed", (f"SELECT DISTINCT * FROM ({self.all_of(new, True, None)})" if node.distinct
                                     else self.all_of(new, True, None)))
        frontier = self.table("f0", f"SELECT * FROM {fixed}")
        for i in range(1, node.max_iterations + 1):
            step = self.all_of(new, False, frontier)
            nxt = self.table(f"f{i}", self.distinct_where(step, f"NOT {self.match(fixed)}") if node.distinct
                             else step)
            if not self.count(nxt):
                return fixed
            self.sql(f"INSERT INTO {fixed} SELECT * FROM {nxt}")
            self.sql(f"DROP TABLE {frontier}")
            frontier = nxt
        raise NoFixedPoint(self.limit_message())

    def limit_message(self) -> str:
        return (f"recursive query {self.node.name} did not reach a fixed point within {self.node.max_iterations} "
                f"iterations (raise it with WITH ('max_iterations' = 'N') on the view, or bound the recursion)")

    def incremental(self, old, new, plus, minus, r_old):
        """(rows added, rows removed) of the fixed point: DRed for the deleted rows, then semi-naive for the
        inserted ones (see the module's docstring)."""
        node = self.node
        removed = self.table("removed", f"SELECT * FROM {r_old} LIMIT 0")
        added = self.table("added", f"SELECT * FROM {r_old} LIMIT 0")
        iterations = 0

        def check():
            nonlocal iterations
            iterations += 1
            if iterations > node.max_iterations:
                raise NoFixedPoint(self.limit_message())

        def seeds(delta: Dict[int, str], others, rec: str) -> List[str]:
            """One step's rows derived with occurrence k of a changed relation reading ``delta``."""
            out = []
            for k, j in enumerate(node.occurrences):
                if j in delta:
                    versions = {i: others[r] for i, r in enumerate(node.occurrences)}
                    versions[k] = delta[j]
                    base = k < node.base_occurrences
                    out.append(self.part(node.base if base else node.step, versions, None if base else rec))
            return out

        gone = None   # the rows of the old fixed point that are deleted (after rederiving)
        candidates = []
        if any(self.count(t) for t in minus.values()):
            # 1. over-delete: what the deleted rows derived in the old fixed point, transitively
            first = " UNION ALL ".join(f"SELECT * FROM ({q})" for q in seeds(dict(minus), old, r_old))
            frontier = self.table("del0", self.distinct_where(first, self.match(r_old)))
            self.sql(f"INSERT INTO {removed} SELECT * FROM {frontier}")
            while self.count(frontier):
                check()
                step = self.all_of(old, False, frontier)
                frontier = self.table(f"del{iterations}", self.distinct_where(
                    step, f"{self.match(r_old)} AND NOT {self.match(removed)}"))
                self.sql(f"INSERT INTO {removed} SELECT * FROM {frontier}")
            # 2. rederive: the removed rows the new contents derive in one step from what is left
            left = self.view("left", f"SELECT * FROM {r_old} AS x WHERE NOT {self.match(removed)}")
            derived = f"SELECT * FROM ({self.all_of(new, True, None)}) UNION ALL " \
                      f"SELECT * FROM ({self.all_of(new, False, left)})"
            again = self.table("again", self.distinct_where(derived, self.match(removed)))
            gone = self.table("gone", f"SELECT * FROM {removed} AS x WHERE NOT {self.match(again)}")
            candidates = [f"SELECT * FROM {again}", self.all_of(new, False, again)]
        # 3. semi-naive: what the inserted rows (and the rederived ones) derive, until nothing is new
        if plus:
            current = r_old if gone is None else \
                self.view("current", f"SELECT * FROM {r_old} AS x WHERE NOT {self.match(gone)}")
            candidates += seeds(plus, new, current)
        if not candidates:
            return added, gone if gone is not None else removed
        kept = self.match(r_old) if gone is None else f"({self.match(r_old)} AND NOT {self.match(gone)})"
        unseen = f"NOT {kept} AND NOT {self.match(added)}"
        frontier = self.table("ins0", self.distinct_where(" UNION ALL ".join(f"SELECT * FROM ({c})"
                                                                             for c in candidates), unseen))
        while self.count(frontier):
            check()
            self.sql(f"INSERT INTO {added} SELECT * FROM {frontier}")
            frontier = self.table(f"ins{iterations}", self.distinct_where(self.all_of(new, False, frontier), unseen))
        return added, gone if gone is not None else removed


def evaluate(con, op, ins: List[Optional[pa.Table]], reads: List[pa.Table]) -> pa.Table:
    """The change of recursive op ``op`` on DuckDB connection ``con`` (raises :class:`NoFixedPoint`, or DuckDB's
    error for a row the SQL fails on)."""
    run = _Run(con, op, ins, reads)
    try:
        return run.evaluate()
    finally:
        run.cleanup()


def _emptied(op, reads: List[pa.Table]) -> pa.Table:
    """The change that retracts everything the op emitted (its own integral's rows, negated)."""
    own = reads[-1]
    return own.set_column(own.schema.get_field_index(W), W, pc.negate(own.column(W)))


def local(lw, op, ins, reads, initial: bool = False) -> pa.Table:
    with lw.lock:
        lw.con.execute(f"SET threads = {THREADS}").fetchall()   # (the steps' connection runs one thread)
        try:
            return evaluate(lw.con, op, ins, reads)
        except (NoFixedPoint, duckdb.Error) as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
        finally:
            lw.con.execute("SET threads = 1").fetchall()
    if lw.errors is not None:
        lw.errors.add(op.id, lw.op_views.get(op.id, []), f"WITH RECURSIVE {op.node.name}", message, [{}], [1],
                      operator=f"Recursive {op.node.name}")
    return _emptied(op, reads)


def spark(lw, op, ins, reads, initial: bool = False):
    """On Spark: the inputs collected, the fixed point iterated here (a failure fails the Spark step, which runs
    again on the driver, where it is recorded)."""
    from sqlengine.executor.backends.duckdb import DuckDBBackend
    from sqlengine.executor.backends.python_calls import register_duckdb
    be = DuckDBBackend()
    register_duckdb(be.con, getattr(lw, "functions", None) or {})
    arrow_ins = [None if d is None else d.toArrow() for d in ins]
    arrow_reads = [r.toArrow() for r in reads]
    try:
        out = evaluate(be.con, op, arrow_ins, arrow_reads)
    finally:
        be.con.close()
    return lw.spark.createDataFrame(out)
