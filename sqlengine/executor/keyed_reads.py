"""Reading on Spark only the state rows a step's change touches.

Each state-owning operator's runs are written sorted by one column, its *sort column* (:func:`sort_columns`),
in parquet row groups of ``ROW_GROUP_ROWS`` rows, so every row group covers a narrow range of that column and
its min/max statistics say which keys it can hold.  Runs are sorted, in small groups, only where Spark may
read them by key (``LocalExecutor.run_order``: a cluster master, or the driver's disk tier off); the filter below is
exact on any run, sorted or not, so a change of configuration between restarts costs speed, not correctness.

When a Spark step reads an integral by a key whose values the driver knows (the op's input changes are Arrow
tables, at most ``Placement.max_keys`` distinct values), the read is filtered by ``<sort column> IN (values)``
(:func:`key_filter`, :func:`in_list`), which Spark pushes into the parquet reader: row groups that cannot hold
any of the values are skipped, so the rows read follow the change's keys, not the size of the state.  The
filter only narrows a read to a superset of the rows the rule joins with, so the rule's result is the same
with or without it (NULL keys included: a probe NULL keeps the NULL rows).

Chosen by measurement (``docs/SCALING.md``; ``benchmarks/RESULTS.md``, *Scale*): a hundred probe keys read
from runs sorted in 16k-row groups in a fraction of the time of a scan of unsorted runs, and the gap grows
with the state.  Parquet's dictionary filter is off (``SPARK_CONF``): on sorted runs it reads every
row group's dictionary, which cost more than the scan.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from planner.circuit import Circuit

from sqlengine import nested
from sqlengine.executor import ops
from sqlengine.executor.ops import aggregate as agg_op
from sqlengine.state.cache import is_column
from sqlengine.state.store import ROW_GROUP_ROWS

IN_CHUNK = 64                # values per IN of the filter (see in_list)
SPARK_CONF = {
    "spark.sql.parquet.pushdown.inFilterThreshold": str(IN_CHUNK),   # IN lists pushed as IN, not as a range
    "parquet.filter.dictionary.enabled": "false",
}
def sort_columns(circuit: Circuit, derived: Dict[int, object], primary_keys: Dict[str, List[str]]
                 ) -> Dict[int, str]:
    """op id -> the column its runs are sorted by: the first column of the key that its first keyed reader
    (in circuit order) looks it up by; an accumulating aggregate's first group key; a table's primary key, or
    its first column (deletes are looked up by every column).  Reads of derived integrals count for the
    state they are read from."""
    out: Dict[int, str] = {}

    def keyed(r: int, spec: Tuple[str, ...]) -> None:
        if not spec or not is_column(spec[0]):
            return
        d = derived.get(r)
        if d is None:
            out.setdefault(r, spec[0])
        elif d.aggregate is None and d.join is None:
            keyed(d.base[0], tuple(f"c{j}" for j in d.below(spec)))
        elif d.join is not None:
            side, key = d.side_of(spec)
            keyed(d.base[side], key)
            keyed(d.base[1 - side], ops.probes(d.join)[1 - side].spec)

    for op in circuit.ops:
        if agg_op.accumulates(op) and op.node.keys:
            out.setdefault(op.id, "c0")
        specs = ops.probes(op) if op.reads else []
        for r, ps in zip(op.reads, specs):
            keyed(r, ps.spec)
    for table, (_, integral) in circuit.tables.items():
        if integral not in derived:
            pk = primary_keys.get(table) or []
            out.setdefault(integral, pk[0] if pk else "c0")
    return out


def sorted_run(table: pa.Table, column: Optional[str]) -> pa.Table:
    """``table`` sorted by ``column`` when it spans more than one row group (order within a run means
    nothing to the engine otherwise)."""
    if column is None or table.num_rows <= ROW_GROUP_ROWS or column not in table.column_names or \
            nested.is_nested_arrow(table.schema.field(column).type):
        return table
    c = table.column(column)
    if (pa.types.is_integer(c.type) or pa.types.is_floating(c.type)) and not c.null_count:
        # numpy's stable sort is a timsort: near-linear on runs concatenated for a merge, and faster than
        # Arrow's on random integers too
        return table.take(np.argsort(c.to_numpy(), kind="stable"))
    return table.take(pc.array_sort_indices(c))   # NULLs last


def _prunable(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)


def key_filter(column: str, spec: Sequence[str], probes: Sequence[Optional[pa.Table]],
               probe_specs: Sequence[Sequence[str]], max_keys: int) -> Optional[Tuple[list, bool]]:
    """The values of a state's sort ``column`` that a read by key ``spec`` can meet, given the probe
    changes (None: empty) and their key expressions: (distinct non-NULL values, whether NULL is one), or
    None when the read cannot be narrowed (the column is not in the key, a probe key is an expression, a type
    whose literals do not round-trip, or more than ``max_keys`` values)."""
    if column not in spec:
        return None
    i = list(spec).index(column)
    parts = []
    for t, ps in zip(probes, probe_specs):
        if t is None:
            continue
        src = ps[i]
        if not is_column(src) or src not in t.column_names or not _prunable(t.schema.field(src).type):
            return None
        c = t.column(src)
        if len(c) > 4 * max_keys and len(pc.unique(c.slice(0, 4 * max_keys))) > max_keys + 1:
            return None   # a large change's first rows already hold too many values (a unique over all of them would cost more than the read it saves)
        parts.append(pc.unique(c))
    types = {p.type for p in parts}
    if len(types) > 1:   # the probes' keys of both sides of a join may be INT and BIGINT (or VARCHAR types)
        if all(pa.types.is_integer(t) for t in types):
            parts = [p.cast(pa.int64()) for p in parts]
        elif all(pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
            parts = [p.cast(pa.large_string()) for p in parts]
        else:
            return None
    values = pa.chunked_array(parts, type=parts[0].type if parts else pa.int64())
    if len(values) > 4 * max_keys:
        return None
    values = pc.unique(values)
    has_null = values.null_count > 0
    values = values.drop_null()
    if len(values) > max_keys:
        return None
    return values.to_pylist(), has_null


LEAD_SAMPLE = 8192


def lead_column(probe: pa.Table, columns: Sequence[str]) -> Optional[str]:
    """Of a lookup by several ``columns``, the one whose values tell the probe's rows apart (at least 90% distinct
    in its first LEAD_SAMPLE rows, the most distinct such), by which a read of a superset of the rows is
    cheaper than by all of them; None when there is one column or no such column."""
    if len(columns) < 2 or not probe.num_rows:
        return None
    head = probe.slice(0, LEAD_SAMPLE)
    best, most = None, 0.9 * head.num_rows
    for c in columns:
        if c not in head.column_names or not _prunable(head.schema.field(c).type):
            continue
        n = pc.count_distinct(head.column(c), mode="all").as_py()
        if n >= most:
            best, most = c, n + 1   # (a later column must be strictly more distinct)
    return best


def _literal(v) -> str:
    if isinstance(v, str):   # Spark SQL string literal: backslash escapes are processed
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(int(v))


def _balanced_or(parts: List[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    half = len(parts) // 2
    return f"({_balanced_or(parts[:half])} OR {_balanced_or(parts[half:])})"


def in_list(column: str, values: list, has_null: bool):
    """The filter ``column IN (values)`` (OR ``column IS NULL``) as one Spark expression (one py4j call, where
    ``Column.isin`` makes one per value).  Spark pushes an IN list into parquet as a chain of ORs, one per value,
    which the executor deserializes recursively: a list of a thousand values overflowed its stack (and took
    the JVM down).  So the list is cut into INs of ``IN_CHUNK`` values under a balanced tree of ORs."""
    from pyspark.sql import functions as F
    name = f"`{column}`"
    parts = [f"{name} IN ({', '.join(_literal(v) for v in values[i:i + IN_CHUNK])})"
             for i in range(0, len(values), IN_CHUNK)]
    if has_null:
        parts.append(f"{name} IS NULL")
    return F.expr(_balanced_or(parts) if parts else "FALSE")
