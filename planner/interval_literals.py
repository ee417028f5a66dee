"""Interval literals kept whole: the dialect the engine reads users' SQL with.

sqlglot reads ``INTERVAL '<text>'`` as ``INTERVAL '<n>' <UNIT>`` when the text holds one ``<n> <unit>``, and drops
whatever else the text says: ``INTERVAL '-1 day 02:00:00'`` becomes ``INTERVAL '-1' DAY`` and ``INTERVAL '1 month
ago'`` becomes ``INTERVAL '1' MONTH`` (the sign lost).  :class:`ReadDuckDB` reads such a literal as ``CAST('<text>'
AS INTERVAL)``, which DuckDB gives the same value as the literal, and which sqlglot writes and reads back as it is.

>>> import sqlglot
>>> [sqlglot.parse_one(f"SELECT INTERVAL '{t}'", read=ReadDuckDB).sql("duckdb") for t in
...  ("-1 day 02:00:00", "1 month ago", "2 days", "1 day 2 hours")]
["SELECT CAST('-1 day 02:00:00' AS INTERVAL)", "SELECT CAST('1 month ago' AS INTERVAL)", "SELECT INTERVAL '2' DAYS", "SELECT INTERVAL '1 day 2 hours'"]
"""
from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

_ONE_PART = exp.INTERVAL_STRING_RE   # one '<n> <unit>', as sqlglot's parser finds it


def whole_interval(this):
    """``CAST('<text>' AS INTERVAL)`` for the text of an INTERVAL literal that sqlglot would cut short, else
    None."""
    if this is None or not isinstance(this, exp.Literal) or not this.is_string:
        return None
    text = this.name
    if len(_ONE_PART.findall(text)) == 1 and not _ONE_PART.fullmatch(text):
        return exp.Cast(this=this, to=exp.DataType.build("INTERVAL"))
    return None


class ReadDuckDB(DuckDB):
    """DuckDB's dialect, reading INTERVAL literals whole (:func:`whole_interval`)."""

    class Parser(DuckDB.Parser):
        def _parse_interval_span(self, this, parse_function_unit=True):
            whole = whole_interval(this)
            if whole is not None:
                return whole
            return super()._parse_interval_span(this, parse_function_unit=parse_function_unit)
