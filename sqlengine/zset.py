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

from typing import List, Sequence

import pyarrow as pa

W = "__w"            # weight column on the data plane
WEIGHT = "__weight"  # weight column in user-facing chunks
WEIGHT_TYPE = pa.int64()


def data_columns(names: Sequence[str]) -> List[str]:
    return [n for n in names if n != W]


def consolidate_arrow(t: pa.Table) -> pa.Table:
    """Sum weights of equal rows and drop rows whose weight is zero."""
    cols = data_columns(t.column_names)
    if t.num_rows == 0:
        return t
    if not cols:
        total = pa.compute.sum(t.column(W)).as_py() or 0
        return t.slice(0, 0) if total == 0 else pa.table({W: pa.array([total], WEIGHT_TYPE)})
    g = t.group_by(cols, use_threads=False).aggregate([(W, "sum")])
    g = g.rename_columns(cols + [W])
    g = g.filter(pa.compute.not_equal(g.column(W), 0))
    return g.select(t.column_names).cast(t.schema)


def negate_arrow(t: pa.Table) -> pa.Table:
    idx = t.column_names.index(W)
    return t.set_column(idx, W, pa.compute.negate(t.column(W)))


def with_weight(t: pa.Table, weight: int) -> pa.Table:
    """Append a constant weight column to a table of plain rows."""
    return t.append_column(W, pa.array([weight] * t.num_rows, WEIGHT_TYPE))


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
