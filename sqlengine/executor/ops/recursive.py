"""Recursive relations (``planner.logical.Recursive``: a ``WITH RECURSIVE`` CTE, or a group of views declared with
DECLARE RECURSIVE VIEW that read each other): their fixed point, kept under inserts and deletes.

The op reads the contents of the relations its SQL reads (their integrals, as of the previous step), their
changes, and the rows it emitted before (the integral of its own change: the old fixed point ``R``, one per
recursive relation).  It runs the branches' own SQL on DuckDB, on the driver, one iteration at a time, each
iteration evaluating every relation's steps over the rows new in the one before:

* **From scratch** (the first step, a view added later, an empty ``R``, a UNION ALL relation, or a change to a relation
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

from planner.circuit import FLOATS
from sqlengine.executor.backends.duckdb import quoted
from sqlengine.executor.delta_rules import zero_sign
from sqlengine.executor.op_schemas import with_weight
from sqlengine.executor.schema import chunked
from sqlengine.executor.ops import ProbeSpec
from sqlengine.executor.ops.recursive_reads import Held, keyable, read, resolve
from sqlengine.executor.state_lookups import ArrowLookup, Lookup
from sqlengine.types import arrow_type
from sqlengine.zset import W, consolidate_arrow, expand_arrow, negate_arrow

SKIPS_UNCHANGED = True
THREADS = max(1, min(4, os.cpu_count() or 1))   # DuckDB's threads for a recomputation: its joins and scans are big
SMALL = 65536   # rows of state read that are consolidated in Arrow rather than by a query
_OCCURRENCE = re.compile(r"\b__o(\d+)\b")
_REC = re.compile(r"\b__rec\b")
_calls = itertools.count()
# how often each way of evaluating ran, in this process (for tests and benchmarks): "from_scratch", "incremental";
# and the state rows the incremental evaluations read ("rows_read")
evaluations: Counter = Counter()


class NoFixedPoint(Exception):
    """The iteration did not converge within the view's ``max_iterations``."""


def probes(op) -> List[ProbeSpec]:
    return [ProbeSpec(None, []) for _ in op.reads]   # looked up as the iterations need them (recursive_reads)


def change_schema(op, ins: List[pa.Schema], typer) -> pa.Schema:
    return with_weight([arrow_type(f.type) for f in op.node.fields])


def _per_row(schema: pa.Schema, data: List[str]) -> str:
    """GROUP BY the ``data`` columns of a Z-set of ``schema`` row by row: a float zero's sign kept (a Z-set row
    keeps it, GROUP BY makes -0.0 and 0.0 one value)."""
    return ", ".join(data + [zero_sign(c) for c in data if pa.types.is_floating(schema.field(c).type)])


