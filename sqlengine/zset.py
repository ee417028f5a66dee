"""Z-sets: the one module that owns the weight column.

A Z-set is a table whose rows carry an integer weight: +n means n copies
inserted, -n means n copies deleted.  Internally (Spark frames, state files)
the weight column is :data:`W`; in the pandas chunks handed to users it is
:data:`WEIGHT`.  Data columns are positional (``c0, c1, ...``) inside the
engine and carry their SQL names only at the API boundary.

>>> import pyarrow as pa
>>> t = pa.table({"c0": [1, 1, 2, None], W: [1, 1, -1, 1]})
>>> consolidate_arrow(t).sort_by("c0").to_pylist()
[{'c0': 1, '__w': 2}, {'c0': 2, '__w': -1}, {'c0': None, '__w': 1}]
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import pyarrow as pa

W = "__w"            # weight column on the data plane
WEIGHT = "__weight"  # weight column in user-facing chunks
WEIGHT_TYPE = pa.int64()


def data_columns(names: Sequence[str]) -> List[str]:
    return [n for n in names if n != W]


def canonical_float(a):
    """A float array with -0.0 as 0.0 and every NaN as the one NaN: SQL's equality (0.0 = -0.0, NaN = NaN in
    GROUP BY, DISTINCT and joins), where Arrow's hashing compares bits."""
    if not pa.types.is_floating(a.type) or not len(a):
        return a
    a = pa.compute.add(a, pa.scalar(0.0, a.type))   # IEEE: -0.0 + 0.0 is 0.0
    return pa.compute.if_else(pa.compute.is_nan(a), pa.scalar(float("nan"), a.type), a)


