"""Which rows of its state the recursive op (:mod:`.recursive`) reads as it iterates: those that a branch run
over few rows can meet, looked up by key, so that the work of an incremental step follows the change rather
than the size of the fixed point and of the relations it reads.

A branch of a recursion is DuckDB SQL in which ``__rec`` is the recursive relation and ``__o<k>`` occurrence k
of a relation (``planner.logical.Recursive``).  :func:`shape` analyzes it once: its *sources* (the FROM
clause's tables, when they are all joined by inner or cross joins), the *links* (equalities between two
sources' plain columns that are top-level conjuncts of an ON or of the WHERE, so every joined row satisfies
them) and, per output column, the source column it is (when it is one).

When a branch runs over some sources held as few rows (an iteration's new rows, a change) and others held as
state (:class:`Held`: a relation's contents, the old fixed point), each held source is read (:func:`resolve`):

1. by a link to a source already read: its rows whose linked column holds one of that source's values;
2. else, when only result rows that are in a small table ``want`` are needed (DRed's rederivation), by the
   output column it is: its rows whose column holds one of ``want``'s values of that output column, the
   relations' occurrences before the recursive relation (a fixed point is usually the larger); then 1 again;
3. else whole.

Each read is a superset of the source's rows that the branch can use (a row left out fails a link's equality,
or gives an output row not in ``want``), so the branch's result is the same as over the whole state.  Links
and output columns are used only between types whose values the key hash compares as SQL does (the same
type, numbers as numbers, DATE with TIMESTAMP; for output columns, where the branch casts its result to the
relation's type, only the same type or integers), and output columns only when no aggregate, window, LIMIT
or OFFSET makes a result row depend on other rows.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from planner.types import INTEGERS
from sqlengine.executor.backends.duckdb import quoted
from sqlengine.executor.state_lookups import Lookup
from sqlengine.zset import W

_NUMBERS = set(INTEGERS) | {"DECIMAL", "REAL", "DOUBLE", "HUGEINT"}
_INSTANTS = {"DATE", "TIMESTAMP"}
KEYS = _NUMBERS | _INSTANTS | {"VARCHAR", "BOOLEAN"}   # the types a state is looked up by (nested ones: never)


def keyable(t: str) -> bool:
    return t.split("(")[0] in KEYS


@dataclass(frozen=True)
class Shape:
    sources: Tuple[Tuple[str, str], ...]                    # (alias, token), aliases lower case
    links: Tuple[Tuple[str, str, str, str], ...]            # (alias, column, alias, column), both ways
    outputs: Tuple[Optional[Tuple[str, str]], ...]          # per output column: (alias, column) or None
    # (an alias "": the column is unqualified)
    narrows_outputs: bool                                    # whether a result row depends on its sources' rows alone


def _conjuncts(e: Optional[exp.Expression]) -> List[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, (exp.Paren, exp.Where)):
        return _conjuncts(e.this)
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]


def _column(e: exp.Expression, aliases) -> Optional[Tuple[str, str]]:
    """(alias, column) of a plain column; alias "" when unqualified (:func:`resolve` finds its source)."""
    if isinstance(e, exp.Paren):
        return _column(e.this, aliases)
    if isinstance(e, exp.Column) and not e.args.get("db") and (not e.table or e.table.lower() in aliases):
        return e.table.lower(), e.name.lower()
    return None


@functools.lru_cache(maxsize=1024)
def shape(text: str) -> Optional[Shape]:
    """The sources, links and output columns of branch ``text``; None when its FROM is not inner joins of
    plain tables (then every state it reads is read whole)."""
    try:
        tree = sqlglot.parse_one(text, read="duckdb")
    except sqlglot.errors.SqlglotError:
        return None
    if not isinstance(tree, exp.Select) or tree.args.get("with"):
        return None
    tables = [tree.args.get("from_")] + list(tree.args.get("joins") or [])
    if tables[0] is None:
        return None
    sources, conditions = [], _conjuncts(tree.args.get("where"))
    for k, t in enumerate(tables):
        if k:   # a join: inner or cross, with ON (USING, NATURAL, outer, semi, anti, ASOF: no narrowing)
            if t.side or (t.kind or "").upper() not in ("", "INNER", "CROSS") or t.args.get("using") or \
                    t.args.get("method"):
                return None
            conditions += _conjuncts(t.args.get("on"))
        table = t.this
        if not isinstance(table, exp.Table) or table.args.get("db") or not isinstance(table.this, exp.Identifier):
            return None
        sources.append((table.alias_or_name.lower(), table.name))
    aliases = {a for a, _ in sources}
    if len(aliases) != len(sources):
        return None
    links = []
    for c in conditions:
        if isinstance(c, exp.EQ):
            left, right = _column(c.this, aliases), _column(c.expression, aliases)
            if left and right and (left[0] != right[0] or not left[0]):
                links += [left + right, right + left]
    outputs = []
    for e in tree.expressions:
        outputs.append(_column(e.this if isinstance(e, exp.Alias) else e, aliases))
    distinct = tree.args.get("distinct")
    narrows = not any(tree.args.get(a) for a in ("group", "having", "limit", "offset", "qualify")) and \
        not tree.find(exp.AggFunc, exp.Window) and not (distinct is not None and distinct.args.get("on"))
    return Shape(tuple(sources), tuple(links), tuple(outputs), narrows)


def linkable(a: str, b: str) -> bool:
    """Do the key hashes of columns of SQL types ``a`` and ``b`` agree wherever ``=`` holds?"""
    if not (keyable(a) and keyable(b)):
        return False
    if a == b:
        return True
    ba, bb = a.split("(")[0], b.split("(")[0]
    return (ba in _NUMBERS and bb in _NUMBERS) or (ba in _INSTANTS and bb in _INSTANTS)


def outputs_as(source: str, out: str) -> bool:
    """Is a value of type ``source`` cast to ``out`` (a branch's result cast to its relation's type) equal,
    as a key, to what it was?"""
    return keyable(source) and (source == out or (source in INTEGERS and out in INTEGERS))


@dataclass(frozen=True)
class Held:
    """A relation whose rows are state: read whole or by key (``lookup``; its rows in columns ``state``,
    or, for one of several recursive relations, those whose ``c0`` is ``relation``), plus the rows of ``extra``
    (a change: the relation's new contents), minus the rows in DuckDB table ``minus`` (rows of recursive
    relation ``target``).  ``names`` and ``types``: its columns as the SQL names them, and their SQL types."""

    lookup: Lookup
    state: Tuple[str, ...]
    names: Tuple[str, ...]
    types: Tuple[str, ...]
    relation: Optional[int] = None
    extra: Optional[pa.Table] = None
    minus: Optional[str] = None
    target: Optional[int] = None

    def plus(self, extra: pa.Table) -> "Held":
        return replace(self, extra=extra)

    def without(self, minus: str, target: int) -> "Held":
        """These rows but those in table ``minus`` (rows of recursive relation ``target``)."""
        return replace(self, minus=minus, target=target)

    def column(self, name: str) -> Optional[int]:
        low = [n.lower() for n in self.names]
        return low.index(name) if name in low else None

    def raw(self, spec: Sequence[str] = (), probe: Optional[pa.Table] = None) -> pa.Table:
        """Its rows (runs, unconsolidated) as ``c0..`` and the weight: all, or those a lookup finds."""
        t = self.lookup.rows(spec, probe)
        if self.relation is not None:
            t = t.filter(pc.equal(t.column("c0"), self.relation))
        t = t.select(list(self.state) + [W]).rename_columns([f"c{k}" for k in range(len(self.state))] + [W])
        if self.extra is not None and self.extra.num_rows:
            t = pa.concat_tables([t, self.extra.select(t.schema.names).cast(t.schema)])
        return t


def read(run, held: Held, name: str, by: Optional[List[int]] = None, probe: Optional[pa.Table] = None) -> str:
    """A DuckDB view of ``held``'s rows (whole, or those whose columns ``by`` can equal a row of ``probe``),
    its columns named as the SQL names them."""
    if by is None:
        raw = held.raw()
    else:
        raw = held.raw([held.state[k] for k in by], probe)
    run.rows_read += raw.num_rows
    view = run.contents(name, raw, held.names)
    if held.minus is not None:
        view = run.view(name + "_less", f"SELECT * FROM {view} AS x WHERE NOT {run.match(held.target, held.minus)}")
    return view


def resolve(run, text: str, tokens: Dict[str, object], types: Dict[str, Dict[str, str]], out_types: Sequence[str],
            out_names: Sequence[str], want: Optional[str] = None) -> Dict[str, str]:
    """Each token of branch ``text`` (``__rec``, ``__o<k>``) bound to a DuckDB table or view name: those
    ``tokens`` holds as names as they are, each :class:`Held` one read as narrowly as the module's docstring
    says.  ``types``: each token's column types by lower-case name; ``out_types`` / ``out_names``: the
    branch's relation's column types and names; ``want``: a table of that relation's rows, when only result rows
    in it are needed."""
    out = {t: v for t, v in tokens.items() if isinstance(v, str)}
    held = {t: v for t, v in tokens.items() if isinstance(v, Held)}
    sh = shape(text) if held else None
    if sh is not None:
        alias_of = {token: alias for alias, token in sh.sources}
        token_of = dict(sh.sources)
        pending = {alias_of[t] for t in held if t in alias_of}

        def owner(alias: str, column: str) -> Optional[str]:
            """The source of a column: its alias, or the one source that has an unqualified column."""
            if alias:
                return alias
            having = [a for a, t in sh.sources if column in types.get(t, {})]
            return having[0] if len(having) == 1 else None

        links = []
        for x, cx, y, cy in sh.links:
            x, y = owner(x, cx), owner(y, cy)
            if x is not None and y is not None and x != y:
                links.append((x, cx, y, cy))
        outputs = [None if o is None or owner(*o) is None else (owner(*o), o[1]) for o in sh.outputs]

        def type_of(alias: str, column: str) -> Optional[str]:
            return types.get(token_of[alias], {}).get(column)

        def values(table: str, column: str) -> pa.Table:
            t = run.con.sql(f"SELECT DISTINCT {quoted(column)} FROM {table}").to_arrow_table()
            return t.rename_columns(["k"])

        def by_links() -> None:
            moved = True
            while moved:
                moved = False
                for a in sorted(pending):
                    h = held[token_of[a]]
                    for x, cx, y, cy in links:
                        if x != a or y in pending or h.column(cx) is None:
                            continue
                        ty = type_of(y, cy)
                        if ty is None or not linkable(h.types[h.column(cx)], ty):
                            continue
                        bound = out.get(token_of[y])
                        if bound is None:
                            continue
                        out[token_of[a]] = read(run, h, run.fresh("by"), [h.column(cx)], values(bound, cy))
                        pending.discard(a)
                        moved = True
                        break

        by_links()
        if want is not None and sh.narrows_outputs:
            for rec_last in (False, True):
                for a in sorted(pending):
                    if (token_of[a] == "__rec") != rec_last or a not in pending:
                        continue
                    h = held[token_of[a]]
                    for k, o in enumerate(outputs):
                        if k >= len(out_names) or o is None or o[0] != a or h.column(o[1]) is None:
                            continue
                        if not outputs_as(h.types[h.column(o[1])], out_types[k]):
                            continue
                        out[token_of[a]] = read(run, h, run.fresh("out"), [h.column(o[1])],
                                                values(want, out_names[k]))
                        pending.discard(a)
                        by_links()
                        break
    for t, h in held.items():
        if t not in out:
            out[t] = run.whole(h)
    return out
