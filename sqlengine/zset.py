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

from collections import Counter
from typing import List, Optional, Sequence

import pyarrow as pa

from sqlengine import nested, private_duckdb

W = "__w"            # weight column on the data plane
WEIGHT = "__weight"  # weight column in user-facing chunks
WEIGHT_TYPE = pa.int64()


def data_columns(names: Sequence[str]) -> List[str]:
    return [n for n in names if n != W]


def one_nan(a):
    """A float array with every NaN (whatever its payload) as the one NaN."""
    return pa.compute.if_else(pa.compute.is_nan(a), pa.scalar(float("nan"), a.type), a)


def canonical_float(a):
    """A float array with -0.0 as 0.0 and every NaN as the one NaN: SQL's equality (0.0 = -0.0, NaN = NaN in
    GROUP BY, DISTINCT and joins), where Arrow's hashing compares bits."""
    if not pa.types.is_floating(a.type) or not len(a):
        return a
    return one_nan(pa.compute.add(a, pa.scalar(0.0, a.type)))   # IEEE: -0.0 + 0.0 is 0.0


def canonical_floats(t: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``t`` with its float ``columns`` canonical (:func:`canonical_float`), to hash or group by them."""
    for c in columns:
        i = t.schema.get_field_index(c)
        if pa.types.is_floating(t.schema.field(i).type):
            t = t.set_column(i, c, canonical_float(t.column(i)))
    return t


def negative_zero(a):
    """Which values of a float array are -0.0 (a bool array; NULL where the value is NULL)."""
    return pa.compute.and_(pa.compute.equal(a, pa.scalar(0.0, a.type)),
                           pa.compute.less(pa.compute.divide(pa.scalar(1.0, a.type), a), pa.scalar(0.0, a.type)))


def with_zero_signs(t: pa.Table) -> "tuple[pa.Table, List[str]]":
    """``t`` with a column ``__nz_<c>`` (is the value -0.0?) appended for each float data column ``c``, and their
    names.  A row's identity in a Z-set is its values with the sign of a zero: -0.0 and 0.0 are equal in SQL
    (they group, join and compare as one) but are different values (``1/x``, ``CAST(x AS VARCHAR)``), so a table
    that holds both holds two different rows, as in DuckDB.  SQL that sums weights per row (``GROUP BY`` merges
    the two zeros) groups by these columns too."""
    extra = []
    for c in data_columns(t.column_names):
        if pa.types.is_floating(t.schema.field(c).type):
            t = t.append_column(f"__nz_{c}", negative_zero(t.column(c)) if t.num_rows else pa.array([], pa.bool_()))
            extra.append(f"__nz_{c}")
    return t, extra


def consolidate_arrow(t: pa.Table) -> pa.Table:
    """Sum weights of equal rows and drop rows whose weight is zero.  Rows are equal when their values are, with
    every NaN one value (as in SQL) and -0.0 apart from 0.0 (see :func:`with_zero_signs`).

    >>> t = pa.table({"c0": [-0.0, 0.0, 1.5, -0.0], W: [1, 1, 1, 1]})
    >>> consolidate_arrow(t).to_pylist()
    [{'c0': -0.0, '__w': 2}, {'c0': 0.0, '__w': 1}, {'c0': 1.5, '__w': 1}]
    """
    cols = data_columns(t.column_names)
    if t.num_rows == 0:
        return t
    if not cols:
        total = pa.compute.sum(t.column(W)).as_py() or 0
        return t.slice(0, 0) if total == 0 else pa.table({W: pa.array([total], WEIGHT_TYPE)})
    for c in cols:   # Arrow's hashing compares bits: -0.0 and 0.0 stay apart, and every NaN is made one NaN
        i = t.schema.get_field_index(c)
        if pa.types.is_floating(t.schema.field(i).type):
            t = t.set_column(i, c, one_nan(t.column(i)))
    if nested.has_nested(t.schema, cols):   # Arrow cannot hash a nested value: grouped by its key
        g = nested.group_by(t, cols, [(W, "sum")])
    else:
        g = t.group_by(cols, use_threads=False).aggregate([(W, "sum")])
    g = g.rename_columns(cols + [W])
    g = g.filter(pa.compute.not_equal(g.column(W), 0))
    return g.select(t.column_names).cast(t.schema)


def all_positive(t: pa.Table) -> bool:
    """Is every row's weight positive (nothing in ``t`` can cancel, so it need not be consolidated to be right)?"""
    return t.num_rows == 0 or pa.compute.min(t.column(W)).as_py() > 0


def total_weight(t: pa.Table) -> int:
    """The sum of ``t``'s weights: how many rows the Z-set holds (0 for no rows)."""
    return int(pa.compute.sum(t.column(W)).as_py() or 0)


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
    floats = {f.name for f in df.schema.fields if f.name in cols and f.dataType.typeName() in ("double", "float")}
    if not floats:
        return df.groupBy(*cols).agg(F.sum(W).alias(W)).filter(F.col(W) != 0)
    # Spark's grouping makes -0.0 0.0 (its keys' values too): the sign of a zero is a key of its own, and the
    # value kept is the group's own (see with_zero_signs)
    keys = [F.col(c).alias(f"__k_{c}") if c in floats else F.col(c) for c in cols]
    signs = [(F.col(c) == 0) & (F.col(c).cast("string").startswith("-")) for c in sorted(floats)]
    g = df.groupBy(*keys, *[s.alias(f"__nz_{i}") for i, s in enumerate(signs)]).agg(
        F.sum(W).alias(W), *[F.first(c).alias(f"__v_{c}") for c in sorted(floats)])
    return g.filter(F.col(W) != 0).select(*[F.col(f"__v_{c}").alias(c) if c in floats else F.col(c) for c in cols],
                                          F.col(W))


def positive_spark(df):
    """The rows of ``df`` whose consolidated weight is positive (the copies that exist), with that weight."""
    from pyspark.sql import functions as F
    return consolidate_spark(df).filter(F.col(W) > 0)


def negate_spark(df):
    from pyspark.sql import functions as F
    return df.withColumn(W, -F.col(W))


_NAN = object()   # every NaN, as one key
_SMALL_CLAMP = 20_000


def _row_keys(t: pa.Table, cols: Sequence[str]):
    values = []
    for c in cols:
        v = t.column(c).to_pylist()
        if pa.types.is_floating(t.schema.field(c).type):
            v = [_NAN if x != x else x for x in v]   # (x != x: NaN; -0.0 and 0.0 told apart by their __nz_ columns)
        values.append(v)
    return zip(*values)


def _copies_cover_deletes(parts: Sequence[pa.Table], stored: pa.Table, cols: Sequence[str]) -> bool:
    """Whether every row the batches delete has at least as many stored copies as all batches delete (then no
    count can reach zero in any order), found in Python for a small step (a DuckDB query costs milliseconds
    of fixed cost); False where it does not hold or the step is not small (the caller's query decides)."""
    rows = sum(p.num_rows for p in parts) + stored.num_rows
    if rows > _SMALL_CLAMP or nested.has_nested(stored.schema, cols):
        return False
    need: Counter = Counter()
    for p in parts:
        neg = p.filter(pa.compute.less(p.column(W), 0))
        for key, w in zip(_row_keys(neg, cols), neg.column(W).to_pylist()):
            need[key] -= w
    have: Counter = Counter()
    for key, w in zip(_row_keys(stored, cols), stored.column(W).to_pylist()):
        if key in need:
            have[key] += w
    return all(have[k] >= n for k, n in need.items())


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
    import numpy as np
    given = parts
    out_schema = parts[0].schema
    # DuckDB's GROUP BY and '=' make -0.0 0.0: a row keeps the sign of its zeros as columns of its own
    parts = [with_zero_signs(p)[0] for p in parts]
    parts = [p.select(data_columns(p.column_names) + [W]) for p in parts]
    deleted, stored = with_zero_signs(deleted)[0], with_zero_signs(stored)[0]
    schema = parts[0].schema
    cols = data_columns(schema.names)
    q = ", ".join(f'"{c}"' for c in cols)

    def eq(x: str, y: str, probe: Optional[pa.Table] = None) -> str:
        """NULL-safe equality of the rows' columns; '=' on a column where ``probe``, the rows on side ``x``,
        has no NULL (the same match, and a cheaper join)."""
        ops = {c: "=" if probe is not None and not probe.column(c).null_count else "IS NOT DISTINCT FROM"
               for c in cols}
        return " AND ".join(f'{x}."{c}" {ops[c]} {y}."{c}"' for c in cols)

    if _copies_cover_deletes(parts, stored, cols):
        return pa.concat_tables(given)
    con = private_duckdb.cursor()
    try:
        con.register("a", pa.concat_tables(parts))
        con.register("deleted", deleted.select(cols))
        con.register("stored", stored.select(cols + [W]))
        con.execute(f'CREATE TEMP VIEW h AS SELECT {q}, SUM("{W}")::BIGINT AS "{W}" FROM stored GROUP BY ALL')
        # where every deleted row has at least as many stored copies as all batches delete, no count can reach
        # zero in any order: nothing to clamp, and the windows below are skipped
        # (the batches' negative weights, summed without first cancelling a batch's inserts of a row against its
        # deletes, bound the deletes from above: the shortcut holds a fortiori)
        short = con.sql(f'SELECT 1 FROM (SELECT {q}, -SUM("{W}") AS __d FROM a WHERE "{W}" < 0 GROUP BY ALL) x '
                        f'LEFT JOIN h ON {eq("x", "h", deleted)} WHERE COALESCE(h."{W}", 0) < x.__d LIMIT 1').fetchall()
        if not short:
            return pa.concat_tables(given)
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
    return consolidate_arrow(pa.concat_tables([clamped.cast(schema), rest.cast(schema)]).select(out_schema.names))