def canonical_floats(t: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``t`` with its float ``columns`` canonical (:func:`canonical_float`), to hash or group by them.

    >>> t = pa.table({"c0": [-0.0, 0.0, 1.5], W: [1, 1, 1]})
    >>> consolidate_arrow(t).to_pylist()     # one row: a value of the group's own, -0.0 here
    [{'c0': -0.0, '__w': 2}, {'c0': 1.5, '__w': 1}]
    """
    for c in columns:
        i = t.schema.get_field_index(c)
        if pa.types.is_floating(t.schema.field(i).type):
            t = t.set_column(i, c, canonical_float(t.column(i)))
    return t


def consolidate_arrow(t: pa.Table) -> pa.Table:
    """Sum weights of equal rows (floats equal as in SQL, see :func:`canonical_float`) and drop rows whose
    weight is zero."""
    cols = data_columns(t.column_names)
    if t.num_rows == 0:
        return t
    if not cols:
        total = pa.compute.sum(t.column(W)).as_py() or 0
        return t.slice(0, 0) if total == 0 else pa.table({W: pa.array([total], WEIGHT_TYPE)})
    floats = [c for c in cols if pa.types.is_floating(t.schema.field(c).type)]
    if floats:   # grouped by their canonical form, each keeps a value of its own (-0.0 stays -0.0)
        keyed = t
        for c in floats:
            keyed = keyed.append_column(f"__canon_{c}", canonical_float(t.column(c)))
        by = [f"__canon_{c}" if c in floats else c for c in cols]
        g = keyed.group_by(by, use_threads=False).aggregate([(W, "sum")] + [(c, "first") for c in floats])
        g = g.rename_columns([c[:-len("_first")] if c.endswith("_first") else c for c in g.column_names])
        g = g.select(cols + [f"{W}_sum"]).rename_columns(cols + [W])
    else:
        g = t.group_by(cols, use_threads=False).aggregate([(W, "sum")])
        g = g.rename_columns(cols + [W])
    g = g.filter(pa.compute.not_equal(g.column(W), 0))
    return g.select(t.column_names).cast(t.schema)


def all_positive(t: pa.Table) -> bool:
    """Is every row's weight positive (nothing in ``t`` can cancel, so it need not be consolidated to be right)?"""
    return t.num_rows == 0 or pa.compute.min(t.column(W)).as_py() > 0


def negate_arrow(t: pa.Table) -> pa.Table:
    idx = t.column_names.index(W)
    return t.set_column(idx, W, pa.compute.negate(t.column(W)))


def with_weight(t: pa.Table, weight: int) -> pa.Table:
    """Append a constant weight column to a table of plain rows."""
    return t.append_column(W, pa.repeat(pa.scalar(weight, WEIGHT_TYPE), t.num_rows))


def expand_arrow(t: pa.Table) -> pa.Table:
    """Rows repeated by their (positive) weight, without the weight column."""
    w = t.column(W).to_numpy()
    if (w == 1).all():
        return t.drop_columns([W])
    import numpy as np
    idx = np.repeat(np.arange(t.num_rows), np.maximum(w, 0))
    return t.drop_columns([W]).take(pa.array(idx))


# ---------------------------------------------------------------- Spark side
def consolidate_spark(df):
    """Spark version of :func:`consolidate_arrow` (a shuffle)."""
    from pyspark.sql import functions as F
    cols = data_columns(df.columns)
    if not cols:
        return df.agg(F.sum(W).alias(W)).filter(F.col(W) != 0)
    return df.groupBy(*cols).agg(F.sum(W).alias(W)).filter(F.col(W) != 0)


def positive_spark(df):
    """The rows of ``df`` whose consolidated weight is positive (the copies that exist), with that weight."""
    from pyspark.sql import functions as F
    return consolidate_spark(df).filter(F.col(W) > 0)


def negate_spark(df):
    from pyspark.sql import functions as F
    return df.withColumn(W, -F.col(W))


def clamp_in_order(parts: Sequence[pa.Table], deleted: pa.Table, stored: pa.Table) -> pa.Table:
    """Apply batches of changes in order with bag semantics: a delete removes at most the copies that exist
    at that point.  ``parts`` are the batches in order, ``deleted`` the rows some batch deletes, ``stored`` the
    committed copies of (at least) those rows, consolidated or not.  Where no count can reach zero, the result is the
    batches as they are (a Z-set need not be consolidated to be right; operators accept duplicate rows), else
    it is consolidated.

    For each deleted row the running count is a sum clamped at zero, c_k = max(c_(k-1) + w_k, 0); with
    S_k = c_0 + w_1 + ... + w_k that is c_k = S_k - min(0, min_(j<=k) S_j), so it is computed with window
    functions (DuckDB), not row by row.  Rows that no batch deletes pass through.

    >>> a = pa.table({"c0": [1, 2], W: [1, 1]}); b = pa.table({"c0": [1, 3], W: [-3, -1]})
    >>> stored = pa.table({"c0": [1], W: [1]})
    >>> consolidate_arrow(clamp_in_order([a, b], b, stored)).sort_by("c0").to_pylist()
    [{'c0': 1, '__w': -1}, {'c0': 2, '__w': 1}]
    """
    import duckdb
    import numpy as np
    schema = parts[0].schema
    cols = data_columns(schema.names)
    q = ", ".join(f'"{c}"' for c in cols)

    def eq(x: str, y: str, probe: Optional[pa.Table] = None) -> str:
        """NULL-safe equality of the rows' columns; '=' on a column where ``probe``, the rows on side ``x``,
        has no NULL (the same match, and a cheaper join)."""
        ops = {c: "=" if probe is not None and not probe.column(c).null_count else "IS NOT DISTINCT FROM"
               for c in cols}
        return " AND ".join(f'{x}."{c}" {ops[c]} {y}."{c}"' for c in cols)

    con = duckdb.connect(":memory:")
    try:
        con.register("a", pa.concat_tables(parts))
        con.register("deleted", deleted.select(cols))
        con.register("stored", stored.select(cols + [W]))
        con.execute(f'CREATE VIEW h AS SELECT {q}, SUM("{W}")::BIGINT AS "{W}" FROM stored GROUP BY ALL')
        # where every deleted row has at least as many stored copies as all batches delete, no count can reach
        # zero in any order: nothing to clamp, and the windows below are skipped
        # (the batches' negative weights, summed without first cancelling a batch's inserts of a row against its
        # deletes, bound the deletes from above: the shortcut holds a fortiori)
        short = con.sql(f'SELECT 1 FROM (SELECT {q}, -SUM("{W}") AS __d FROM a WHERE "{W}" < 0 GROUP BY ALL) x '
                        f'LEFT JOIN h ON {eq("x", "h", deleted)} WHERE COALESCE(h."{W}", 0) < x.__d LIMIT 1').fetchall()
        if not short:
            return pa.concat_tables(parts)
        # the running counts below take each batch's net weight per row, so the batches are consolidated first
        seq = pa.concat_tables([consolidate_arrow(p) for p in parts])
        seq = seq.append_column("__i", pa.array(np.arange(seq.num_rows, dtype=np.int64)))
        con.unregister("a")
        con.register("a", seq)
        con.execute(f"CREATE TEMP TABLE tr AS SELECT DISTINCT {q} FROM deleted")
        window = f"PARTITION BY {q} ORDER BY __i"
        clamped = con.sql(f"""
            WITH x AS (SELECT a.* FROM a SEMI JOIN tr ON {eq('a', 'tr')}),
            y AS (SELECT x.*, COALESCE(h."{W}", 0) AS __c0 FROM x LEFT JOIN h ON {eq('x', 'h')}),
            s AS (SELECT *, __c0 + SUM("{W}") OVER (w ROWS UNBOUNDED PRECEDING) AS __s FROM y WINDOW w AS ({window})),
            c AS (SELECT *, __s - LEAST(0, MIN(__s) OVER (w ROWS UNBOUNDED PRECEDING)) AS __c FROM s
                  WINDOW w AS ({window})),
            d AS (SELECT *, __c - LAG(__c, 1, __c0) OVER ({window}) AS __nw FROM c)
            SELECT {q}, __nw::BIGINT AS "{W}" FROM d WHERE __nw <> 0""").to_arrow_table()
        rest = con.sql(f'SELECT {q}, "{W}" FROM a ANTI JOIN tr ON {eq("a", "tr")}').to_arrow_table()
    finally:
        con.close()
    return consolidate_arrow(pa.concat_tables([clamped.cast(schema), rest.cast(schema)]))