class _Run:
    """One evaluation on connection ``con``: the temporary relations it makes carry the prefix ``p``."""

    def __init__(self, con, op, ins: List[Optional[pa.Table]], reads: List[Lookup]):
        self.con, self.op, self.node = con, op, op.node
        self.p = f"__fx{next(_calls)}_"
        self.made: List[str] = []
        self.rows_read = 0
        self._names = itertools.count()
        self._wholes: Dict[int, str] = {}
        self.sizes: Dict[str, int] = {}   # the row count of each table made
        self.names = [[f.name for f in cols] for cols in self.node.columns]   # per recursive relation
        self.types = [[f.type.sql for f in cols] for cols in self.node.columns]
        self.floats = [[f.type.base in FLOATS for f in cols] for cols in self.node.columns]
        self.ins, self.reads = ins, reads

    # ------------------------------------------------------------ relations
    def sql(self, text: str):
        return self.con.execute(text).fetchall()   # (a result left unread blocks the connection)

    def table(self, name: str, query: str) -> str:
        full = self.p + name
        self.sizes[full] = self.sql(f"CREATE OR REPLACE TEMP TABLE {full} AS {query}")[0][0]   # (its row count)
        self.made.append(full)
        return full

    def insert(self, target: str, source: str) -> None:
        """Add table ``source``'s rows to table ``target``."""
        self.sizes[target] += self.sql(f"INSERT INTO {target} SELECT * FROM {source}")[0][0]

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

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self._names)}"

    def whole(self, held: Held) -> str:
        """A view of all of ``held``'s rows (read once per evaluation)."""
        if id(held) not in self._wholes:
            self._wholes[id(held)] = read(self, held, self.fresh("all"))
        return self._wholes[id(held)]

    def held_in(self, i: int, held: Held, rows: str) -> str:
        """A view of the rows of ``held`` (rows of relation ``i``) that are rows of table ``rows`` (and a few
        more): looked up by all their columns of types a lookup compares (whole when there is none)."""
        by = [k for k, t in enumerate(self.types[i]) if keyable(t)]
        if not by:
            return self.whole(held)
        listed = ", ".join(quoted(self.names[i][k]) for k in by)
        probe = self.con.sql(f"SELECT DISTINCT {listed} FROM {rows}").to_arrow_table()
        return read(self, held, self.fresh("in"), by, probe)

    def contents(self, name: str, raw: pa.Table, columns) -> str:
        """A view of the bag that the Z-set ``raw`` (c0.., W; runs, unconsolidated) holds, its columns named
        ``columns``: consolidated only when some weight is negative, expanded where a weight is above 1."""
        data = [f.name for f in raw.schema if f.name != W]
        w = raw.column(W)
        if raw.num_rows <= SMALL:   # consolidated and expanded here, without a query
            if raw.num_rows and pc.any(pc.less(w, 0)).as_py():
                raw = consolidate_arrow(raw)
                raw = raw.filter(pc.greater(raw.column(W), 0))
            return self.arrow(name, expand_arrow(raw).select(data).rename_columns(list(columns)))
        src = self.arrow(name + "_raw", raw)
        negative = pc.less(w, 0)
        if raw.num_rows and pc.any(negative).as_py():
            # only the rows that some run deletes are summed (the runs since the last merge: few); the others
            # are as they were written
            touched = self.arrow(name + "_neg", raw.filter(negative).select(data))
            same = " AND ".join(f"y.{c} IS NOT DISTINCT FROM x.{c}" for c in data)
            hit = f"EXISTS (SELECT 1 FROM {touched} AS y WHERE {same})"
            listed = ", ".join(data)
            by = _per_row(raw.schema, data)
            src = self.table(name + "_sum", f"SELECT {listed}, {W} FROM {src} AS x WHERE NOT {hit} UNION ALL "
                                           f"SELECT {listed}, SUM({W})::BIGINT AS {W} FROM {src} AS x WHERE {hit} "
                                           f"GROUP BY {by} HAVING SUM({W}) > 0")
            many = self.con.sql(f"SELECT COALESCE(MAX({W}), 0) > 1 FROM {src}").fetchall()[0][0]
        else:
            many = bool(raw.num_rows) and pc.max(w).as_py() > 1
        cols = ", ".join(f"{c} AS {quoted(n)}" for c, n in zip(data, columns))
        query = f"SELECT {cols} FROM {src}"
        if many:   # (a weight above 1: that many copies; most rows have weight 1 and are read as they are)
            query = (f"SELECT {cols} FROM {src} WHERE {W} = 1 UNION ALL "
                     f"SELECT {cols} FROM {src}, range({src}.{W}) WHERE {W} > 1")
        return self.view(name, query)

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
    def part(self, text: str, i: int, versions: Dict[int, object], rec=None, j: Optional[int] = None,
             want: Optional[str] = None) -> str:
        """``text`` (a branch of relation ``i``) reading ``versions[k]`` for occurrence k and ``rec`` (relation
        ``j``) for ``__rec``, its columns cast to relation ``i``'s types and named as its columns.  A version
        is a table's name, or a :class:`Held` relation, read as narrowly as the other versions allow
        (``want``: only result rows in that table are needed; see :mod:`.recursive_reads`)."""
        tokens = {f"__o{k}": versions[k] for k in {int(m) for m in _OCCURRENCE.findall(text)}}
        if rec is not None:
            tokens["__rec"] = rec
        types = {t: self.token_types(t, j) for t, v in tokens.items()}
        bound = resolve(self, text, tokens, types, self.types[i], self.names[i], want)
        body = _OCCURRENCE.sub(lambda m: bound[f"__o{m.group(1)}"], text)
        if rec is not None:
            body = _REC.sub(bound["__rec"], body)
        cols = ", ".join(f"{self.value(i, k, f'CAST(#{k + 1} AS {t})')} AS {quoted(n)}"
                         for k, (t, n) in enumerate(zip(self.types[i], self.names[i])))
        return f"SELECT {cols} FROM ({body})"

    def token_types(self, token: str, j: Optional[int]) -> Dict[str, str]:
        """The SQL types of ``token``'s columns by lower-case name (``__rec``: recursive relation ``j``)."""
        if token == "__rec":
            return {n.lower(): t for n, t in zip(self.names[j], self.types[j])}
        r = self.node.occurrences[int(token[3:])]
        return {n.lower(): f.type.sql for n, f in zip(self.node.relation_columns[r], self.node.relations[r].fields)}

    def value(self, i: int, k: int, e: str) -> str:
        """Column ``k`` of relation ``i`` as ``e``; in a set (UNION) a float one with its zeros made 0.0: the set
        holds one of -0.0 and 0.0, and which one would depend on the rows' order."""
        return f"({e} + CAST(0 AS {self.types[i][k]}))" if self.node.distinct[i] and self.floats[i][k] else e

    def grouped(self, i: int) -> str:
        """GROUP BY relation ``i``'s rows, a float zero's sign kept (a Z-set row keeps it)."""
        names = [quoted(c) for c in self.names[i]]
        return ", ".join(names + [zero_sign(c) for c, f in zip(names, self.floats[i]) if f])

    def everywhere(self, tables: List[str]) -> Dict[int, str]:
        """Each occurrence reading its relation's ``tables[j]``."""
        return {k: tables[j] for k, j in enumerate(self.node.occurrences)}

    def base(self, i: int, tables: List[object], want: Optional[str] = None) -> List[str]:
        return [self.part(b, i, self.everywhere(tables), want=want) for b in self.node.bases[i]]

    def steps_into(self, i: int, tables: List[object], recs: List[object], want: Optional[str] = None) -> List[str]:
        """The steps that derive rows of relation ``i``, each reading its recursive relation as ``recs[j]``."""
        return [self.part(text, i, self.everywhere(tables), recs[j], j, want)
                for target, j, text in self.node.steps if target == i and recs[j] is not None]

    def match(self, i: int, t: str) -> str:
        """A condition: the row ``x`` (of relation ``i``) is in ``t`` (NULLs equal, as in a set).  As EXISTS rather
        than INTERSECT or EXCEPT: DuckDB then builds its hash table on the side with fewer rows."""
        same = " AND ".join(f"y.{quoted(n)} IS NOT DISTINCT FROM x.{quoted(n)}" for n in self.names[i])
        return f"EXISTS (SELECT 1 FROM {t} AS y WHERE {same})"

    def empty(self, i: int) -> str:
        cols = ", ".join(f"CAST(NULL AS {t}) AS {quoted(n)}" for t, n in zip(self.types[i], self.names[i]))
        return f"SELECT {cols} WHERE FALSE"

    def union(self, i: int, queries: List[str]) -> str:
        return " UNION ALL ".join(f"SELECT * FROM ({q})" for q in queries) if queries else self.empty(i)

    def distinct_where(self, query: str, condition: str) -> str:
        return f"SELECT DISTINCT * FROM ({query}) AS x WHERE {condition}"

    def count(self, name: str) -> int:
        if name in self.sizes:
            return self.sizes[name]
        return self.con.sql(f"SELECT COUNT(*) FROM {name}").fetchall()[0][0]

    def tables(self, prefix: str, queries: List[str]) -> List[str]:
        return [self.table(f"{prefix}_{i}", q) for i, q in enumerate(queries)]

    # ------------------------------------------------------------ evaluation
    def evaluate(self) -> pa.Table:
        node = self.node
        rels, n = len(node.relations), len(node.names)
        old = []
        for j in range(rels):
            fields = node.relations[j].fields
            old.append(Held(self.reads[j], tuple(f"c{k}" for k in range(len(fields))), tuple(node.relation_columns[j]),
                            tuple(f.type.sql for f in fields)))
        changed = [j for j in range(rels) if self.ins[j] is not None and self.ins[j].num_rows]
        new = list(old)
        for j in changed:
            new[j] = old[j].plus(self.ins[j])
        if n == 1:
            r_old = [Held(self.reads[rels], tuple(f"c{k}" for k in range(len(self.names[0]))), tuple(self.names[0]),
                          tuple(self.types[0]))]
        else:   # (the relation's number, then each relation's columns in turn)
            r_old = [Held(self.reads[rels], tuple(f"c{s}" for s in node.slots(i)), tuple(self.names[i]),
                          tuple(self.types[i]), relation=i) for i in range(n)]
        incremental = all(node.distinct) and self.reads[rels].weight() > 0 and all(
            node.monotone[k] for k, j in enumerate(node.occurrences) if j in changed)
        evaluations["incremental" if incremental else "from_scratch"] += 1
        if incremental:
            plus, minus = {}, {}
            for j in changed:   # each changed relation's rows inserted and deleted (as sets), summed here
                summed = consolidate_arrow(self.ins[j])   # (-0.0 apart from 0.0, as a Z-set row keeps it)
                data = [f.name for f in summed.schema if f.name != W]
                for out, name, keep in ((plus, "plus", pc.greater), (minus, "minus", pc.less)):
                    rows = summed.filter(keep(summed.column(W), 0)).select(data)
                    out[j] = self.arrow(f"{name}{j}", rows.rename_columns(list(node.relation_columns[j])))
                    self.sizes[out[j]] = rows.num_rows
            added, removed = self.incremental(old, new, plus, minus, r_old)
            evaluations["rows_read"] += self.rows_read
            changes = [f"SELECT *, 1::BIGINT AS {W} FROM (SELECT * FROM {added[i]} EXCEPT SELECT * FROM {removed[i]}) "
                       f"UNION ALL SELECT *, -1::BIGINT AS {W} FROM (SELECT * FROM {removed[i]} EXCEPT "
                       f"SELECT * FROM {added[i]})" for i in range(n)]
        else:
            threads = self.con.sql("SELECT current_setting('threads')").fetchall()[0][0]
            self.sql(f"SET threads = {THREADS}")   # (the steps' connection runs one thread: enough for small reads)
            try:
                fixed = self.from_scratch([self.whole(x) for x in new])
            finally:
                self.sql(f"SET threads = {threads}")
            r_old = [self.whole(r) for r in r_old]
            changes = []
            for i in range(n):
                cols = ", ".join(quoted(c) for c in self.names[i])
                changes.append(f"SELECT {cols}, SUM({W})::BIGINT AS {W} FROM (SELECT *, 1::BIGINT AS {W} FROM "
                               f"{fixed[i]} UNION ALL SELECT *, -1::BIGINT AS {W} FROM {r_old[i]}) "
                               f"GROUP BY {self.grouped(i)} HAVING SUM({W}) <> 0")
        if n == 1:
            out = self.con.sql(changes[0]).to_arrow_table()
            return out.rename_columns([f"c{k}" for k in range(len(self.names[0]))] + [W])
        parts = []
        for i, change in enumerate(changes):   # each relation's rows in its slots, NULL in the others'
            slots = [f"{i}::BIGINT"]
            for r in range(n):
                slots += [f"x.{quoted(c)}" if r == i else f"CAST(NULL AS {t})" for c, t in zip(self.names[r], self.types[r])]
            parts.append(f"SELECT {', '.join(slots)}, x.{W} FROM ({change}) AS x")
        out = self.con.sql(" UNION ALL ".join(parts)).to_arrow_table()
        return out.rename_columns([f"c{k}" for k in range(out.num_columns - 1)] + [W])

    def from_scratch(self, new: List[str]) -> List[str]:
        """The fixed point over the relations' contents ``new``, as DuckDB's WITH RECURSIVE iterates it: the bases,
        then each iteration's steps over the rows new in the one before (for UNION: minus the rows found)."""
        node = self.node
        n = len(node.names)
        fixed = self.tables("fixed", [f"SELECT DISTINCT * FROM ({self.union(i, self.base(i, new))})"
                                      if node.distinct[i] else self.union(i, self.base(i, new)) for i in range(n)])
        frontier = self.tables("f0", [f"SELECT * FROM {t}" for t in fixed])
        for it in range(1, node.max_iterations + 1):
            nxt = []
            for i in range(n):
                step = self.union(i, self.steps_into(i, new, frontier))
                nxt.append(self.distinct_where(step, f"NOT {self.match(i, fixed[i])}") if node.distinct[i] else step)
            frontier = self.tables(f"f{it}", nxt)
            if not sum(self.count(t) for t in frontier):
                return fixed
            for i in range(n):
                self.insert(fixed[i], frontier[i])
        raise NoFixedPoint(self.limit_message())

    def limit_message(self) -> str:
        return (f"recursive query {self.node.name} did not reach a fixed point within {self.node.max_iterations} "
                f"iterations (raise it with WITH ('max_iterations' = 'N') on the view, or bound the recursion)")

    def incremental(self, old, new, plus, minus, r_old):
        """(rows added, rows removed) of each relation's fixed point: DRed for the deleted rows, then semi-naive
        for the inserted ones (see the module's docstring)."""
        node = self.node
        n = len(node.names)
        added = self.tables("added", [self.empty(i) for i in range(n)])
        removed = self.tables("removed", [self.empty(i) for i in range(n)])
        iterations = 0

        def check():
            nonlocal iterations
            iterations += 1
            if iterations > node.max_iterations:
                raise NoFixedPoint(self.limit_message())

        def seeds(delta: Dict[int, str], others: List[str], recs: List[str]) -> List[List[str]]:
            """Per relation: one step's rows derived with an occurrence of a changed relation reading ``delta``
            (the other occurrences ``others``, the recursive relations ``recs``)."""
            out: List[List[str]] = [[] for _ in range(n)]
            parts = [(i, b, None, None) for i in range(n) for b in node.bases[i]] + \
                [(i, text, recs[j], j) for i, j, text in node.steps]
            for i, text, rec, r in parts:
                for k in sorted({int(m) for m in _OCCURRENCE.findall(text)}):
                    j = node.occurrences[k]
                    if j in delta:
                        versions = self.everywhere(others)
                        versions[k] = delta[j]
                        out[i].append(self.part(text, i, versions, rec, r))
            return out

        gone = None   # each relation's rows of the old fixed point that are deleted (after rederiving)
        candidates: List[List[str]] = [[] for _ in range(n)]
        if any(self.count(t) for t in minus.values()):
            # 1. over-delete: what the deleted rows derived in the old fixed point, transitively
            first = self.tables("del0c", [self.distinct_where(self.union(i, q), "TRUE")
                                          for i, q in enumerate(seeds(dict(minus), old, r_old))])
            frontier = self.tables("del0", [f"SELECT * FROM {first[i]} AS x WHERE "
                                            f"{self.match(i, self.held_in(i, r_old[i], first[i]))}" for i in range(n)])
            for i in range(n):
                self.insert(removed[i], frontier[i])
            while sum(self.count(t) for t in frontier):
                check()
                more = self.tables(f"del{iterations}c", [self.distinct_where(
                    self.union(i, self.steps_into(i, old, frontier)), "TRUE") for i in range(n)])
                frontier = self.tables(f"del{iterations}", [
                    f"SELECT * FROM {more[i]} AS x WHERE {self.match(i, self.held_in(i, r_old[i], more[i]))} "
                    f"AND NOT {self.match(i, removed[i])}" for i in range(n)])
                for i in range(n):
                    self.insert(removed[i], frontier[i])
            # 2. rederive: the removed rows the new contents derive in one step from what is left
            left = [r_old[i].without(removed[i], i) for i in range(n)]
            again = self.tables("again", [self.distinct_where(
                self.union(i, self.base(i, new, removed[i]) + self.steps_into(i, new, left, removed[i])),
                self.match(i, removed[i])) for i in range(n)])
            gone = self.tables("gone", [f"SELECT * FROM {removed[i]} AS x WHERE NOT {self.match(i, again[i])}"
                                        for i in range(n)])
            candidates = [[f"SELECT * FROM {again[i]}"] + self.steps_into(i, new, again) for i in range(n)]
        # 3. semi-naive: what the inserted rows (and the rederived ones) derive, until nothing is new
        if plus:
            current = r_old if gone is None else [r_old[i].without(gone[i], i) for i in range(n)]
            for i, more in enumerate(seeds(plus, new, current)):
                candidates[i] += more
        result = gone if gone is not None else removed
        if not any(candidates):
            return added, result

        def unseen(name: str, queries: List[List[str]]) -> List[str]:
            """The rows of ``queries`` (per relation) not in the fixed point so far: not in the old one (or deleted
            from it), and not added yet.  The candidates first, then each test a join on their (few) rows."""
            out = []
            for i, c in enumerate(self.tables(name + "c", [self.distinct_where(self.union(i, q), "TRUE")
                                                           for i, q in enumerate(queries)])):
                fresh = f"SELECT * FROM {c} AS x WHERE NOT {self.match(i, self.held_in(i, r_old[i], c))}"
                if gone is not None:
                    fresh += f" UNION ALL SELECT * FROM {c} AS x WHERE {self.match(i, gone[i])}"
                out.append(f"SELECT * FROM ({fresh}) AS x WHERE NOT {self.match(i, added[i])}")
            return self.tables(name, out)

        frontier = unseen("ins0", candidates)
        while sum(self.count(t) for t in frontier):
            check()
            for i in range(n):
                self.insert(added[i], frontier[i])
            frontier = unseen(f"ins{iterations}", [self.steps_into(i, new, frontier) for i in range(n)])
        return added, result


