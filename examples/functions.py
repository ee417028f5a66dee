"""Python functions for examples/functions.sql (``sqlengine run examples/functions.sql --udfs
examples/functions.py``): those made with @sqlengine.udf / @sqlengine.udaf are called by name; a plain
function is named in the program with CREATE FUNCTION ... LANGUAGE PYTHON AS 'functions:name'."""
import math

import pyarrow as pa
import pyarrow.compute as pc

import sqlengine


@sqlengine.udf("DOUBLE", ["DECIMAL(10, 2)", "VARCHAR"])
def with_vat(amount: pa.Array, region: pa.Array) -> pa.Array:
    """The amount with the region's VAT (vectorised: one Arrow array per argument)."""
    rate = pc.if_else(pc.equal(region, "EU"), 1.2, 1.0)
    return pc.multiply(pc.cast(amount, pa.float64()), rate)


@sqlengine.udaf("DOUBLE", ["DOUBLE"])
class GeoAvg:
    """The geometric mean of the positive values of a group."""

    def create(self):
        return [0.0, 0]

    def accumulate(self, acc, x):
        if x is not None and x > 0:
            acc[0] += math.log(x)
            acc[1] += 1

    def finish(self, acc):
        return math.exp(acc[0] / acc[1]) if acc[1] else None


def band(amount):
    """A plain function, called a row at a time."""
    return None if amount is None else ("small" if amount < 100 else "large")
