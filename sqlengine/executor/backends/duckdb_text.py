"""DuckDB's text of a float, for Spark: ``CAST(x AS VARCHAR)`` of a DOUBLE or REAL as DuckDB writes it.

DuckDB writes the shortest digits that read back as the same value, positional from 1e-4 up to 1e16 and with an
exponent outside (``1e+20``, ``1e-05``), and ``inf``, ``-inf``, ``nan`` - Python's ``repr`` of a float.  Spark
writes Java's ``Double.toString`` (``1.0E20``, ``Infinity``).  The planner marks each float cast to text
(``planner.semantics``: ``CAST(CAST(x AS DOUBLE) AS VARCHAR)``); on Spark that becomes a call of one of the
Python UDFs here (Arrow-optimised, registered by :func:`register`).

>>> double_text(1e20), double_text(-0.0), double_text(float("inf")), double_text(0.1)
('1e+20', '-0.0', 'inf', '0.1')
>>> real_text(16777216.0), real_text(0.10000000149011612), real_text(1.0000000200408773e+20)
('16777216.0', '0.1', '1e+20')
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

DOUBLE_TEXT = "__duck_double_text"
REAL_TEXT = "__duck_real_text"


def double_text(v: Optional[float]) -> Optional[str]:
    return None if v is None else repr(float(v))


def real_text(v: Optional[float]) -> Optional[str]:
    """The shortest text of ``v`` as a 4-byte float, laid out as :func:`double_text` lays out a double's."""
    if v is None:
        return None
    f = np.float32(v)
    if math.isnan(f) or math.isinf(f):
        return repr(float(f))
    mantissa, exponent = np.format_float_scientific(f, unique=True, trim="-").split("e")
    e = int(exponent)
    if -4 <= e < 16:
        text = np.format_float_positional(f, unique=True, trim="-")
        return text if "." in text else text + ".0"
    return f"{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"


def register(spark) -> None:
    """Register the UDFs on ``spark`` (once per session: a second call replaces them).  They are pickled by
    value, so that a cluster's executors need not import this package."""
    import sys

    from pyspark import cloudpickle
    from pyspark.sql.functions import udf
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.udf.register(DOUBLE_TEXT, udf(double_text, "string", useArrow=True))
    spark.udf.register(REAL_TEXT, udf(real_text, "string", useArrow=True))