def evaluate(con, op, ins: List[Optional[pa.Table]], reads: List[Lookup]) -> pa.Table:
    """The change of recursive op ``op`` on DuckDB connection ``con`` (raises :class:`NoFixedPoint`, or DuckDB's
    error for a row the SQL fails on)."""
    run = _Run(con, op, ins, reads)
    try:
        return run.evaluate()
    finally:
        run.cleanup()


def _emptied(op, reads: List[Lookup]) -> pa.Table:
    """The change that retracts everything the op emitted (its own integral's rows, negated)."""
    return negate_arrow(reads[-1].rows())


def local(lw, op, ins, reads, initial: bool = False) -> pa.Table:
    with lw.lock:
        try:
            return evaluate(lw.con, op, ins, reads)
        except (NoFixedPoint, duckdb.Error) as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
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
    stats = getattr(lw, "stats", None)
    count = stats.from_spark if stats is not None else (lambda t: t)
    arrow_ins = [None if d is None else count(d.toArrow()) for d in ins]
    arrow_reads = [ArrowLookup(count(r.toArrow())) for r in reads]
    try:
        out = evaluate(be.con, op, arrow_ins, arrow_reads)
    finally:
        be.con.close()
    return lw.spark.createDataFrame(chunked(out if stats is None else stats.to_spark(out)))
