"""What the operators' Arrow fast paths share.

A DuckDB query over Arrow costs milliseconds, mostly planning, where an Arrow group-by or hash join of a few
hundred rows costs a small fraction of that.  So the operators take the shapes that dominate small steps in plain Arrow
compute, each in its own module (:mod:`sqlengine.executor.ops`): projections that pick columns
(``ops.map.project_columns``), equi-joins on plain columns (``ops.join.equi_join``), and aggregates
(``ops.aggregate.aggregate_partial``, ``aggregate_output``, ``aggregate_recompute``).  Each returns ``None``
for a shape it does not cover, and the operator runs its rule on DuckDB instead; both compute the same
Z-set, and the differential tests run both.
"""
from __future__ import annotations

from typing import Optional

import pyarrow as pa


def column_index(sql: str) -> Optional[int]:
    """The position of a plain column ``c<i>`` (None: an expression)."""
    return int(sql[1:]) if sql.startswith("c") and sql[1:].isdigit() else None


def numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


class Consolidated(list):
    """A change's parts whose union is consolidated already (no two rows equal): nothing to merge."""
