"""The Python functions the fuzzer's programs may call: given to every pipeline (``udfs=``), registered on the
oracle's DuckDB as its own UDFs (the same Python code), and the aggregate rewritten for the oracle as the SQL it
equals (:func:`oracle_spelling`)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from duckdb.func import ARROW, NATIVE, SPECIAL

from sqlengine import udaf, udf


@udf("DOUBLE", ["DOUBLE"])
def py_half(x: pa.Array) -> pa.Array:
    return pc.divide(x, 2.0)


@udf("BIGINT", ["VARCHAR"])
def py_strlen(s: pa.Array) -> pa.Array:
    return pc.cast(pc.utf8_length(s), pa.int64())


@udf("VARCHAR", ["VARCHAR", "BIGINT"], vectorized=False)
def py_tag(s, n):
    return None if s is None or n is None else f"{s}#{n}"


@udaf("BIGINT", ["VARCHAR"])
class PyCountDistinct:
    """COUNT(DISTINCT s): the oracle computes it so."""

    def create(self):
        return set()

    def accumulate(self, acc, s):
        if s is not None:
            acc.add(s)

    def finish(self, acc):
        return len(acc)


@udaf("BIGINT", ["VARCHAR"])
class PyRetractCount:
    """COUNT(DISTINCT s) with ``retract``: its accumulator (a multiset) is kept per group when the query's
    other aggregates are COUNTs or such functions (``mode=retract``)."""

    def create(self):
        return {}

    def accumulate(self, acc, s):
        if s is not None:
            acc[s] = acc.get(s, 0) + 1

    def retract(self, acc, s):
        if s is not None:
            acc[s] -= 1
            if not acc[s]:
                del acc[s]

    def finish(self, acc):
        return len(acc)


SCALARS = [py_half, py_strlen, py_tag]
UDFS = SCALARS + [PyCountDistinct, PyRetractCount]


def register(con) -> None:
    """The scalar functions on an oracle's DuckDB, as DuckDB's own UDFs of the same code."""
    for u in SCALARS:
        con.create_function(u.name, u.fn, [t.sql for t in u.params], u.returns.sql,
                            type=ARROW if u.vectorized else NATIVE, null_handling=SPECIAL)
